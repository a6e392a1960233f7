"""Eager calls of converted modules without a GPU (Note [Eager calls] in
ucudnn/torch/eager.py): which calls take the eager path, and its autograd wiring. The core's
implementations need a GPU, so here CPU tensors take the eager path and PyTorch's own
convolution and its gradients stand in for the three implementations; the GPU tier compares
the eager path with the operators bit for bit (tests/gpu/test_torch_gpu.py)."""
import warnings

import pytest

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch "
                            "(pip install 'ucudnn[torch]')")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from ucudnn.experiments import torch_frontend  # noqa: E402
from ucudnn.torch import eager, ops  # noqa: E402

F = torch.nn.functional
GEOMETRY = ([2, 1], [1, 0], [1, 2], 2)          # stride, padding, dilation, groups
CONFIG = 0


def ref_fwd(x, w, stride, padding, dilation, groups, config):
    return F.conv2d(x, w, None, stride, padding, dilation, groups)


def ref_bwd_data(w, dy, x_size, stride, padding, dilation, groups, config):
    return torch.nn.grad.conv2d_input(list(x_size), w, dy, stride, padding, dilation, groups)


def ref_bwd_filter(x, dy, w_size, stride, padding, dilation, groups, config):
    return torch.nn.grad.conv2d_weight(x, list(w_size), dy, stride, padding, dilation, groups)


@pytest.fixture
def on_cpu(monkeypatch):
    """CPU tensors take the eager path; the implementations and the operators are PyTorch's
    convolution and gradients, each call recorded as (where, name)."""
    calls = []

    def recorded(where, name, f):
        def call(*args):
            calls.append((where, name))
            return f(*args)
        return call
    refs = {"fwd": ref_fwd, "bwd_data": ref_bwd_data, "bwd_filter": ref_bwd_filter}
    monkeypatch.setenv(eager.NATIVE_ENV, "0")       # the Python Functions (tests/torch/test_native.py)
    monkeypatch.setattr(eager, "_on_gpu", lambda t: t.device.type == "cpu")
    for name, f in refs.items():
        monkeypatch.setattr(eager, f"_{name}", recorded("impl", name, f))
    operators = ops.Ops("test", *(recorded("op", n, f) for n, f in refs.items()))
    monkeypatch.setattr(eager, "active", lambda: operators)
    for cls, name in ((eager._ConvFwd, "fwd"), (eager._ConvBwdData, "bwd_data")):
        monkeypatch.setattr(eager, cls.__name__, type(cls.__name__, (cls,), {
            "forward": staticmethod(recorded("function", name, cls.forward))}))
    return calls


class Passing(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _leaves(*sizes):
    torch.manual_seed(0)
    return [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in sizes]


def test_gradients_are_pytorchs_through_the_implementations(on_cpu):
    x, w = _leaves((3, 4, 9, 10), (6, 2, 3, 2))
    y = eager.conv_fwd(x, w, *GEOMETRY, CONFIG)
    assert type(y.grad_fn).__name__ == "_ConvFwdBackward"
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, w), g)
    want = torch.autograd.grad(F.conv2d(x, w, None, *GEOMETRY), (x, w), g)
    assert all(torch.allclose(a, b) for a, b in zip(got, want))
    assert on_cpu == [("function", "fwd"), ("impl", "fwd"), ("impl", "bwd_data"),
                      ("impl", "bwd_filter")]
    # only what needs a gradient is computed
    del on_cpu[:]
    y = eager.conv_fwd(x.detach(), w, *GEOMETRY, CONFIG)
    y.backward(torch.ones_like(y))
    assert on_cpu == [("function", "fwd"), ("impl", "fwd"), ("impl", "bwd_filter")]


