#!/usr/bin/env python3
"""PyTorch on bench_shapes' serving sweep: one cold sweep per process.

    python3 shapes.py eager|compile OP DTYPE SIZES.json

Prints one JSON line: the sweep's end-to-end time from a fresh process (the
first call's warm-up and, for torch.compile(dynamic=True), its compile and
any recompiles included), the same sweep again warm, and the number of
compiled graphs. Inputs and outputs' sizes as bench_shapes: (T, 4096), a
(4096,) bias, (T, 8192) for silu_and_mul; inputs made up front.
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

HIDDEN = 4096
DT = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def fn(op):
    if op == "gelu":
        return lambda x: F.gelu(x)
    if op == "add":
        return lambda x, b: x + b
    if op == "silu_and_mul":
        return lambda x: F.silu(x[..., :HIDDEN]) * x[..., HIDDEN:]
    raise ValueError(op)


def main():
    mode, op, dtype, sizes_path = sys.argv[1:5]
    sizes = json.load(open(sizes_path))
    dt = DT[dtype]
    torch.cuda.init()
    bias = torch.rand(HIDDEN, device="cuda", dtype=torch.float32).to(dt)
    inputs = []
    for t in sizes:
        cols = 2 * HIDDEN if op == "silu_and_mul" else HIDDEN
        x = (torch.rand(t, cols, device="cuda", dtype=torch.float32) * 2 - 1).to(dt)
        inputs.append((x, bias) if op == "add" else (x,))
    torch.cuda.synchronize()
    f = fn(op)
    graphs = 0
    if mode == "compile":
        counts = {"n": 0}

        def backend(gm, example_inputs):
            counts["n"] += 1
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs)

        f = torch.compile(f, dynamic=True, backend=backend)
    t0 = time.perf_counter()
    for xs in inputs:
        f(*xs)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    for xs in inputs:
        f(*xs)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    if mode == "compile":
        graphs = counts["n"]
    print(json.dumps({"impl": "torch " + mode, "op": op, "dtype": dtype,
                      "cold_ms": (t1 - t0) * 1e3, "warm_ms": (t2 - t1) * 1e3,
                      "compiles": graphs}))


if __name__ == "__main__":
    main()
