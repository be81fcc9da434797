"""cuDNN SDPA, torch's flash backend and a Triton flash-attention kernel on
bench_attention's shapes, and the report against tx.

    python3 bench/attention.py TX.json OUT_PREFIX

Every library gets (batch, seq, heads, head_dim) storage, the layout the
flash kernels keep, seen as (batch, heads, seq, head_dim) by SDPA
(q.transpose(1, 2)); bf16, random inputs in [-1, 1). GQA rows pass
enable_gqa=True where the backend takes it; a backend that refuses it gets
K and V repeated to every query head beforehand (outside the timing), which
is said in the row. TFLOP/s = 4 B H S^2 D / time (half when causal);
timing as bench_attention (CUDA events, 5 warm-ups, median of 30). Writes
OUT_PREFIX.json and OUT_PREFIX.md.

The Triton kernel is written here after Triton's fused-attention tutorial
(FlashAttention-2's algorithm: a program per 128 query rows of one head,
K and V blocks walked with tl.dot, online softmax in registers, the
causal diagonal blocks masked apart from the others), autotuned over a
short list of block shapes, stages and warps.
"""
import json
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_timing import time_ms  # bench/ is on sys.path


def triton_configs():
    out = []
    for bm, bn, stages, warps in [(128, 64, 3, 8), (128, 128, 3, 8), (128, 64, 4, 4),
                                  (64, 64, 4, 4), (128, 32, 4, 4), (64, 128, 3, 4)]:
        out.append(triton.Config({"BM": bm, "BN": bn}, num_stages=stages, num_warps=warps))
    return out


@triton.jit
def _blocks(acc, l_i, m_i, q, k_base, v_base, s_k, lo, hi, offs_m, offs_n, offs_d, qk_scale,
            SEQ, BN: tl.constexpr, MASK: tl.constexpr):
    for n0 in range(lo, hi, BN):
        cols = n0 + offs_n
        k = tl.load(k_base + cols[None, :] * s_k + offs_d[:, None], mask=cols[None, :] < SEQ,
                    other=0.0)
        s = tl.dot(q, k) * qk_scale
        if MASK:
            keep = (offs_m[:, None] >= cols[None, :]) & (cols[None, :] < SEQ)
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * s_k + offs_d[None, :], mask=cols[:, None] < SEQ,
                    other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.autotune(configs=triton_configs(), key=["SEQ", "HEADS", "D", "CAUSAL"])
@triton.jit
def flash_fwd(Q, K, V, O, sm_scale, SEQ, HEADS, KV_HEADS, D: tl.constexpr, CAUSAL: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr):
    m_block = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HEADS
    h = bh % HEADS
    hk = h // (HEADS // KV_HEADS)
    s_q = HEADS * D  # (batch, seq, heads, head_dim) storage: a row of one head is D apart
    s_k = KV_HEADS * D
    offs_m = m_block * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q_base = Q + b.to(tl.int64) * SEQ * s_q + h * D
    k_base = K + b.to(tl.int64) * SEQ * s_k + hk * D
    v_base = V + b.to(tl.int64) * SEQ * s_k + hk * D
    q = tl.load(q_base + offs_m[:, None] * s_q + offs_d[None, :], mask=offs_m[:, None] < SEQ,
                other=0.0)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    if CAUSAL:
        # Blocks wholly below the diagonal need no mask; those it crosses do.
        full = (m_block * BM) // BN * BN
        acc, l_i, m_i = _blocks(acc, l_i, m_i, q, k_base, v_base, s_k, 0, full, offs_m, offs_n,
                                offs_d, qk_scale, SEQ, BN, False)
        hi = tl.minimum((m_block + 1) * BM, SEQ)
        acc, l_i, m_i = _blocks(acc, l_i, m_i, q, k_base, v_base, s_k, full, hi, offs_m, offs_n,
                                offs_d, qk_scale, SEQ, BN, True)
    else:
        full = SEQ // BN * BN
        acc, l_i, m_i = _blocks(acc, l_i, m_i, q, k_base, v_base, s_k, 0, full, offs_m, offs_n,
                                offs_d, qk_scale, SEQ, BN, False)
        acc, l_i, m_i = _blocks(acc, l_i, m_i, q, k_base, v_base, s_k, full, SEQ, offs_m, offs_n,
                                offs_d, qk_scale, SEQ, BN, True)
    acc = acc / l_i[:, None]
    o_base = O + b.to(tl.int64) * SEQ * s_q + h * D
    tl.store(o_base + offs_m[:, None] * s_q + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=offs_m[:, None] < SEQ)


