"""PyTorch eager and torch.compile on bench_rope_dropout's cases, and the report.

    python3 bench/rope_dropout.py CASES.json TX.json OUT_PREFIX

rope is vLLM's RotaryEmbedding.forward_native (neox, full rotary, the cache
in the query's dtype, as vLLM keeps it), written here so that it runs
without vLLM; dropout is torch.nn.functional.dropout(x, 0.1, training=True).
Writes OUT_PREFIX.json and OUT_PREFIX.md (GB/s = bytes / time, bytes as
bench_rope_dropout counts them; each case against the copy of the same bytes).
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F

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


def time_ms(f, args, warm=5, reps=30):
    for _ in range(warm):
        f(*args)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(reps):
        start.record()
        f(*args)
        stop.record()
        stop.synchronize()
        ms.append(start.elapsed_time(stop))
    return statistics.median(ms)


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
        try:
            r["eager_ms"] = time_ms(f, args)
        except Exception as e:  # noqa: BLE001 -- report, keep going
            r["eager_error"] = str(e)[:200]
        try:
            g = torch.compile(f, dynamic=False)
            g(*args)
            r["compile_ms"] = time_ms(g, args)
        except Exception as e:  # noqa: BLE001
            r["compile_error"] = str(e)[:200]
        m = tx.get((c["label"], c["dtype"]), {})
        r.update({k: m[k] for k in ("tx_ms", "copy_ms") if k in m})
        print(json.dumps(r), flush=True)
        rows.append(r)
        del args
        torch.cuda.empty_cache()
    json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
               "results": rows}, open(prefix + ".json", "w"), indent=1)

    def gbs(r, key):
        return r["bytes"] / r[key] / 1e6 if key in r else float("nan")

    with open(prefix + ".md", "w") as md:
        md.write("GPU: %s, torch %s\n\n" % (torch.cuda.get_device_name(), torch.__version__))
        md.write("| case | dtype | copy GB/s | tx GB/s | tx / copy | eager GB/s | compile GB/s "
                 "| tx / eager | tx / compile |\n|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            t, cp, e, cc = gbs(r, "tx_ms"), gbs(r, "copy_ms"), gbs(r, "eager_ms"), gbs(r, "compile_ms")
            md.write("| %s | %s | %.0f | %.0f | %.3f | %.0f | %.0f | %.2f | %.2f |\n"
                     % (r["label"], r["dtype"], cp, t, t / cp, e, cc, t / e, t / cc))
    print(open(prefix + ".md").read())


if __name__ == "__main__":
    main()
