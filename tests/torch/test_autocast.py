"""The operators under CUDA autocast without a GPU (Note [Autocast] in ucudnn/torch/ops.py): on
fake CUDA tensors, with autocast switched on for the CUDA device as ``torch.autocast("cuda")``
switches it (that context manager turns itself off where no CUDA device is visible), each
operator's inputs are cast to the autocast dtype as PyTorch's convolution casts its own, float64
is left alone, the casts are on the autograd graph, and a converted module's output has PyTorch's
dtype."""
import contextlib

import pytest

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch "
                            "(pip install 'ucudnn[torch]')")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import ucudnn.torch as ut  # noqa: E402
from ucudnn.torch import ops  # noqa: E402
from ucudnn.torch.convert import settings_from  # noqa: E402
from ucudnn.torch.runtime import config_id  # noqa: E402

F = torch.nn.functional
CONFIG = config_id(settings_from())
GEOMETRY = ([1, 1], [1, 1], [1, 1], 1, CONFIG)


@contextlib.contextmanager
def cuda_autocast(dtype):
    """What ``torch.autocast("cuda", dtype)`` does to the dispatcher's state."""
    before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", dtype)
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", before[0])
        torch.set_autocast_dtype("cuda", before[1])
        torch.clear_autocast_cache()


def _tensors(dtype=torch.float32, grad=False):
    x = torch.empty(2, 4, 8, 8, device="cuda", dtype=dtype, requires_grad=grad)
    w = torch.empty(6, 4, 3, 3, device="cuda", dtype=dtype, requires_grad=grad)
    return x, w


def _all_ops(o, x, w):
    y = o.fwd(x, w, *GEOMETRY)
    dy = torch.empty(y.shape, device="cuda", dtype=x.dtype)
    dx = o.bwd_data(w, dy, list(x.shape), *GEOMETRY)
    dw = o.bwd_filter(x, dy, list(w.shape), *GEOMETRY)
    return y, dx, dw


@pytest.mark.parametrize("style", ops.STYLES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_inputs_are_cast_as_pytorchs_convolution_casts_them(style, dtype):
    o = ops.registered(style)
    with FakeTensorMode():
        x, w = _tensors()
        with cuda_autocast(dtype):
            got = _all_ops(o, x, w)
            want = F.conv2d(x, w, None, 1, 1).dtype
        assert want == dtype                    # PyTorch's own convolution, same autocast
        assert [t.dtype for t in got] == [want] * 3
        # outside autocast nothing is cast
        assert [t.dtype for t in _all_ops(o, x, w)] == [torch.float32] * 3
        # float64 is not cast, as PyTorch's autocast leaves it
        x64, w64 = _tensors(torch.float64)
        with cuda_autocast(dtype):
            assert [t.dtype for t in _all_ops(o, x64, w64)] == [torch.float64] * 3
            assert F.conv2d(x64, w64, None, 1, 1).dtype == torch.float64


@pytest.mark.parametrize("style", ops.STYLES)
def test_the_casts_are_on_the_autograd_graph(style):
    o = ops.registered(style)
    with FakeTensorMode():
        x, w = _tensors(grad=True)
        with cuda_autocast(torch.bfloat16):
            y = o.fwd(x, w, *GEOMETRY)
        # the operator's backward, then each input's cast back to its float32 leaf
        casts = [f for f, _ in y.grad_fn.next_functions]
        assert [type(f).__name__ for f in casts] == ["ToCopyBackward0"] * 2
        leaves = [f.next_functions[0][0].variable for f in casts]
        assert leaves[0] is x and leaves[1] is w


def test_a_converted_module_has_pytorchs_dtype_under_autocast():
    with FakeTensorMode():
        plain = torch.nn.Conv2d(4, 6, 3, padding=1, device="cuda")
        up = torch.nn.ConvTranspose2d(6, 4, 2, stride=2, device="cuda")
        model = ut.convert(torch.nn.Sequential(plain, up)).model
        assert type(model[0]) is ut.Conv2d and type(model[1]) is ut.ConvTranspose2d
        x = torch.empty(2, 4, 8, 8, device="cuda")
        with cuda_autocast(torch.bfloat16):
            y = model(x)
            want = F.conv_transpose2d(F.conv2d(x, plain.weight, plain.bias, 1, 1), up.weight,
                                      up.bias, 2)
        assert y.dtype == want.dtype == torch.bfloat16 and y.shape == want.shape
