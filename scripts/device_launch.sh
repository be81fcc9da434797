#!/usr/bin/env bash
# The GPU side of issue 39 (one launch path), in device calls of under 10
# minutes each (see DEVELOPERS.md). What comes back is in $OUT.
#
#   scripts/device_launch.sh launch    build without the host JIT, then:
#                                      gpu_graphs (LaunchOptions, tx::Graph:
#                                      tx kernels and ops captured and replayed
#                                      100 times), the launch-path suites
#                                      (gpu_runtime, gpu_shapes, gpu_safety),
#                                      torch.cuda.graph with tx ops (where
#                                      torch sees the GPU), bench_launch (10 tx
#                                      launches direct vs one replayed graph),
#                                      the launch floor (3 runs) and
#                                      bench_elementwise --compare-exact
#   scripts/device_launch.sh both      BASE_DIR (a copy of the old tree,
#                                      e.g. `git archive fd8c839`, untracked
#                                      so it travels): both trees built at
#                                      once, then bench_launch, the launch
#                                      floor of old and new alternating (5
#                                      rounds) and compare-exact of each:
#                                      the 2% check in one call
#   scripts/device_launch.sh baseline  the launch floor and compare-exact of
#                                      the tree before the change (BASE_REF,
#                                      default fd8c839, where the launch-path
#                                      branch started; needs the repository's
#                                      .git there, or BASE_DIR: a copy of the
#                                      old tree), on the same warm machine
#
# Compare the two stages' launch_floor*.json (tx_kernel_us) and
# compare_exact*.txt on the same card: the per-launch host cost must not
# grow (within 2%). Back in $OUT (at most 6 files): tests.txt (the machine,
# each suite's summary and failures), launch.md / launch.json, launch_floor.json,
# compare_exact.txt (their _base twins from `baseline`), logs-STAGE.tgz.
set -uo pipefail
stage=${1:-launch}
FINAL=${OUT:-device-out}
mkdir -p "$FINAL"
export OUT=/tmp/device-logs-launch-$stage
rm -rf "$OUT" && mkdir -p "$OUT"
export TX_CACHE_DIR=/tmp/tx-cache
t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }

# build DIR SRC TARGETS...: a configure without the host JIT and a build of
# the targets, from source tree SRC.
build() {
  local dir=$1 src=$2
  shift 2
  (cd "$src" && TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make configure BUILD="$dir") > "$OUT/configure-$stage.log" 2>&1
  # shellcheck disable=SC2068
  cmake --build "$src/$dir" -j 16 --target $@ > "$OUT/build-$stage.log" 2>&1 || {
    tail -30 "$OUT/build-$stage.log"
    exit 1
  }
}

# floor_and_exact B SUFFIX: the launch floor three times, then compare-exact.
floor_and_exact() {
  local B=$1 sfx=$2
  step "the launch floor (driver vs tx Kernel, us per launch), 3 runs"
  for r in 1 2 3; do timeout 60 "$B/bench/bench_elementwise" --launch-floor; done | tee "$FINAL/launch_floor$sfx.json"
  step "generic vs exact-shape kernels (bench_elementwise --compare-exact)"
  T="$FINAL/compare_exact$sfx.txt"
  timeout 200 "$B/bench/bench_elementwise" --compare-exact > "$OUT/compare_exact$sfx.json" 2> "$T"
  echo "compare-exact exit $?: $(grep -c ratio "$T") cases"
  grep -iE "host|us per call" "$T" | head -12
}

