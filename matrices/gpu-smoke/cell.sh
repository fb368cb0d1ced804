#!/bin/sh
# One cell of gpu-smoke.toml: a CUDA probe built for the cell's target arch, or a PyTorch workload
# that keeps the GPU busy silently or sits idle holding GPU memory (a hang).
set -eu
mode=$1
cc=${2:-90}
case $mode in
  torch-busy)
    # Silent for longer than the no-progress window while the GPU works: progress, not a hang.
    exec python3 -c '
import time, torch
a = torch.randn(8192, 8192, device="cuda")
start = time.time()
while time.time() - start < 25:
    a = torch.tanh(a @ a)
torch.cuda.synchronize()
print("busy workload finished:", float(a.abs().mean()))' ;;
  torch-hang)
    # Holds GPU memory and waits forever: what a stuck worker looks like.
    exec python3 -c '
import time, torch
x = torch.ones(1 << 24, device="cuda")
print("allocated", x.numel() * 4 >> 20, "MiB; waiting", flush=True)
time.sleep(3600)' ;;
esac
binary="$GPUCOMPAT_JIT_CACHE/probe_sm$cc"
if [ ! -x "$binary" ]; then
  mkdir -p "$GPUCOMPAT_JIT_CACHE"
  start=$(date +%s.%N)
  nvcc -gencode "arch=compute_$cc,code=sm_$cc" -o "$binary.tmp" gpu-smoke/probe.cu
  mv "$binary.tmp" "$binary"
  echo "GPUCOMPAT_METRIC jit_s=$(awk "BEGIN { print $(date +%s.%N) - $start }")"
fi
exec "$binary" "$mode"
