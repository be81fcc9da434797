"""torch.matmul (cuBLAS) and a Triton GEMM on bench_gemm's shapes, and the report.

    python3 bench/gemm.py TX.json OUT_PREFIX

The Triton kernel is the plain blocked matmul of Triton's tutorial (tiles of
A and B loaded with tl.load, tl.dot, f32 accumulation, grouped launch order),
autotuned over a short list of configurations. TFLOP/s = 2 M N K / time;
timing as bench_gemm (CUDA events, 10 warm-ups, median of 50). Writes
OUT_PREFIX.json and OUT_PREFIX.md.

Where the tx_torch extension loads (torch.ops.tx.matmul: tx::ops::matmul on
torch's tensors), a second table times tx::ops::matmul, cuBLAS and Triton in
this one process, in alternating rounds (7 rounds of 20 runs each, the median
of the rounds' medians): the three see the same clocks and power state, which
move by several percent between the C++ and the Python halves of the run at
8192^3.
"""
import os
import json
import sys

import torch
import triton
import triton.language as tl

from torch_timing import time_ms  # bench/ is on sys.path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tx_torch",
                                "python"))
try:
    import tx_torch  # noqa: F401 -- registers torch.ops.tx
    TX_MM = torch.ops.tx.matmul
except Exception as e:  # noqa: BLE001 -- the alternating table is left out, saying why
    TX_MM = None
    TX_MM_WHY = str(e)[:200]

DT = {"bfloat16": torch.bfloat16, "float16": torch.float16,
      "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def configs():
    out = []
    for bm, bn, bk, stages, warps in [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8),
                                      (128, 128, 64, 4, 4), (128, 128, 32, 4, 4),
                                      (64, 128, 64, 4, 4), (64, 64, 64, 4, 4)]:
        out.append(triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8},
                                 num_stages=stages, num_warps=warps))
    return out


