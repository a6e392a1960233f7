"""The operators without a GPU (ucudnn/torch/ops.py): their fake implementations give PyTorch's
own sizes and memory formats under FakeTensorMode and on meta tensors, their autograd calls the
ucudnn operators for both gradients, ``torch.compile(fullgraph=True)`` traces through them, and
both registration styles behave alike."""
import pytest

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch "
                            "(pip install 'ucudnn[torch]')")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import ucudnn.torch as ut  # noqa: E402
from ucudnn.torch import ops  # noqa: E402
from ucudnn.torch.convert import settings_from  # noqa: E402
from ucudnn.torch.runtime import config_id  # noqa: E402
from ucudnn.vocab import InputError  # noqa: E402

F = torch.nn.functional
CONFIG = config_id(settings_from())
STYLES = ops.STYLES

# (input, weight, stride, padding, dilation, groups)
CASES = [
    ((4, 6, 9, 9), (8, 3, 3, 3), [2, 2], [1, 1], [1, 1], 2),
    ((2, 5, 11, 7), (7, 5, 3, 2), [1, 3], [2, 0], [2, 1], 1),
    ((3, 8, 6, 6), (8, 1, 3, 3), [1, 1], [1, 1], [1, 1], 8),
    ((2, 4, 5, 9, 8), (6, 4, 3, 3, 2), [1, 2, 2], [1, 0, 1], [1, 2, 1], 1),
    ((2, 6, 4, 6, 6), (6, 2, 2, 3, 3), [2, 1, 1], [0, 1, 1], [1, 1, 1], 3),
]
CONV = {4: F.conv2d, 5: F.conv3d}
CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def _ucudnn_ops_in(graph):
    return [str(n.target) for n in graph.nodes
            if n.op == "call_function" and str(n.target).startswith("ucudnn.")]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("channels_last", [False, True])
def test_fake_sizes_and_formats_are_pytorchs(style, case, channels_last):
    xs, ws, stride, pad, dil, groups = case
    o = ops.registered(style)
    last = CHANNELS_LAST[len(xs)]
    fmt = last if channels_last else torch.contiguous_format
    with FakeTensorMode():
        x = torch.empty(xs, device="cuda").contiguous(memory_format=fmt)
        w = torch.empty(ws, device="cuda").contiguous(memory_format=fmt)
        y = o.fwd(x, w, stride, pad, dil, groups, CONFIG)
        ref = CONV[len(xs)](x, w, None, stride, pad, dil, groups)
        assert y.shape == ref.shape and y.device == x.device and y.dtype == x.dtype
        # channels_last runs NHWC (NDHWC), except a grouped convolution (NCHW)
        nhwc = channels_last and groups == 1
        assert y.is_contiguous(memory_format=last if nhwc else torch.contiguous_format)
        dx = o.bwd_data(w, y, list(x.shape), stride, pad, dil, groups, CONFIG)
        dw = o.bwd_filter(x, y, list(w.shape), stride, pad, dil, groups, CONFIG)
        assert dx.shape == x.shape and dw.shape == w.shape
        assert (dx.is_contiguous(memory_format=last) or not nhwc)
        assert (dw.is_contiguous(memory_format=last) or not nhwc)
    meta = o.fwd(torch.empty(xs, device="meta"), torch.empty(ws, device="meta"), stride, pad,
                 dil, groups, CONFIG)
    assert meta.shape == ref.shape


@pytest.mark.parametrize("style", STYLES)
def test_fake_refuses_mixed_dtypes_and_devices(style):
    o = ops.registered(style)
    with FakeTensorMode():
        x = torch.empty(1, 2, 4, 4, device="cuda")
        with pytest.raises(InputError, match="dtype"):
            o.fwd(x, torch.empty(2, 2, 1, 1, device="cuda", dtype=torch.float16), [1, 1],
                  [0, 0], [1, 1], 1, CONFIG)
        with pytest.raises(InputError, match="device"):
            o.fwd(x, torch.empty(2, 2, 1, 1), [1, 1], [0, 0], [1, 1], 1, CONFIG)


