#!/usr/bin/env python3
"""Merges the tx and torch JSON of one device run into a table (markdown,
printed and written), a merged JSON, and a bar chart.

    python3 report.py tx.json torch.json jit.json jit_disk.json out_prefix
"""
import json
import sys


def main():
    tx = json.load(open(sys.argv[1]))
    th = json.load(open(sys.argv[2]))
    jit = json.load(open(sys.argv[3])) if len(sys.argv) > 3 else {}
    disk = json.load(open(sys.argv[4])) if len(sys.argv) > 4 else {}
    prefix = sys.argv[5] if len(sys.argv) > 5 else "elementwise"
    torch_by = {(r["label"], r["dtype"]): r for r in th["results"]}
    rows = []
    for r in tx["results"]:
        t = torch_by.get((r["label"], r["dtype"]), {})
        gbs = lambda ms: r["bytes"] / (ms * 1e6) if ms else None  # noqa: E731
        row = {
            "case": r["label"], "dtype": r["dtype"], "bytes": r["bytes"],
            "copy": gbs(r["copy_ms"]), "tx": gbs(r["tx_ms"]),
            "eager": gbs(t.get("eager_ms")), "compile": gbs(t.get("compile_ms")),
            "tx_host_us": r["host_us"], "eager_host_us": t.get("eager_host_us"),
            "config": r["config"],
        }
        rows.append(row)
    f = lambda v, fmt="%.0f": (fmt % v) if v is not None else "-"  # noqa: E731
    lines = [
        "| case | dtype | copy GB/s | tx GB/s | eager GB/s | compile GB/s | tx/copy | tx/eager | tx/compile | tx host us | eager host us |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in rows:
        ratio = lambda a, b: (a / b) if (a and b) else None  # noqa: E731
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            w["case"], w["dtype"], f(w["copy"]), f(w["tx"]), f(w["eager"]), f(w["compile"]),
            f(ratio(w["tx"], w["copy"]), "%.3f"), f(ratio(w["tx"], w["eager"]), "%.2f"),
            f(ratio(w["tx"], w["compile"]), "%.2f"), f(w["tx_host_us"], "%.2f"), f(w["eager_host_us"], "%.2f")))
    table = "\n".join(lines)
    print(table)
    if jit:
        print("\nJIT: cold %.1f ms (NVRTC alone %.1f ms, ratio %.2f), memory hit %.3f ms" % (
            jit["cold_ms"], jit["nvrtc_alone_ms"], jit["cold_ms"] / jit["nvrtc_alone_ms"], jit["memory_ms"]))
    if disk:
        print("JIT: disk-cache hit in a new process %.2f ms (lowering %.2f ms), origin %s" % (
            disk["disk_ms"], disk["lower_ms"], disk["origin"]))
    open(prefix + ".md", "w").write(table + "\n")
    json.dump({"gpu": tx["gpu"], "torch": th.get("torch"), "rows": rows, "jit": jit, "jit_disk": disk},
              open(prefix + ".json", "w"), indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        big = [w for w in rows if w["bytes"] > 64 << 20]
        fig, ax = plt.subplots(figsize=(max(12, len(big) * 0.45), 6))
        xs = range(len(big))
        width = 0.2
        for k, (key, label) in enumerate([("copy", "copy"), ("tx", "tx"), ("eager", "torch eager"),
                                          ("compile", "torch.compile")]):
            ax.bar([x + (k - 1.5) * width for x in xs], [w[key] or 0 for w in big], width, label=label)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(["%s %s" % (w["case"], w["dtype"].replace("float", "f")) for w in big],
                           rotation=75, ha="right", fontsize=7)
        ax.set_ylabel("GB/s (read + write)")
        ax.set_title("tx elementwise vs copy and PyTorch on %s" % tx["gpu"])
        ax.legend()
        fig.tight_layout()
        fig.savefig(prefix + ".png", dpi=110)
    except ImportError:
        print("(matplotlib missing: no chart)")


if __name__ == "__main__":
    main()
