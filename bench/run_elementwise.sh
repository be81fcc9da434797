#!/usr/bin/env bash
# The elementwise benchmark, tx and PyTorch in one run on the GPU machine:
#   bench/run_elementwise.sh BUILD_DIR OUT_DIR
set -euo pipefail
B=${1:-build-device}
O=${2:-${OUT:-bench-out}}
mkdir -p "$O"
export TX_CACHE_DIR=${TX_CACHE_DIR:-/tmp/tx-bench-cache}
"$B/bench/bench_elementwise" --cases > "$O/cases.json"
"$B/bench/bench_elementwise" --out "$O/tx.json" | tee "$O/tx_table.txt"
"$B/bench/bench_elementwise" --jit > "$O/jit.json"
n=$(python3 -c "import json;print(json.load(open('$O/jit.json'))['n'])")
"$B/bench/bench_elementwise" --jit-disk "$n" > "$O/jit_disk.json"
PYTHONUNBUFFERED=1 python3 bench/torch_elementwise.py "$O/cases.json" "$O/torch.json" > "$O/torch_log.txt" 2>&1
python3 bench/report.py "$O/tx.json" "$O/torch.json" "$O/jit.json" "$O/jit_disk.json" "$O/elementwise"
