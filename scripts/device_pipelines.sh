#!/usr/bin/env bash
# The GPU side of issue 40 (the checked mode on asynchronous pipelines): each
# kernel of the broken-pipeline catalogue (test/broken_pipelines.hpp) on the
# GPU, plain and under compute-sanitizer memcheck, racecheck and synccheck,
# for the table of docs/reliability.md. One device call (under 10 minutes):
#
#   scripts/device_pipelines.sh    build broken_pipelines and the two Hopper
#                                  samples without the host JIT; run the
#                                  samples; then per catalogue kernel a plain
#                                  run (a kernel that deadlocks hangs: killed
#                                  after HANG_S seconds, the tools are not run
#                                  on it) and each tool's run
#
# Back in $OUT: pipelines.md (the table: kernel, plain run, each tool's
# summary), pipelines_raw.txt (the tools' first reports), logs.tgz.
set -uo pipefail
FINAL=${OUT:-device-out}
mkdir -p "$FINAL"
export OUT=/tmp/device-logs-pipelines
rm -rf "$OUT" && mkdir -p "$OUT"
export TX_CACHE_DIR=/tmp/tx-cache
export TX_SYNC=1
HANG_S=${HANG_S:-20}
B=build-device
t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }

step "configure and build (no host JIT)"
TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make configure BUILD=$B > "$OUT/configure.log" 2>&1
cmake --build $B -j 16 --target broken_pipelines gemm_hopper attention_hopper > "$OUT/build.log" 2>&1 || {
  tail -30 "$OUT/build.log"
  exit 1
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/machine.txt"
for s in gemm_hopper attention_hopper; do
  timeout 120 $B/samples/$s > "$OUT/$s.txt" 2>&1
  echo "sample $s exit $?: $(tail -1 "$OUT/$s.txt")"
done

CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
P=$B/test/broken_pipelines
{
  echo "# The broken-pipeline catalogue on the GPU ($(cat "$OUT/machine.txt"), $(date -u +%F))"
  echo
  echo "| kernel | plain run | memcheck | racecheck | synccheck |"
  echo "|---|---|---|---|---|"
} > "$FINAL/pipelines.md"
: > "$FINAL/pipelines_raw.txt"
summary() {  # a tool's log -> one cell
  local log=$1 rc=$2
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "hangs (killed)"; return; fi
  local s
  s=$(grep -hoE "(ERROR SUMMARY|RACECHECK SUMMARY): [^(]*" "$log" | head -1 | sed 's/ *$//')
  local kinds
  kinds=$(grep -hoE "Race reported between [A-Za-z]+|Invalid __[a-z]+__ [a-z]+|Barrier error|Misaligned|Out of bounds|hazard" "$log" | sort | uniq -c | sed 's/^ *//' | tr '\n' ';' | sed 's/;$//')
  echo "${s:-no summary} (exit $rc)${kinds:+: $kinds}"
}
for name in $($P --list | awk '{print $1}'); do
  step "$name"
  timeout "$HANG_S" $P --device=cuda "$name" > "$OUT/$name.plain.txt" 2>&1
  rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    plain="hangs (killed after ${HANG_S} s)"
    echo "| $name | $plain | not run (hangs) | not run (hangs) | not run (hangs) |" >> "$FINAL/pipelines.md"
    continue
  fi
  plain="$(head -1 "$OUT/$name.plain.txt" | cut -c1-80) (exit $rc)"
  row="| $name | $plain"
  for tool in memcheck racecheck synccheck; do
    extra=""
    [ $tool = racecheck ] && extra="--racecheck-report all"
    # shellcheck disable=SC2086
    timeout 120 "$CS" --tool $tool $extra --print-limit 20 --report-api-errors no \
      $P --device=cuda "$name" > "$OUT/$name.$tool.txt" 2>&1
    rc=$?
    row="$row | $(summary "$OUT/$name.$tool.txt" $rc)"
    { echo "== $name $tool (exit $rc)"; grep -E "=========" "$OUT/$name.$tool.txt" | head -12; } >> "$FINAL/pipelines_raw.txt"
  done
  echo "$row |" >> "$FINAL/pipelines.md"
done
cat "$FINAL/pipelines.md"
tar czf "$FINAL/logs.tgz" -C /tmp device-logs-pipelines 2>/dev/null
step "done"
