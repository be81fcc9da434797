#!/usr/bin/env bash
# The row kernels: tx, copy, PyTorch eager and torch.compile in one run on the GPU machine.
#   bench/run_rows.sh BUILD_DIR OUT_DIR
set -euo pipefail
B=${1:-build-device}
O=${2:-${OUT:-bench-out}}
mkdir -p "$O"
export TX_CACHE_DIR=${TX_CACHE_DIR:-/tmp/tx-bench-cache}
"$B/bench/bench_rows" --cases > "$O/rows_cases.json"
"$B/bench/bench_rows" --out "$O/rows_tx.json" | tee "$O/rows_tx.txt"
export TORCHINDUCTOR_COMPILE_THREADS=16
PYTHONUNBUFFERED=1 timeout "${TORCH_TIMEOUT:-420}" python3 bench/rows.py \
  "$O/rows_cases.json" "$O/rows_tx.json" "$O/rows" > "$O/rows_torch_log.txt" 2>&1 ||
  { echo "torch side failed:"; tail -20 "$O/rows_torch_log.txt"; exit 1; }
cat "$O/rows.md"