@triton.autotune(configs=configs(), key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a, b, c, M, N, K, sbk, sbn, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    width = GROUP * grid_n
    group = pid // width
    first = group * GROUP
    size = min(grid_m - first, GROUP)
    pm = first + (pid % width) % size
    pn = (pid % width) // size
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = a + rm[:, None] * K + rk[None, :]
    pb = b + rk[:, None] * sbk + rn[None, :] * sbn  # B's strides: (N, 1), or (1, K) for b.t()
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        x = tl.load(pa, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BK), other=0.0)
        y = tl.load(pb, mask=(rk[:, None] < K - k * BK) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
        pa += BK
        pb += BK * sbk
    pc = c + rm[:, None] * N + rn[None, :]
    tl.store(pc, acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def triton_mm(a, b, c):
    M, K = a.shape
    N = b.shape[1]
    grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
    matmul_kernel[grid](a, b, c, M, N, K, b.stride(0), b.stride(1))
    return c


def main():
    tx = json.load(open(sys.argv[1]))
    prefix = sys.argv[2]
    rows = []
    for r in tx:
        m, n, k = r["shape"]
        t = DT[r["dtype"]]
        g = torch.Generator(device="cuda").manual_seed(0)
        fp8 = t in FP8
        if fp8:
            # fp8: B stored (N, K) and passed as its transpose, the layout
            # torch._scaled_mm (cuBLASLt) takes; scales 1, f32 out as tx.
            a = (torch.rand((m, k), device="cuda", generator=g) * 2 - 1).to(t)
            b = (torch.rand((n, k), device="cuda", generator=g) * 2 - 1).to(t).t()
            c = torch.empty((m, n), device="cuda", dtype=torch.float32)
            one = torch.ones((), device="cuda", dtype=torch.float32)

            def cublas(a=a, b=b, one=one):
                return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.float32)
        else:
            a = torch.rand((m, k), device="cuda", dtype=t, generator=g) * 2 - 1
            b = torch.rand((k, n), device="cuda", dtype=t, generator=g) * 2 - 1
            c = torch.empty((m, n), device="cuda", dtype=t)
            cublas = torch.matmul
        flops = 2.0 * m * n * k
        row = dict(r)
        try:
            row["cublas_ms"] = time_ms(cublas, (a, b), warm=10, reps=50)
        except Exception as e:  # noqa: BLE001 -- report, keep going
            row["cublas_error"] = str(e)[:200]
        if fp8:
            # cuBLAS's fast accumulation (no promotion of the tensor cores'
            # partial sums; tx always promotes), timed for reference, and
            # the relative error of both cuBLAS modes against f64.
            ref64 = a.double() @ b.double()
            for key, fast in (("cublas", False), ("cublas_fast", True)):
                try:
                    got = torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                           out_dtype=torch.float32, use_fast_accum=fast)
                    row[key + "_rel_err"] = ((got.double() - ref64).norm() / ref64.norm()).item()
                    if fast:
                        row["cublas_fast_ms"] = time_ms(
                            lambda a, b: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                          out_dtype=torch.float32,
                                                          use_fast_accum=True),
                            (a, b), warm=10, reps=50)
                        row["cublas_fast_tflops"] = flops / (row["cublas_fast_ms"] * 1e-3) / 1e12
                except Exception as e:  # noqa: BLE001 -- report, keep going
                    row[key + "_error"] = str(e)[:200]
        try:
            triton_mm(a, b, c)
            err = (c.float() - (a.float() @ b.float())).abs().max().item()
            row["triton_max_err"] = err
            row["triton_ms"] = time_ms(triton_mm, (a, b, c), warm=10, reps=50)
        except Exception as e:  # noqa: BLE001 -- report, keep going
            row["triton_error"] = str(e)[:200]
        if TX_MM is not None:
            # tx::ops::matmul checked once against the f32 product, then the
            # three implementations in alternating rounds.
            ref = a.double() @ b.double()
            got = TX_MM(a, b).double()
            row["alt_tx_rel_err"] = ((got - ref).norm() / ref.norm()).item()
            impls = {"tx": lambda: TX_MM(a, b)}
            if "cublas_ms" in row:
                impls["cublas"] = lambda: cublas(a, b)
            if "triton_ms" in row:
                impls["triton"] = lambda: triton_mm(a, b, c)
            rounds = {key: [] for key in impls}
            for _ in range(7):
                for key, f in impls.items():
                    rounds[key].append(time_ms(f, (), warm=3, reps=20))
            for key, ms in rounds.items():
                row["alt_" + key + "_ms"] = sorted(ms)[len(ms) // 2]
                row["alt_" + key + "_tflops"] = flops / (row["alt_" + key + "_ms"] * 1e-3) / 1e12
        for key in ("cublas", "triton"):
            if key + "_ms" in row:
                row[key + "_tflops"] = flops / (row[key + "_ms"] * 1e-3) / 1e12
        rows.append(row)
        print(row, flush=True)
    json.dump({"torch": torch.__version__, "triton": triton.__version__,
               "device": torch.cuda.get_device_name(), "results": rows},
              open(prefix + ".json", "w"), indent=1)
    with open(prefix + ".md", "w") as md:
        md.write("GPU: %s, torch %s, triton %s\n\n"
                 % (torch.cuda.get_device_name(), torch.__version__, triton.__version__))
        md.write("| (M, N, K) | dtype | tx TFLOP/s (tiling) | cuBLAS TFLOP/s | Triton TFLOP/s "
                 "| tx / cuBLAS | tx / Triton | tx::ops::matmul TFLOP/s (its choice) "
                 "| tx::ops::matmul back to back |\n"
                 "|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            m, n, k = r["shape"]
            tx_t = r["tx_tflops"] if r["tx_ms"] > 0 else float("nan")
            cb, tr = r.get("cublas_tflops", float("nan")), r.get("triton_tflops", float("nan"))
            ops_t = 2.0 * m * n * k / (r["ops_matmul_ms"] * 1e-3) / 1e12
            b2b_t = 2.0 * m * n * k / (r["ops_matmul_b2b_ms"] * 1e-3) / 1e12
            md.write("| %s | %s | %.1f (%s) | %.1f | %.1f | %.3f | %.3f | %.1f (%s) | %.1f |\n"
                     % (tuple(r["shape"]), r["dtype"], tx_t, r["tiling"], cb, tr, tx_t / cb,
                        tx_t / tr, ops_t, r["ops_matmul_plan"], b2b_t))
        md.write("\nfp8 rows (float8_e4m3fn): B stored (N, K) and passed as its transpose; "
                 "cuBLAS is torch._scaled_mm (scales 1, f32 out, default accumulation: the "
                 "tensor cores' partial sums promoted to f32, as tx does), tx's output is f32 "
                 "too; the Triton kernel reads the same B through its strides.\n\n")
        fp8_rows = [r for r in rows if r["dtype"].startswith("float8")]
        if fp8_rows:
            md.write("| (M, N, K) | cuBLAS TFLOP/s | cuBLAS fast accumulation TFLOP/s "
                     "| rel. error: cuBLAS | cuBLAS fast | tx::ops::matmul |\n|---|---|---|---|---|---|\n")
            for r in fp8_rows:
                md.write("| %s | %.1f | %.1f | %.2e | %.2e | %.2e |\n"
                         % (tuple(r["shape"]), r.get("cublas_tflops", float("nan")),
                            r.get("cublas_fast_tflops", float("nan")),
                            r.get("cublas_rel_err", float("nan")),
                            r.get("cublas_fast_rel_err", float("nan")),
                            r.get("alt_tx_rel_err", float("nan"))))
            md.write("\n")
        if TX_MM is None:
            md.write("No alternating table: tx_torch did not load (%s).\n" % TX_MM_WHY)
        else:
            md.write("Same process, alternating rounds (tx::ops::matmul through "
                     "torch.ops.tx.matmul; median of 7 rounds of 20 runs):\n\n"
                     "| (M, N, K) | dtype | tx::ops::matmul TFLOP/s | cuBLAS TFLOP/s "
                     "| Triton TFLOP/s | tx / cuBLAS | tx / Triton | tx rel. error |\n"
                     "|---|---|---|---|---|---|---|---|\n")
            for r in rows:
                tx_t = r["alt_tx_tflops"]
                cb = r.get("alt_cublas_tflops", float("nan"))
                tr = r.get("alt_triton_tflops", float("nan"))
                md.write("| %s | %s | %.1f | %.1f | %.1f | %.3f | %.3f | %.1e |\n"
                         % (tuple(r["shape"]), r["dtype"], tx_t, cb, tr, tx_t / cb, tx_t / tr,
                            r["alt_tx_rel_err"]))
    print(open(prefix + ".md").read())


if __name__ == "__main__":
    main()
