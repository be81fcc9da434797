"""tx's op library as PyTorch operators: torch.ops.tx.*

    import tx_torch                      # finds and loads libtx_torch.so
    y = torch.ops.tx.gelu(x)             # CPU (tx's host JIT) or CUDA tensors
    torch.ops.tx.add.out(a, b, out=c)    # out= and in-place (add_) forms

Loading the library is all there is to it: ``torch.ops.load_library(path)``
does the same, except for one thing this module adds: the autograd formula
of ``torch.ops.tx.attention`` (its backward is ``torch.ops.tx.attention_backward``),
so a model trains through tx attention, eagerly or under torch.compile. This module only finds the library: $TX_TORCH_LIBRARY, else
next to this package (an installed tx), else the build folders of a
checkout (build/, build-*/).
"""
import glob
import os

import torch

__all__ = ["library_path", "load", "nccl_comm"]

_loaded = None


def library_path():
    """The path of libtx_torch.so that `load` uses (FileNotFoundError if none)."""
    env = os.environ.get("TX_TORCH_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise FileNotFoundError(f"TX_TORCH_LIBRARY={env} does not exist")
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "libtx_torch.so")]
    root = os.path.abspath(os.path.join(here, "..", "..", ".."))
    for build in ["build"] + sorted(os.path.basename(p) for p in glob.glob(os.path.join(root, "build-*"))):
        candidates.append(os.path.join(root, build, "tx_torch", "libtx_torch.so"))
    for c in candidates:
        if os.path.exists(c):
            return c
    raise FileNotFoundError(
        "libtx_torch.so not found (looked at: " + ", ".join(candidates) +
        "); build it (make test builds it where torch is installed) or set TX_TORCH_LIBRARY")


def load(path=None):
    """Loads libtx_torch.so once; returns its path."""
    global _loaded
    if _loaded is None:
        p = path or library_path()
        torch.ops.load_library(p)
        _loaded = p
    return _loaded


def nccl_comm(group=None):
    """(communicator, world_size) of a torch.distributed NCCL group (default:
    the world), for torch.ops.tx's multi-GPU ops:

        comm, n = tx_torch.nccl_comm(group)
        torch.ops.tx.all_reduce_(x, comm, n)
        y = torch.ops.tx.all_gather_matmul(a, w, comm, n)

    The communicator is the address of the group's ncclComm_t (tx adopts it,
    never destroys it); the group must be an NCCL group whose communicator
    exists (after its first collective, or with device_id given to
    init_process_group)."""
    import torch.distributed as dist

    pg = group if group is not None else dist.group.WORLD
    backend = pg._get_backend(torch.device("cuda"))
    comm = backend._comm_ptr()
    if not comm:
        raise RuntimeError("tx_torch.nccl_comm: the group's NCCL communicator does not exist yet "
                           "(run one collective on it first, or pass device_id to "
                           "init_process_group)")
    return comm, dist.get_world_size(pg)


def _attention_setup_context(ctx, inputs, output):
    q, k, v, is_causal, scale, bottom_right = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.options = (is_causal, scale, bottom_right)
    ctx.mark_non_differentiable(lse)  # the log-sum-exp is for the backward, not a loss


def _attention_backward(ctx, grad_out, _grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.tx.attention_backward(grad_out, q, k, v, out, lse, *ctx.options)
    return dq, dk, dv, None, None, None


def _register_autograd():
    torch.library.register_autograd("tx::attention", _attention_backward,
                                    setup_context=_attention_setup_context)


load()
_register_autograd()
