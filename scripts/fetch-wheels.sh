#!/usr/bin/env bash
# Fills an offline wheelhouse for a GPU host with no network whose python3 (cp312, manylinux
# x86_64) already has torch and Triton: the FlashInfer versions asked for (default: the three the
# FlashInfer matrices pin) plus the small runtime packages the probe engine needs, and py-spy
# (about 3 MiB: the hang capture installs it from the wheelhouse into the harness's tool cache).
# Usage: scripts/fetch-wheels.sh DIR [VERSION...]      (about 44 MiB for the default three)
set -euo pipefail
dir=${1:?usage: scripts/fetch-wheels.sh DIR [VERSION...]}
shift
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then versions=(0.6.3 0.6.8.post1 0.6.11.post1); fi
plat=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
mkdir -p "$dir"
for v in "${versions[@]}"; do
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$dir" "flashinfer-python==$v"
done
python3 -m pip download -q --no-deps "${plat[@]}" -d "$dir" \
  "apache-tvm-ffi>=0.1.6,<0.2,!=0.1.8,!=0.1.8.post0" cuda-tile "nvidia-cudnn-frontend>=1.13.0" \
  click einops tabulate nvidia-ml-py ninja py-spy
du -sh "$dir"