@pytest.mark.parametrize("style", STYLES)
def test_cpu_tensors_and_mixed_dtypes_raise_one_clear_error(style):
    o = ops.registered(style)
    x, w = torch.randn(1, 2, 4, 4), torch.randn(2, 2, 1, 1)
    with pytest.raises(InputError, match=r"conv_fwd: tensors on cpu and cpu; the core runs "
                       "on one CUDA device"):
        o.fwd(x, w, [1, 1], [0, 0], [1, 1], 1, CONFIG)
    with pytest.raises(InputError, match="conv_bwd_filter: tensors of torch.float32 and "
                       "torch.float16"):
        o.bwd_filter(x, x.half(), list(w.shape), [1, 1], [0, 0], [1, 1], 1, CONFIG)
    with pytest.raises(InputError, match="conv_bwd_data: tensors on cpu"):
        o.bwd_data(w, x, list(x.shape), [1, 1], [0, 0], [1, 1], 1, CONFIG)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("case", [CASES[0], CASES[3]])
def test_gradients_go_through_the_ucudnn_operators(style, case):
    o = ops.registered(style)
    suffix = "" if style == ops.chosen_style() else f"_{style}"
    xs, ws, stride, pad, dil, groups = case

    def conv_grads(x, w):
        y = o.fwd(x, w, stride, pad, dil, groups, CONFIG)
        return torch.autograd.grad((y * y).sum(), (x, w))

    x = torch.randn(xs, requires_grad=True)
    w = torch.randn(ws, requires_grad=True)
    traced = _ucudnn_ops_in(make_fx(conv_grads, tracing_mode="fake")(x, w).graph)
    assert traced == [f"ucudnn.conv_fwd{suffix}.default", f"ucudnn.conv_bwd_data{suffix}.default",
                      f"ucudnn.conv_bwd_filter{suffix}.default"]

    def transposed_grads(w, dy):          # a transposed convolution: bwd_data as forward
        dx = o.bwd_data(w, dy, list(xs), stride, pad, dil, groups, CONFIG)
        return torch.autograd.grad((dx * dx).sum(), (w, dy))

    dy = torch.randn(CONV[len(xs)](torch.empty(xs, device="meta"), torch.empty(ws, device="meta"),
                              None, stride, pad, dil, groups).shape, requires_grad=True)
    traced = _ucudnn_ops_in(make_fx(transposed_grads, tracing_mode="fake")(w, dy).graph)
    assert traced == [f"ucudnn.conv_bwd_data{suffix}.default",
                      f"ucudnn.conv_bwd_filter{suffix}.default",
                      f"ucudnn.conv_fwd{suffix}.default"]
    # and on meta tensors the gradients have the inputs' sizes
    xm, wm = (torch.empty(xs, device="meta", requires_grad=True),
              torch.empty(ws, device="meta", requires_grad=True))
    gx, gw = conv_grads(xm, wm)
    assert gx.shape == xm.shape and gw.shape == wm.shape


def _model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(6, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, groups=4, dilation=2, padding=2, bias=False),
        torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1))


def test_compile_fullgraph_traces_through_the_operators():
    model = _model().to("meta")
    ref = _model().to("meta")
    ut.convert(model)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    x = torch.empty(2, 6, 16, 16, device="meta")
    y = torch.compile(model, fullgraph=True, backend=record)(x)
    assert y.shape == ref(x).shape
    assert [t.split(".")[1] for t in _ucudnn_ops_in(graphs[0].graph)] == \
        ["conv_fwd", "conv_fwd", "conv_bwd_data"]
    # the whole step, forward and backward, through AOTAutograd's fake tracing
    xg = torch.empty(2, 6, 16, 16, device="meta", requires_grad=True)
    out = torch.compile(model, fullgraph=True, backend="aot_eager")(xg)
    out.sum().backward()
    assert xg.grad.shape == xg.shape
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())


def test_settings_are_checked_and_net_wide_optimizers_refused():
    with pytest.raises(InputError, match="policy"):
        settings_from(policy="most")
    with pytest.raises(InputError, match="ilp"):
        config_id(settings_from(optimizer="ilp"))
    assert config_id(settings_from(limit="64MiB")) == config_id(settings_from(limit=64 << 20))
