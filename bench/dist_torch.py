"""bench/dist_torch.py: PyTorch's all-reduces at bench_dist's sizes, for the
same table (docs/dist.md): NCCL through torch.distributed, and torch
symmetric memory's one-shot and two-shot kernels (multicast off:
TORCH_SYMM_MEM_DISABLE_MULTICAST=1). bf16 sum, per call, back to back,
the slowest rank's time.

    torchrun --nproc-per-node N bench/dist_torch.py
"""
import json
import os

import torch
import torch.distributed as dist

os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
SIZES = [8 << 10, 32 << 10, 128 << 10, 512 << 10, 2 << 20, 16 << 20, 64 << 20, 256 << 20]


def time_us(fn, iters):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    e.synchronize()
    t = torch.tensor([s.elapsed_time(e) * 1000.0 / iters], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main():
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    world = dist.get_world_size()
    group_name = dist.group.WORLD.group_name
    try:
        import torch.distributed._symmetric_memory as symm_mem

        buf = symm_mem.empty(SIZES[-1] // 2, dtype=torch.bfloat16, device="cuda")
        symm_mem.rendezvous(buf, group_name)
    except Exception as e:  # noqa: BLE001 -- reported, the NCCL rows still run
        symm_mem, buf = None, None
        if rank == 0:
            print("torch symmetric memory unavailable:", e)
    for size in SIZES:
        n = size // 2
        iters = 10 if size >= (64 << 20) else 50
        x = torch.ones(n, dtype=torch.bfloat16, device="cuda")
        row = {"what": "all_reduce bf16 sum", "ranks": world, "bytes": size}
        row["torch_nccl_us"] = time_us(lambda: dist.all_reduce(x), iters)
        if buf is not None:
            view = buf[:n]
            view.fill_(1)
            for name, op in (("one_shot", "one_shot_all_reduce"), ("two_shot", "two_shot_all_reduce_")):
                try:
                    f = getattr(torch.ops.symm_mem, op)
                    row[f"symm_{name}_us"] = time_us(lambda: f(view, "sum", group_name), iters)
                except Exception as e:  # noqa: BLE001
                    row[f"symm_{name}_us"] = None
                    row[f"symm_{name}_error"] = str(e).splitlines()[0][:120]
        if rank == 0:
            print(json.dumps(row), flush=True)
    # all_gather(A) @ B at bench_dist's shapes: NCCL all-gather then torch.mm
    # (cuBLAS), the GEMM alone, and symmetric memory's fused op (torch's
    # copy-engine or SM producer, whichever this torch picks).
    for M, K, N in ((512, 4096, 4096), (2048, 8192, 28672), (8192, 8192, 28672)):
        m, n = M // world, N // world
        a = torch.rand(m, K, dtype=torch.bfloat16, device="cuda") * 2 - 1
        b = torch.rand(K, n, dtype=torch.bfloat16, device="cuda") * 2 - 1
        full = torch.empty(M, K, dtype=torch.bfloat16, device="cuda")
        row = {"what": "all_gather_matmul bf16", "ranks": world, "M": M, "K": K, "N_rank": n}

        def seq():
            dist.all_gather_into_tensor(full, a)
            return torch.mm(full, b)

        row["torch_gemm_us"] = time_us(lambda: torch.mm(full, b), 10)
        row["torch_seq_us"] = time_us(seq, 10)
        try:
            f = torch.ops.symm_mem.fused_all_gather_matmul
            row["symm_fused_us"] = time_us(lambda: f(a, [b], 0, group_name), 10)
        except Exception as e:  # noqa: BLE001
            row["symm_fused_us"] = None
            row["symm_fused_error"] = str(e).splitlines()[0][:160]
        if rank == 0:
            print(json.dumps(row), flush=True)
    # matmul then reduce-scatter: (M, K split over the ranks, N).
    for M, K, N in ((512, 4096, 4096), (2048, 28672, 8192), (8192, 28672, 8192)):
        k = K // world
        a = torch.rand(M, k, dtype=torch.bfloat16, device="cuda") * 2 - 1
        b = torch.rand(k, N, dtype=torch.bfloat16, device="cuda") * 2 - 1
        out = torch.empty(M // world, N, dtype=torch.bfloat16, device="cuda")
        row = {"what": "matmul_reduce_scatter bf16", "ranks": world, "M": M, "K_rank": k, "N": N}

        def seq():
            dist.reduce_scatter_tensor(out, torch.mm(a, b))

        row["torch_gemm_us"] = time_us(lambda: torch.mm(a, b), 10)
        row["torch_seq_us"] = time_us(seq, 10)
        try:
            f = torch.ops.symm_mem.fused_matmul_reduce_scatter
            row["symm_fused_us"] = time_us(lambda: f(a, b, "sum", 0, group_name), 10)
        except Exception as e:  # noqa: BLE001
            row["symm_fused_us"] = None
            row["symm_fused_error"] = str(e).splitlines()[0][:160]
        if rank == 0:
            print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
