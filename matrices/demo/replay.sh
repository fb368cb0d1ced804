#!/bin/sh
# Replays a recorded cell: prints a real log line by line (as the process that wrote it did), then
# exits the way that process exited. `hang` keeps the process alive and silent after the log, the
# way a deadlocked worker does. Used by demo.toml, which needs no GPU.
set -u
case_name=$1
log=${2:-}
code=${3:-1}
echo "replay of a recorded run: case $case_name, log ${log:-none}, cell $GPUCOMPAT_CELL_ID"
if [ -n "$log" ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s\n' "$line"
  done < "$log"
fi
case $case_name in
  pass) echo "answer: Paris"; exit 0 ;;
  hang) exec sleep 3600 ;;
  *) exit "$code" ;;
esac
