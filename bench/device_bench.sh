#!/usr/bin/env bash
# One device call: build the library and the benchmark (no tests), run tx,
# JIT timings, then PyTorch, then the report. Everything lands in $OUT.
set -uo pipefail
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
export TX_CACHE_DIR=/tmp/tx-bench-cache
BD=${BUILD_DIR:-build-bench}
if [ ! -x "$BD/bench/bench_elementwise" ]; then
  cmake -S . -B "$BD" -G Ninja -DTX_HOST_JIT=OFF -DTX_BUILD_TESTS=OFF -DTX_BUILD_SAMPLES=OFF > "$OUT/bench_build.log" 2>&1 &&
    cmake --build "$BD" --target bench_elementwise -j 16 >> "$OUT/bench_build.log" 2>&1 || { tail -30 "$OUT/bench_build.log"; exit 1; }
fi
B=$BD/bench/bench_elementwise
$B --cases > /tmp/cases.json
$B --out "$OUT/tx.json" > /tmp/tx_table.txt
$B --jit > "$OUT/jit.json"
$B --launch-floor | tee "$OUT/launch_floor.json"
$B --jit-disk "$(python3 -c "import json;print(json.load(open('$OUT/jit.json'))['n'])")" > "$OUT/jit_disk.json"
export TORCHINDUCTOR_COMPILE_THREADS=16
PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-420} python3 bench/torch_elementwise.py /tmp/cases.json "$OUT/torch.json" > /tmp/torch_log.txt 2>&1
echo "torch rc=$?"
tail -3 /tmp/torch_log.txt
python3 bench/report.py "$OUT/tx.json" "$OUT/torch.json" "$OUT/jit.json" "$OUT/jit_disk.json" "$OUT/elementwise"
