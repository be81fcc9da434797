#!/usr/bin/env bash
# copy_async/tma_store on the GPU, one device call: the Hopper tests (TMA
# stores through every swizzle mode, the GEMM), then the GEMM sample's tilings
# with and without the TMA-store epilogue at 4096^3 and 8192^3 bf16, and
# torch.matmul (cuBLAS) in the same run. Back in $OUT: *.txt.
set -uo pipefail
FINAL=${OUT:-device-out}
mkdir -p "$FINAL"
export TX_CACHE_DIR=/tmp/tx-cache
B=build-device
t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }
step "configure and build (no host JIT)"
TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make configure BUILD=$B > /tmp/configure.log 2>&1
cmake --build $B -j 16 --target gpu_hopper bench_gemm > /tmp/build.log 2>&1 || {
  tail -30 /tmp/build.log
  exit 1
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$FINAL/machine.txt"
step "gpu_hopper"
(cd $B/test && timeout 240 ./gpu_hopper) > "$FINAL/gpu_hopper.txt" 2>&1
echo "exit $?"
grep -E "ERROR|test cases|assertions" "$FINAL/gpu_hopper.txt" | head -20
step "bench_gemm 4096 and 8192 (bf16)"
for q in 1 8192; do
  TX_GEMM_QUICK=$q timeout 150 $B/bench/bench_gemm --out /tmp/g$q.json 2>&1 | grep -v "^tx warning" | tee -a "$FINAL/gemm_tx.txt"
done
step "torch.matmul (cuBLAS)"
timeout 100 python3 - <<'PY' 2>&1 | tee "$FINAL/gemm_cublas.txt"
import torch
for n in (4096, 8192):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(10): torch.matmul(a, b)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(50):
        s.record(); torch.matmul(a, b); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); ms = ts[len(ts) // 2]
    print(f"cublas bf16 {n}^3: {ms:.3f} ms, {2 * n**3 / ms / 1e9:.0f} TFLOP/s")
PY
step "done"
