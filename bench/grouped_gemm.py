"""The GEMM family: grouped GEMM (a mixture-of-experts layer) and fp8 with
block scales, tx against PyTorch in one process.

Grouped: tx::ops::grouped_matmul against
PyTorch's torch._grouped_mm and a loop of torch.matmul per expert, in one
process, in alternating rounds (7 rounds of 20 runs each, the median of the
rounds' medians; timing as bench/torch_timing.py: CUDA events around each
call).

    python3 bench/grouped_gemm.py OUT_PREFIX [--quick]
    python3 bench/grouped_gemm.py OUT_PREFIX --smoke   # tiny shapes on the CPU: the script runs

Shapes: Mixtral-8x7B-like (8 experts, hidden 4096, expert width 14336, top-2)
and DeepSeek-like (64 experts, hidden 7168, expert width 2048, top-8 -- the
64 experts one GPU holds of DeepSeek-V3's 256 under 4-way expert
parallelism) at 4096 and 16384 tokens, the up projection (K = hidden, N =
width) and the down projection (K = width, N = hidden); routing balanced
(every expert the same rows) or skewed (Zipf-like: expert e gets a share
proportional to 1 / (e + 1), a few with none). The operands are
torch._grouped_mm's: a (T, K) bf16 sorted by expert, b (E, K, N) stored as
(E, N, K) and passed transposed (the layout torch._grouped_mm prefers),
offs int32 cumulative ends. TFLOP/s = 2 T K N / time (rows actually routed).

Scaled fp8 (e4m3, bf16 out): tx::ops::scaled_matmul with DeepSeek-V3's block
scales (1 x 128 for A, 128 x 128 for B) against the same call with one
scale per tensor and with per-row / per-column scales, tx's ops::matmul on
the same operands (f32 out, no scales: the same main loop), torch._scaled_mm
with one scale per tensor and row-wise (cuBLAS), and torch._scaled_mm with
block scales where this torch offers them on this GPU (else the row says why), at 4096^3, 8192^3 and DeepSeek-V3's projections
(M 4096: (N, K) = (7168, 2048), (2048, 7168), (24576, 1536)); B stored (N, K)
and passed transposed. Same alternating rounds.
Writes OUT_PREFIX.json and OUT_PREFIX.md.
"""
import json
import os
import sys

import torch

from torch_timing import time_ms  # bench/ is on sys.path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tx_torch",
                                "python"))
import tx_torch  # noqa: F401,E402 -- registers torch.ops.tx

SMOKE = "--smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
if SMOKE:  # no CUDA events on the CPU: wall time of one call
    import time

    def time_ms(f, args, warm=1, reps=1):  # noqa: F811 -- the CPU stand-in
        f(*args)
        t = time.perf_counter()
        f(*args)
        return (time.perf_counter() - t) * 1e3

TX = torch.ops.tx.grouped_matmul
TX_SCALED = torch.ops.tx.scaled_matmul