def triton_attention(q, k, v, causal):
    """q (B, S, H, D), k and v (B, S, Hkv, D), contiguous."""
    bsz, seq, heads, d = q.shape
    o = torch.empty_like(q)
    grid = lambda meta: (triton.cdiv(seq, meta["BM"]), bsz * heads)  # noqa: E731
    flash_fwd[grid](q, k, v, o, d ** -0.5, seq, heads, k.shape[2], D=d, CAUSAL=causal)
    return o


def sdpa(backend, q, k, v, causal, gqa):
    # q, k, v: (B, S, H, D) storage, seen as (B, H, S, D).
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                              v.transpose(1, 2), is_causal=causal,
                                              enable_gqa=gqa)


def rel_error(got, want):
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def main():
    tx_rows = json.load(open(sys.argv[1]))
    prefix = sys.argv[2]
    torch.manual_seed(0)
    rows = []
    for r in tx_rows:
        bsz, heads, kvh, seq, d, causal = (r["batch"], r["heads"], r["kv_heads"], r["seq"],
                                           r["head_dim"], r["causal"])
        gqa = kvh != heads
        q = torch.rand(bsz, seq, heads, d, device="cuda", dtype=torch.bfloat16) * 2 - 1
        k = torch.rand(bsz, seq, kvh, d, device="cuda", dtype=torch.bfloat16) * 2 - 1
        v = torch.rand(bsz, seq, kvh, d, device="cuda", dtype=torch.bfloat16) * 2 - 1
        flops = 4.0 * bsz * heads * seq * seq * d * (0.5 if causal else 1.0)
        out = dict(r)
        ref = None
        for label, backend in [("cudnn", SDPBackend.CUDNN_ATTENTION),
                               ("flash", SDPBackend.FLASH_ATTENTION)]:
            kk, vv, note = k, v, ""
            try:
                sdpa(backend, q[:1, :64], k[:1, :64], v[:1, :64], causal, gqa)
            except Exception:  # noqa: BLE001 -- try without enable_gqa
                if gqa:
                    kk = k.repeat_interleave(heads // kvh, dim=2)
                    vv = v.repeat_interleave(heads // kvh, dim=2)
                    note = " (K/V repeated)"
            try:
                g = gqa and kk is k
                o = sdpa(backend, q, kk, vv, causal, g)
                if ref is None:
                    ref = o
                ms = time_ms(lambda: sdpa(backend, q, kk, vv, causal, g), ())
                out[label + "_ms"] = ms
                out[label + "_tflops"] = flops / (ms * 1e-3) / 1e12
                out[label + "_note"] = note
            except Exception as e:  # noqa: BLE001 -- report, keep going
                out[label + "_error"] = str(e)[:160]
        try:
            o = triton_attention(q, k, v, causal)
            if ref is not None:
                out["triton_rel_err"] = rel_error(o.transpose(1, 2), ref)
            ms = time_ms(lambda: triton_attention(q, k, v, causal), ())
            out["triton_ms"] = ms
            out["triton_tflops"] = flops / (ms * 1e-3) / 1e12
        except Exception as e:  # noqa: BLE001
            out["triton_error"] = str(e)[:160]
        rows.append(out)
        print(json.dumps(out), flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    json.dump(rows, open(prefix + ".json", "w"), indent=1)
    dev = torch.cuda.get_device_name()
    lines = [f"Attention forward, bf16, TFLOP/s on {dev} (torch {torch.__version__}, "
             f"Triton {triton.__version__}, cuDNN {torch.backends.cudnn.version()})", "",
             "| case | B | H/Hkv | S | D | tx | tx op | cuDNN | flash (FA2) | Triton | tx/cuDNN | "
             "tx/flash | op/cuDNN |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(x):
        return f"{x:.1f}" if isinstance(x, float) else "-"

    for r in rows:
        c = r.get("cudnn_tflops")
        fl = r.get("flash_tflops")
        t = r["tx_tflops"]
        o = r.get("op_tflops")
        lines.append(
            f"| {r['name']} | {r['batch']} | {r['heads']}/{r['kv_heads']} | {r['seq']} | "
            f"{r['head_dim']} | {f(t)} | {f(o)} | {f(c)}{r.get('cudnn_note', '')} | "
            f"{f(fl)}{r.get('flash_note', '')} | {f(r.get('triton_tflops'))} | "
            f"{(t / c if c else float('nan')):.3f} | {(t / fl if fl else float('nan')):.3f} | "
            f"{(o / c if c and o else float('nan')):.3f} |")
    open(prefix + ".md", "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
