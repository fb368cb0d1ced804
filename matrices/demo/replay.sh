#!/bin/sh
# Replays one recorded cell of a run folder: prints its log (all at once: the recording has no
# timing), then ends the way the recorded process ended, so the harness that runs this script
# watches, classifies and reports it as it would the real cell. Used by demo.toml, which needs no GPU.
#
# usage: replay.sh RUN_DIR/CELL_ID
#
# A cell the watchdog called hung (`deadlock`) goes silent and idle after its log, as the hung
# process did; one that ran out of time (`timeout`) keeps a CPU busy until the harness's deadline.
# The harness's own `[gpucompat]` lines are left out: the replaying run writes its own. (So a
# verdict that came only from those lines, such as a failed answer check, is not reproduced.)
#
# The recording's measurements come first, so the replay reports the GPU run's numbers, not its
# own: each metric a cell may report (`GPUCOMPAT_METRIC jit_s=9.03`, into the replay's record),
# then one `GPUCOMPAT_RECORDED` line with what only the harness measures (duration, phase, JIT
# cache hit, provision time), which a report of a replay shows in place of the replay's own.
set -u
case ${1:-} in
  */*) run=${1%/*}; cell=${1##*/} ;;
  *) echo "usage: replay.sh RUN_DIR/CELL_ID" >&2; exit 2 ;;
esac
results=$run/results.jsonl
if [ ! -r "$results" ]; then
  echo "replay: cannot read $results" >&2
  exit 2
fi
# The last record of the cell (a resumed run may hold older ones). Records are one JSON object per
# line, written by the harness with `id` first and, after `pins`, `status`, `signature`, `phase`,
# `duration_s`, `attempts`, `log`, then objects (metrics, runner, an expectation with its own
# `signature`): each field is read at its place, never by a search that could find a nested one.
record=$(grep -F "{\"id\":\"$cell\"," "$results" | tail -n 1)
if [ -z "$record" ]; then
  echo "replay: no record of cell '$cell' in $results" >&2
  exit 2
fi
rest=$(printf '%s\n' "$record" | sed 's/^.*"pins":\[[^]]*\],//')
status=$(printf '%s\n' "$rest" | sed -n 's/^"status":"\([^"]*\)".*$/\1/p')
signature=$(printf '%s\n' "$rest" | sed -n 's/^"status":"[^"]*","signature":"\([^"]*\)".*$/\1/p')
log=$(printf '%s\n' "$rest" | sed -n 's/^[^{]*"log":"\([^"]*\)".*$/\1/p')
started=$(printf '%s\n' "$rest" | sed -n 's/^.*"started_at":"\([^"]*\)".*$/\1/p')
gpu=$(printf '%s\n' "$rest" | sed -n 's/^[^[]*"gpus":\[{[^}]*"name":"\([^"]*\)","arch":"\([^"]*\)".*$/\1 (\2)/p')
phase=$(printf '%s\n' "$rest" | sed -n 's/^"status":"[^"]*","signature":[^,]*,"phase":"\([^"]*\)".*$/\1/p')
duration=$(printf '%s\n' "$rest" | sed -n 's/^[^{]*"duration_s":\([0-9.eE+-]*\),.*$/\1/p')
metrics=$(printf '%s\n' "$rest" | sed -n 's/^[^{]*"log":"[^"]*","metrics":{\([^}]*\)}.*$/\1/p')
code=$(printf '%s\n' "$rest" | sed -n 's/^.*"exit":{"code":\(-\{0,1\}[0-9]*\)}.*$/\1/p')
signal=$(printf '%s\n' "$rest" | sed -n 's/^.*"exit":{"signal":\([0-9]*\).*$/\1/p')

printf '%s\n' "replay of $run cell $cell, recorded ${started:-at an unknown time} on ${gpu:-no GPU}: ${status:-unknown status}${signature:+ ($signature)}"
# `"jit_s":9.03,"jit_cache_hit":true` -> `name value` lines.
recorded="duration_s=${duration:-} phase=${phase:-}"
for pair in $(printf '%s\n' "$metrics" | tr ',' ' '); do
  name=$(printf '%s\n' "$pair" | sed -n 's/^"\([a-z_]*\)":.*$/\1/p')
  value=${pair#*:}
  case $name in
    time_to_ready_s | jit_s | ttft_s | tpot_s | tokens_per_s) echo "GPUCOMPAT_METRIC $name=$value" ;;
    jit_cache_hit | provision_s) recorded="$recorded $name=$value" ;;
  esac
done
echo "GPUCOMPAT_RECORDED $recorded"
if [ -n "$log" ] && [ -f "$run/$log" ]; then
  # sed, not grep: a log may hold NUL bytes or invalid UTF-8, and every byte of it is replayed.
  sed '/^\[gpucompat\]/d' "$run/$log"
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
  # The signal was ignored (inherited that way): end as a shell reports a death by it.
  exit $((128 + signal))
fi
exit "${code:-1}"
