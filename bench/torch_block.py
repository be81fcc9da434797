#!/usr/bin/env python3
"""A transformer block's tail with tx ops against PyTorch (bench for tx_torch).

    TX_TORCH_LIBRARY=build/tx_torch/libtx_torch.so PYTHONPATH=tx_torch/python \
        python3 bench/torch_block.py [--tokens 256,4096] [--hidden 4096]

The block: linear -> gelu -> dropout(p=0.1, training) -> residual add ->
rms_norm, bf16, under torch.no_grad(). Four implementations, one process, one
GPU: PyTorch eager; torch.compile of it (default mode); the same block with
tx ops (tx.gelu, tx.dropout, tx.add_rms_norm: tx's fused residual add +
norm) eager; and torch.compile(fullgraph=True) of the tx block (the tx ops
stay opaque calls; the graph around them is compiled). Each: 20 warm-up
calls, then 15 rounds in which the four alternate, each timing 50
back-to-back calls with CUDA events; the median round. Prints one JSON line
per (implementation, tokens): ms per call.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

import tx_torch  # noqa: F401

tx = torch.ops.tx
P = 0.1


def torch_block(x, lin, w):
    h = F.gelu(lin(x))
    h = F.dropout(h, P, True)
    h = h + x
    return F.rms_norm(h, [h.shape[-1]], w, 1e-6)


def tx_block(x, lin, w):
    h = tx.gelu(lin(x))
    h = tx.dropout(h, P, True)
    out, _ = tx.add_rms_norm(h, x, w, 1e-6)
    return out


def time_all(fns, warmup=20, iters=50, rounds=15):
    """ms per call of each fn: rounds of 50 back-to-back calls, the
    implementations alternating within each round (clock and thermal drift
    falls on all of them alike), the median round of each."""
    for f in fns.values():
        for _ in range(warmup):
            f()
    torch.cuda.synchronize()
    r = {name: [] for name in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(iters):
                f()
            e.record()
            e.synchronize()
            r[name].append(s.elapsed_time(e) / iters)
    return {name: statistics.median(v) for name, v in r.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="256,4096")
    ap.add_argument("--hidden", type=int, default=4096)
    a = ap.parse_args()
    hidden = a.hidden
    lin = torch.nn.Linear(hidden, hidden, device="cuda", dtype=torch.bfloat16)
    w = (torch.rand(hidden, device="cuda") + 0.5).to(torch.bfloat16)
    gpu = torch.cuda.get_device_name()
    with torch.no_grad():
        impls = {
            "torch eager": lambda x: torch_block(x, lin, w),
            "torch.compile": torch.compile(lambda x: torch_block(x, lin, w)),
            "tx eager": lambda x: tx_block(x, lin, w),
            "tx torch.compile": torch.compile(lambda x: tx_block(x, lin, w), fullgraph=True),
        }
        for t in [int(s) for s in a.tokens.split(",")]:
            x = torch.randn(t, hidden, device="cuda", dtype=torch.bfloat16)
            ms = time_all({name: (lambda f=f: f(x)) for name, f in impls.items()})
            for name in impls:
                print(json.dumps({"bench": "torch_block", "impl": name, "tokens": t,
                                  "hidden": hidden, "dtype": "bfloat16",
                                  "ms": round(ms[name], 4), "gpu": gpu}), flush=True)


if __name__ == "__main__":
    main()