def routing(tokens, topk, experts, skewed):
    rows = tokens * topk
    if not skewed:
        counts = [rows // experts] * experts
        counts[-1] += rows - sum(counts)
        return counts
    w = [1.0 / (e + 1) for e in range(experts)]
    # A fifth of the experts get nothing (the tail of the Zipf-like shares).
    for e in range(experts - experts // 5, experts):
        w[e] = 0.0
    s = sum(w)
    counts = [int(rows * x / s) for x in w]
    counts[0] += rows - sum(counts)
    return counts


def case(name, experts, tokens, topk, K, N, skewed):
    counts = routing(tokens, topk, experts, skewed)
    T = sum(counts)
    offs = torch.tensor(counts, device=DEV).cumsum(0).to(torch.int32)
    a = (torch.randn(T, K, device=DEV) * 0.5).to(torch.bfloat16)
    w = (torch.randn(experts, N, K, device=DEV) * 0.05).to(torch.bfloat16)
    b = w.transpose(1, 2)  # (E, K, N) over (E, N, K) storage
    row = {"case": name, "experts": experts, "tokens": tokens, "topk": topk, "K": K, "N": N,
           "routing": "skewed" if skewed else "balanced", "rows": T, "max_rows": max(counts)}
    flops = 2.0 * T * K * N
    # Correctness against float64 on a sample of rows of every expert.
    got = TX(a, b, offs)
    err = 0.0
    start = 0
    for e, c in enumerate(counts):
        if c:
            r = slice(start, start + min(c, 64))
            ref = a[r].double() @ b[e].double()
            err = max(err, ((got[r].double() - ref).norm() / ref.norm()).item())
        start += c
    row["tx_rel_err"] = err
    impls = {"tx": lambda: TX(a, b, offs)}
    if hasattr(torch, "_grouped_mm") and not SMOKE:
        try:
            torch._grouped_mm(a, b, offs=offs)
            impls["torch_grouped_mm"] = lambda: torch._grouped_mm(a, b, offs=offs)
        except Exception as e:  # noqa: BLE001 -- reported, the rest still runs
            row["torch_grouped_mm_error"] = str(e)[:200]
    else:
        row["torch_grouped_mm_error"] = ("not run on the CPU" if SMOKE else
                                         "this torch has no torch._grouped_mm")
    bounds = [0] + offs.tolist()
    out = torch.empty(T, N, device=DEV, dtype=torch.bfloat16)

    def loop():
        for e in range(experts):
            if bounds[e + 1] > bounds[e]:
                torch.matmul(a[bounds[e]:bounds[e + 1]], b[e], out=out[bounds[e]:bounds[e + 1]])
    impls["matmul_loop"] = loop
    alternate(impls, row, flops)
    print(row, flush=True)
    return row


def alternate(impls, row, flops):
    rounds = {k: [] for k in impls}
    for _ in range(7):
        for k, f in impls.items():
            rounds[k].append(time_ms(f, (), warm=3, reps=20))
    for k, ms in rounds.items():
        row[k + "_ms"] = sorted(ms)[len(ms) // 2]
        row[k + "_tflops"] = flops / (row[k + "_ms"] * 1e-3) / 1e12


def scaled_case(M, N, K):
    e4m3 = torch.float8_e4m3fn
    a = (torch.randn(M, K, device=DEV) * 4).to(e4m3)
    w = (torch.randn(N, K, device=DEV) * 4).to(e4m3)  # (N, K) storage
    b = w.t()
    kb, nb = (K + 127) // 128, (N + 127) // 128
    sa = torch.rand(M, kb, device=DEV) + 0.5
    sb = (torch.rand(nb, kb, device=DEV) + 0.5).t()  # the weights' scales, transposed
    one = torch.ones(1, device=DEV)
    row = {"shape": [M, N, K]}
    flops = 2.0 * M * N * K
    ref = (a[:64].double() * sa[:64].repeat_interleave(128, 1)[:, :K].double()) @ (
        w.double() * sb.t().repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)[:, :K].double()).t()
    got = TX_SCALED(a, b, sa, sb)[:64].double()
    row["tx_blocks_rel_err"] = ((got - ref).norm() / ref.norm()).item()
    sa_rows = torch.rand(M, 1, device=DEV) + 0.5  # torch._scaled_mm's row-wise recipe
    sb_cols = torch.rand(1, N, device=DEV) + 0.5
    impls = {"tx_blocks": lambda: TX_SCALED(a, b, sa, sb),
             "tx_tensor": lambda: TX_SCALED(a, b, one, one),
             "tx_rowwise": lambda: TX_SCALED(a, b, sa_rows, sb_cols),
             # tx's ops::matmul on the same fp8 operands (f32 out, no scales): the
             # same main loop as scaled_matmul's, for the gap between the two.
             "tx_matmul": lambda: torch.ops.tx.matmul(a, b),
             "torch_tensor": lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16),
             "torch_rowwise": lambda: torch._scaled_mm(a, b, sa_rows, sb_cols,
                                                       out_dtype=torch.bfloat16)}
    if SMOKE:  # torch._scaled_mm is CUDA's
        for k in ("torch_tensor", "torch_rowwise"):
            impls.pop(k)
            row[k + "_tflops"] = float("nan")
    try:  # block-scaled cuBLAS, where this torch and GPU have it
        torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        impls["torch_blocks"] = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    except Exception as e:  # noqa: BLE001 -- reported in the table
        row["torch_blocks_error"] = str(e).splitlines()[0][:160]
    alternate(impls, row, flops)
    print(row, flush=True)
    return row


def main():
    prefix = sys.argv[1]
    quick = "--quick" in sys.argv
    shapes = [("mixtral up", 8, 4096, 14336), ("mixtral down", 8, 14336, 4096),
              ("deepseek up", 64, 7168, 2048), ("deepseek down", 64, 2048, 7168)]
    if SMOKE:
        shapes = [("tiny", 4, 64, 48), ("tiny", 8, 48, 64)]
    rows = []
    for name, experts, K, N in shapes:
        topk = 2 if experts == 8 else 8
        for tokens in ([16] if SMOKE else [4096] if quick else [4096, 16384]):
            for skewed in (False, True):
                rows.append(case(name, experts, tokens, topk, K, N, skewed))
    scaled = [scaled_case(M, N, K) for M, N, K in
              ([(64, 136, 256)] if SMOKE else [(4096, 4096, 4096)] if quick else
               [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 2048), (4096, 2048, 7168),
                (4096, 24576, 1536)])]
    json.dump({"torch": torch.__version__, "device": (torch.cuda.get_device_name() if not SMOKE else "cpu (smoke)"),
               "results": rows, "scaled": scaled}, open(prefix + ".json", "w"), indent=1)
    with open(prefix + ".md", "w") as md:
        md.write("GPU: %s, torch %s; bf16, TFLOP/s (alternating rounds)\n\n"
                 % ((torch.cuda.get_device_name() if not SMOKE else "cpu (smoke)"), torch.__version__))
        md.write("| shape | E | tokens x top-k | (K, N) | routing | tx | torch._grouped_mm "
                 "| matmul loop | tx / _grouped_mm | tx rel. error |\n"
                 "|---|---|---|---|---|---|---|---|---|---|\n")
        nan = float("nan")
        for r in rows:
            g = r.get("torch_grouped_mm_tflops", nan)
            md.write("| %s | %d | %d x %d | (%d, %d) | %s | %.1f | %.1f | %.1f | %.3f | %.1e |\n"
                     % (r["case"], r["experts"], r["tokens"], r["topk"], r["K"], r["N"],
                        r["routing"], r["tx_tflops"], g, r["matmul_loop_tflops"],
                        r["tx_tflops"] / g, r["tx_rel_err"]))
        errs = {r["case"] + " " + r["routing"]: r["torch_grouped_mm_error"] for r in rows
                if "torch_grouped_mm_error" in r}
        for k, v in errs.items():
            md.write("\ntorch._grouped_mm on %s: %s\n" % (k, v))
        md.write("\nfp8 e4m3 with scales, bf16 out, TFLOP/s (alternating rounds)\n\n"
                 "| (M, N, K) | tx blocks | tx tensor-wise | tx row-wise | tx matmul (f32 out) "
                 "| torch._scaled_mm tensor-wise | torch._scaled_mm row-wise "
                 "| torch._scaled_mm blocks | tx blocks / tx tensor-wise "
                 "| tx row-wise / torch row-wise | tx blocks rel. error |\n"
                 "|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in scaled:
            tb = r.get("torch_blocks_tflops", nan)
            md.write("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %.3f | %.3f | %.1e |\n"
                     % (tuple(r["shape"]), r["tx_blocks_tflops"], r["tx_tensor_tflops"],
                        r["tx_rowwise_tflops"], r["tx_matmul_tflops"], r["torch_tensor_tflops"],
                        r["torch_rowwise_tflops"],
                        "%.1f" % tb if tb == tb else "n/a (%s)" % r.get("torch_blocks_error", ""),
                        r["tx_blocks_tflops"] / r["tx_tensor_tflops"],
                        r["tx_rowwise_tflops"] / r["torch_rowwise_tflops"],
                        r["tx_blocks_rel_err"]))
    print(open(prefix + ".md").read())


if __name__ == "__main__":
    main()
