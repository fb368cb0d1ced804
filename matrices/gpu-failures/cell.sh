#!/bin/sh
# One cell of gpu-failures.toml: a short PyTorch/Triton/NCCL program (failures.py) or a native CUDA
# program (kernels.cu, built with nvcc for the GPU's own arch) that fails the way the mode names,
# through the real library (its own error text, its own exit).
set -eu
here=$(dirname "$0")
case $1 in
  block-too-big|too-many-registers|trap)
    # Named by the source's hash, so an edited kernels.cu builds afresh; built under a unique
    # name and moved into place, so cells that start together never share a half-written file.
    mkdir -p "$GPUCOMPAT_JIT_CACHE"
    binary="$GPUCOMPAT_JIT_CACHE/kernels-$(sha256sum "$here/kernels.cu" | cut -c1-16)"
    if [ ! -x "$binary" ]; then
      tmp=$(mktemp "$binary.XXXXXX")
      nvcc -arch=native -o "$tmp" "$here/kernels.cu"
      mv -f "$tmp" "$binary"
    fi
    exec "$binary" "$1" ;;
esac
exec python3 "$here/failures.py" "$1"
