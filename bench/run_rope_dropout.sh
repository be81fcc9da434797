#!/usr/bin/env bash
# rope and dropout: tx, copy, PyTorch eager and torch.compile in one run on the GPU machine.
#   bench/run_rope_dropout.sh BUILD_DIR OUT_DIR
set -euo pipefail
B=${1:-build-device}
O=${2:-${OUT:-bench-out}}
mkdir -p "$O"
export TX_CACHE_DIR=${TX_CACHE_DIR:-/tmp/tx-bench-cache}
"$B/bench/bench_rope_dropout" --cases > "$O/rope_dropout_cases.json"
"$B/bench/bench_rope_dropout" --out "$O/rope_dropout_tx.json" | tee "$O/rope_dropout_tx.txt"
export TORCHINDUCTOR_COMPILE_THREADS=16
PYTHONUNBUFFERED=1 timeout "${TORCH_TIMEOUT:-420}" python3 bench/rope_dropout.py \
  "$O/rope_dropout_cases.json" "$O/rope_dropout_tx.json" "$O/rope_dropout" > "$O/rope_dropout_torch_log.txt" 2>&1 ||
  { echo "torch side failed:"; tail -20 "$O/rope_dropout_torch_log.txt"; exit 1; }
cat "$O/rope_dropout.md"
