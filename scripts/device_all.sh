#!/usr/bin/env bash
# Everything the GPU machine is for, in one call (see DEVELOPERS.md):
# build + the whole ctest suite + the samples, the GPU side of the
# GPU-vs-host comparison, every op against PyTorch, and the elementwise
# benchmark. At most 8 files come back, so the logs travel as one archive.
set -uo pipefail
FINAL=${OUT:-device-out}
mkdir -p "$FINAL"
export OUT=/tmp/device-logs
mkdir -p "$OUT"
scripts/device_check.sh > "$OUT/check.txt" 2>&1
grep -E "build ok|BUILD FAILED|tests passed|tests failed|sample |\*\*\*Failed" "$OUT/check.txt"
cp build-device/Testing/Temporary/LastTest.log "$OUT/" 2>/dev/null
B=build-device
$B/test/cross_device run --device=cuda "$FINAL/gpu_cross.bin" 2>&1 | tail -2
mkdir -p /tmp/ovt && $B/bench/bench_ops_vs_torch /tmp/ovt > /dev/null 2>&1 &&
  python3 bench/ops_vs_torch.py /tmp/ovt > "$FINAL/ops_vs_torch.md" 2>"$OUT/ops_vs_torch.err"
tail -1 "$FINAL/ops_vs_torch.md"
BUILD_DIR=$B OUT=/tmp/bench-out bench/device_bench.sh > "$OUT/bench.txt" 2>&1
grep -E "JIT|torch rc|driver_us" "$OUT/bench.txt"
cp /tmp/bench-out/elementwise.md /tmp/bench-out/elementwise.json /tmp/bench-out/elementwise.png "$FINAL/" 2>/dev/null
cp /tmp/bench-out/*.json "$OUT/" 2>/dev/null
# Why the misses miss: instruction issue vs DRAM for the kernels under 0.95 of copy.
for only in "gelu 2^28|float16" "relu f8e4m3 2^28|float8_e4m3fn" "gelu 2^28|float32" "exp 2^28|float16"; do
  timeout 120 ncu --metrics sm__inst_executed.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum \
    -k regex:tx_ -c 1 $B/bench/bench_elementwise --only "$only" --out /tmp/ncu.json > "$OUT/ncu_$(echo $only | tr -c 'a-z0-9' _).txt" 2>&1
done
grep -hE "tx_|inst_executed|sm__throughput|dram__throughput|duration" "$OUT"/ncu_*.txt | head -40
TX_CACHE_DIR=/tmp/tune-cache $B/bench/bench_elementwise --tune 2>"$OUT/tune.txt" | tail -3
tail -2 "$OUT/tune.txt"
tar czf "$FINAL/logs.tgz" -C /tmp device-logs
ls "$FINAL"
