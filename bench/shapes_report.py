#!/usr/bin/env python3
"""The table of bench/shapes.sh's JSON lines (markdown on stdout)."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
impls = ["tx generic", "tx exact", "torch eager", "torch compile"]
by = {}
for r in rows:
    by[(r["op"], r["dtype"], r["impl"])] = r
print("| op | dtype | " + " | ".join(f"{i} cold ms (compiles)" for i in impls) +
      " | tx generic warm ms | torch eager warm ms | tx generic / eager (cold) |")
print("|---|---|" + "---|" * (len(impls) + 3))
for op in ["gelu", "add", "silu_and_mul"]:
    for dt in ["float16", "bfloat16"]:
        cells = []
        for i in impls:
            r = by.get((op, dt, i))
            nv = f", {r['nvrtc']} NVRTC" if r and "nvrtc" in r else ""
            cells.append(f"{r['cold_ms']:.1f} ({r['compiles']}{nv})" if r else "-")
        g, e = by.get((op, dt, "tx generic")), by.get((op, dt, "torch eager"))
        warm_g = f"{g['warm_ms']:.2f}" if g else "-"
        warm_e = f"{e['warm_ms']:.2f}" if e else "-"
        ratio = f"{g['cold_ms'] / e['cold_ms']:.2f}" if g and e else "-"
        print(f"| {op} | {dt} | " + " | ".join(cells) + f" | {warm_g} | {warm_e} | {ratio} |")
