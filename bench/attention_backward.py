"""The backward pass of cuDNN SDPA and of torch's flash backend on
bench_attention_backward's shapes, and the report against tx.

    python3 bench/attention_backward.py TX.json OUT_PREFIX

(batch, seq, heads, head_dim) storage seen as (batch, heads, seq, head_dim),
bf16, random inputs in [-1, 1), as bench/attention.py. The backward alone is
timed: torch.autograd.grad of the forward's output (kept, retain_graph) with
a random dout, CUDA events, 5 warm-ups, median of 30. TFLOP/s = 2.5 x 4 B H
S^2 D / time (half when causal). GQA rows pass enable_gqa=True where the
backend takes it, else K and V repeated beforehand (said in the row).
Writes OUT_PREFIX.json and OUT_PREFIX.md.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_timing import time_ms  # bench/ is on sys.path


def main():
    tx_rows = json.load(open(sys.argv[1]))
    prefix = sys.argv[2]
    torch.manual_seed(0)
    rows = []
    for r in tx_rows:
        bsz, heads, kvh, seq, d, causal = (r["batch"], r["heads"], r["kv_heads"], r["seq"],
                                           r["head_dim"], r["causal"])
        gqa = kvh != heads
        mk = lambda h: (torch.rand(bsz, seq, h, d, device="cuda", dtype=torch.bfloat16) * 2 - 1)  # noqa: E731
        q, k, v, g = mk(heads), mk(kvh), mk(kvh), mk(heads)
        flops = 2.5 * 4.0 * bsz * heads * seq * seq * d * (0.5 if causal else 1.0)
        out = dict(r)
        for label, backend in [("cudnn", SDPBackend.CUDNN_ATTENTION),
                               ("flash", SDPBackend.FLASH_ATTENTION)]:
            try:
                kk, vv, note, use_gqa = k, v, "", gqa
                if gqa:
                    try:
                        with sdpa_kernel(backend):
                            F.scaled_dot_product_attention(
                                q[:1, :64].transpose(1, 2), k[:1, :64].transpose(1, 2),
                                v[:1, :64].transpose(1, 2), enable_gqa=True)
                    except Exception:  # noqa: BLE001 -- repeat K/V instead
                        kk = k.repeat_interleave(heads // kvh, dim=2)
                        vv = v.repeat_interleave(heads // kvh, dim=2)
                        note, use_gqa = " (K/V repeated)", False
                qq, kk, vv = (x.detach().requires_grad_() for x in (q, kk, vv))
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(
                        qq.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2),
                        is_causal=causal, enable_gqa=use_gqa)
                gt = g.transpose(1, 2)

                def bwd():
                    torch.autograd.grad(o, (qq, kk, vv), gt, retain_graph=True)

                ms = time_ms(bwd, ())
                out[label + "_ms"] = ms
                out[label + "_tflops"] = flops / (ms * 1e-3) / 1e12
                out[label + "_note"] = note
                del o
            except Exception as e:  # noqa: BLE001 -- report, keep going
                out[label + "_error"] = str(e)[:160]
        rows.append(out)
        print(json.dumps(out), flush=True)
        del q, k, v, g
        torch.cuda.empty_cache()
    json.dump(rows, open(prefix + ".json", "w"), indent=1)
    dev = torch.cuda.get_device_name()
    lines = [f"Attention backward, bf16, TFLOP/s on {dev} (torch {torch.__version__}, "
             f"cuDNN {torch.backends.cudnn.version()})", "",
             "| case | B | H/Hkv | S | D | tx (default: its dQ form) | tx deterministic | "
             "tx, dQ by TMA reductions | cuDNN | flash (FA2) | tx/cuDNN | tx/flash |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(x):
        return "-" if x is None else f"{x:.0f}"

    for r in rows:
        t, c, fl = r.get("tx_tflops"), r.get("cudnn_tflops"), r.get("flash_tflops")
        lines.append(
            f"| {r['name']} | {r['batch']} | {r['heads']}/{r['kv_heads']} | {r['seq']} | "
            f"{r['head_dim']} | {f(t)} ({r.get('tx_dq_sum', '?')}) | "
            f"{f(r.get('tx_det_tflops'))} | {f(r.get('tx_atomics_tflops'))} | "
            f"{f(c)}{r.get('cudnn_note', '')} | "
            f"{f(fl)}{r.get('flash_note', '')} | "
            f"{'-' if not (t and c) else f'{t / c:.2f}'} | "
            f"{'-' if not (t and fl) else f'{t / fl:.2f}'} |")
    open(prefix + ".md", "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
