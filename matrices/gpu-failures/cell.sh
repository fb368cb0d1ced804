#!/bin/sh
# One cell of gpu-failures.toml: a short PyTorch/Triton/NCCL program (failures.py) or a native CUDA
# program (kernels.cu, built with nvcc for the GPU's own arch) that fails the way the mode names,
# through the real library (its own error text, its own exit).
set -eu
here=$(dirname "$0")
case $1 in
  block-too-big|too-many-registers|trap)
    binary="$GPUCOMPAT_JIT_CACHE/kernels"
    if [ ! -x "$binary" ]; then
      mkdir -p "$GPUCOMPAT_JIT_CACHE"
      nvcc -arch=native -o "$binary.tmp" "$here/kernels.cu"
      mv "$binary.tmp" "$binary"
    fi
    exec "$binary" "$1" ;;
esac
exec python3 "$here/failures.py" "$1"
