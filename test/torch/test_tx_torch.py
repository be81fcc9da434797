"""torch.ops.tx against PyTorch: every registered op on fresh random inputs
against a float64 reference (PyTorch's op or the formula), its out= and
in-place forms, torch.library.opcheck on each, and torch.compile(fullgraph)
of a model block built from tx ops.

    TX_TORCH_LIBRARY=build/tx_torch/libtx_torch.so PYTHONPATH=tx_torch/python \
        python -m pytest test/torch -q

Devices: "cpu" (tx's host JIT) and, where PyTorch sees a GPU, "cuda". A tx
built without its host JIT (the GPU machines) runs the CPU cases as a check
that the error says so. The seed of each case is in its failure message
(TX_TEST_SEED=n repeats it).
"""
import math
import os

import pytest
import torch
import torch.nn.functional as F

import tx_torch  # noqa: F401  (loads libtx_torch.so)

tx = torch.ops.tx


def _host_jit_available():
    try:
        tx.neg(torch.ones(2))
        return True, ""
    except RuntimeError as e:
        return False, str(e)


HOST_JIT, HOST_JIT_WHY = _host_jit_available()
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    if request.param == "cpu" and not HOST_JIT:
        # Not a quiet skip: the CPU kernels must say why they cannot run.
        assert "host JIT" in HOST_JIT_WHY, HOST_JIT_WHY
        pytest.skip("tx was built without its host JIT: " + HOST_JIT_WHY.splitlines()[0])
    return request.param


@pytest.fixture
def seed():
    s = int(os.environ.get("TX_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    torch.manual_seed(s)
    return s


# Tolerances against a float64 reference rounded to the dtype: a few units in
# the last place of each dtype (tx's math is within 2-4 ulp of libm / CUDA's).
TOL = {torch.float32: (2e-5, 1e-6), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1e-2)}


def close(got, want, dtype, msg):
    rtol, atol = TOL.get(dtype, (0, 0))
    assert got.dtype == want.dtype, f"{msg}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{msg}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=rtol, atol=atol, equal_nan=True,
                               msg=lambda m: f"{msg}: {m}")


# ------------------------------------------------------------- elementwise

def positive(shape, dtype, device):
    return (torch.rand(shape, dtype=torch.float64) * 4 + 0.1).to(dtype).to(device)


def signed(shape, dtype, device):
    return (torch.randn(shape, dtype=torch.float64) * 2).to(dtype).to(device)


