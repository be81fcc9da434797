"""PyTorch eager and torch.compile on bench_rows' cases, and the report.

    python3 bench/rows.py CASES.json TX.json OUT_PREFIX

softmax and log_softmax over the last dimension; rms_norm, layer_norm as
torch.nn.functional's; add_rms_norm as vLLM's fused_add_rms_norm computes it
(h = x + residual; y = rms_norm(h) * weight; both returned); the _fp8 forms
write y / 0.05 as float8_e4m3fn, clamped to +-448 first. Writes
OUT_PREFIX.json and OUT_PREFIX.md (GB/s = bytes / time, bytes as bench_rows
counts them; each case against the copy of the same bytes).
"""
import json
import sys

import torch
import torch.nn.functional as F

from torch_timing import eager_and_compile, write_report  # bench/ is on sys.path

DT = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def add_rms_norm(x, r, w):
    h = x + r
    return F.rms_norm(h, (h.shape[-1],), w, 1e-6), h


def to_fp8(y, scale=0.05):
    # y / scale rounded to e4m3, saturated at +-448 as tx (and vLLM's quant) does
    return (y.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def add_rms_norm_fp8(x, r, w):
    h = x + r
    return to_fp8(F.rms_norm(h, (h.shape[-1],), w, 1e-6)), h


FN = {
    "softmax": lambda x, r, w, b: torch.softmax(x, -1),
    "log_softmax": lambda x, r, w, b: F.log_softmax(x, -1),
    "rms_norm": lambda x, r, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
    "layer_norm": lambda x, r, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
    "add_rms_norm": lambda x, r, w, b: add_rms_norm(x, r, w),
    "rms_norm_fp8": lambda x, r, w, b: to_fp8(F.rms_norm(x, (x.shape[-1],), w, 1e-6)),
    "add_rms_norm_fp8": lambda x, r, w, b: add_rms_norm_fp8(x, r, w),
}


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
        res = torch.randn(R, N, device="cuda", dtype=dt) if c["op"].startswith("add_") else None
        w = torch.randn(N, device="cuda", dtype=dt)
        b = torch.randn(N, device="cuda", dtype=dt)
        f = FN[c["op"]]
        args = (x, res, w, b)
        r = {"label": c["label"], "dtype": c["dtype"], "bytes": c["bytes"]}
        eager_and_compile(f, args, r)
        m = tx.get((c["label"], c["dtype"]), {})
        r.update({k: m[k] for k in ("tx_ms", "copy_ms") if k in m})
        print(json.dumps(r), flush=True)
        rows.append(r)
        del args, x, res
        torch.cuda.empty_cache()
    write_report(prefix, rows)


if __name__ == "__main__":
    main()
