#!/usr/bin/env bash
# The serving sweep of bench/shapes: tx (shape-generic and exact-shape
# kernels) and PyTorch (eager, torch.compile dynamic=True), each (op, dtype,
# implementation) in a fresh process with an empty kernel cache; then the
# table. Needs a GPU, torch and a build with bench_shapes.
#
#   BUILD_DIR=build-device OUT=out bench/shapes.sh
set -uo pipefail
OUT=${OUT:-shapes-out}
BD=${BUILD_DIR:-build}
mkdir -p "$OUT"
B=$BD/bench/bench_shapes
# A cold sweep of a few milliseconds in a fresh process varies from run to
# run by a millisecond (page faults, the driver's first calls): tx generic
# and torch eager, the pair the target compares, run REPEAT times each,
# alternating, and the report takes the median. tx exact and torch.compile
# (seconds) run once.
REPEAT=${SHAPES_REPEAT:-3}
$B --sizes > "$OUT/sizes.json"
: > "$OUT/shapes.jsonl"
tx_run() {  # mode op dtype: a fresh, empty disk cache, so the first call of each kernel compiles
  rm -rf /tmp/tx-shapes-cache
  TX_CACHE_DIR=/tmp/tx-shapes-cache timeout 300 $B --run "$1" "$2" "$3" >> "$OUT/shapes.jsonl" 2>> "$OUT/shapes.err"
}
torch_run() {  # mode op dtype
  rm -rf /tmp/torchinductor_shapes
  TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor_shapes timeout 300 python3 bench/shapes.py "$1" "$2" "$3" "$OUT/sizes.json" >> "$OUT/shapes.jsonl" 2>> "$OUT/shapes.err"
}
for op in gelu add silu_and_mul; do
  for dt in float16 bfloat16; do
    for _ in $(seq "$REPEAT"); do
      tx_run generic $op $dt
      torch_run eager $op $dt
    done
    tx_run exact $op $dt
    torch_run compile $op $dt
  done
done
# Where the first calls of a fresh process spend their time (tx generic).
: > "$OUT/first_calls.jsonl"
for op in add gelu; do
  for dt in float16 bfloat16; do
    TX_CACHE_DIR=/tmp/tx-shapes-cache timeout 60 $B --first-calls $op $dt >> "$OUT/first_calls.jsonl" 2>> "$OUT/shapes.err"
  done
done
python3 bench/shapes_report.py "$OUT/shapes.jsonl" > "$OUT/shapes.md"
cat "$OUT/shapes.md"
