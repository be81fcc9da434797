#!/usr/bin/env bash
# The attention forward: tx, cuDNN SDPA, torch's flash backend and Triton in
# one run on the GPU machine.
#   bench/run_attention.sh BUILD_DIR OUT_DIR
set -euo pipefail
B=${1:-build-device}
O=${2:-${OUT:-bench-out}}
mkdir -p "$O"
export TX_CACHE_DIR=${TX_CACHE_DIR:-/tmp/tx-bench-cache}
"$B/bench/bench_attention" --out "$O/attention_tx.json" | tee "$O/attention_tx.txt"
PYTHONUNBUFFERED=1 PYTHONPATH=bench timeout "${TORCH_TIMEOUT:-400}" python3 bench/attention.py \
  "$O/attention_tx.json" "$O/attention" > "$O/attention_torch_log.txt" 2>&1 ||
  { echo "torch side failed:"; tail -20 "$O/attention_torch_log.txt"; exit 1; }
cat "$O/attention.md"
# Decode over a paged KV cache (bench/paged_decode.cpp, bench/paged_decode.py).
"$B/bench/bench_paged_decode" --out "$O/paged_tx.json" | tee "$O/paged_tx.txt"
PYTHONUNBUFFERED=1 timeout "${TORCH_TIMEOUT:-400}" python3 bench/paged_decode.py \
  "$O/paged_tx.json" "$O/paged_decode" > "$O/paged_torch_log.txt" 2>&1 ||
  { echo "torch side of the decode rows failed:"; tail -20 "$O/paged_torch_log.txt"; exit 1; }
cat "$O/paged_decode.md"
