"""PyTorch eager and torch.compile on bench_rows' cases, and the report.

    python3 bench/rows.py CASES.json TX.json OUT_PREFIX

softmax and log_softmax over the last dimension; rms_norm, layer_norm as
torch.nn.functional's; add_rms_norm as vLLM's fused_add_rms_norm computes it
(h = x + residual; y = rms_norm(h) * weight; both returned). Writes
OUT_PREFIX.json and OUT_PREFIX.md (GB/s = bytes / time, bytes as bench_rows
counts them; each case against the copy of the same bytes).
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F

DT = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def add_rms_norm(x, r, w):
    h = x + r
    return F.rms_norm(h, (h.shape[-1],), w, 1e-6), h


FN = {
    "softmax": lambda x, r, w, b: torch.softmax(x, -1),
    "log_softmax": lambda x, r, w, b: F.log_softmax(x, -1),
    "rms_norm": lambda x, r, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
    "layer_norm": lambda x, r, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
    "add_rms_norm": lambda x, r, w, b: add_rms_norm(x, r, w),
}


def time_ms(f, args, warm=5, reps=30):
    for _ in range(warm):
        f(*args)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(reps):
        start.record()
        f(*args)
        stop.record()
        stop.synchronize()
        ms.append(start.elapsed_time(stop))
    return statistics.median(ms)


def main():
    cases = json.load(open(sys.argv[1]))
    tx = {(r["label"], r["dtype"]): r for r in json.load(open(sys.argv[2]))["results"]}
    prefix = sys.argv[3]
    torch.manual_seed(0)
    rows = []
    for c in cases:
        dt = DT[c["dtype"]]
        R, N = c["rows"], c["cols"]
        x = torch.randn(R, N, device="cuda", dtype=dt)
        res = torch.randn(R, N, device="cuda", dtype=dt) if c["op"] == "add_rms_norm" else None
        w = torch.randn(N, device="cuda", dtype=dt)
        b = torch.randn(N, device="cuda", dtype=dt)
        f = FN[c["op"]]
        args = (x, res, w, b)
        r = {"label": c["label"], "dtype": c["dtype"], "bytes": c["bytes"]}
        try:
            r["eager_ms"] = time_ms(f, args)
        except Exception as e:  # noqa: BLE001 -- report, keep going
            r["eager_error"] = str(e)[:200]
        try:
            g = torch.compile(f, dynamic=False)
            g(*args)
            r["compile_ms"] = time_ms(g, args)
        except Exception as e:  # noqa: BLE001
            r["compile_error"] = str(e)[:200]
        m = tx.get((c["label"], c["dtype"]), {})
        r.update({k: m[k] for k in ("tx_ms", "copy_ms") if k in m})
        print(json.dumps(r), flush=True)
        rows.append(r)
        del args, x, res
        torch.cuda.empty_cache()
    json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
               "results": rows}, open(prefix + ".json", "w"), indent=1)

    def gbs(r, key):
        return r["bytes"] / r[key] / 1e6 if key in r else float("nan")

    with open(prefix + ".md", "w") as md:
        md.write("GPU: %s, torch %s\n\n" % (torch.cuda.get_device_name(), torch.__version__))
        md.write("| case | dtype | copy GB/s | tx GB/s | tx / copy | eager GB/s | compile GB/s "
                 "| tx / eager | tx / compile |\n|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            t, cp, e, cc = gbs(r, "tx_ms"), gbs(r, "copy_ms"), gbs(r, "eager_ms"), gbs(r, "compile_ms")
            md.write("| %s | %s | %.0f | %.0f | %.3f | %.0f | %.0f | %.2f | %.2f |\n"
                     % (r["label"], r["dtype"], cp, t, t / cp, e, cc, t / e, t / cc))
    print(open(prefix + ".md").read())


if __name__ == "__main__":
    main()