case "$stage" in
launch)
  B=build-device
  step "configure and build (no host JIT)"
  targets="gpu_graphs gpu_runtime gpu_shapes gpu_safety bench_launch bench_elementwise tx_aot"
  build $B . $targets
  cmake --build $B -j 16 --target tx_torch > "$OUT/build-torch.log" 2>&1 && have_torch=1 || have_torch=0
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$FINAL/tests.txt"
  for p in gpu_graphs gpu_runtime gpu_shapes gpu_safety; do
    step "$p"
    timeout 200 $B/test/$p > "$OUT/$p.txt" 2>&1
    { echo "$p exit $?: $(grep -E 'test cases|assertions' "$OUT/$p.txt" | tr '\n' ' ')"
      grep -E "ERROR:|MESSAGE|ERROR$" -A3 "$OUT/$p.txt" | head -40; } | tee -a "$FINAL/tests.txt"
  done
  if [ "$have_torch" = 1 ]; then
    step "tx ops under torch.cuda.graph (test/torch/test_cuda_graph.py)"
    PY=$(sed -n 's/^TX_TORCH_PYTHON:FILEPATH=//p' $B/CMakeCache.txt)
    [ -x "$PY" ] || PY=python3
    TX_TORCH_LIBRARY=$B/tx_torch/libtx_torch.so PYTHONPATH=tx_torch/python \
      timeout 200 "$PY" -m pytest -q test/torch/test_cuda_graph.py > "$OUT/torch_cuda_graph.txt" 2>&1
    { echo "torch.cuda.graph exit $?:"; tail -30 "$OUT/torch_cuda_graph.txt"; } | tee -a "$FINAL/tests.txt"
  else
    { echo "tx_torch did not build here (no torch): the torch.cuda.graph test did not run"
      tail -3 "$OUT/build-torch.log"; } | tee -a "$FINAL/tests.txt"
  fi
  step "bench_launch: 10 tx launches direct vs replayed as one CUDA graph"
  timeout 120 $B/bench/bench_launch --json "$FINAL/launch.json" | tee "$FINAL/launch.md"
  floor_and_exact $B ""
  ;;
both)
  [ -n "${BASE_DIR:-}" ] || { echo "both: set BASE_DIR to a copy of the old tree"; exit 2; }
  rm -rf /tmp/base && cp -r "$BASE_DIR" /tmp/base && rm -rf /tmp/base/build-base
  step "configure and build both trees at once (8 jobs each)"
  (cd /tmp/base && TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make configure BUILD=build-base) > "$OUT/configure-base.log" 2>&1
  (TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make configure BUILD=build-device) > "$OUT/configure-new.log" 2>&1
  cmake --build /tmp/base/build-base -j 8 --target bench_elementwise > "$OUT/build-base.log" 2>&1 &
  cmake --build build-device -j 8 --target bench_elementwise bench_launch > "$OUT/build-new.log" 2>&1 &
  wait
  for d in /tmp/base/build-base build-device; do
    [ -x $d/bench/bench_elementwise ] || { echo "no bench_elementwise in $d"; tail -30 "$OUT"/build-*.log; exit 1; }
  done
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$FINAL/tests.txt"
  step "bench_launch: 10 tx launches direct vs replayed as one CUDA graph"
  timeout 120 build-device/bench/bench_launch --json "$FINAL/launch.json" | tee "$FINAL/launch.md"
  step "the launch floor, old and new alternating, 5 rounds"
  for r in 1 2 3 4 5; do
    echo "base $(timeout 60 /tmp/base/build-base/bench/bench_elementwise --launch-floor)"
    echo "new  $(timeout 60 build-device/bench/bench_elementwise --launch-floor)"
  done | tee "$FINAL/launch_floor_both.txt"
  step "compare-exact, old then new"
  timeout 200 /tmp/base/build-base/bench/bench_elementwise --compare-exact > "$OUT/ce_base.json" 2> "$FINAL/compare_exact_base.txt"
  timeout 200 build-device/bench/bench_elementwise --compare-exact > "$OUT/ce_new.json" 2> "$FINAL/compare_exact.txt"
  paste -d'\n' "$FINAL/compare_exact_base.txt" "$FINAL/compare_exact.txt" | head -40
  ;;
baseline)
  if [ -n "${BASE_DIR:-}" ]; then  # a copy of the old tree (e.g. git worktree add, carried)
    rm -rf /tmp/base && cp -r "$BASE_DIR" /tmp/base && rm -rf /tmp/base/build-base
  else
    command -v git > /dev/null && git rev-parse --git-dir > /dev/null 2>&1 || {
      echo "baseline: no git repository here: set BASE_DIR to a copy of the old tree"
      exit 1
    }
    ref=${BASE_REF:-fd8c839}
    step "the tree at $ref into /tmp/base"
    rm -rf /tmp/base && mkdir -p /tmp/base && git archive "$ref" | tar -x -C /tmp/base
  fi
  build build-base /tmp/base bench_elementwise tx_aot
  floor_and_exact /tmp/base/build-base "_base"
  ;;
*)
  echo "usage: $0 launch|both|baseline"
  exit 2
  ;;
esac
tar -czf "$FINAL/logs-$stage.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")" 2>/dev/null
step "done"
