#!/usr/bin/env bash
# Everything the GPU machine is for, in device calls of under 10 minutes
# each (see DEVELOPERS.md). Both stages leave what comes back in $OUT (at most
# 8 files; the logs travel as one archive, logs-STAGE.tgz).
#
#   scripts/device_all.sh check   set-up as a user would run it (no network:
#                                 nothing may be installed or hang), build
#                                 without the host JIT, the whole ctest suite
#                                 (GPU suites included), every sample, the GPU
#                                 side of the GPU-vs-host comparison
#                                 (gpu_cross.bin -> test/data/gpu_cross_h200.bin)
#   scripts/device_all.sh sanitize every sample and GPU suite under
#                                 compute-sanitizer memcheck + racecheck
#                                 (after check, on its build and kernel cache)
#   scripts/device_all.sh races   a build of the few programs it needs, then
#                                 racecheck on the racy kernels (against the
#                                 checked host mode), memcheck on gpu_shapes
#                                 and gpu_safety (the 2^31-element buffer),
#                                 and bench_elementwise --compare-exact
#   scripts/device_all.sh shapes  the serving sweep of bench/shapes (tx
#                                 generic and exact, torch eager and compile)
#   scripts/device_all.sh generic shape-generic kernels in one call: gpu_shapes,
#                                 bench_elementwise
#                                 --compare-exact, then the serving sweep
#   scripts/device_all.sh hopper  the GEMM suites in full (gpu_hopper,
#                                 gpu_gemm: wgmma, TMA, fp8, B as (N, K)), then
#                                 memcheck, racecheck and synccheck on the
#                                 Hopper kernels with partial tiles and fp8
#   scripts/device_all.sh gemm    bench/gemm: tx, cuBLAS, Triton,
#                                 torch._scaled_mm (after hopper, warm)
#   scripts/device_all.sh attention  gpu_attention, the attention sample,
#                                 memcheck / racecheck / synccheck on it and on
#                                 ops::attention's kernels, then
#                                 bench/attention (tx, cuDNN, flash, Triton)
#   scripts/device_all.sh decode  decode over a paged KV cache: gpu_paged_attention,
#                                 the paged prefill cases of gpu_attention_op,
#                                 then bench/paged_decode (tx,
#                                 copy, PyTorch SDPA contiguous and gathered,
#                                 CUDA-graph replay)
#   scripts/device_all.sh decode-memcheck  memcheck on the decode, combine,
#                                 cache-write and paged prefill kernels (a
#                                 second call: decode alone fills most of one)
#   scripts/device_all.sh decode-pages  the decode benchmark at pages of 16,
#                                 32 and 64, Nsight Compute on one row
#   scripts/device_all.sh backward  the attention backward: its cases of
#                                 gpu_attention_op (float64, 10 runs' bits),
#                                 gpu_hopper's transposed-A wgmma, memcheck on
#                                 the small cases, then bench/attention_backward
#                                 (tx, cuDNN, flash)
#   scripts/device_all.sh grouped grouped and scaled GEMMs: gpu_gemm_family,
#                                 memcheck on it, bench/grouped_gemm.py (tx,
#                                 torch._grouped_mm, a torch.matmul loop)
#   scripts/device_all.sh grouped-ncu  Nsight Compute on the grouped kernel
#                                 (bench/grouped_profile.py at 4096, 16384 tokens)
#   scripts/device_all.sh interop tx inside a program against torch in one
#                                 run (bench/interop.sh), gpu_interop
#   scripts/device_all.sh bench   the elementwise benchmark (copy, tx, torch
#                                 eager and compile, JIT times, launch floor)
#   scripts/device_all.sh extras  every op against PyTorch, the strategy
#                                 sweep, an autotuning run, ncu on the cases
#                                 below the copy limit
#
# bench and extras reuse build-device when the machine is still warm.
set -uo pipefail
stage=${1:-check}
FINAL=${OUT:-device-out}
mkdir -p "$FINAL"
export OUT=/tmp/device-logs-$stage
rm -rf "$OUT" && mkdir -p "$OUT"
export TX_CACHE_DIR=/tmp/tx-cache
B=build-device
t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }

