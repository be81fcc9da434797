"""PyTorch eager and torch.compile on bench_rope_dropout's cases, and the report.

    python3 bench/rope_dropout.py CASES.json TX.json OUT_PREFIX

rope is vLLM's RotaryEmbedding.forward_native (neox, full rotary, the cache
in the query's dtype, as vLLM keeps it), written here so that it runs
without vLLM; dropout is torch.nn.functional.dropout(x, 0.1, training=True).
Writes OUT_PREFIX.json and OUT_PREFIX.md (GB/s = bytes / time, bytes as
bench_rope_dropout counts them; each case against the copy of the same bytes).
"""
import json
import sys

import torch
import torch.nn.functional as F

from torch_timing import eager_and_compile, write_report  # bench/ is on sys.path

DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def rope_native(positions, query, key, cos_sin_cache, head_size):
    # vLLM's forward_native and _apply_rotary_emb_torch (neox), full rotary.
    num_tokens = positions.shape[0]
    cos_sin = cos_sin_cache.index_select(0, positions)
    cos, sin = cos_sin.chunk(2, dim=-1)

    def rot(x):
        shape = x.shape
        x = x.view(num_tokens, -1, head_size)
        c = cos.unsqueeze(-2).to(x.dtype)
        s = sin.unsqueeze(-2).to(x.dtype)
        x1, x2 = torch.chunk(x, 2, dim=-1)
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).reshape(shape)

    return rot(query), rot(key)


def main():
    cases = json.load(open(sys.argv[1]))
    tx = {(r["label"], r["dtype"]): r for r in json.load(open(sys.argv[2]))["results"]}
    prefix = sys.argv[3]
    torch.manual_seed(0)
    rows = []
    for c in cases:
        dt = DT[c["dtype"]]
        if c["op"] == "rope":
            T, H, Hkv, hd = c["tokens"], c["heads"], c["kv_heads"], c["head_size"]
            inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float) / hd))
            t = torch.arange(8192, dtype=torch.float)
            freqs = torch.einsum("i,j->ij", t, inv)
            cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).to("cuda", dt)
            pos = (torch.arange(T, device="cuda") * 7919) % 8192
            q = torch.randn(T, H * hd, device="cuda", dtype=dt)
            k = torch.randn(T, Hkv * hd, device="cuda", dtype=dt)
            f = lambda p, q, k, c: rope_native(p, q, k, c, hd)  # noqa: E731
            args = (pos, q, k, cache)
        else:
            x = torch.randn(c["rows"], c["cols"], device="cuda", dtype=dt)
            f = lambda x: F.dropout(x, 0.1, training=True)  # noqa: E731
            args = (x,)
        r = {"label": c["label"], "dtype": c["dtype"], "bytes": c["bytes"]}
        eager_and_compile(f, args, r)
        m = tx.get((c["label"], c["dtype"]), {})
        r.update({k: m[k] for k in ("tx_ms", "copy_ms") if k in m})
        print(json.dumps(r), flush=True)
        rows.append(r)
        del args
        torch.cuda.empty_cache()
    write_report(prefix, rows)


if __name__ == "__main__":
    main()
