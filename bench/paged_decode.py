"""PyTorch's decode paths on bench_paged_decode's shapes, and the report
against tx.

    python3 bench/paged_decode.py TX.json OUT_PREFIX

For each row of TX.json (batch, context; 32 query heads over 8 K/V heads,
head_dim 128, pages of 16): SDPA over a contiguous (batch, kv_heads, ctx,
128) cache with enable_gqa=True (what a framework with a contiguous cache
runs), and a paged cache gathered through the block table into that layout,
then SDPA (what a framework without a paged kernel runs). bf16 only: the fp8
rows have no PyTorch path to compare. KV bytes per second against the copy
bandwidth bench_paged_decode measured; timing as bench_paged_decode: CUDA
events around 10 back-to-back calls, median of 30. Writes OUT_PREFIX.json
and OUT_PREFIX.md.
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F

H, HK, D, PAGE = 32, 8, 128, 16


def back_to_back_ms(f, calls=10, warm=5, reps=30):
    for _ in range(warm):
        f()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(reps):
        start.record()
        for _ in range(calls):
            f()
        stop.record()
        stop.synchronize()
        ms.append(start.elapsed_time(stop) / calls)
    return statistics.median(ms)


def main():
    tx_rows = json.load(open(sys.argv[1]))
    prefix = sys.argv[2]
    out = []
    for r in tx_rows:
        b, ctx = r["batch"], r["ctx"]
        row = dict(r)
        if r["cache"] == "bfloat16":
            q = torch.randn(b, H, 1, D, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, HK, ctx, D, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            row["sdpa_ms"] = back_to_back_ms(
                lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
            pages = b * ((ctx + PAGE - 1) // PAGE)
            kc = torch.randn(pages, PAGE, HK, D, device="cuda", dtype=torch.bfloat16)
            vc = torch.randn_like(kc)
            table = torch.randperm(pages, device="cuda", dtype=torch.int64).view(b, -1)

            def gathered():
                kk = kc[table].view(b, -1, HK, D)[:, :ctx].transpose(1, 2)
                vv = vc[table].view(b, -1, HK, D)[:, :ctx].transpose(1, 2)
                return F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True)

            row["gathered_ms"] = back_to_back_ms(gathered)
        out.append(row)
    json.dump(out, open(prefix + ".json", "w"), indent=1)
    gpu = torch.cuda.get_device_name()
    lines = [f"Decode over a paged KV cache, {gpu}, torch {torch.__version__}: 32 query heads, "
             "8 K/V heads, head_dim 128, pages of 16. KV GB/s (fraction of copy).", "",
             "| batch | context | cache | tx | tx, other residency | SDPA, contiguous cache | "
             "gathered pages + SDPA | copy GB/s | 32 steps eager / graph (ms) | tx plan |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in out:
        by = r["kv_bytes"]
        copy = 2 * by / r["copy_ms"] / 1e6  # a copy of the KV bytes: read and written

        def cell(ms):
            return "—" if ms is None else f"{by / ms / 1e6:.0f} ({by / ms / 1e6 / copy:.2f})"

        other = "one CTA/SM" if "two CTAs per SM" in r["plan"] else "two CTAs/SM"
        lines.append(f"| {r['batch']} | {r['ctx']} | {r['cache']} | {cell(r['tx_ms'])} | "
                     f"{cell(r.get('alt_ms'))} ({other}) | {cell(r.get('sdpa_ms'))} | {cell(r.get('gathered_ms'))} | {copy:.0f} | "
                     f"{r['eager32_ms']:.3f} / {r['graph32_ms']:.3f} | {r['plan']} |")
    open(prefix + ".md", "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