# op -> (reference on float64 tensors, input maker)
UNARY = {
    "exp": (torch.exp, signed), "log": (torch.log, positive), "sqrt": (torch.sqrt, positive),
    "rsqrt": (torch.rsqrt, positive), "abs": (torch.abs, signed), "neg": (torch.neg, signed),
    "reciprocal": (torch.reciprocal, positive), "sign": (torch.sign, signed),
    "sin": (torch.sin, signed), "cos": (torch.cos, signed), "floor": (torch.floor, signed),
    "ceil": (torch.ceil, signed), "round": (torch.round, signed), "trunc": (torch.trunc, signed),
    "erf": (torch.erf, signed), "log1p": (torch.log1p, positive), "expm1": (torch.expm1, signed),
    "relu": (torch.relu, signed), "gelu": (F.gelu, signed), "silu": (F.silu, signed),
    "sigmoid": (torch.sigmoid, signed), "tanh": (torch.tanh, signed),
    "hardswish": (F.hardswish, signed), "hardsigmoid": (F.hardsigmoid, signed),
    "mish": (F.mish, signed), "selu": (F.selu, signed),
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "remainder": torch.remainder, "pow": None, "floor_divide": torch.floor_divide,
    "lerp": lambda a, b: torch.lerp(a, b, 0.5), "maximum": torch.maximum,
    "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne, "gt": torch.gt, "lt": torch.lt,
    "ge": torch.ge, "le": torch.le, "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
}
GATED = {
    "silu_and_mul": lambda x, n: F.silu(x[..., :n]) * x[..., n:],
    "gelu_and_mul": lambda x, n: F.gelu(x[..., :n]) * x[..., n:],
    "gelu_tanh_and_mul": lambda x, n: F.gelu(x[..., :n], approximate="tanh") * x[..., n:],
}
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def expect(ref, dtype, *xs):
    """The float64 reference of ref on xs, rounded to dtype (or kept bool)."""
    r = ref(*[x.double() for x in xs])
    return r if r.dtype == torch.bool else r.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op, dtype, device, seed):
    ref, make = UNARY[op]
    x = make((37, 129), dtype, device)
    close(getattr(tx, op)(x), expect(ref, dtype, x), dtype, f"{op} seed={seed}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["isnan", "isinf", "isfinite", "logical_not"])
def test_predicates(op, dtype, device, seed):
    x = signed((301,), dtype, device)
    x[::7] = float("nan")
    x[3::11] = float("inf")
    x[5::13] = -float("inf")
    got = getattr(tx, op)(x)
    assert torch.equal(got.cpu(), getattr(torch, op)(x).cpu()), f"{op} seed={seed}"


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_broadcast(op, dtype, device, seed):
    # (M, N) with a (N,) row: the serving shape of a bias.
    a = signed((33, 96), dtype, device)
    b = signed((96,), dtype, device)
    if op in ("div", "remainder", "floor_divide"):
        b = torch.where(b.abs() < 0.25, torch.full_like(b, 0.5), b)
    if op == "pow":
        a = positive((33, 96), dtype, device)
        ref = torch.pow
    else:
        ref = BINARY[op]
    got = getattr(tx, op)(a, b)
    want = expect(ref, dtype, a, b)
    if op == "floor_divide":
        # A quotient within rounding of an integer may floor either way in a
        # narrow dtype; compare where the float64 quotient is clear of one.
        q = a.double() / b.double()
        clear = (q - q.round()).abs() > 1e-2
        got, want = got[clear.to(got.device)], want[clear.to(want.device)]
    close(got, want, dtype, f"{op} seed={seed}")


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor", "add", "mul",
                                "maximum", "eq", "lt"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_integer_binary(op, dtype, device, seed):
    a = torch.randint(0, 100, (64, 33), dtype=dtype, device=device)
    b = torch.randint(1, 100, (33,), dtype=dtype, device=device)
    assert torch.equal(getattr(tx, op)(a, b).cpu(), getattr(torch, op)(a, b).cpu()), \
        f"{op} {dtype} seed={seed}"


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", sorted(GATED))
def test_gated(op, dtype, device, seed):
    x = signed((17, 2 * 136), dtype, device)
    close(getattr(tx, op)(x), expect(lambda t: GATED[op](t, 136), dtype, x), dtype,
          f"{op} seed={seed}")


@pytest.mark.parametrize("dtype", FLOATS)
def test_parameterized(dtype, device, seed):
    x = signed((45, 77), dtype, device)
    cases = [
        ("leaky_relu", (0.2,), lambda t: F.leaky_relu(t, 0.2)),
        ("elu", (0.7,), lambda t: F.elu(t, 0.7)),
        ("hardtanh", (-0.5, 1.5), lambda t: F.hardtanh(t, -0.5, 1.5)),
        ("softplus", (2.0, 3.0), lambda t: F.softplus(t, 2.0, 3.0)),
        ("clamp", (-1.0, 0.5), lambda t: torch.clamp(t, -1.0, 0.5)),
        ("clamp", (None, 0.5), lambda t: torch.clamp(t, None, 0.5)),
    ]
    for op, args, ref in cases:
        close(getattr(tx, op)(x, *args), expect(ref, dtype, x), dtype, f"{op}{args} seed={seed}")
    w = signed((77,), dtype, device)
    close(tx.prelu(x.view(45, 77), w), expect(F.prelu, dtype, x, w), dtype, f"prelu seed={seed}")
    mask = torch.rand(45, 77, device=device) < 0.3
    close(tx.masked_fill(x, mask, -3.5), x.masked_fill(mask, -3.5), dtype, f"masked_fill {seed}")
    y = signed((77,), dtype, device)
    close(tx.where(mask, x, y), torch.where(mask, x, y), dtype, f"where seed={seed}")
    z = x.clone()
    z[::3, ::5] = float("nan")
    z[1::4, ::7] = float("inf")
    z[2::4, ::7] = -float("inf")
    close(tx.nan_to_num(z), torch.nan_to_num(z), dtype, f"nan_to_num seed={seed}")
    close(tx.nan_to_num(z, 1.0, 2.0, -2.0), torch.nan_to_num(z, 1.0, 2.0, -2.0), dtype,
          f"nan_to_num(1, 2, -2) seed={seed}")


def test_out_and_inplace_forms(device, seed):
    """out= into a poisoned tensor (and a strided one), in place, all equal
    to the functional form bit for bit."""
    a = signed((64, 80), torch.float16, device)
    b = signed((80,), torch.float16, device)
    want = tx.add(a, b)
    out = torch.full((64, 80), float("nan"), dtype=torch.float16, device=device)
    assert tx.add.out(a, b, out=out) is None  # mutating forms return nothing
    assert torch.equal(out, want), f"add.out seed={seed}"
    wide = torch.full((64, 160), float("nan"), dtype=torch.float16, device=device)
    tx.add.out(a, b, out=wide[:, ::2])
    assert torch.equal(wide[:, ::2], want) and wide[:, 1::2].isnan().all(), f"strided out {seed}"
    small = torch.empty(0, dtype=torch.float16, device=device)
    tx.add.out(a, b, out=small)  # resized, as PyTorch's out= ops do
    assert torch.equal(small, want), f"resized out seed={seed}"
    c = a.clone()
    tx.add_(c, b)
    assert torch.equal(c, want), f"add_ seed={seed}"
    d = a.clone()
    tx.exp_(d)
    assert torch.equal(d, tx.exp(a)), f"exp_ seed={seed}"
    f32 = signed((80,), torch.float32, device)
    g = a.clone()
    tx.add_(g, f32)  # float16 += float32: computed in float32, stored in float16 (as add_)
    assert torch.equal(g, tx.add(a, f32).half()), f"add_ promoted seed={seed}"
    wide_out = torch.full((64, 80), float("nan"), device=device)
    tx.add.out(a, b, out=wide_out)  # float16 result into a float32 out=, as PyTorch casts it
    assert torch.equal(wide_out, want.float()), f"cast out= seed={seed}"
    with pytest.raises(RuntimeError, match=r"tx::add_.*cannot be stored"):
        tx.add_(torch.ones(3, dtype=torch.int32, device=device), torch.ones(3, device=device))
    e = a.clone()
    tx.clamp_(e, -0.5, 0.5)
    assert torch.equal(e, tx.clamp(a, -0.5, 0.5)), f"clamp_ seed={seed}"


def test_strided_and_promoted_inputs(device, seed):
    a = signed((96, 64), torch.float32, device)
    b = signed((64, 96), torch.float32, device)
    close(tx.add(a, b.t()), a.double().add(b.t().double()).float(), torch.float32,
          f"a + b.T seed={seed}")
    h = a.half()
    got = tx.mul(h, a)  # float16 * float32 -> float32, as PyTorch promotes
    close(got, (h.double() * a.double()).float(), torch.float32, f"promotion seed={seed}")
    s = torch.tensor(1.5, dtype=torch.float64)  # a 0-dim CPU tensor: a number
    got = tx.mul(h, s)
    assert got.dtype == torch.float16 and got.device == h.device
    close(got, (h.double() * 1.5).half(), torch.float16, f"0-dim seed={seed}")


def test_errors(device):
    i = torch.arange(10, device=device)
    with pytest.raises(RuntimeError, match=r"tx::exp.*takes floating tensors.*Long"):
        tx.exp(i)
    with pytest.raises(RuntimeError, match=r"tx::gelu.*approximate='tanh'"):
        tx.gelu(torch.ones(3, device=device), approximate="tanh")
    with pytest.raises(RuntimeError, match=r"tx::silu_and_mul.*must be even"):
        tx.silu_and_mul(torch.ones(3, 5, device=device))
    with pytest.raises(RuntimeError, match=r"tx::add.*cannot be stored in out's Int"):
        tx.add.out(torch.ones(3, device=device), torch.ones(3, device=device),
                   out=torch.empty(3, dtype=torch.int32, device=device))
    with pytest.raises(RuntimeError, match=r"tx::softmax.*dim 2 is out of range"):
        tx.softmax(torch.ones(3, 4, device=device), 2)
    with pytest.raises(RuntimeError, match=r"tx::matmul.*2-D"):
        tx.matmul(torch.ones(3, device=device), torch.ones(3, device=device))
    if device == "cuda":
        with pytest.raises(RuntimeError, match=r"tx::add.*one device"):
            tx.add(torch.ones(3, device="cuda"), torch.ones(3))


# --------------------------------------------------------------- row ops

@pytest.mark.parametrize("dtype", FLOATS)
def test_rows(dtype, device, seed):
    x = signed((13, 1000), dtype, device)
    for op, ref in [("softmax", F.softmax), ("log_softmax", F.log_softmax)]:
        close(getattr(tx, op)(x, -1), expect(lambda t: ref(t, -1), dtype, x), dtype,
              f"{op} seed={seed}")
        close(getattr(tx, op)(x, 0), expect(lambda t: ref(t, 0), dtype, x), dtype,
              f"{op}(dim=0) seed={seed}")
    w = signed((1000,), dtype, device)
    bias = signed((1000,), dtype, device)
    close(tx.rms_norm(x, [1000], w, 1e-6), expect(lambda t, v: F.rms_norm(t, [1000], v, 1e-6),
                                                  dtype, x, w), dtype, f"rms_norm seed={seed}")
    close(tx.layer_norm(x, [1000], w, bias, 1e-5),
          expect(lambda t, v, c: F.layer_norm(t, [1000], v, c, 1e-5), dtype, x, w, bias), dtype,
          f"layer_norm seed={seed}")
    r = signed((13, 1000), dtype, device)
    out, res = tx.add_rms_norm(x, r, w, 1e-6)
    h = (x.double() + r.double()).to(dtype)
    close(res, h, dtype, f"add_rms_norm residual seed={seed}")
    close(out, expect(lambda t, v: F.rms_norm(t, [1000], v, 1e-6), dtype, h, w), dtype,
          f"add_rms_norm seed={seed}")
    xi, ri = x.clone(), r.clone()
    tx.fused_add_rms_norm(xi, ri, w, 1e-6)
    assert torch.equal(xi, out) and torch.equal(ri, res), f"fused_add_rms_norm seed={seed}"


# ------------------------------------------- dropout, matmul, rope, factories

def test_dropout(device, seed):
    x = signed((256, 512), torch.float32, device)
    torch.manual_seed(seed)
    y = tx.dropout(x, 0.3, True)
    kept = y != 0
    frac = kept.float().mean().item()
    assert abs(frac - 0.7) < 0.01, f"kept {frac} seed={seed}"
    torch.testing.assert_close(y[kept], (x / 0.7)[kept], rtol=1e-6, atol=0)
    y2 = tx.dropout(x, 0.3, True)
    assert not torch.equal(y, y2), "two calls drew the same mask"
    torch.manual_seed(seed)
    assert torch.equal(tx.dropout(x, 0.3, True), y), "torch.manual_seed does not reproduce"
    assert torch.equal(tx.dropout(x, 0.3, False), x)
    # After a PyTorch op that leaves the generator's offset at 4 mod 8 (tx
    # rounds it up to a multiple of 8): still reproducible, still a new mask.
    torch.manual_seed(seed)
    torch.nn.functional.dropout(x[:1, :5], 0.5, True)
    y3 = tx.dropout(x, 0.3, True)
    torch.manual_seed(seed)
    torch.nn.functional.dropout(x[:1, :5], 0.5, True)
    assert torch.equal(tx.dropout(x, 0.3, True), y3), "not reproducible after a torch op"
    assert abs((y3 != 0).float().mean().item() - 0.7) < 0.01


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul(dtype, device, seed):
    m, k, n = (256, 128, 256) if device == "cuda" else (48, 40, 24)
    a = signed((m, k), dtype, device)
    b = signed((k, n), dtype, device)
    want = (a.double() @ b.double())
    got = tx.matmul(a, b)
    assert got.dtype == dtype
    # f32 accumulation in another order, one rounding: a few units of dtype.
    torch.testing.assert_close(got.double().cpu(), want.cpu(), rtol=TOL[dtype][0] * 2,
                               atol=TOL[dtype][1] * math.sqrt(k) * 4,
                               msg=lambda s: f"matmul seed={seed}: {s}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_matmul_b_transposed(dtype, device, seed):
    # other as b.t() of an (N, K) tensor (torch._scaled_mm's layout) goes to
    # tx without a copy; fp8 in, f32 out.
    m, k, n = (256, 256, 256) if device == "cuda" else (40, 64, 24)
    a = signed((m, k), torch.float32, device).to(dtype)
    bt = signed((n, k), torch.float32, device).to(dtype)
    want = a.double() @ bt.double().t()
    got = tx.matmul(a, bt.t())
    assert got.dtype == (torch.float32 if dtype == torch.float8_e4m3fn else dtype)
    torch.testing.assert_close(got.double().cpu(), want.cpu(), rtol=TOL[torch.bfloat16][0] * 2,
                               atol=TOL[torch.bfloat16][1] * math.sqrt(k) * 4,
                               msg=lambda s: f"matmul b.t() seed={seed}: {s}")


def grouped_reference(a, b, offs):
    out = torch.zeros(a.shape[0], b.shape[2], dtype=torch.float64, device=a.device)
    start = 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = a[start:end].double() @ b[e].double()
        start = end
    return out, start


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("b_transposed", [False, True])
def test_grouped_matmul(dtype, b_transposed, device, seed):
    # A mixture-of-experts layer's GEMM: tokens sorted by expert, an empty
    # expert, one row past the last end; torch._grouped_mm's operands.
    counts = [70, 0, 1, 130, 33] if device == "cuda" else [9, 0, 1, 20, 5]
    k, n = (256, 256) if device == "cuda" else (64, 24)
    offs = torch.tensor(counts, device=device).cumsum(0).to(torch.int32)
    t = int(offs[-1]) + 1
    a = signed((t, k), torch.float32, device).to(dtype)
    w = signed((len(counts), n, k), torch.float32, device).to(dtype)  # (E, N, K) storage
    b = w.transpose(1, 2) if b_transposed else w.transpose(1, 2).contiguous()
    got = tx.grouped_matmul(a, b, offs)
    assert got.shape == (t, n)
    assert got.dtype == (torch.float32 if dtype == torch.float8_e4m3fn else dtype)
    want, end = grouped_reference(a, b, offs)
    torch.testing.assert_close(got[:end].double().cpu(), want[:end].cpu(),
                               rtol=TOL[torch.bfloat16][0] * 2,
                               atol=TOL[torch.bfloat16][1] * math.sqrt(k) * 4,
                               msg=lambda s: f"grouped_matmul seed={seed}: {s}")
    if dtype == torch.bfloat16 and b_transposed and hasattr(torch, "_grouped_mm") and \
            device == "cuda":
        # The same operands through PyTorch's own grouped GEMM (b as the
        # transpose of (E, N, K): the layout it asks for on sm_90).
        ref = torch._grouped_mm(a, b, offs=offs)
        torch.testing.assert_close(got[:end].float(), ref[:end].float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("scales", ["tensor", "rows", "blocks"])
def test_scaled_matmul(scales, device, seed):
    # fp8 with scales (torch._scaled_mm's operands); b as (N, K) transposed.
    m, k, n = (256, 384, 256) if device == "cuda" else (40, 200, 136)
    x = signed((m, k), torch.float32, device) * 8
    w = signed((n, k), torch.float32, device)
    if scales == "blocks":
        xq, xs = tx.quantize_fp8(x)  # 1 x 128 blocks
        kb, nb = (k + 127) // 128, (n + 127) // 128
        ws = torch.rand(nb, kb, device=device) + 0.5  # the weights' 128 x 128 blocks
        wq = w.to(torch.float8_e4m3fn)
        sb = ws.t()
        sa_full = xs.repeat_interleave(128, dim=1)[:, :k]
        sb_full = ws.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    else:
        xq = x.to(torch.float8_e4m3fn)
        wq = w.to(torch.float8_e4m3fn)
        xs = (torch.rand(m, 1, device=device) + 0.5) if scales == "rows" else torch.tensor(
            [0.75], device=device)
        sa_full = xs.expand(m, k)
        if scales == "rows":  # torch._scaled_mm's row-wise recipe: b per column, (1, N)
            sb = torch.rand(1, n, device=device) + 0.5
            sb_full = sb.t().expand(n, k)
        else:
            sb = torch.tensor([1.25], device=device)
            sb_full = sb.expand(n, k)
    got = tx.scaled_matmul(xq, wq.t(), xs, sb)
    assert got.dtype == torch.bfloat16 and got.shape == (m, n)
    want = (xq.double() * sa_full.double()) @ (wq.double() * sb_full.double()).t()
    torch.testing.assert_close(got.double().cpu(), want.cpu(), rtol=2e-2,
                               atol=2e-2 * want.abs().max().item(),
                               msg=lambda s: f"scaled_matmul {scales} seed={seed}: {s}")


def test_scaled_matmul_opcheck(device):
    # fp8 inputs: opcheck's schema test multiplies them, which torch's CPU
    # kernels do not do for fp8; the fake kernel and autograd registration
    # are what it checks here.
    args = (torch.randn(32, 256, device=device).to(torch.float8_e4m3fn),
            torch.randn(64, 256, device=device).to(torch.float8_e4m3fn).t(),
            torch.rand(32, 2, device=device) + 0.5, torch.tensor([2.0], device=device))
    torch.library.opcheck(tx.scaled_matmul.default, args, {},
                          test_utils=("test_faketensor", "test_autograd_registration"))


def test_quantize_fp8_weight_blocks(device, seed):
    # 128 x 128 blocks (block_rows): one scale per block, the data within fp8's rounding.
    w = signed((200, 300), torch.float32, device) * 5
    q, s = tx.quantize_fp8(w, block_rows=128)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            blk = w[128 * i:128 * (i + 1), 128 * j:128 * (j + 1)]
            torch.testing.assert_close(s[i, j], blk.abs().max() / 448.0, rtol=1e-6, atol=0)
            back = q[128 * i:128 * (i + 1), 128 * j:128 * (j + 1)].float() * s[i, j]
            torch.testing.assert_close(back, blk, rtol=2 ** -4, atol=1e-3 * blk.abs().max().item())


def test_quantize_fp8(device, seed):
    x = signed((6, 300), torch.bfloat16, device) * 20
    q, s = tx.quantize_fp8(x)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (6, 3)
    for j in range(3):
        blk = x[:, 128 * j:128 * (j + 1)].float()
        torch.testing.assert_close(s[:, j], blk.abs().amax(1) / 448.0, rtol=1e-6, atol=0)
        back = q[:, 128 * j:128 * (j + 1)].float() * s[:, j:j + 1]
        torch.testing.assert_close(back, blk, rtol=2 ** -4, atol=1e-3 * blk.abs().max().item())


def rope_reference(positions, q, cache, head_size, neox):
    rot = cache.shape[1]
    cos, sin = cache[positions.long()].double().chunk(2, dim=-1)
    x = q.double().view(q.shape[0], -1, head_size)
    r = x[..., :rot]
    if neox:
        x1, x2 = r.chunk(2, dim=-1)
    else:
        x1, x2 = r[..., ::2], r[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    out = torch.cat([o1, o2], -1) if neox else torch.stack([o1, o2], -1).flatten(-2)
    return torch.cat([out, x[..., rot:]], -1).view(q.shape).to(q.dtype)


@pytest.mark.parametrize("neox", [True, False])
def test_rotary_embedding(neox, device, seed):
    cache = tx.rope_cache(64, 512, device=device)
    inv = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    ang = torch.arange(512, dtype=torch.float64)[:, None] * inv[None, :]
    torch.testing.assert_close(cache.double().cpu(), torch.cat([ang.cos(), ang.sin()], -1),
                               rtol=1e-6, atol=1e-6)
    pos = torch.randint(0, 512, (37,), device=device)
    q = signed((37, 4 * 128), torch.bfloat16, device)
    k = signed((37, 2 * 128), torch.bfloat16, device)
    wq, wk = rope_reference(pos, q, cache, 128, neox), rope_reference(pos, k, cache, 128, neox)
    tx.rotary_embedding(pos, q, k, 128, cache, neox)
    close(q, wq, torch.bfloat16, f"rope q seed={seed}")
    close(k, wk, torch.bfloat16, f"rope k seed={seed}")


def test_rope_longrope(device, seed):
    l0, lmax, rot = 64, 256, 32
    short = [1.0 + 0.1 * i for i in range(rot // 2)]
    long = [2.0 + 0.3 * i for i in range(rot // 2)]
    cache = tx.rope_cache_longrope(rot, lmax, 10000.0, short, long, l0, device=device)
    assert cache.shape == (l0 + lmax, rot)
    for hi, offset in [(l0, 0), (lmax, l0)]:  # all positions short: short rows; else long rows
        pos = torch.randint(0, hi, (19,), device=device)
        pos[0] = hi - 1
        q = signed((19, 2 * 64), torch.float32, device)
        k = signed((19, 64), torch.float32, device)
        want_q, want_k = q.clone(), k.clone()
        tx.rotary_embedding(pos + offset, want_q, want_k, 64, cache, True)
        tx.rope_longrope(pos, q, k, 64, cache, l0)
        assert torch.equal(q, want_q) and torch.equal(k, want_k), f"longrope {hi} seed={seed}"


def test_factories_and_cast(device, seed):
    a = tx.alibi(6, 9, device=device)
    slopes = torch.tensor([2 ** (-2 * (h + 1)) for h in range(4)] + [2 ** -1, 2 ** -3],
                          dtype=torch.float64)
    i = torch.arange(9, dtype=torch.float64)
    close(a, (slopes[:, None, None] * (i[None, None, :] - i[None, :, None])).float(),
          torch.float32, "alibi")
    pe = tx.sinusoidal(50, 16, device=device)
    w = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    ang = torch.arange(50, dtype=torch.float64)[:, None] * w[None, :]
    want = torch.stack([ang.sin(), ang.cos()], -1).flatten(-2).float()
    close(pe, want, torch.float32, "sinusoidal")
    x = signed((33, 65), torch.float32, device)
    for t in [torch.float16, torch.bfloat16, torch.float8_e4m3fn]:
        got = tx.cast(x, t)
        assert torch.equal(got.float().cpu(), x.to(t).float().cpu()), f"cast {t} seed={seed}"


# ----------------------------------------------------------------- opcheck

def opcheck_cases(device):
    f = lambda *s: torch.randn(*s, device=device)  # noqa: E731
    cases = []
    for op in sorted(UNARY) + ["isnan", "isinf", "isfinite", "logical_not"]:
        cases.append((getattr(tx, op).default, (f(8, 16).abs() + 0.1,), {}))
    for op in sorted(BINARY) + ["pow"]:
        cases.append((getattr(tx, op).default, (f(8, 16).abs() + 0.5, f(16).abs() + 0.5), {}))
        cases.append((getattr(tx, op).out, (f(8, 16).abs() + 0.5, f(16).abs() + 0.5),
                      {"out": torch.empty(8, 16, device=device,
                                          dtype=torch.bool if op in ("eq", "ne", "gt", "lt", "ge",
                                                                     "le", "logical_and",
                                                                     "logical_or")
                                          else torch.float32)}))
    for op in ["bitwise_and", "bitwise_or", "bitwise_xor"]:
        i = torch.randint(0, 50, (8, 16), device=device)
        cases.append((getattr(tx, op).default, (i, i.flip(0)), {}))
    cases.append((tx.bitwise_not.default, (torch.randint(0, 50, (8, 16), device=device),), {}))
    for op in sorted(GATED):
        cases.append((getattr(tx, op).default, (f(8, 32),), {}))
    cases += [
        (tx.exp_.default, (f(8, 16),), {}),
        (tx.add_.default, (f(8, 16), f(16)), {}),
        (tx.leaky_relu.default, (f(8, 16), 0.1), {}),
        (tx.elu.default, (f(8, 16), 0.5), {}),
        (tx.hardtanh.default, (f(8, 16), -0.5, 0.5), {}),
        (tx.softplus.default, (f(8, 16), 1.5, 10.0), {}),
        (tx.prelu.default, (f(8, 16), f(16)), {}),
        (tx.where.default, (f(8, 16) > 0, f(8, 16), f(16)), {}),
        (tx.clamp.default, (f(8, 16), -0.5, 0.5), {}),
        (tx.masked_fill.default, (f(8, 16), f(8, 16) > 0, 2.0), {}),
        (tx.nan_to_num.default, (f(8, 16),), {}),
        (tx.softmax.default, (f(8, 16), -1), {}),
        (tx.log_softmax.default, (f(8, 16), -1), {}),
        (tx.rms_norm.default, (f(8, 16), [16], f(16), 1e-6), {}),
        (tx.layer_norm.default, (f(8, 16), [16], f(16), f(16), 1e-5), {}),
        (tx.add_rms_norm.default, (f(8, 16), f(8, 16), f(16), 1e-6), {}),
        (tx.fused_add_rms_norm.default, (f(8, 16), f(8, 16), f(16), 1e-6), {}),
        (tx.matmul.default, (f(32, 32).half(), f(32, 64).half()), {}),
        (tx.quantize_fp8.default, (f(8, 200),), {}),
        (tx.grouped_matmul.default,
         (f(40, 32).half(), f(3, 32, 16).half(),
          torch.tensor([10, 10, 40], dtype=torch.int32, device=device)), {}),
        (tx.cast.default, (f(8, 16), torch.bfloat16), {}),
        (tx.rotary_embedding.default,
         (torch.randint(0, 64, (8,), device=device), f(8, 2 * 32), f(8, 32), 32,
          tx.rope_cache(32, 64, device=device), True), {}),
        (tx.rope_longrope.default,
         (torch.randint(0, 96, (8,), device=device), f(8, 2 * 32), f(8, 32), 32,
          tx.rope_cache_longrope(32, 96, 10000.0, [1.0] * 16, [2.0] * 16, 64, device=device), 64),
         {}),
    ]
    return cases


def test_opcheck(device):
    # dropout draws from the generator: opcheck's repeated calls differ by
    # design, so its schema test alone runs on it.
    failures = []
    for op, args, kwargs in opcheck_cases(device):
        try:
            torch.library.opcheck(op, args, kwargs)
        except Exception as e:  # collect them all, then fail once
            failures.append(f"{op}: {type(e).__name__}: {str(e).splitlines()[0]}")
    torch.library.opcheck(tx.dropout.default, (torch.randn(8, 16, device=device), 0.2, True), {},
                          test_utils=("test_schema",))
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------- torch.compile

class Block(torch.nn.Module):
    """linear -> gelu -> dropout -> residual add -> rms_norm, in tx ops."""

    def __init__(self, hidden, p=0.1):
        super().__init__()
        self.linear = torch.nn.Linear(hidden, hidden)
        self.weight = torch.nn.Parameter(torch.rand(hidden) + 0.5)
        self.p = p

    def forward(self, x):
        h = tx.gelu(self.linear(x))
        h = tx.dropout(h, self.p, self.training)
        h = tx.add(h, x)
        return tx.rms_norm(h, [h.shape[-1]], self.weight, 1e-6)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph(dynamic, device, seed):
    torch._dynamo.reset()
    block = Block(64).to(device)
    x = torch.randn(24, 64, device=device)
    with torch.no_grad():
        compiled = torch.compile(block, fullgraph=True, dynamic=dynamic)
        torch.manual_seed(seed)
        want = block(x)
        torch.manual_seed(seed)
        got = compiled(x)  # fullgraph=True: a graph break is an error
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5,
                                   msg=lambda s: f"compiled != eager seed={seed}: {s}")
        if dynamic:  # another size: the same graph, no recompile needed
            y = torch.randn(7, 64, device=device)
            torch.manual_seed(seed)
            w2 = block(y)
            torch.manual_seed(seed)
            torch.testing.assert_close(compiled(y), w2, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------- attention

def _attention_f64(q, k, v, causal, bottom_right=False):
    """float64 SDPA on (B, H, S, D) tensors (GQA: K/V heads repeated)."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        diag = sk - sq if bottom_right else 0
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + diag, float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.softmax(s, -1) @ v, lse


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention(layout, causal, device, seed):
    b, h, hk, sq, sk, d = (2, 8, 2, 300, 500, 128) if device == "cuda" else (1, 2, 1, 70, 90, 64)

    def make(heads, s):
        if layout == "bhsd":
            return torch.rand(b, heads, s, d, device=device, dtype=torch.bfloat16) * 2 - 1
        return (torch.rand(b, s, heads, d, device=device, dtype=torch.bfloat16) * 2 - 1).transpose(1, 2)

    q, k, v = make(h, sq), make(hk, sk), make(hk, sk)
    out, lse = tx.attention(q, k, v, is_causal=causal)
    want, want_lse = _attention_f64(q, k, v, causal)
    assert out.shape == (b, h, sq, d) and lse.shape == (b, h, sq)
    assert out.stride() == q.stride() or layout == "bshd"  # out keeps query's layout
    # bf16: P and O rounded once each (docs/attention.md derives the bound).
    torch.testing.assert_close(out.double(), want, rtol=2 * 2**-8, atol=2 * 2**-8,
                               msg=lambda s: f"seed={seed}: {s}")
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-5, atol=1e-5)
    if device == "cuda" and not causal:  # against torch's own SDPA on the same inputs
        ref = F.scaled_dot_product_attention(q, k.repeat_interleave(h // hk, 1),
                                             v.repeat_interleave(h // hk, 1))
        torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)


def test_attention_opcheck_and_compile(device, seed):
    q = torch.randn(1, 2, 40, 64, device=device, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 50, 64, device=device, dtype=torch.bfloat16)
    torch.library.opcheck(tx.attention.default, (q, k, k), {"is_causal": True})

    class AttnBlock(torch.nn.Module):
        """qkv projection -> tx attention -> output projection."""

        def __init__(self, heads, dim):
            super().__init__()
            self.heads = heads
            self.qkv = torch.nn.Linear(heads * dim, 3 * heads * dim, dtype=torch.bfloat16)
            self.out = torch.nn.Linear(heads * dim, heads * dim, dtype=torch.bfloat16)

        def forward(self, x):
            bsz, s, _ = x.shape
            q, k, v = self.qkv(x).view(bsz, s, 3, self.heads, -1).unbind(2)
            o, _ = tx.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                is_causal=True)
            return self.out(o.transpose(1, 2).reshape(bsz, s, -1))

    torch._dynamo.reset()
    block = AttnBlock(2, 64).to(device)
    x = torch.randn(2, 33, 128, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        want = block(x)
        got = torch.compile(block, fullgraph=True)(x)  # a graph break is an error
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2,
                                   msg=lambda s: f"compiled != eager seed={seed}: {s}")


def _grads_f64(q, k, v, g, causal):
    """float64 gradients of sum(attention(q, k, v) * g) (GQA: K/V repeated,
    so their gradients sum over each group's query heads)."""
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    out, _ = _attention_f64(q, k, v, causal)
    (out * g.double()).sum().backward()
    return q.grad, k.grad, v.grad


def _close_to_grad(got, want, what, seed):
    # bf16: P and dS enter their products rounded (2^-9), O and the inputs too:
    # within 2^-6 of the largest gradient (test/attention_backward_cases.hpp).
    err = (got.double() - want).abs()
    bound = 2**-6 * (want.abs().max() + want.abs())
    assert torch.isfinite(got).all() and (err <= bound).all(), (
        f"{what}: worst error {(err / bound).max().item():.3g} of the bound, seed={seed}")


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_backward_autograd(layout, causal, device, seed):
    """Gradients through torch.ops.tx.attention (its registered autograd
    formula, torch.ops.tx.attention_backward) against float64."""
    b, h, hk, sq, sk, d = (2, 8, 2, 300, 500, 128) if device == "cuda" else (1, 4, 2, 70, 90, 64)

    def make(heads, s):
        if layout == "bhsd":
            x = torch.rand(b, heads, s, d, device=device, dtype=torch.bfloat16) * 2 - 1
        else:
            x = (torch.rand(b, s, heads, d, device=device, dtype=torch.bfloat16) * 2 - 1).transpose(1, 2)
        return x.requires_grad_()

    q, k, v = make(h, sq), make(hk, sk), make(hk, sk)
    g = torch.rand(b, h, sq, d, device=device, dtype=torch.bfloat16) * 2 - 1
    out, lse = tx.attention(q, k, v, is_causal=causal)
    assert out.requires_grad and not lse.requires_grad
    (out * g).sum().backward()
    for got, want, what in zip((q.grad, k.grad, v.grad), _grads_f64(q, k, v, g, causal),
                               ("dq", "dk", "dv")):
        assert got.shape == want.shape
        _close_to_grad(got, want, what, seed)
    if device == "cuda":  # against torch's own SDPA gradients on the same inputs
        qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))
        ref = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, enable_gqa=True)
        (ref * g).sum().backward()
        for got, want, what in zip((q.grad, k.grad, v.grad), (qs.grad, ks.grad, vs.grad),
                                   ("dq", "dk", "dv")):
            _close_to_grad(got, want.double(), what + " vs SDPA", seed)


def test_attention_backward_opcheck(device, seed):
    q = torch.randn(1, 2, 40, 64, device=device, dtype=torch.bfloat16)
    k = torch.randn(1, 1, 50, 64, device=device, dtype=torch.bfloat16)
    out, lse = tx.attention(q, k, k, is_causal=True)
    g = torch.randn_like(out)
    torch.library.opcheck(tx.attention_backward.default, (g, q, k, k, out, lse),
                          {"is_causal": True})
    # And through the autograd registration of attention itself.
    qq, kk = q.clone().requires_grad_(), k.clone().requires_grad_()
    torch.library.opcheck(tx.attention.default, (qq, kk, kk), {"is_causal": True})


class _TwoLayerAttention(torch.nn.Module):
    """Two pre-norm causal self-attention layers and a linear head; `attend`
    is tx's attention or torch's SDPA."""

    def __init__(self, heads, head_dim, attend):
        super().__init__()
        width = heads * head_dim
        self.heads, self.attend = heads, attend
        self.layers = torch.nn.ModuleList(
            torch.nn.ModuleDict({"norm": torch.nn.LayerNorm(width),
                                 "qkv": torch.nn.Linear(width, 3 * width),
                                 "out": torch.nn.Linear(width, width)}) for _ in range(2))
        self.head = torch.nn.Linear(width, width)

    def forward(self, x):
        bsz, s, _ = x.shape
        for layer in self.layers:
            q, k, v = layer["qkv"](layer["norm"](x)).view(bsz, s, 3, self.heads, -1).unbind(2)
            o = self.attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            x = x + layer["out"](o.transpose(1, 2).reshape(bsz, s, -1))
        return self.head(x)


def _tx_attend(q, k, v):
    return tx.attention(q, k, v, is_causal=True)[0]


def _sdpa_attend(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_attention_trains(device, seed):
    """50 steps of a two-layer attention model (bf16, SGD with momentum, a
    fixed regression target): tx attention tracks the loss of the same
    model with torch SDPA from the same weights and data."""
    torch.manual_seed(seed)
    x = torch.randn(4, 48, 128, device=device, dtype=torch.bfloat16)
    target = torch.randn(4, 48, 128, device=device, dtype=torch.bfloat16)
    models = {"tx": _TwoLayerAttention(2, 64, _tx_attend),
              "sdpa": _TwoLayerAttention(2, 64, _sdpa_attend)}
    models["sdpa"].load_state_dict(models["tx"].state_dict())
    losses = {}
    for name, model in models.items():
        model.to(device=device, dtype=torch.bfloat16)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        losses[name] = []
        for _ in range(50):
            opt.zero_grad()
            loss = F.mse_loss(model(x).float(), target.float())
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    a, b = losses["tx"], losses["sdpa"]
    assert a[-1] < 0.7 * a[0], f"tx's loss did not fall: {a[0]:.4f} -> {a[-1]:.4f} seed={seed}"
    for step, (la, lb) in enumerate(zip(a, b)):
        assert abs(la - lb) <= 0.05 * lb, (
            f"step {step}: loss {la:.5f} with tx, {lb:.5f} with SDPA, seed={seed}")


def test_attention_training_step_compiles(device, seed):
    """torch.compile(fullgraph) of a model with tx attention, trained one step:
    no graph break, the same gradients as eager."""
    torch._dynamo.reset()
    torch.manual_seed(seed)
    model = _TwoLayerAttention(2, 64, _tx_attend).to(device=device, dtype=torch.bfloat16)
    x = torch.randn(2, 33, 128, device=device, dtype=torch.bfloat16)
    model(x).float().pow(2).mean().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True)  # a graph break is an error
    compiled(x).float().pow(2).mean().backward()
    for (name, p), w in zip(model.named_parameters(), want):
        torch.testing.assert_close(p.grad, w, rtol=2e-2, atol=2e-2,
                                   msg=lambda s, n=name: f"{n}: compiled != eager seed={seed}: {s}")


# ------------------------------------------------------- paged decode

def _paged_cache(b, ctx, hk, d, page, device, dtype=torch.bfloat16):
    """A paged cache filled by tx.reshape_and_cache from contiguous K/V, the
    pages of every sequence scattered; the unused rows NaN."""
    max_pages = (max(ctx) + page - 1) // page
    pages = b * max_pages + 2
    table = torch.randperm(pages, dtype=torch.int32)[: b * max_pages].view(b, max_pages)
    kc = torch.full((pages, page, hk, d), float("nan"), dtype=torch.bfloat16,
                    device=device).to(dtype)
    vc = kc.clone()
    ks, vs = [], []
    for i, n in enumerate(ctx):
        k = torch.rand(n, hk, d, device=device, dtype=torch.bfloat16) * 4 - 2
        v = torch.rand(n, hk, d, device=device, dtype=torch.bfloat16) * 2 - 1
        pos = torch.arange(n)
        slots = (table[i, pos // page].long() * page + pos % page).to(device)
        tx.reshape_and_cache(k, v, kc, vc, slots)
        ks.append(k)
        vs.append(v)
    return kc, vc, table.to(device), ks, vs


def _decode_f64(q, ks, vs):
    """float64: token t of sequence b at ctx - T + t sees keys <= its position."""
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    tq, h = q.shape[1], q.shape[2]
    for b, (k, v) in enumerate(zip(ks, vs)):
        n, hk = k.shape[0], k.shape[1]
        kk = k.double().repeat_interleave(h // hk, 1).transpose(0, 1)  # (H, n, D)
        vv = v.double().repeat_interleave(h // hk, 1).transpose(0, 1)
        s = q[b].double().transpose(0, 1) @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
        t = torch.arange(tq, device=q.device)[:, None]
        j = torch.arange(n, device=q.device)[None, :]
        s = s.masked_fill(j > n - tq + t, float("-inf"))
        # A token whose position is below 0 sees no key: its row is 0 (tx's
        # documented result; softmax over nothing would be NaN).
        p = torch.softmax(s, -1).nan_to_num(0.0)
        out[b] = (p @ vv).transpose(0, 1)
    return out


@pytest.mark.parametrize("tq", [1, 3])
def test_paged_attention(tq, device, seed):
    b, h, hk, d, page = 3, 8, 2, 64, 16
    ctx = [1, 17, 150] if device == "cpu" else [1, 1000, 3000]
    kc, vc, table, ks, vs = _paged_cache(b, ctx, hk, d, page, device)
    q = torch.rand(b, tq, h, d, device=device, dtype=torch.bfloat16) * 4 - 2
    lens = torch.tensor(ctx, dtype=torch.int32, device=device)
    out = tx.paged_attention(q, kc, vc, table, lens)
    assert out.shape == q.shape and out.dtype == q.dtype
    want = _decode_f64(q, ks, vs)
    # bf16: P and O rounded once each (docs/attention.md derives the bound).
    torch.testing.assert_close(out.double(), want, rtol=2 * 2**-8, atol=2 * 2**-8,
                               msg=lambda s: f"seed={seed}: {s}")
    split = tx.paged_attention(q, kc, vc, table, lens, splits=3)
    torch.testing.assert_close(split.double(), want, rtol=2 * 2**-8, atol=2 * 2**-8)


def test_paged_attention_fp8_opcheck_and_compile(device, seed):
    b, h, hk, d, page = 2, 4, 1, 64, 16
    ctx = [20, 45]
    kc, vc, table, ks, vs = _paged_cache(b, ctx, hk, d, page, device, torch.float8_e4m3fn)
    lens = torch.tensor(ctx, dtype=torch.int32, device=device)
    q = torch.rand(b, 1, h, d, device=device, dtype=torch.bfloat16) * 4 - 2
    out = tx.paged_attention(q, kc, vc, table, lens)
    # The reference reads the cache as stored (fp8-rounded keys and values).
    want = _decode_f64(q, [k.to(torch.float8_e4m3fn).double() for k in ks],
                       [v.to(torch.float8_e4m3fn).double() for v in vs])
    torch.testing.assert_close(out.double(), want, rtol=2 * 2**-8, atol=2 * 2**-8)
    # opcheck on a bf16 cache: its schema check does arithmetic on the
    # tensors, which torch has no fp8 kernels for.
    kb, vb = kc.to(torch.bfloat16), vc.to(torch.bfloat16)
    torch.library.opcheck(tx.paged_attention.default, (q, kb, vb, table, lens), {})
    k_new = torch.randn(3, hk, d, device=device, dtype=torch.bfloat16)
    torch.library.opcheck(tx.reshape_and_cache.default,
                          (k_new, k_new, kb.clone(), vb.clone(),
                           torch.tensor([0, 5, -1], device=device)), {})

    def step(q, k_new, v_new, slots):  # write the new token, then attend: one graph
        tx.reshape_and_cache(k_new, v_new, kc, vc, slots)
        return tx.paged_attention(q, kc, vc, table, lens + 1)

    torch._dynamo.reset()
    slots = (table[:, torch.tensor(ctx) // page].diagonal().long() * page +
             torch.tensor(ctx, device=device) % page)
    args = (q, torch.randn(b, hk, d, device=device, dtype=torch.bfloat16),
            torch.randn(b, hk, d, device=device, dtype=torch.bfloat16), slots)
    got = torch.compile(step, fullgraph=True)(*args)  # a graph break is an error
    want = tx.paged_attention(q, kc, vc, table, lens + 1)
    torch.testing.assert_close(got, want)


def test_paged_attention_errors(device):
    q = torch.randn(1, 1, 4, 64, device=device, dtype=torch.bfloat16)
    kc = torch.randn(4, 24, 2, 64, device=device, dtype=torch.bfloat16)
    table = torch.zeros(1, 2, dtype=torch.int32, device=device)
    lens = torch.ones(1, dtype=torch.int32, device=device)
    with pytest.raises(RuntimeError, match="page_size 24"):
        tx.paged_attention(q, kc, kc, table, lens)
    kc = torch.randn(4, 16, 3, 64, device=device, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="do not divide"):
        tx.paged_attention(q, kc, kc, table, lens)


def test_attention_errors(device):
    q = torch.randn(1, 4, 8, 96, device=device, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="head_dim 96"):
        tx.attention(q, q, q)
    q = torch.randn(1, 3, 8, 64, device=device, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 8, 64, device=device, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="do not divide"):
        tx.attention(q, k, k)
