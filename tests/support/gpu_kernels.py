"""Running one compiled-core kernel on PyTorch's buffers, for the GPU tests of the core
(tests/gpu/test_core_gpu.py, test_engines_gpu.py, test_core3d_gpu.py, test_slabs_gpu.py), and
the float64 results they are compared with. Import it only after the
test module has skipped where torch or a CUDA device is missing."""
import torch

from ucudnn import _core


def handle():
    """A core handle on PyTorch's current stream."""
    return _core.Handle(torch.cuda.current_stream().cuda_stream)


def run_kernel(kern, a, b, out, alpha=1.0, beta=0.0):
    """``kern.run`` on the tensors' data with a workspace of its plan's size, then wait."""
    ws = torch.empty(max(1, kern.workspace_size), dtype=torch.uint8, device="cuda")
    kern.run(handle(), a.data_ptr(), b.data_ptr(), out.data_ptr(), ws.data_ptr(),
             kern.workspace_size, alpha, beta)
    torch.cuda.synchronize()


def conv3d_reference(op, x, w, dy, **conv):
    """``op``'s result of ``F.conv3d(x, w, **conv)`` in float64: y for ``fwd``, and with
    ``dy`` as y's gradient, dx for ``bwd_data`` and dw for ``bwd_filter`` (by autograd)."""
    F = torch.nn.functional
    x, w = x.double(), w.double()
    if op == "fwd":
        return F.conv3d(x, w, **conv)
    with torch.enable_grad():
        wrt = (x if op == "bwd_data" else w).requires_grad_(True)
        (got,) = torch.autograd.grad(F.conv3d(x, w, **conv), wrt, dy.double())
    return got
