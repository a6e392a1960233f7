"""scripts/torch_overhead.py without a GPU: its ``function`` variant, PyTorch's convolution
behind a Python autograd node, gives PyTorch's own gradients (its timing needs a GPU:
tests/gpu/test_bench_torch_gpu.py)."""
import sys

import pytest

from repo_paths import REPO

torch = pytest.importorskip("torch", reason="scripts/torch_overhead.py needs PyTorch")


def test_the_python_node_gives_pytorchs_gradients():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import torch_overhead
    finally:
        sys.path.pop(0)
    torch.manual_seed(0)
    x = torch.randn(2, 6, 9, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 2, dtype=torch.float64, requires_grad=True)
    geo = ([2, 1], [1, 0], [1, 2], 2)
    y = torch_overhead._PythonNode.apply(x, w, *geo)
    ref = torch.nn.functional.conv2d(x, w, None, *geo)
    g = torch.randn_like(ref)
    got = torch.autograd.grad(y, (x, w), g)
    want = torch.autograd.grad(ref, (x, w), g)
    assert torch.equal(y, ref) and all(torch.allclose(a, b) for a, b in zip(got, want))
    # only the gradient asked for
    (gw,) = torch.autograd.grad(torch_overhead._PythonNode.apply(x.detach(), w, *geo), (w,), g)
    assert torch.allclose(gw, want[1])
