"""One grouped GEMM for a profiler (scripts/device_all.sh grouped-ncu): the
DeepSeek-like down projection (64 experts, K 2048, N 7168, balanced routing)
at TOKENS x top-8 rows, tx::ops::grouped_matmul called three times (the
first compiles).

    python3 bench/grouped_profile.py TOKENS
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tx_torch",
                                "python"))
import tx_torch  # noqa: F401,E402 -- registers torch.ops.tx

tokens = int(sys.argv[1])
E, K, N, topk = 64, 2048, 7168, 8
T = tokens * topk
offs = torch.full((E,), T // E, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
a = (torch.randn(T, K, device="cuda") * 0.5).to(torch.bfloat16)
b = (torch.randn(E, N, K, device="cuda") * 0.05).to(torch.bfloat16).transpose(1, 2)
for _ in range(3):
    torch.ops.tx.grouped_matmul(a, b, offs)
torch.cuda.synchronize()
print("ran", T, "rows")
