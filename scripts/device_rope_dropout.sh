#!/usr/bin/env bash
# rope and dropout on a GPU machine, in one call of the device tool (about
# 5 minutes on a cold H100/H200): build without the host JIT (the GPU
# machines have no LLVM), run gpu_rope_dropout (every cache against float64
# vLLM formulas, the rotation against a float64 forward_native, the dropout
# masks bit for bit against the C++ Philox reference that the host JIT
# suite also matches), test_rope_dropout, then the benchmark against copy,
# torch eager and torch.compile (bench/run_rope_dropout.sh). Results in $OUT:
#   gpu_rope_dropout.log, rope_dropout.md / .json (the table for docs/), machine.txt
#
#   OUT=/tmp/out scripts/device_rope_dropout.sh
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export TX_CACHE_DIR=${TX_CACHE_DIR:-/tmp/tx-cache}
BD=${BUILD_DIR:-build-device}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  date -u +%Y-%m-%dT%H:%MZ
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
if ! { cmake -S . -B "$BD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTX_HOST_JIT=OFF \
         -DTX_AOT_KERNELS=OFF -DTX_BUILD_BENCH=ON > "$OUT/build.log" 2>&1 &&
       cmake --build "$BD" -j 16 --target gpu_rope_dropout test_rope_dropout bench_rope_dropout \
         >> "$OUT/build.log" 2>&1; }; then
  tail -40 "$OUT/build.log"
  echo "BUILD FAILED"
  exit 1
fi
rc=0
"$BD/test/gpu_rope_dropout" > "$OUT/gpu_rope_dropout.log" 2>&1 || rc=$?
echo "gpu_rope_dropout: exit $rc"
tail -25 "$OUT/gpu_rope_dropout.log"
"$BD/test/test_rope_dropout" > "$OUT/test_rope_dropout.log" 2>&1 || rc=$?
tail -3 "$OUT/test_rope_dropout.log"
bash bench/run_rope_dropout.sh "$BD" "$OUT" || rc=$?
exit $rc
