#!/usr/bin/env python3
"""PyTorch eager and torch.compile on bench_elementwise's cases.

    bench_elementwise --cases > cases.json
    python3 torch_elementwise.py cases.json torch.json

Same shapes, dtypes and bytes as the tx run; CUDA-event timing, 5 warm-ups,
median of 30. Inputs are random (torch.rand), never zeros.
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

from torch_timing import time_ms  # bench/torch_timing.py (bench/ is on sys.path)

DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
      "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "bool": torch.bool}
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def make(shape, dtype, lo=-3.0, hi=3.0):
    if dtype == torch.bool:
        return torch.rand(shape, device="cuda") < 0.5
    x = torch.rand(shape, device="cuda", dtype=torch.float32) * (hi - lo) + lo
    return x.to(dtype)


def fn_for(case):
    f = base_fn(case)
    if case["op"] == "cast" or DT[case["dtype"]] not in FP8:
        return f
    # torch has no fp8 arithmetic: what a user writes is upcast, compute, downcast.
    to = DT[case["dtype"]]
    return lambda *xs: f(*(x.float() if x.dtype in FP8 else x for x in xs)).to(to)


def base_fn(case):
    op, p = case["op"], case["params"]
    if op in ("sqrt", "exp", "relu"):
        return getattr(torch, op)
    if op == "gelu":
        return lambda x: F.gelu(x)
    if op == "silu":
        return lambda x: F.silu(x)
    if op == "add":
        return lambda a, b: a + b
    if op == "masked_fill":
        return lambda x, m: x.masked_fill(m, p[0])
    if op == "where":
        return lambda c, x, y: torch.where(c, x, y)
    if op == "clamp":
        return lambda x: torch.clamp(x, p[0], p[1])
    if op == "silu_and_mul":
        return lambda x: F.silu(x[..., : x.shape[-1] // 2]) * x[..., x.shape[-1] // 2:]
    if op == "gelu_tanh_and_mul":
        return lambda x: F.gelu(x[..., : x.shape[-1] // 2], approximate="tanh") * x[..., x.shape[-1] // 2:]
    if op == "cast":
        to = DT[case["cast_to"]]
        return lambda x: x.to(to)
    raise ValueError(op)


def host_us(f, args, calls):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        f(*args)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def main():
    cases = json.load(open(sys.argv[1]))
    out = []
    torch.manual_seed(0)
    for c in cases:
        dtype = DT[c["dtype"]]
        args = []
        for k, shape in enumerate(c["shapes"]):
            mask = (c["op"] == "where" and k == 0) or (c["op"] == "masked_fill" and k == 1)
            lo = 0.01 if c["op"] == "sqrt" else -3.0
            args.append(make(shape, torch.bool if mask else dtype, lo))
        f = fn_for(c)
        r = {"label": c["label"], "dtype": c["dtype"]}
        try:
            r["eager_ms"] = time_ms(f, args)
            r["eager_host_us"] = host_us(f, args, 200 if c["small"] else 50)
        except Exception as e:  # noqa: BLE001 -- report, keep going
            r["eager_error"] = str(e)[:200]
        try:
            g = torch.compile(f, dynamic=False)
            g(*args)
            r["compile_ms"] = time_ms(g, args)
            r["compile_host_us"] = host_us(g, args, 200 if c["small"] else 50)
        except Exception as e:  # noqa: BLE001
            r["compile_error"] = str(e)[:200]
        print(json.dumps(r), flush=True)
        out.append(r)
        json.dump({"torch": torch.__version__, "results": out}, open(sys.argv[2], "w"), indent=1)
        del args
        torch.cuda.empty_cache()
    json.dump({"torch": torch.__version__, "results": out}, open(sys.argv[2], "w"), indent=1)


if __name__ == "__main__":
    main()
