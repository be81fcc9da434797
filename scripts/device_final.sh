#!/usr/bin/env bash
# One call for the GEMM and the shape-generic kernels after a change to both:
# build what it needs, the split-K and matmul GPU cases (and split-K under
# memcheck), gpu_shapes, the generic-vs-exact comparison, then bench/gemm
# (tx, cuBLAS, Triton; alternating rounds through tx_torch). Results in $OUT.
set -uo pipefail
export TX_CACHE_DIR=/tmp/tx-cache
B=build-device
OUT=${OUT:-device-out}
mkdir -p "$OUT"
TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make configure BUILD=$B > /tmp/cfg.log 2>&1
cmake --build $B -j 16 --target gpu_gemm gpu_shapes bench_gemm bench_elementwise tx_torch tx_aot \
  > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== gpu_gemm (split-K, ops::matmul)"
timeout 150 $B/test/gpu_gemm -tc="split-K*,tx::ops::matmul*" > "$OUT/gpu_gemm.txt" 2>&1
echo "exit $?"; grep -E "ERROR|test cases|assertions" "$OUT/gpu_gemm.txt" | head -12
echo "== memcheck on the split-K case"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 120 "$CS" --tool memcheck $B/test/gpu_gemm -tc="split-K*" > /tmp/memcheck.txt 2>&1
echo "exit $?"; grep -E "ERROR SUMMARY|test cases" /tmp/memcheck.txt
echo "== gpu_shapes"
timeout 90 $B/test/gpu_shapes > /tmp/gpu_shapes.txt 2>&1
echo "exit $?"; grep -E "ERROR|test cases" /tmp/gpu_shapes.txt | head -8
echo "== compare-exact"
timeout 120 $B/bench/bench_elementwise --compare-exact > "$OUT/compare_exact.txt" 2>&1
awk '{ for (i = 1; i < NF; ++i) if ($i == "ratio") print $(i + 1) }' "$OUT/compare_exact.txt" | sort -n | head -3 | tr '\n' ' '
echo "(lowest 3 of $(grep -c ratio "$OUT/compare_exact.txt"))"
grep ratio "$OUT/compare_exact.txt" | grep -E "\(16,256|\(1024,20480\)\+"
echo "== bench/gemm"
mkdir -p /tmp/g
timeout 330 bench/run_gemm.sh $B /tmp/g > /tmp/g/log.txt 2>&1
echo "exit $?"
cp /tmp/g/gemm.md /tmp/g/gemm.json /tmp/g/gemm_tx.json /tmp/g/log.txt "$OUT/" 2>/dev/null
cat /tmp/g/gemm.md
