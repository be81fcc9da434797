"""torch.ops.tx's multi-GPU ops on a torch.distributed NCCL group: all_reduce_,
all_gather, reduce_scatter, all_gather_matmul, matmul_reduce_scatter, each
rank a process (spawned here as torchrun would start them), against float64
references of the gathered inputs. Needs 2 GPUs (skipped, and said so,
elsewhere); the errors of a call without a communicator run everywhere."""
import os
import tempfile

import pytest
import torch

import tx_torch

tx = torch.ops.tx


def test_dist_ops_need_a_communicator():
    x = torch.ones(8)
    with pytest.raises(RuntimeError, match="no NCCL communicator"):
        tx.all_reduce_(x, 0, 1)
    with pytest.raises(RuntimeError, match="no NCCL communicator"):
        tx.all_gather(x, 0, 1)


def test_dist_ops_meta_shapes():
    x = torch.empty(6, 4, device="meta")
    assert tx.all_gather(x, 1, 3).shape == (18, 4)
    assert tx.reduce_scatter(x, 1, 3).shape == (2, 4)
    a, b = torch.empty(6, 8, device="meta"), torch.empty(8, 5, device="meta")
    assert tx.all_gather_matmul(a, b, 1, 2).shape == (12, 5)
    assert tx.matmul_reduce_scatter(a, b, 1, 2).shape == (3, 5)


def _rank(rank, world, init_file, results):
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, device_id=torch.device("cuda", rank))
    torch.manual_seed(1234 + rank)
    errors = []
    try:
        comm, n = tx_torch.nccl_comm()
        assert n == world

        def gathered(t):
            parts = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(parts, t)
            return parts

        # all-reduce (sum): small and large, bf16 and f32
        for numel, dt in [(4096, torch.float32), (3 << 20, torch.bfloat16)]:
            x = (torch.rand(numel, device="cuda") * 2 - 1).to(dt)
            want = sum(p.double() for p in gathered(x))
            tx.all_reduce_(x, comm, n)
            err = (x.double() - want).abs().max().item()
            tol = 1e-5 if dt == torch.float32 else world * 2**-7
            if not err <= tol:
                errors.append(f"all_reduce {numel} {dt}: {err}")
        # all-gather and reduce-scatter
        x = torch.rand(1000, 16, device="cuda")
        if not torch.equal(tx.all_gather(x, comm, n), torch.cat(gathered(x))):
            errors.append("all_gather differs from torch's")
        y = torch.rand(world * 512, 8, device="cuda")
        want = sum(p.double() for p in gathered(y))[rank * 512:(rank + 1) * 512]
        err = (tx.reduce_scatter(y, comm, n).double() - want).abs().max().item()
        if not err <= 1e-5:
            errors.append(f"reduce_scatter: {err}")
        # the fused GEMMs (bf16): all-gather of A's rows, then A W; A W summed and scattered
        m, K, N = 256, 512, 384
        a = (torch.rand(m, K, device="cuda") - 0.5).bfloat16()
        w = (torch.rand(K, N, device="cuda") - 0.5).bfloat16()
        want = torch.cat(gathered(a)).double() @ w.double()
        got = tx.all_gather_matmul(a, w, comm, n)
        err = ((got.double() - want).abs() / (1 + want.abs())).max().item()
        if not err <= 2**-7:
            errors.append(f"all_gather_matmul: {err}")
        a2 = (torch.rand(world * m, K, device="cuda") - 0.5).bfloat16()
        want = sum(p.double() for p in gathered(a2 @ w))[rank * m:(rank + 1) * m]
        got = tx.matmul_reduce_scatter(a2, w, comm, n)
        err = ((got.double() - want).abs() / (1 + want.abs())).max().item()
        if not err <= world * 2**-7:
            errors.append(f"matmul_reduce_scatter: {err}")
    except Exception as e:  # noqa: BLE001 -- reported to the parent
        errors.append(f"{type(e).__name__}: {e}")
    results[rank] = errors
    dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs (nvidia-*-x2)")
def test_dist_ops_on_two_gpus():
    import torch.multiprocessing as mp

    world = 2
    with tempfile.TemporaryDirectory() as d:
        manager = mp.Manager()
        results = manager.dict()
        mp.spawn(_rank, args=(world, os.path.join(d, "init"), results), nprocs=world, join=True)
        for r in range(world):
            assert results[r] == [], f"rank {r}: {results[r]}"
