#!/usr/bin/env bash
# Several GPUs (issue 43), one device call on nvidia-h100-x2 / h200-x2 (or
# x4): the multi-GPU suites (gpu_dist: groups, symmetric memory, NCCL, CUDA
# IPC; gpu_dist_ops: tx's all-reduce against float64), compute-sanitizer
# memcheck on gpu_dist_ops, then bench_dist (tx against NCCL) and
# bench/dist_torch.py (torch NCCL and symmetric memory) in the same run.
# `scripts/device_dist.sh torch`: torch.ops.tx's multi-GPU ops (pytest).
# NVLink multicast stays off. Back in $OUT: *.txt.
set -uo pipefail
FINAL=${OUT:-device-out}
mkdir -p "$FINAL"
export TX_CACHE_DIR=/tmp/tx-cache NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=build-device
t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }
stage=${1:-all}
step "configure and build (no host JIT)"
TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make configure BUILD=$B > /tmp/configure.log 2>&1
targets="gpu_dist gpu_dist_ops bench_dist"
[ "$stage" = torch ] && targets="tx_torch"
cmake --build $B -j 32 --target $targets > /tmp/build.log 2>&1 || {
  tail -30 /tmp/build.log
  exit 1
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$FINAL/machine.txt"
nvidia-smi topo -m > "$FINAL/topo.txt" 2>&1
if [ "$stage" = all ] || [ "$stage" = test ]; then
  step "gpu_dist"
  (cd $B/test && timeout 200 ./gpu_dist) > "$FINAL/gpu_dist.txt" 2>&1
  echo "exit $?"; grep -E "ERROR|test cases|assertions" "$FINAL/gpu_dist.txt" | head
  step "gpu_dist_ops"
  (cd $B/test && timeout 150 ./gpu_dist_ops) > "$FINAL/gpu_dist_ops.txt" 2>&1
  echo "exit $?"; grep -E "ERROR|error|test cases|assertions|ranks on" "$FINAL/gpu_dist_ops.txt" | head -20
fi
if [ "$stage" = all ] || [ "$stage" = sanitize ]; then
  # API errors off: NCCL (the sequential paths) probes kernels for other
  # architectures (cudaErrorNoKernelImageForDevice) and enables peer access
  # tx already enabled (cudaErrorPeerAccessAlreadyEnabled) -- both handled
  # inside NCCL, yet memcheck counts them as errors. Memory errors stay on.
  step "memcheck gpu_dist_ops (2 ranks)"
  (cd $B/test && timeout 300 compute-sanitizer --tool memcheck --report-api-errors no ./gpu_dist_ops) > "$FINAL/memcheck.txt" 2>&1
  echo "exit $?"; grep -E "ERROR SUMMARY|test cases" "$FINAL/memcheck.txt" | head
fi
if [ "$stage" = all ] || [ "$stage" = bench ]; then
  step "bench_dist"
  timeout 200 $B/bench/bench_dist 2>&1 | grep -v "^tx warning" | tee "$FINAL/bench_dist.txt"
  step "bench/dist_torch.py"
  timeout 200 torchrun --nproc-per-node "$(nvidia-smi -L | wc -l)" bench/dist_torch.py 2>&1 | grep -v "^W1\|Warning" | tee "$FINAL/bench_dist_torch.txt"
fi
if [ "$stage" = torch ]; then
  # torch.ops.tx's multi-GPU ops on a torch.distributed NCCL group (two
  # spawned ranks against float64): test/torch/test_dist_ops.py.
  step "torch.ops.tx multi-GPU ops (pytest, 2 ranks)"
  TX_TORCH_LIBRARY=$B/tx_torch/libtx_torch.so PYTHONPATH=tx_torch/python timeout 300 \
    python3 -m pytest -q -p no:cacheprovider test/torch/test_dist_ops.py > "$FINAL/torch_dist_ops.txt" 2>&1
  echo "exit $?"; tail -15 "$FINAL/torch_dist_ops.txt"
fi
step done
