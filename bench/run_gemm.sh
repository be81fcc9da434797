#!/usr/bin/env bash
# The GEMM: tx, torch.matmul (cuBLAS) and Triton in one run on the GPU machine.
#   bench/run_gemm.sh BUILD_DIR OUT_DIR
set -euo pipefail
B=${1:-build-device}
O=${2:-${OUT:-bench-out}}
mkdir -p "$O"
export TX_CACHE_DIR=${TX_CACHE_DIR:-/tmp/tx-bench-cache}
"$B/bench/bench_gemm" --out "$O/gemm_tx.json" | tee "$O/gemm_tx.txt"
PYTHONUNBUFFERED=1 PYTHONPATH=bench timeout "${TORCH_TIMEOUT:-420}" python3 bench/gemm.py \
  "$O/gemm_tx.json" "$O/gemm" > "$O/gemm_torch_log.txt" 2>&1 ||
  { echo "torch side failed:"; tail -20 "$O/gemm_torch_log.txt"; exit 1; }
cat "$O/gemm.md"
