"""The native eager path's autograd wiring without a GPU (Note [Native calls] in
ucudnn/torch/eager.py). ``ucudnn.torch._native`` takes only CUDA tensors itself and hands
every other call to the Python implementations it was given, so here, given PyTorch's own
convolution and gradients as those, CPU tensors run through its C++ autograd Functions: the
gradients, which inputs get one, the transposed convolution, and a recorded double backward
through the operators. The GPU tier compares it with the other paths bit for bit
(tests/gpu/test_torch_native_gpu.py). Where the core was built without it this file skips,
unless $UCUDNN_TORCH_NATIVE=1 says that it must be there (CI)."""
import os

import pytest

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch "
                            "(pip install 'ucudnn[torch]')")

from ucudnn.torch import eager, ops, runtime  # noqa: E402

F = torch.nn.functional
GEOMETRY = ([2, 1], [1, 0], [1, 2], 2)          # stride, padding, dilation, groups
CONFIG = 0


def _ext():
    ok, why = eager.native_status()
    if not ok:
        if os.environ.get(eager.NATIVE_ENV) == "1":
            pytest.fail(f"${eager.NATIVE_ENV}=1 but the native path does not load: {why}")
        pytest.skip(why)
    return eager._ext


@pytest.fixture
def native(monkeypatch):
    """The extension, given PyTorch's convolution and gradients as the implementations (each
    call recorded by name) and as the operators; set back afterwards."""
    ext = _ext()
    calls = []

    def recorded(name, f):
        def call(*args):
            calls.append(name)
            return f(*args)
        return call

    def fwd(x, w, stride, padding, dilation, groups, config):
        return F.conv2d(x, w, None, stride, padding, dilation, groups)

    def bwd_data(w, dy, x_size, stride, padding, dilation, groups, config):
        return torch.nn.grad.conv2d_input(list(x_size), w, dy, stride, padding, dilation,
                                          groups)

    def bwd_filter(x, dy, w_size, stride, padding, dilation, groups, config):
        return torch.nn.grad.conv2d_weight(x, list(w_size), dy, stride, padding, dilation,
                                           groups)
    refs = {"fwd": fwd, "bwd_data": bwd_data, "bwd_filter": bwd_filter}
    monkeypatch.setattr(eager, "active", lambda: ops.Ops("test", *(
        recorded("op " + n, f) for n, f in refs.items())))
    ext.init(runtime.native_call, *(recorded(n, f) for n, f in refs.items()),
             eager.recorded_backward)
    try:
        yield ext, calls
    finally:
        ext.init(runtime.native_call, eager._fwd, eager._bwd_data, eager._bwd_filter,
                 eager.recorded_backward)


def _leaves(*sizes):
    torch.manual_seed(0)
    return [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in sizes]


def test_gradients_are_pytorchs(native):
    ext, calls = native
    x, w = _leaves((3, 4, 9, 10), (6, 2, 3, 2))
    y = ext.conv_fwd(x, w, *GEOMETRY, CONFIG)
    assert "ConvFwd" in y.grad_fn.name(), y.grad_fn.name()
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, w), g)
    yr = F.conv2d(x, w, None, *GEOMETRY)
    want = torch.autograd.grad(yr, (x, w), g)
    assert torch.equal(y, yr) and all(torch.allclose(a, b) for a, b in zip(got, want))
    assert calls == ["fwd", "bwd_data", "bwd_filter"]
    assert ext.known_calls() == 0                   # no call of the core was made


def test_only_the_gradients_asked_for(native):
    ext, calls = native
    x, w = _leaves((2, 4, 8, 8), (6, 2, 3, 3))
    y = ext.conv_fwd(x.detach(), w, *GEOMETRY, CONFIG)
    y.sum().backward()
    assert calls == ["fwd", "bwd_filter"] and w.grad is not None
    with torch.no_grad():
        assert ext.conv_fwd(x, w, *GEOMETRY, CONFIG).grad_fn is None


def test_a_transposed_convolution_and_its_gradients(native):
    ext, calls = native
    w, dy = _leaves((6, 2, 3, 2), (3, 6, 5, 8))
    x_size = [3, 4, 9, 10]
    y = ext.conv_transpose(w, dy, x_size, *GEOMETRY, CONFIG)
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, (w, dy), g)
    yr = torch.nn.grad.conv2d_input(x_size, w, dy, *GEOMETRY)
    want = torch.autograd.grad(yr, (w, dy), g)
    assert torch.allclose(y, yr) and all(torch.allclose(a, b) for a, b in zip(got, want))
    assert calls == ["bwd_data", "bwd_filter", "fwd"]


def test_a_double_backward_goes_through_the_operators(native):
    ext, calls = native
    x, w = _leaves((2, 4, 7, 8), (6, 2, 3, 3))
    y = ext.conv_fwd(x, w, *GEOMETRY, CONFIG)
    gx, gw = torch.autograd.grad((y * y).sum(), (x, w), create_graph=True)
    assert calls[1:] == ["op bwd_data", "op bwd_filter"]
    got = torch.autograd.grad((gx * gx).sum() + (gw * gw).sum(), (x, w))
    yr = F.conv2d(x, w, None, *GEOMETRY)
    rx, rw = torch.autograd.grad((yr * yr).sum(), (x, w), create_graph=True)
    want = torch.autograd.grad((rx * rx).sum() + (rw * rw).sum(), (x, w))
    assert all(torch.allclose(a, b) for a, b in zip(got, want))
