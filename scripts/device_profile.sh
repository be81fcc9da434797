#!/usr/bin/env bash
# The GPU side of issue 46 (per-warp timelines), one device call: build
# without the host JIT, run the GPU profiling tests, then the Hopper GEMM and
# attention samples' traces (T::profile regions) with their time profiling
# off and on, then ncu's kernel durations of each, off and on.
# Back in $OUT: gpu_profile.txt, timelines.txt, *.trace.json, *.svg, *.png, ncu.txt.
set -uo pipefail
FINAL=${OUT:-device-out}
mkdir -p "$FINAL"
export TX_CACHE_DIR=/tmp/tx-cache
B=build-device
t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }
step "configure and build (no host JIT)"
TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make configure BUILD=$B > /tmp/configure.log 2>&1
cmake --build $B -j 16 --target bench_profile_timeline gpu_profile > /tmp/build.log 2>&1 || {
  tail -30 /tmp/build.log
  exit 1
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$FINAL/machine.txt"
step "gpu_profile"
(cd $B/test && timeout 200 ./gpu_profile) > "$FINAL/gpu_profile.txt" 2>&1
echo "exit $?"
tail -5 "$FINAL/gpu_profile.txt"
step "timelines"
timeout 240 $B/bench/bench_profile_timeline "$FINAL" > "$FINAL/timelines.txt" 2> "$FINAL/progress.txt"
echo "exit $?"
head -70 "$FINAL/timelines.txt"; cat "$FINAL/progress.txt"
step "ncu: kernel durations, profiling off then on"
timeout 200 ncu --metrics gpu__time_duration.sum --kernel-name regex:'gemm_hopper|attention' \
  $B/bench/bench_profile_timeline /tmp --ncu > "$FINAL/ncu.txt" 2>&1
echo "exit $?"
grep -E "gemm_hopper|attention|gpu__time_duration" "$FINAL/ncu.txt" | head -20
step "done"