case "$stage" in
check)
  step "set-up as a user runs it (scripts/setup.sh, no TX_ switches)"
  (time timeout 300 scripts/setup.sh) > "$OUT/setup.txt" 2>&1
  echo "setup exit $?: $(grep -E '^setup:|^real' "$OUT/setup.txt" | tr '\n' ' ')"
  step "build, ctest, samples (scripts/device_check.sh)"
  scripts/device_check.sh > "$OUT/check.txt" 2>&1
  grep -E "build ok|BUILD FAILED|tests passed|tests failed|sample |\*\*\*Failed|Skipped" "$OUT/check.txt"
  cp $B/Testing/Temporary/LastTest.log "$OUT/" 2>/dev/null
  step "GPU side of the GPU-vs-host comparison"
  $B/test/cross_device run --device=cuda "$FINAL/gpu_cross.bin" > "$OUT/cross.txt" 2>&1
  grep -E "ran |test cases|assertions|error" "$OUT/cross.txt" | grep -v "tx warning" | tail -4
  ;;
sanitize)
  [ -x $B/test/gpu_matrix ] || scripts/device_check.sh > "$OUT/check.txt" 2>&1
  step "compute-sanitizer memcheck + racecheck"
  TX_CACHE_DIR=$PWD/$B/test-cache RUN_TIMEOUT=420 test/sanitize_gpu.sh $B /tmp/san > "$FINAL/sanitize_summary.txt" 2>&1
  echo "sanitize exit $?"
  tail -25 "$FINAL/sanitize_summary.txt"
  step "racecheck on the racy kernels (docs/reliability.md: against the checked host mode)"
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  TX_SYNC=1 timeout 300 "$CS" --tool racecheck --racecheck-report all --print-limit 200 \
    $B/test/racy_kernels --device=cuda > "$FINAL/racy_racecheck.txt" 2>&1
  echo "racecheck on racy_kernels exit $?"
  grep -E "^[a-z_]+: ran|RACECHECK SUMMARY|Race reported|hazard" "$FINAL/racy_racecheck.txt" | sort | uniq -c | head -30
  cp -r /tmp/san "$OUT/sanitize" 2>/dev/null
  ;;
races | shapes | interop | generic | hopper | gemm | grouped | grouped-ncu | attention | backward | decode | decode-memcheck | decode-pages)
  step "configure and build what the stage needs"
  TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make configure BUILD=$B > "$OUT/configure.log" 2>&1
  targets="racy_kernels gpu_shapes gpu_safety bench_elementwise"
  [ "$stage" = shapes ] && targets="bench_shapes tx_aot"
  [ "$stage" = generic ] && targets="gpu_shapes bench_elementwise bench_shapes tx_aot"
  [ "$stage" = interop ] && targets="bench_interop gpu_interop tx_peers_shim"
  [ "$stage" = hopper ] && targets="gpu_hopper gpu_gemm bench_gemm tx_torch"
  [ "$stage" = gemm ] && targets="bench_gemm tx_torch"
  [ "$stage" = grouped ] && targets="gpu_gemm_family gpu_hopper tx_torch"
  [ "$stage" = grouped-ncu ] && targets="tx_torch"
  [ "$stage" = attention ] && targets="gpu_attention gpu_attention_op attention_hopper bench_attention"
  [ "${stage%-memcheck}" = decode ] && targets="gpu_paged_attention gpu_attention_op bench_paged_decode"
  [ "$stage" = decode-pages ] && targets="bench_paged_decode"
  [ "$stage" = backward ] && targets="gpu_attention_op gpu_hopper bench_attention_backward"
  # shellcheck disable=SC2086
  cmake --build $B -j 16 --target $targets > "$OUT/build.log" 2>&1 || {
    tail -30 "$OUT/build.log"
    exit 1
  }
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/machine.txt"
  ;;&
