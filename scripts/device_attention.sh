#!/usr/bin/env bash
# The GPU side of the attention forward, in device calls of under 10 minutes
# (see DEVELOPERS.md). What comes back is in $OUT.
#
#   scripts/device_attention.sh verify   build without the host JIT (every
#                                        target, tx_torch too), the whole ctest
#                                        suite with the GPU suites (gpu_attention,
#                                        gpu_attention_op, gpu_graphs, ...), the
#                                        torch tests (TORCH_K=attention: those of
#                                        attention) and of CUDA graphs, then
#                                        memcheck / racecheck / synccheck on the
#                                        attention kernels (SKIP_SANITIZE=1: not)
#   scripts/device_attention.sh bench    bench/attention (tx, cuDNN, flash,
#                                        Triton); ATTN_ROWS=name,name for some rows
#                                        (warm after verify: an incremental build)
set -uo pipefail
stage=${1:-verify}
FINAL=${OUT:-device-out}
mkdir -p "$FINAL"
export OUT=/tmp/device-logs-attention-$stage
rm -rf "$OUT" && mkdir -p "$OUT"
export TX_CACHE_DIR=/tmp/tx-cache
B=build-device
t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }

step "configure and build (no host JIT)"
TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make configure BUILD=$B > "$OUT/configure.log" 2>&1
if [ "$stage" = verify ]; then
  cmake --build $B -j 16 > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
else
  cmake --build $B -j 16 --target bench_attention > "$OUT/build.log" 2>&1 || {
    tail -30 "$OUT/build.log"
    exit 1
  }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$FINAL/machine.txt"

case "$stage" in
verify)
  step "ctest (every suite but the interactive ones and torch_ops, which run below)"
  (cd $B && timeout 420 ctest -j 6 --timeout 400 -E "torch_ops|notebook|repl|package" \
    > "$OUT/ctest.txt" 2>&1)
  grep -aE "tests passed|tests failed|\(Failed\)|\(Timeout\)|\(SEGFAULT\)" "$OUT/ctest.txt" | tee "$FINAL/tests.txt"
  for p in gpu_attention gpu_attention_op gpu_graphs; do
    $B/test/$p > "$OUT/$p.txt" 2>&1
    echo "$p exit $?: $(grep -E 'test cases|assertions' "$OUT/$p.txt" | tr '\n' ' ')" | tee -a "$FINAL/tests.txt"
    grep -E "ERROR:|MESSAGE" -A3 "$OUT/$p.txt" | head -30 | tee -a "$FINAL/tests.txt"
  done
  if [ -f $B/tx_torch/libtx_torch.so ]; then
    step "torch: attention (test_tx_torch.py -k attention) and CUDA graphs"
    PY=$(sed -n 's/^TX_TORCH_PYTHON:FILEPATH=//p' $B/CMakeCache.txt)
    [ -x "$PY" ] || PY=python3
    TX_TORCH_LIBRARY=$B/tx_torch/libtx_torch.so PYTHONPATH=tx_torch/python \
      TORCHINDUCTOR_CACHE_DIR=/tmp/inductor timeout 300 "$PY" -m pytest -q -p no:cacheprovider \
      test/torch/test_tx_torch.py ${TORCH_K:+-k "$TORCH_K"} test/torch/test_cuda_graph.py > "$OUT/torch.txt" 2>&1
    echo "torch tests exit $?: $(tail -1 "$OUT/torch.txt")" | tee -a "$FINAL/tests.txt"
    grep -E "FAILED|Error" "$OUT/torch.txt" | head -20 | tee -a "$FINAL/tests.txt"
  else
    echo "tx_torch did not build: $(tail -3 "$OUT/build.log")" | tee -a "$FINAL/tests.txt"
  fi
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  tools="memcheck racecheck synccheck"
  [ -n "${SKIP_SANITIZE:-}" ] && tools=""
  for tool in $tools; do
    step "$tool on the attention kernels (the sample's host cases; the op's varlen batches)"
    TX_SYNC=1 timeout 100 "$CS" --tool $tool --report-api-errors no $B/test/gpu_attention \
      -tc="*the host's cases*" > "$OUT/${tool}_sample.txt" 2>&1
    echo "$tool sample exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$OUT/${tool}_sample.txt" | tr '\n' ' ')" | tee -a "$FINAL/tests.txt"
    TX_SYNC=1 timeout 100 "$CS" --tool $tool --report-api-errors no $B/test/gpu_attention_op \
      -tc="*variable-length*" > "$OUT/${tool}_op.txt" 2>&1
    echo "$tool op exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$OUT/${tool}_op.txt" | tr '\n' ' ')" | tee -a "$FINAL/tests.txt"
  done
  grep -hsE "^========= (Error|Race|Barrier|Invalid)|hazard" "$OUT"/*check_*.txt | sort | uniq -c | head -20
  ;;
bench)
  [ -n "${ATTN_ROWS:-}" ] && export TX_ATTN_ONLY=$ATTN_ROWS
  step "bench/attention (tx, cuDNN, flash, Triton)"
  mkdir -p /tmp/a
  TORCH_TIMEOUT=${ATTN_TORCH_TIMEOUT:-400} timeout "${ATTN_TIMEOUT:-540}" bench/run_attention.sh $B /tmp/a \
    > "$OUT/attention_log.txt" 2>&1
  echo "run_attention exit $?"
  cp /tmp/a/attention.md /tmp/a/attention.json /tmp/a/attention_tx.txt "$FINAL/" 2>/dev/null
  cat /tmp/a/attention.md 2>/dev/null || tail -30 "$OUT/attention_log.txt"
  ;;
esac
step "done"
tar czf "$FINAL/logs-attention-$stage.tgz" -C /tmp "device-logs-attention-$stage"
ls "$FINAL"
