#!/usr/bin/env python3
"""The table of bench/shapes.sh's JSON lines (markdown on stdout).

A (op, dtype, implementation) measured several times (fresh processes) is
shown as its median, with the range beside it; the ratio is of the medians.
"""
import json
import statistics
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
impls = ["tx generic", "tx exact", "torch eager", "torch compile"]
by = {}
for r in rows:
    by.setdefault((r["op"], r["dtype"], r["impl"]), []).append(r)


def median(runs, field):
    return statistics.median(r[field] for r in runs)


def cold_cell(runs):
    if not runs:
        return "-"
    r = runs[0]
    nv = f", {r['nvrtc']} NVRTC" if "nvrtc" in r else ""
    cold = [x["cold_ms"] for x in runs]
    spread = f" [{min(cold):.1f}-{max(cold):.1f}]" if len(runs) > 1 else ""
    return f"{statistics.median(cold):.1f}{spread} ({r['compiles']}{nv})"


print("| op | dtype | " + " | ".join(f"{i} cold ms (compiles)" for i in impls) +
      " | tx generic warm ms | torch eager warm ms | tx generic / eager (cold) |")
print("|---|---|" + "---|" * (len(impls) + 3))
for op in ["gelu", "add", "silu_and_mul"]:
    for dt in ["float16", "bfloat16"]:
        cells = [cold_cell(by.get((op, dt, i), [])) for i in impls]
        g, e = by.get((op, dt, "tx generic"), []), by.get((op, dt, "torch eager"), [])
        warm_g = f"{median(g, 'warm_ms'):.2f}" if g else "-"
        warm_e = f"{median(e, 'warm_ms'):.2f}" if e else "-"
        ratio = f"{median(g, 'cold_ms') / median(e, 'cold_ms'):.2f}" if g and e else "-"
        print(f"| {op} | {dt} | " + " | ".join(cells) + f" | {warm_g} | {warm_e} | {ratio} |")

# Where tx generic's cold sweep spends its host time (medians): the first
# call, the calls on token counts not seen before, the repeated ones.
print()
print("| op | dtype | tx generic: first call ms | new token counts (calls) ms | repeated counts ms |")
print("|---|---|---|---|---|")
for op in ["gelu", "add", "silu_and_mul"]:
    for dt in ["float16", "bfloat16"]:
        g = [r for r in by.get((op, dt, "tx generic"), []) if "host_first_ms" in r]
        if g:
            print(f"| {op} | {dt} | {median(g, 'host_first_ms'):.2f} | "
                  f"{median(g, 'host_new_sizes_ms'):.2f} ({g[0]['new_sizes']}) | "
                  f"{median(g, 'host_repeats_ms'):.2f} |")
