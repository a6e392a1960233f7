"""Running one compiled-core kernel on PyTorch's buffers, for the GPU tests of the core
(tests/gpu/test_core_gpu.py, test_engines_gpu.py, test_core3d_gpu.py). Import it only after the
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
