#!/bin/sh
# One cell of gpu-failures.toml: a short PyTorch/Triton/NCCL program that fails the way the mode
# names, through the real library (its own error text, its own exit).
set -eu
here=$(dirname "$0")
exec python3 "$here/failures.py" "$1"
