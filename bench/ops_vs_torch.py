#!/usr/bin/env python3
"""Compares every tx op with PyTorch on the same inputs (written by
bench_ops_vs_torch) and prints the largest difference per op and dtype,
then one summary line.

    bench_ops_vs_torch DIR && python3 bench/ops_vs_torch.py DIR > report.md
    bench_ops_vs_torch DIR --device host && python3 bench/ops_vs_torch.py DIR --device cpu

PyTorch computes f16/bf16 ops natively (f32 internally) and fp8 ops in
float16 then casts (it has no fp8 arithmetic); tx computes in f32. The fp8
casts follow tx's documented rules, which torch's plain .to() does not:
e4m3fn saturates to +-448 (torch would give NaN past 480), e5m2 keeps Inf.
The difference is reported in output ulps (units in the last place of the
output dtype): 0 is bit-identical, 1 is one rounding apart.

prelu takes its weight (C,) on dimension 1 of x (torch.nn.functional.prelu).
alibi and sinusoidal have no inputs; their torch references are built here:
ALiBi with BLOOM's build_alibi_tensor slopes (also vLLM's _get_alibi_slopes,
correct for head counts that are not powers of two), bias[h, i, j] =
slope_h * (j - i); sinusoidal interleaved as docs/api.md documents it,
pe[p, 2i] = sin(p w_i), pe[p, 2i+1] = cos(p w_i), w_i = 10000^(-2i/dim).

A case that raises is reported as a row with the error and counted in the
summary; the script always goes through the whole list.
"""
import argparse
import math
import sys
import traceback

import torch
import torch.nn.functional as F

DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
      "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
      "int32": torch.int32, "uint8": torch.uint8, "bool": torch.bool}
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)

DEVICE = "cuda"


def load(path, dtype, shape):
    raw = open(path, "rb").read()
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape).to(DEVICE)


def parse_shape(spec):
    return [] if spec == "scalar" else [int(s) for s in spec.split("x")]


def to_dtype(t, dtype):
    """t cast to dtype with tx's fp8 rules: e4m3fn saturates, e5m2 keeps Inf."""
    if dtype == torch.float8_e4m3fn and t.is_floating_point():
        # clamp keeps NaN and maps +-Inf to +-448, as cvt.rn.satfinite does.
        return t.clamp(-448.0, 448.0).to(dtype)
    return t.to(dtype)


def alibi_slopes(heads):
    """BLOOM's build_alibi_tensor / vLLM's _get_alibi_slopes."""
    closest = 2 ** math.floor(math.log2(heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest) - 3))), dtype=torch.float64)
    slopes = torch.pow(base, torch.arange(1, 1 + closest, dtype=torch.float64))
    if closest != heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest) - 3))), dtype=torch.float64)
        remaining = min(closest, heads - closest)
        extra = torch.pow(extra_base, torch.arange(1, 1 + 2 * remaining, 2, dtype=torch.float64))
        slopes = torch.cat([slopes, extra])
    return slopes


def torch_alibi(heads, seq, dtype):
    pos = torch.arange(seq, dtype=dtype, device=DEVICE)
    rel = pos[None, :] - pos[:, None]  # j - i
    return alibi_slopes(heads).to(device=DEVICE, dtype=dtype)[:, None, None] * rel[None, :, :]


def torch_sinusoidal(positions, dim, dtype):
    p = torch.arange(positions, dtype=dtype, device=DEVICE)[:, None]
    i2 = torch.arange(0, dim, 2, dtype=dtype, device=DEVICE)
    angle = p * torch.pow(torch.tensor(10000.0, dtype=dtype, device=DEVICE), -i2 / dim)
    pe = torch.empty(positions, dim, dtype=dtype, device=DEVICE)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def torch_op(name, xs, p, dtype=None):
    """The op in torch; dtype: the compute dtype of alibi / sinusoidal."""
    if name == "alibi":
        return torch_alibi(int(p[0]), int(p[1]), dtype)
    if name == "sinusoidal":
        return torch_sinusoidal(int(p[0]), int(p[1]), dtype)
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
        return F.prelu(x, xs[1])  # weight (C,) on dimension 1, or (1,)
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
    """Largest |a - b| in units of the output dtype's spacing at b, and the
    number of elements where one is NaN/Inf and the other differs."""
    a64, b64 = a.double(), b.double()
    both_nan = torch.isnan(a64) & torch.isnan(b64)
    same = (a64 == b64) | both_nan
    if bool(same.all()):
        return 0.0, 0
    mism = ~same
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        spacing = torch.clamp(b64.abs(), min=info.tiny) * info.eps
        finite = torch.isfinite(a64) & torch.isfinite(b64)
        d = ((a64 - b64).abs() / spacing)[mism & finite]
        special = int((mism & ~finite).sum())
        return (float(d.max()) if d.numel() else 0.0), special
    return float((a64 - b64).abs()[mism].max()), 0


