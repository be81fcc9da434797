#!/usr/bin/env python3
"""PyTorch on bench_interop's work, for the same run (bench/interop.sh).

    python3 interop_torch.py overhead   host time per call of F.gelu(x),
                                        4096 f32 elements, a new result
    python3 interop_torch.py strided    (4096, 4096) f16 adds on views

Prints JSON lines like bench_interop. Overhead: median of 41 runs of 256 calls
(inside the launch queue), no synchronization inside a run: what the host
spends per call.
Strided: CUDA events, median of 7 runs of 20 calls.
"""
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def overhead():
    x = torch.rand(4096, device="cuda") * 4 - 2
    out = torch.empty_like(x)

    def per_call(fn, iters=256, reps=41):
        for _ in range(1000):
            fn()
        torch.cuda.synchronize()
        r = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            r.append((t1 - t0) / iters * 1e6)
        return statistics.median(r)

    for what, fn in [("gelu(x) -> new tensor", lambda: F.gelu(x)),
                     ("gelu(x, out)", lambda: torch.ops.aten.gelu.out(x, out=out)),
                     ("torch.empty(4096) + free", lambda: torch.empty(4096, device="cuda"))]:
        print(json.dumps({"bench": "overhead", "impl": "torch eager", "what": what,
                          "device": "cuda", "us_per_call": round(per_call(fn), 3)}), flush=True)


def strided():
    n = 4096
    a = torch.rand(n, n, device="cuda").half()
    b = torch.rand(n, n, device="cuda").half()
    wide = torch.rand(n, 2 * n, device="cuda").half()
    col = torch.rand(n, 1, device="cuda").half()
    cases = [("contiguous a + b", a, b), ("a.T + b.T", a.t(), b.t()), ("a.T + b", a.t(), b),
             ("wide[:, :n] + b", wide[:, :n], b), ("a + col.expand", a, col.expand(n, n))]
    for name, x, y in cases:
        nbytes = (2 if "expand" in name else 3) * n * n * 2
        torch.add(x, y)
        torch.cuda.synchronize()
        ms = []
        for _ in range(7):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(20):
                torch.add(x, y)
            e.record()
            e.synchronize()
            ms.append(s.elapsed_time(e) / 20)
        m = statistics.median(ms)
        print(json.dumps({"bench": "strided", "impl": "torch eager", "case": name,
                          "ms": round(m, 4), "gbps": round(nbytes / (m * 1e-3) / 1e9, 1)}),
              flush=True)


if __name__ == "__main__":
    {"overhead": overhead, "strided": strided}[sys.argv[1]]()
