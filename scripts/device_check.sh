#!/usr/bin/env bash
# One batched run on a GPU machine (see DEVELOPERS.md): build without the
# host JIT, run the whole ctest suite (GPU suites included), every sample
# with its IR/CUDA, and optional extras given as arguments (benchmarks,
# compute-sanitizer). Logs go to $OUT (or ./device-out).
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export TX_CACHE_DIR=${TX_CACHE_DIR:-/tmp/tx-cache}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

build() {
  TX_HOST_JIT=OFF TX_NOTEBOOKS=0 make build BUILD=build-device JOBS=16 > "$OUT/build.log" 2>&1
}
if ! build; then
  tail -50 "$OUT/build.log"
  echo "BUILD FAILED"
  exit 1
fi
echo "build ok"

ctest --test-dir build-device --output-on-failure -j 4 > "$OUT/ctest.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|Skipped|\*\*\*Failed|Not Run" "$OUT/ctest.log" | tail -40
for s in warp_sqrt_reg cta_sqrt_smem warp_copy_reg thread_sum_local warp_sum_shuffle shape_generic softmax cta_sum_cross_warp gemm; do
  build-device/samples/$s > "$OUT/sample_$s.log" 2>&1
  echo "sample $s: exit $? ($(tail -1 "$OUT/sample_$s.log"))"
done
for extra in "$@"; do
  echo "== $extra"
  bash -c "$extra" 2>&1 | tee -a "$OUT/extra.log" | tail -60
done
exit $rc
