#!/bin/sh
# The hang-forensics proof on a GPU machine with no network (docs/hang.md, "Proof on a GPU"):
# runs hang-forensics.toml (the probe's injected stall, 4 workers), hang-forensics-jit.toml (a cold
# 4-worker JIT caught mid-compile) and hang-forensics-python.toml (a Python lock-order deadlock,
# and a torch.distributed rendezvous missing a rank) through `gpucompat run`, with one shared cache
# (py-spy is installed from `.whl/` into its tool cache by the first capture), then packs the run
# folders, with what the host allows for ptrace, into one file under $OUT.
# Usage, from the repository root: sh matrices/hang-forensics/gpu.sh [BINARY]
set -u
bin=${1:-target/release/gpucompat}
out=${OUT:-/tmp/hang-forensics-out}
runs=$(mktemp -d)
cache=$(mktemp -d)
{
  echo "ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 'no yama')"
  grep -E '^Cap(Prm|Eff)' /proc/self/status
  echo "uid: $(id -u)"
  nvidia-smi -L
  ls .whl | grep -i spy || echo "no py-spy wheel in .whl/"
} >"$runs/host.txt" 2>&1
for m in hang-forensics hang-forensics-jit hang-forensics-python; do
  start=$(date +%s)
  "$bin" run "matrices/$m.toml" --out "$runs/$m" --cache-dir "$cache"
  echo "$m: exit $? after $(( $(date +%s) - start ))s" >>"$runs/host.txt"
done
cat "$runs/host.txt"
for m in hang-forensics hang-forensics-jit hang-forensics-python; do
  grep -h -A12 'hang capture:' "$runs/$m"/logs/*.log | grep -v '^\[gpucompat\]       '
done
mkdir -p "$out"
tar -C "$runs" -czf "$out/hang-forensics-runs.tar.gz" .