def test_a_call_autograd_does_not_record_runs_the_implementation_alone(on_cpu):
    x, w = _leaves((3, 4, 9, 10), (6, 2, 3, 2))
    with torch.no_grad():
        y = eager.conv_fwd(x, w, *GEOMETRY, CONFIG)
    z = eager.conv_fwd(x.detach(), w.detach(), *GEOMETRY, CONFIG)
    with torch.inference_mode():
        t = eager.conv_transpose(w, y, list(x.shape), *GEOMETRY, CONFIG)
    assert y.grad_fn is None and z.grad_fn is None and t.grad_fn is None
    assert torch.allclose(y, F.conv2d(x, w, None, *GEOMETRY)) and torch.equal(y, z)
    assert on_cpu == [("impl", "fwd"), ("impl", "fwd"), ("impl", "bwd_data")]


def test_a_transposed_convolution_and_its_gradients(on_cpu):
    w, dy = _leaves((6, 2, 3, 2), (3, 6, 5, 8))
    x_size = [3, 4, 9, 10]
    gx = eager.conv_transpose(w, dy, x_size, *GEOMETRY, CONFIG)
    assert list(gx.shape) == x_size
    g = torch.randn_like(gx)
    got = torch.autograd.grad(gx, (w, dy), g)
    want = torch.autograd.grad(ref_bwd_data(w, dy, x_size, *GEOMETRY, CONFIG), (w, dy), g)
    assert all(torch.allclose(a, b) for a, b in zip(got, want))
    assert on_cpu == [("function", "bwd_data"), ("impl", "bwd_data"), ("impl", "bwd_filter"),
                      ("impl", "fwd")]


def test_a_double_backward_goes_through_the_operators(on_cpu):
    x, w = _leaves((2, 4, 7, 8), (6, 2, 3, 3))
    y = eager.conv_fwd(x, w, *GEOMETRY, CONFIG)
    gx, gw = torch.autograd.grad((y * y).sum(), (x, w), create_graph=True)
    assert on_cpu[2:] == [("op", "bwd_data"), ("op", "bwd_filter")]
    got = torch.autograd.grad((gx * gx).sum() + (gw * gw).sum(), (x, w))
    yr = F.conv2d(x, w, None, *GEOMETRY)
    rx, rw = torch.autograd.grad((yr * yr).sum(), (x, w), create_graph=True)
    want = torch.autograd.grad((rx * rx).sum() + (rw * rw).sum(), (x, w))
    assert all(torch.allclose(a, b) for a, b in zip(got, want))


def test_which_calls_take_the_eager_path(on_cpu, monkeypatch):
    x, w = torch.randn(2, 4, 8, 8), torch.randn(4, 2, 3, 3)
    assert eager.eager_call(x, torch.nn.Parameter(w))
    assert not eager.eager_call(x.to("meta"), w)
    with FakeTensorMode():                          # a tensor subclass
        assert not eager.eager_call(torch.empty(2, 4, 8, 8), torch.empty(4, 2, 3, 3))
    with Passing():
        assert not eager.eager_call(x, w)
    assert not torch.func.vmap(lambda t: torch.tensor(float(eager.eager_call(t, w))))(x).any()
    monkeypatch.setenv(eager.EAGER_ENV, "0")
    assert not eager.eager_call(x, w)
    monkeypatch.setenv(eager.EAGER_ENV, "1")
    # the frontend study's ucudnn_operators processes get the same switch
    slot = torch_frontend.Slot(1, 1, "float32", torch_frontend.OPERATORS_VARIANT)
    for name, value in torch_frontend.process_env(slot, ".", {}).items():
        monkeypatch.setenv(name, value)
    assert not eager.eager_call(x, w)
    monkeypatch.setenv(eager.EAGER_ENV, "1")

    def traced(t):
        return t + 1 if eager.eager_call(t, w) else t - 1
    compiled = torch.compile(traced, backend="eager", fullgraph=True)
    assert torch.equal(compiled(x), x - 1) and torch.equal(traced(x), x + 1)
    with warnings.catch_warnings():           # torch.jit.trace is deprecated in newer PyTorch
        warnings.simplefilter("ignore", FutureWarning)
        jit_traced = torch.jit.trace(traced, x, check_trace=False)
    assert torch.equal(jit_traced(x), x - 1)