def out_shape(name, xs, p):
    if name == "alibi":
        return [int(p[0]), int(p[1]), int(p[1])]
    if name == "sinusoidal":
        return [int(p[0]), int(p[1])]
    if name.endswith("_and_mul"):
        s = list(xs[0].shape)
        s[-1] //= 2
        return s
    if name == "prelu":
        return list(xs[0].shape)  # the weight is not broadcast NumPy-style
    return list(torch.broadcast_shapes(*[x.shape for x in xs]))


def compare_case(d, line):
    """One index line -> the table row's cells and the difference in ulps."""
    parts = line.split()
    ident, name, dtype_name = parts[0], parts[1], parts[2]
    params_spec = next(q for q in parts if q.startswith("params:"))
    out_spec = next(q for q in parts if q.startswith("out:"))
    ins = [q for q in parts[3:] if ":" in q and not q.startswith(("params:", "out:"))]
    params = [float(v) for v in params_spec[len("params:"):].split(",") if v]
    out_fields = out_spec[len("out:"):].split(":")
    out_dtype = DT[out_fields[0]]
    xs = []
    for k, spec in enumerate(ins):
        dn, shape = spec.split(":")
        xs.append(load("%s/%s.in%d" % (d, ident, k), DT[dn], parse_shape(shape)))
    shape = parse_shape(out_fields[1]) if len(out_fields) > 1 else out_shape(name, xs, params)
    if shape != out_shape(name, xs, params):
        raise ValueError("tx wrote shape %s, torch makes %s" % (shape, out_shape(name, xs, params)))
    got = load("%s/%s.out" % (d, ident), out_dtype, shape)
    dt = DT[dtype_name]
    if dt in FP8:
        # torch has no fp8 arithmetic: float16 compute, then the fp8 cast.
        want = torch_op(name, [x.half() if x.dtype == dt else x for x in xs], params, torch.float16)
    elif name in ("alibi", "sinusoidal") and dt != torch.float32:
        want = torch_op(name, xs, params, torch.float32)  # as tx: f32 math, then the cast
    else:
        want = torch_op(name, xs, params, dt)
    want = to_dtype(want, out_dtype)
    ulps, special = ulp_diff(got.cpu(), want.cpu(), out_dtype)
    # Who is closer to the exact answer: both against torch in float64.
    ref_t, ref_g = "-", "-"
    if out_dtype.is_floating_point and dt.is_floating_point:
        try:
            exact = torch_op(name, [x.double() if x.dtype.is_floating_point else x for x in xs], params,
                             torch.float64)
            exact = to_dtype(exact, out_dtype).cpu()
            ref_g = "%.2f" % ulp_diff(got.cpu(), exact, out_dtype)[0]
            ref_t = "%.2f" % ulp_diff(want.cpu(), exact, out_dtype)[0]
        except Exception:  # noqa: BLE001 -- no float64 kernel for this op on this device
            pass
    label = name if name not in ("alibi", "sinusoidal") else "%s %s" % (name, ident.split(".")[-1])
    diff = ("%.2f" % ulps) if out_dtype.is_floating_point else ("%g" % ulps)
    return (label, dtype_name, diff, str(special), ref_g, ref_t), ulps, (float(ref_g) if ref_g != "-" else None)


def main():
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="the directory bench_ops_vs_torch wrote")
    ap.add_argument("--device", default="cuda", help="torch device: cuda (default) or cpu (a dry run)")
    args = ap.parse_args()
    DEVICE = args.device
    d = args.dir
    print("| op | dtype | tx vs torch (output ulps) | elements differing in NaN/Inf | tx vs float64 | torch vs float64 |")
    print("|---|---|---|---|---|---|")
    worst, worst_case, done, failed = 0.0, "-", 0, []
    worst_exact, worst_exact_case = 0.0, "-"  # tx against float64: tx's own error
    lines = [ln for ln in open(d + "/index.txt") if ln.strip()]
    for line in lines:
        ident = line.split()[0]
        try:
            cells, ulps, exact_ulps = compare_case(d, line)
        except Exception as e:  # noqa: BLE001 -- report it and go on with the list
            failed.append(ident)
            print("| %s | %s | error: %s | - | - | - |" % (ident, line.split()[2], str(e).splitlines()[0][:120]))
            traceback.print_exc(file=sys.stderr)
            continue
        print("| %s |" % " | ".join(cells))
        sys.stdout.flush()
        done += 1
        if ulps > worst:
            worst, worst_case = ulps, "%s %s" % (cells[0], cells[1])
        if exact_ulps is not None and exact_ulps > worst_exact:
            worst_exact, worst_exact_case = exact_ulps, "%s %s" % (cells[0], cells[1])
    print("\ncompared %d of %d (op, dtype) cases on %s, %d failed%s; largest difference: "
          "%.2f ulps (%s); largest tx vs float64: %.2f ulps (%s)"
          % (done, len(lines), DEVICE, len(failed), (" (" + ", ".join(failed) + ")") if failed else "",
             worst, worst_case, worst_exact, worst_exact_case))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
