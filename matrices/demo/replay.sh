#!/bin/sh
# Replays one recorded cell of a run folder: prints its log line by line (as the process that wrote
# it did), then ends the way that process ended, so the harness that runs this script watches,
# classifies and reports it as it would the real cell. Used by demo.toml, which needs no GPU.
#
# usage: replay.sh RUN_DIR/CELL_ID
#
# A cell the watchdog called hung (`deadlock`) goes silent and idle after its log, as the hung
# process did; one that ran out of time (`timeout`) keeps a CPU busy until the harness's deadline.
# The harness's own `[gpucompat]` lines are left out: the replaying run writes its own.
set -u
case ${1:-} in
  */*) run=${1%/*}; cell=${1##*/} ;;
  *) echo "usage: replay.sh RUN_DIR/CELL_ID" >&2; exit 2 ;;
esac
results=$run/results.jsonl
# The last record of the cell (a resumed run may hold older ones). Records are one JSON object per
# line with `id` first and the fields read below after `pins`, in the order the harness writes them.
record=$(grep -F "{\"id\":\"$cell\"," "$results" 2>/dev/null | tail -n 1)
if [ -z "$record" ]; then
  echo "replay: no record of cell '$cell' in $results" >&2
  exit 2
fi
rest=$(printf '%s\n' "$record" | sed 's/^.*"pins":\[[^]]*\],//')
field() { printf '%s\n' "$rest" | sed -n "s/^.*\"$1\":\"\([^\"]*\)\".*$/\1/p" | head -n 1; }
status=$(field status)
signature=$(field signature)
log=$(field log)
started=$(field started_at)
gpu=$(printf '%s\n' "$rest" | sed -n 's/^.*"gpus":\[{[^}]*"name":"\([^"]*\)","arch":"\([^"]*\)".*$/\1 (\2)/p')
code=$(printf '%s\n' "$rest" | sed -n 's/^.*"exit":{"code":\(-\{0,1\}[0-9]*\)}.*$/\1/p')
signal=$(printf '%s\n' "$rest" | sed -n 's/^.*"exit":{"signal":\([0-9]*\).*$/\1/p')

echo "replay of $run cell $cell, recorded ${started:-at an unknown time} on ${gpu:-no GPU}:" \
  "${status:-unknown status}${signature:+ ($signature)}"
if [ -n "$log" ] && [ -f "$run/$log" ]; then
  grep -v '^\[gpucompat\]' "$run/$log" || true
fi
case $status in
  pass | xpass | flaky) exit 0 ;;
esac
case $signature in
  deadlock) exec sleep 3600 ;;
  timeout) while :; do :; done ;;
esac
if [ -n "$signal" ]; then
  kill "-$signal" $$
fi
exit "${code:-1}"