races)
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  step "racecheck on the racy kernels"
  TX_SYNC=1 timeout 200 "$CS" --tool racecheck --racecheck-report all --print-limit 200 \
    $B/test/racy_kernels --device=cuda > "$FINAL/racy_racecheck.txt" 2>&1
  echo "racecheck on racy_kernels exit $?"
  grep -E "^[a-z_]+: ran|RACECHECK SUMMARY|Race reported|hazard" "$FINAL/racy_racecheck.txt" | sort | uniq -c | head -30
  step "memcheck on gpu_shapes and gpu_safety"
  for p in gpu_shapes gpu_safety; do
    timeout 120 "$CS" --tool memcheck --report-api-errors no $B/test/$p > "$FINAL/memcheck_$p.txt" 2>&1
    echo "memcheck $p exit $?: $(grep -E 'ERROR SUMMARY|test cases' "$FINAL/memcheck_$p.txt" | tr '\n' ' ')"
  done
  step "generic vs exact-shape kernels (bench_elementwise --compare-exact)"
  timeout 120 $B/bench/bench_elementwise --compare-exact > "$FINAL/compare_exact.txt" 2>&1
  echo "compare-exact exit $?"
  tail -30 "$FINAL/compare_exact.txt"
  ;;
hopper)
  for p in gpu_hopper gpu_gemm; do
    step "$p"
    timeout 240 $B/test/$p > "$FINAL/$p.txt" 2>&1
    echo "$p exit $?: $(grep -E 'test cases|assertions' "$FINAL/$p.txt" | tr '\n' ' ')"
    grep -E "ERROR:|MESSAGE" "$FINAL/$p.txt" | head -12
  done
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    step "$tool on the Hopper kernels (partial tiles; fp8 and B as (N, K))"
    TX_SYNC=1 timeout 150 "$CS" --tool $tool --report-api-errors no $B/test/gpu_hopper \
      -tc="*partial tiles*,T::pipeline*" > "$OUT/${tool}_hopper.txt" 2>&1
    echo "$tool gpu_hopper exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$OUT/${tool}_hopper.txt" | tr '\n' ' ')"
    TX_SYNC=1 timeout 150 "$CS" --tool $tool --report-api-errors no $B/test/gpu_gemm \
      -tc="tx::ops::matmul with B as*" > "$OUT/${tool}_matmul_nt.txt" 2>&1
    echo "$tool gpu_gemm exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$OUT/${tool}_matmul_nt.txt" | tr '\n' ' ')"
  done
  grep -hE "^========= (Error|Race|Barrier|Invalid)|hazard" "$OUT"/*check_*.txt | sort | uniq -c | head -20
  ;;
attention)
  step "gpu_attention"
  timeout 240 $B/test/gpu_attention > "$FINAL/gpu_attention.txt" 2>&1
  echo "gpu_attention exit $?: $(grep -E 'test cases|assertions' "$FINAL/gpu_attention.txt" | tr '\n' ' ')"
  grep -E "ERROR:|MESSAGE|values:|CHECK" "$FINAL/gpu_attention.txt" | head -24
  step "the sample"
  timeout 60 $B/samples/attention_hopper > "$OUT/sample.txt" 2>&1
  echo "attention_hopper exit $?: $(tail -1 "$OUT/sample.txt")"
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # ATTN_SANITIZE=0: leave the sanitizers for a later call.
  [ "${ATTN_SANITIZE:-1}" = 0 ] || for tool in memcheck racecheck synccheck; do
    step "$tool on the attention kernels (the host's cases)"
    TX_SYNC=1 timeout 120 "$CS" --tool $tool --report-api-errors no $B/test/gpu_attention \
      -tc="*the host's cases*" > "$OUT/${tool}_attention.txt" 2>&1
    echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$OUT/${tool}_attention.txt" | tr '\n' ' ')"
    # ops::attention's own kernels, the three-consumer form among them.
    TX_SYNC=1 timeout 120 "$CS" --tool $tool --report-api-errors no $B/test/gpu_attention_op \
      -tc="*three consumer*,*against float64: layouts*" > "$OUT/${tool}_attention_op.txt" 2>&1
    echo "$tool (op) exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$OUT/${tool}_attention_op.txt" | tr '\n' ' ')"
  done
  grep -hE "^========= (Error|Race|Barrier|Invalid)|hazard" "$OUT"/*check_attention.txt 2>/dev/null | sort | uniq -c | head -20
  # ATTN_ROWS=name,name: those rows of the benchmark only (TX_ATTN_ONLY).
  [ -n "${ATTN_ROWS:-}" ] && export TX_ATTN_ONLY=$ATTN_ROWS
  step "bench/attention (tx, cuDNN, flash, Triton)"
  mkdir -p /tmp/a
  TORCH_TIMEOUT=${ATTN_TORCH_TIMEOUT:-300} timeout "${ATTN_TIMEOUT:-420}" bench/run_attention.sh $B /tmp/a > "$OUT/attention_log.txt" 2>&1
  echo "run_attention exit $?"
  cp /tmp/a/attention.md /tmp/a/attention.json /tmp/a/attention_tx.txt "$FINAL/" 2>/dev/null
  cat /tmp/a/attention.md 2>/dev/null || tail -30 "$OUT/attention_log.txt"
  ;;
decode)
  step "gpu_paged_attention, and the paged prefill of gpu_attention_op"
  timeout 240 $B/test/gpu_paged_attention > "$FINAL/gpu_paged_attention.txt" 2>&1
  echo "gpu_paged_attention exit $?: $(grep -E 'test cases|assertions' "$FINAL/gpu_paged_attention.txt" | tr '\n' ' ')"
  grep -E "ERROR:|MESSAGE|values:|logged" "$FINAL/gpu_paged_attention.txt" | head -24
  timeout 120 $B/test/gpu_attention_op -tc="*paged*" > "$FINAL/gpu_attention_op_paged.txt" 2>&1
  echo "gpu_attention_op (paged) exit $?: $(grep -E 'test cases|assertions' "$FINAL/gpu_attention_op_paged.txt" | tr '\n' ' ')"
  grep -E "ERROR:|MESSAGE|logged" "$FINAL/gpu_attention_op_paged.txt" | head -12
  step "bench/paged_decode (tx, copy, PyTorch SDPA, graph replay)"
  mkdir -p /tmp/p
  $B/bench/bench_paged_decode --out /tmp/p/paged_tx.json > "$FINAL/paged_tx.txt" 2>&1
  echo "bench_paged_decode exit $?"
  cat "$FINAL/paged_tx.txt"
  PYTHONUNBUFFERED=1 timeout 300 python3 bench/paged_decode.py /tmp/p/paged_tx.json /tmp/p/paged_decode \
    > "$OUT/paged_torch_log.txt" 2>&1
  echo "paged_decode.py exit $?"
  cp /tmp/p/paged_decode.md /tmp/p/paged_decode.json "$FINAL/" 2>/dev/null
  cat /tmp/p/paged_decode.md 2>/dev/null || tail -20 "$OUT/paged_torch_log.txt"
  ;;
backward)
  step "gpu_attention_op: the backward cases"
  # BWD_SKIP_TESTS=1: memcheck and the benchmark only (a second call).
  [ -n "${BWD_SKIP_TESTS:-}" ] || timeout 200 $B/test/gpu_attention_op -tc="*backward*" > "$FINAL/gpu_attention_backward.txt" 2>&1
  echo "gpu_attention_op (backward) exit $?: $(grep -E 'test cases|assertions' "$FINAL/gpu_attention_backward.txt" | tr '\n' ' ')"
  grep -E "ERROR:|MESSAGE|logged|values:" "$FINAL/gpu_attention_backward.txt" | head -40
  step "gpu_hopper: wgmma with A read transposed, TMA reductions (atomic/tma_reduce)"
  timeout 60 $B/test/gpu_hopper -tc="*transpos*,*atomic_add of a shared tile*" > "$OUT/gpu_hopper_transposed.txt" 2>&1
  echo "gpu_hopper (transposed) exit $?: $(grep -E 'test cases|assertions' "$OUT/gpu_hopper_transposed.txt" | tr '\n' ' ')"
  grep -E "ERROR:|logged" "$OUT/gpu_hopper_transposed.txt" | head -10
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  step "memcheck on the backward kernels (the small cases)"
  TX_SYNC=1 timeout 150 "$CS" --tool memcheck --report-api-errors no $B/test/gpu_attention_op \
    -tc="*attention_backward against*,*attention_backward on variable*" > "$OUT/memcheck_backward.txt" 2>&1
  echo "memcheck backward exit $?: $(grep -E 'ERROR SUMMARY|test cases' "$OUT/memcheck_backward.txt" | tr '\n' ' ')"
  grep -E "Invalid|at 0x|by thread" "$OUT/memcheck_backward.txt" | head -8
  step "bench/attention_backward (tx, cuDNN, flash)"
  mkdir -p /tmp/b
  timeout "${BWD_TIMEOUT:-330}" $B/bench/bench_attention_backward --out /tmp/b/bwd_tx.json > "$FINAL/attention_backward_tx.txt" 2>&1
  echo "bench_attention_backward exit $?"
  cat "$FINAL/attention_backward_tx.txt"
  PYTHONUNBUFFERED=1 PYTHONPATH=bench timeout 200 python3 bench/attention_backward.py /tmp/b/bwd_tx.json /tmp/b/attention_backward \
    > "$OUT/bwd_torch_log.txt" 2>&1
  echo "attention_backward.py exit $?"
  cp /tmp/b/attention_backward.md /tmp/b/attention_backward.json "$FINAL/" 2>/dev/null
  cat /tmp/b/attention_backward.md 2>/dev/null || tail -20 "$OUT/bwd_torch_log.txt"
  ;;
decode-memcheck)
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  step "memcheck on the decode, combine, cache-write and paged prefill kernels"
  TX_SYNC=1 timeout 150 "$CS" --tool memcheck --report-api-errors no $B/test/gpu_paged_attention \
    -tce="*serving sizes*" > "$OUT/memcheck_paged.txt" 2>&1
  echo "memcheck gpu_paged_attention exit $?: $(grep -E 'ERROR SUMMARY|test cases' "$OUT/memcheck_paged.txt" | tr '\n' ' ')"
  TX_SYNC=1 timeout 100 "$CS" --tool memcheck --report-api-errors no $B/test/gpu_attention_op \
    -tc="*paged*" > "$OUT/memcheck_prefill.txt" 2>&1
  echo "memcheck paged prefill exit $?: $(grep -E 'ERROR SUMMARY|test cases' "$OUT/memcheck_prefill.txt" | tr '\n' ' ')"
  ;;
decode-pages)
  # Where the decode kernel's time goes: the same rows with pages of 16, 32
  # and 64 (each page is one copy per tensor: its size is the copy's), then
  # Nsight Compute on batch 32 x 4096 keys at pages of 16 and 64.
  for p in 16 32 64; do
    step "bench_paged_decode, pages of $p"
    TX_PAGED_BENCH_PAGE=$p timeout 120 $B/bench/bench_paged_decode --out /tmp/pages_$p.json \
      > "$FINAL/paged_page$p.txt" 2>&1
    cut -c1-110 "$FINAL/paged_page$p.txt"
  done
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for p in 16 64; do
    step "ncu, batch 32 x 4096, pages of $p"
    TX_PAGED_BENCH_PAGE=$p TX_PAGED_BENCH_ONLY=b32ctx4096 timeout 150 "$NCU" --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section Occupancy -k regex:paged_decode -c 1 $B/bench/bench_paged_decode --out /tmp/x.json \
      > "$OUT/ncu_page$p.txt" 2>&1
    grep -E "Throughput|Duration|Stall|Issued|Eligible|Active Warps|Hit Rate|Bandwidth" \
      "$OUT/ncu_page$p.txt" | head -30
  done
  ;;
grouped)
  step "gpu_gemm_family"
  timeout 200 $B/test/gpu_gemm_family > "$FINAL/gpu_gemm_family.txt" 2>&1
  echo "gpu_gemm_family exit $?: $(grep -E 'test cases|assertions' "$FINAL/gpu_gemm_family.txt" | tr '\n' ' ')"
  grep -E "ERROR:|MESSAGE|logged|values:" "$FINAL/gpu_gemm_family.txt" | head -30
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck; do
    step "$tool on the grouped kernels"
    TX_SYNC=1 timeout 150 "$CS" --tool $tool --report-api-errors no $B/test/gpu_gemm_family \
      -tc="*every expert*,*fp8 operands*" > "$OUT/${tool}_grouped.txt" 2>&1
    echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$OUT/${tool}_grouped.txt" | tr '\n' ' ')"
  done
  step "bench/grouped_gemm.py (tx, torch._grouped_mm, a matmul loop)"
  mkdir -p /tmp/gg
  PYTHONUNBUFFERED=1 PYTHONPATH=bench TX_TORCH_LIBRARY=$PWD/$B/tx_torch/libtx_torch.so \
    timeout "${GROUPED_TIMEOUT:-300}" python3 bench/grouped_gemm.py /tmp/gg/grouped_gemm ${GROUPED_QUICK:+--quick} \
    > "$OUT/grouped_log.txt" 2>&1
  echo "grouped_gemm.py exit $?"
  cp /tmp/gg/grouped_gemm.md /tmp/gg/grouped_gemm.json "$FINAL/" 2>/dev/null
  cat /tmp/gg/grouped_gemm.md 2>/dev/null || tail -30 "$OUT/grouped_log.txt"
  ;;
grouped-ncu)
  # Nsight Compute on the grouped kernel at 4096 and 16384 tokens of the
  # DeepSeek-like down projection (the second runs at 0.75x torch._grouped_mm
  # where the first reaches 0.97x).
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for tokens in 4096 16384; do
    step "ncu, grouped_matmul deepseek down, $tokens tokens"
    PYTHONPATH=bench TX_TORCH_LIBRARY=$PWD/$B/tx_torch/libtx_torch.so timeout 200 "$NCU" \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section SchedulerStats --section LaunchStats -k regex:grouped_matmul -s 1 -c 1 \
      python3 bench/grouped_profile.py $tokens > "$OUT/ncu_grouped_$tokens.txt" 2>&1
    grep -E "Throughput|Duration|Stall|Issued|Eligible|Active Warps|Hit Rate|Bandwidth|Registers|Grid|Block Size" \
      "$OUT/ncu_grouped_$tokens.txt" | head -40
  done
  ;;
gemm)
  step "bench/gemm (tx, cuBLAS, Triton, torch._scaled_mm)"
  mkdir -p /tmp/g
  TORCH_TIMEOUT=${GEMM_TORCH_TIMEOUT:-400} timeout "${GEMM_TIMEOUT:-540}" bench/run_gemm.sh $B /tmp/g > "$OUT/gemm_log.txt" 2>&1
  echo "run_gemm exit $?"
  cp /tmp/g/gemm.md /tmp/g/gemm.json /tmp/g/gemm_tx.json /tmp/g/gemm_tx.txt "$FINAL/" 2>/dev/null
  cat /tmp/g/gemm.md 2>/dev/null || tail -30 "$OUT/gemm_log.txt"
  ;;
generic)
  step "gpu_shapes"
  timeout 150 $B/test/gpu_shapes > "$FINAL/gpu_shapes.txt" 2>&1
  echo "gpu_shapes exit $?: $(grep -E 'test cases|assertions' "$FINAL/gpu_shapes.txt" | tr '\n' ' ')"
  grep -E "ERROR:|MESSAGE|values:" "$FINAL/gpu_shapes.txt" | head -20
  step "generic vs exact-shape kernels (bench_elementwise --compare-exact)"
  T="$FINAL/compare_exact_table.txt"
  timeout 150 $B/bench/bench_elementwise --compare-exact > "$FINAL/compare_exact.txt" 2> "$T"
  echo "compare-exact exit $?: $(grep -c ratio "$T") cases, $(awk '{ for (i = 1; i < NF; ++i)
    if ($i == "ratio" && $(i + 1) >= 0.97) ++k } END { print k + 0 }' "$T") at >= 0.97 of exact; lowest:"
  awk '{ for (i = 1; i < NF; ++i) if ($i == "ratio") print $(i + 1), $0 }' "$T" | sort -n | head -4 | cut -d' ' -f2-
  ;;&
shapes | generic)
  step "the serving sweep (bench/shapes.sh)"
  BUILD_DIR=$B OUT=/tmp/shapes-out timeout 500 bench/shapes.sh > "$OUT/shapes.txt" 2>&1
  echo "shapes exit $?"
  cp /tmp/shapes-out/shapes.md /tmp/shapes-out/shapes.jsonl /tmp/shapes-out/first_calls.jsonl "$FINAL/" 2>/dev/null
  cat /tmp/shapes-out/first_calls.jsonl 2>/dev/null
  cp /tmp/shapes-out/shapes.err "$OUT/" 2>/dev/null
  cat /tmp/shapes-out/shapes.md 2>/dev/null | head -60
  ;;
interop)
  step "tx inside a program, against torch (bench/interop.sh)"
  BUILD_DIR=$B OUT=/tmp/interop-out timeout 300 bench/interop.sh > "$OUT/interop.txt" 2>&1
  echo "interop exit $?"
  cp /tmp/interop-out/interop.md /tmp/interop-out/interop.jsonl "$FINAL/" 2>/dev/null
  cp /tmp/interop-out/interop.err "$OUT/" 2>/dev/null
  cat /tmp/interop-out/interop.md 2>/dev/null
  step "tx with torch and cupy through DLPack (test/peers)"
  TX_PEERS_TRACE=1 timeout 120 python3 -u -X faulthandler test/peers/dlpack_peers.py $B/test/libtx_peers_shim.so > "$FINAL/dlpack_peers.txt" 2>&1
  echo "dlpack_peers exit $?"
  tail -25 "$FINAL/dlpack_peers.txt"
  step "gpu_interop"
  timeout 120 $B/test/gpu_interop > "$OUT/gpu_interop.txt" 2>&1
  echo "gpu_interop exit $?: $(grep -E 'test cases|MESSAGE|us per call|ms' "$OUT/gpu_interop.txt" | tr '\n' ' ' | head -c 600)"
  ;;
bench | extras)
  step "build (incremental when the machine is still warm)"
  TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make build BUILD=$B JOBS=16 > "$OUT/build.log" 2>&1 || {
    tail -30 "$OUT/build.log"
    exit 1
  }
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/machine.txt"
  ;;&
bench)
  step "elementwise benchmark (tx, copy, torch)"
  BUILD_DIR=$B OUT=/tmp/bench-out TORCH_TIMEOUT=420 bench/device_bench.sh > "$OUT/bench.txt" 2>&1
  grep -E "JIT|torch rc|driver_us" "$OUT/bench.txt"
  cp /tmp/bench-out/elementwise.md /tmp/bench-out/elementwise.json /tmp/bench-out/elementwise.png "$FINAL/" 2>/dev/null
  cp /tmp/bench-out/*.json "$OUT/" 2>/dev/null
  cp /tmp/bench-out/launch_floor.json "$FINAL/" 2>/dev/null
  ;;
extras)
  step "every op against PyTorch"
  mkdir -p /tmp/ovt && $B/bench/bench_ops_vs_torch /tmp/ovt > "$OUT/ops_vs_torch_tx.txt" 2>&1 &&
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/ops_vs_torch.py /tmp/ovt > "$FINAL/ops_vs_torch.md" 2> "$OUT/ops_vs_torch.err"
  echo "ops_vs_torch exit $?"
  tail -2 "$FINAL/ops_vs_torch.md"
  step "the three strategies"
  timeout 90 $B/bench/bench_launch_configs strategies > "$OUT/strategies.txt" 2>&1
  cat "$OUT/strategies.txt"
  step "autotuning (opt-in search, remembered on disk)"
  TX_CACHE_DIR=/tmp/tune-cache timeout 60 $B/bench/bench_elementwise --tune > "$OUT/tune_out.txt" 2> "$OUT/tune.txt"
  tail -3 "$OUT/tune.txt"
  cat /tmp/tune-cache/autotune.txt > "$OUT/autotune_file.txt" 2>/dev/null
  step "ncu on the kernels below the copy limit"
  for only in "gelu f8e4m3 2^28|float8_e4m3fn" "silu f8e5m2 2^28|float8_e5m2"; do
    timeout 60 ncu --metrics sm__inst_executed.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum \
      -k regex:tx_ -c 1 $B/bench/bench_elementwise --only "$only" --out /tmp/ncu.json > "$OUT/ncu_$(echo "$only" | tr -c 'a-z0-9' _).txt" 2>&1
  done
  grep -hE "tx_|inst_executed|sm__throughput|dram__throughput|duration" "$OUT"/ncu_*.txt | head -20
  ;;
*)
  echo "usage: scripts/device_all.sh check|sanitize|races|shapes|generic|hopper|gemm|interop|bench|extras" >&2
  exit 2
  ;;
esac
tar czf "$FINAL/logs-$stage.tgz" -C /tmp "device-logs-$stage"
step "done"
ls "$FINAL"
