#!/usr/bin/env bash
# bench/interop: tx inside a program, against PyTorch in the same run (issue
# 16): host time per gelu(x) call with a new 4096-element result, and adds on
# transposed / sliced / broadcast (4096, 4096) f16 views. Needs a GPU, torch
# and a build with bench_interop.
#
#   BUILD_DIR=build-device OUT=out bench/interop.sh
set -uo pipefail
OUT=${OUT:-interop-out}
BD=${BUILD_DIR:-build}
mkdir -p "$OUT"
: > "$OUT/interop.jsonl"
for mode in overhead strided; do
  timeout 120 "$BD/bench/bench_interop" $mode >> "$OUT/interop.jsonl" 2>> "$OUT/interop.err"
  timeout 120 python3 bench/interop_torch.py $mode >> "$OUT/interop.jsonl" 2>> "$OUT/interop.err"
done
python3 - "$OUT/interop.jsonl" > "$OUT/interop.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ov = [r for r in rows if r["bench"] == "overhead"]
print("| host time per call | tx (us) | torch eager (us) | tx / torch |\n|---|---|---|---|")
whats = list(dict.fromkeys(r["what"] for r in ov if r["impl"] == "tx"))
for w in whats:
    tx = next(r["us_per_call"] for r in ov if r["impl"] == "tx" and r["what"] == w)
    tw = w.replace("Tensor::empty", "torch.empty")
    to = next((r["us_per_call"] for r in ov if r["impl"] != "tx" and r["what"] == tw), None)
    print(f"| {w} | {tx:.2f} | {to if to is None else f'{to:.2f}'} | "
          f"{'' if not to else f'{tx / to:.2f}x'} |")
st = [r for r in rows if r["bench"] == "strided"]
print("\n| (4096, 4096) f16 add | tx GB/s | torch eager GB/s | tx / torch |\n|---|---|---|---|")
for c in dict.fromkeys(r["case"] for r in st):
    tx = next((r["gbps"] for r in st if r["impl"] == "tx" and r["case"] == c), None)
    to = next((r["gbps"] for r in st if r["impl"] != "tx" and r["case"] == c), None)
    ratio = f"{tx / to:.2f}x" if tx and to else ""
    print(f"| {c} | {tx} | {to} | {ratio} |")
PY
cat "$OUT/interop.md"
