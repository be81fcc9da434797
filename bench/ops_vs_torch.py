#!/usr/bin/env python3
"""Compares every tx op with PyTorch on the same inputs (written by
bench_ops_vs_torch) and prints the largest difference per op and dtype.

    bench_ops_vs_torch DIR && python3 bench/ops_vs_torch.py DIR > report.md

PyTorch computes f16/bf16 ops natively (f32 internally) and fp8 ops in
float16 then casts (it has no fp8 arithmetic); tx computes in f32. The
difference is reported in output ulps (units in the last place of the
output dtype): 0 is bit-identical, 1 is one rounding apart.
"""
import math
import sys

import torch
import torch.nn.functional as F

DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
      "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
      "int32": torch.int32, "uint8": torch.uint8, "bool": torch.bool}


def load(path, dtype, shape):
    raw = open(path, "rb").read()
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape).cuda()


def torch_op(name, xs, p):
    x = xs[0]
    unary = {"exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "abs": torch.abs,
             "neg": torch.neg, "reciprocal": torch.reciprocal, "sign": torch.sign, "sin": torch.sin,
             "cos": torch.cos, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
             "trunc": torch.trunc, "erf": torch.erf, "log1p": torch.log1p, "expm1": torch.expm1,
             "relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
             "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "mish": F.mish, "selu": F.selu,
             "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not, "isnan": torch.isnan,
             "isinf": torch.isinf, "isfinite": torch.isfinite}
    if name in unary:
        return unary[name](x)
    binary = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
              "remainder": torch.remainder, "pow": torch.pow, "floor_divide": torch.floor_divide,
              "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne,
              "gt": torch.gt, "lt": torch.lt, "ge": torch.ge, "le": torch.le, "logical_and": torch.logical_and,
              "logical_or": torch.logical_or, "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
              "bitwise_xor": torch.bitwise_xor}
    if name in binary:
        return binary[name](x, xs[1])
    if name == "lerp":
        return torch.lerp(x, xs[1], 0.5)
    if name.endswith("_and_mul"):
        d = x.shape[-1] // 2
        act = {"silu_and_mul": F.silu, "gelu_and_mul": F.gelu,
               "gelu_tanh_and_mul": lambda t: F.gelu(t, approximate="tanh")}[name]
        return act(x[..., :d]) * x[..., d:]
    if name == "leaky_relu":
        return F.leaky_relu(x, p[0])
    if name == "elu":
        return F.elu(x, p[0])
    if name == "hardtanh":
        return F.hardtanh(x, p[0], p[1])
    if name == "softplus":
        return F.softplus(x, p[0], p[1])
    if name == "prelu":
        return F.prelu(x, xs[1])
    if name == "where":
        return torch.where(x, xs[1], xs[2])
    if name == "clamp":
        return torch.clamp(x, p[0], p[1])
    if name == "masked_fill":
        return x.masked_fill(xs[1], p[0])
    if name == "nan_to_num":
        return torch.nan_to_num(x, p[0], p[1], p[2])
    raise KeyError(name)


def ulp_diff(a, b, dtype):
    """Largest |a - b| in units of the output dtype's spacing at b."""
    a64, b64 = a.double(), b.double()
    both_nan = torch.isnan(a64) & torch.isnan(b64)
    same = (a64 == b64) | both_nan
    if bool(same.all()):
        return 0.0, 0
    mism = ~same
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        spacing = torch.clamp(b64.abs(), min=info.tiny) * info.eps
        d = ((a64 - b64).abs() / spacing)[mism & torch.isfinite(a64) & torch.isfinite(b64)]
        special = int((mism & ~(torch.isfinite(a64) & torch.isfinite(b64))).sum())
        return (float(d.max()) if d.numel() else 0.0), special
    return float((a64 - b64).abs()[mism].max()), 0


def main():
    d = sys.argv[1]
    print("| op | dtype | tx vs torch (output ulps) | elements differing in NaN/Inf | tx vs float64 | torch vs float64 |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for line in open(d + "/index.txt"):
        parts = line.split()
        ident, name, dtype_name = parts[0], parts[1], parts[2]
        ins = [p for p in parts[3:] if ":" in p and not p.startswith(("params:", "out:"))]
        params = [float(v) for v in parts[-2][len("params:"):].split(",") if v]
        out_dtype = DT[parts[-1][len("out:"):]]
        xs = []
        for k, spec in enumerate(ins):
            dn, shape = spec.split(":")
            xs.append(load("%s/%s.in%d" % (d, ident, k), DT[dn], [int(s) for s in shape.split("x")]))
        got = load("%s/%s.out" % (d, ident), out_dtype, list(torch_op_shape(name, xs)))
        dt = DT[dtype_name]
        if dt in (torch.float8_e4m3fn, torch.float8_e5m2):
            want = torch_op(name, [x.half() if x.dtype == dt else x for x in xs], params).to(out_dtype)
        else:
            want = torch_op(name, xs, params)
        want = want.to(out_dtype)
        ulps, special = ulp_diff(got.cpu(), want.cpu(), out_dtype)
        worst = max(worst, ulps)
        # Who is closer to the exact answer: both against torch in float64.
        ref_t, ref_g = "-", "-"
        if out_dtype.is_floating_point and dt.is_floating_point:
            try:
                exact = torch_op(name, [x.double() if x.dtype.is_floating_point else x for x in xs], params)
                ref_g = "%.2f" % ulp_diff(got.cpu(), exact.to(out_dtype).cpu(), out_dtype)[0]
                ref_t = "%.2f" % ulp_diff(want.cpu(), exact.to(out_dtype).cpu(), out_dtype)[0]
            except Exception:  # noqa: BLE001 -- no float64 kernel for this op
                pass
        print("| %s | %s | %s | %d | %s | %s |" % (name, dtype_name, ("%.2f" % ulps) if out_dtype.is_floating_point else ("%g" % ulps),
                                            special, ref_g, ref_t))
    print("\nlargest difference: %.2f ulps" % worst)


def torch_op_shape(name, xs):
    if name.endswith("_and_mul"):
        s = list(xs[0].shape)
        s[-1] //= 2
        return s
    return torch.broadcast_shapes(*[x.shape for x in xs])


if __name__ == "__main__":
    main()
