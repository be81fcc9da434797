#!/usr/bin/env bash
# The GPU side of issue 46 (per-warp timelines), one device call: build the
# timeline bench without the host JIT, then the Hopper GEMM and attention
# samples' traces (T::profile regions) and their time with profiling off and
# on, then ncu's kernel duration of each with profiling off and on.
# Back in $OUT: timelines.txt, *.trace.json, *.svg, ncu.txt.
set -uo pipefail
FINAL=${OUT:-device-out}
mkdir -p "$FINAL"
export TX_CACHE_DIR=/tmp/tx-cache
B=build-device
t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }
step "configure and build (no host JIT)"
TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make configure BUILD=$B > /tmp/configure.log 2>&1
cmake --build $B -j 16 --target bench_profile_timeline > /tmp/build.log 2>&1 || {
  tail -30 /tmp/build.log
  exit 1
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$FINAL/machine.txt"
step "timelines"
timeout 240 $B/bench/bench_profile_timeline "$FINAL" > "$FINAL/timelines.txt" 2>&1
echo "exit $?"
head -60 "$FINAL/timelines.txt"
step "done"
