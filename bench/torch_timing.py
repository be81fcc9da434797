"""What the PyTorch sides of the benchmarks share: the timing of one call,
as the C++ side times tx (bench_util.hpp): CUDA events around each call,
waiting for each, `warm` calls first, the median of `reps`; eager and
torch.compile on one case; the report against tx and copy."""
import json
import statistics

import torch


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


def eager_and_compile(f, args, r):
    """Times f eagerly and under torch.compile into r (an error is reported, not raised)."""
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


def write_report(prefix, rows):
    """PREFIX.json (the rows) and PREFIX.md (GB/s = bytes / time against the copy)."""
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
