"""tx's PyTorch ops inside torch.cuda.graph: captured with PyTorch's own
recipe (warm-up on a side stream, then capture), replayed 100 times on fresh
inputs copied into the static input, each replay checked against PyTorch.
tx ops launch on PyTorch's current stream -- the capturing one -- and never
synchronize, allocate outside PyTorch's allocator or read back, so they are
recorded like PyTorch's own kernels.
"""
import pytest
import torch
import torch.nn.functional as F

import tx_torch  # noqa: F401  (loads libtx_torch.so)

tx = torch.ops.tx

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="torch.cuda.graph needs a GPU")


def test_tx_ops_replayed_in_a_torch_cuda_graph():
    torch.manual_seed(39)
    n = 4096
    w = torch.randn(n, device="cuda")

    def block(x):
        return tx.mul(tx.add(tx.gelu(x), w), x)

    def reference(x):
        x = x.double()
        return (F.gelu(x) + w.double()) * x

    static_x = torch.randn(n, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # first calls (kernel builds) outside the capture
        for _ in range(3):
            block(static_x)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = block(static_x)

    for step in range(100):
        x = torch.randn(n, device="cuda")
        static_x.copy_(x)
        graph.replay()
        torch.testing.assert_close(static_out.double(), reference(x), rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"replay {step}: {m}")
