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
$B --sizes > "$OUT/sizes.json"
: > "$OUT/shapes.jsonl"
for op in gelu add silu_and_mul; do
  for dt in float16 bfloat16; do
    for mode in generic exact; do
      # A fresh, empty disk cache: the first call of each kernel compiles.
      rm -rf /tmp/tx-shapes-cache
      TX_CACHE_DIR=/tmp/tx-shapes-cache timeout 300 $B --run $mode $op $dt >> "$OUT/shapes.jsonl" 2>> "$OUT/shapes.err"
    done
    for mode in eager compile; do
      rm -rf /tmp/torchinductor_shapes
      TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor_shapes timeout 300 python3 bench/shapes.py $mode $op $dt "$OUT/sizes.json" >> "$OUT/shapes.jsonl" 2>> "$OUT/shapes.err"
    done
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
