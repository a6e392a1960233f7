"""The bridge from a PyTorch convolution to the core's geometry (ucudnn/torch/geometry.py),
and the extra staying optional: ``import ucudnn`` and the command never import torch. The sizes
are checked against the output-size rule written out here, and against PyTorch's own in
tests/torch/test_ops.py."""
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch (pip install 'ucudnn[torch]')")
from ucudnn.plan.conv import ConvShape  # noqa: E402
import torch  # noqa: E402
from ucudnn.torch.geometry import (conv_out_size, conv_shape, layout_of, memory_format,
                                   transposed_out_size, unsupported)  # noqa: E402


def test_import_ucudnn_and_the_cli_do_not_import_torch():
    code = ("import sys, ucudnn, ucudnn.cli, ucudnn.measure.runtime; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("x,w,stride,pad,dil", [
    ((2, 6, 9, 9), (8, 3, 3, 3), (2, 2), (1, 1), (1, 1)),
    ((1, 4, 10, 7), (4, 4, 3, 2), (1, 3), (2, 0), (2, 1)),
    ((2, 6, 5, 9, 8), (4, 3, 3, 3, 2), (1, 2, 2), (1, 0, 1), (1, 2, 1)),
    ((1, 2, 7, 4, 6), (3, 2, 2, 1, 3), (3, 1, 1), (0, 1, 2), (2, 1, 1)),
])
def test_conv_out_size_and_the_core_record(x, w, stride, pad, dil):
    out = conv_out_size(x, w, stride, pad, dil)
    dims = len(x) - 2
    for i in range(dims):
        extent = dil[i] * (w[2 + i] - 1) + 1
        assert out[2 + i] == (x[2 + i] + 2 * pad[i] - extent) // stride[i] + 1
    assert out[:2] == (x[0], w[0])
    groups = x[1] // w[1]
    shape = conv_shape(x, w, stride, pad, dil, groups)
    assert isinstance(shape, ConvShape)
    assert (shape.c, shape.k, shape.groups) == (x[1], w[0], groups)
    assert shape.ndim == dims
    assert (shape.spatial, shape.kernel) == (x[2:], w[2:])
    assert (shape.pad, shape.stride, shape.dilation) == (pad, stride, dil)
    assert shape.out_spatial == out[2:]
    assert (shape.x_strides, shape.y_strides) == (None, None)     # packed, one grouped call


@pytest.mark.parametrize("x,w,stride,pad,opad,dil,groups", [
    ((2, 8, 5, 6), (8, 2, 3, 3), (2, 2), (1, 1), (1, 0), (1, 1), 2),
    ((1, 4, 3, 5, 4), (4, 3, 2, 3, 3), (2, 1, 3), (0, 1, 1), (1, 0, 2), (1, 2, 1), 1),
])
def test_transposed_is_the_backward_data_of_the_convolution_back(x, w, stride, pad, opad, dil,
                                                                 groups):
    # the transposed output, convolved by the same weight, gives the transposed input back
    y = transposed_out_size(x, w, stride, pad, opad, dil, groups)
    assert y[:2] == (x[0], w[1] * groups)
    assert conv_out_size(y, w, stride, pad, dil) == x


def test_what_the_core_cannot_take_is_refused_with_the_reason():
    assert unsupported(2) is None and unsupported(3) is None
    assert "1-D" in unsupported(1)
    with pytest.raises(ValueError, match="1-D"):
        conv_shape((1, 2, 4), (2, 2, 1), (1,), (0,), (1,), 1)
    with pytest.raises(ValueError, match="spatial axes"):
        conv_shape((1, 2, 4, 4, 4), (2, 2, 1, 1), (1,) * 3, (0,) * 3, (1,) * 3, 1)
    with pytest.raises(ValueError, match="'groups'"):
        conv_shape((1, 6, 4, 4), (2, 4, 1, 1), (1, 1), (0, 0), (1, 1), 2)


@pytest.mark.parametrize("size,fmt", [((2, 3, 4, 5), torch.channels_last),
                                      ((2, 3, 4, 5, 6), torch.channels_last_3d)])
def test_channels_last_runs_nhwc_unless_grouped(size, fmt):
    dense, last = torch.empty(size), torch.empty(size).contiguous(memory_format=fmt)
    assert layout_of(dense, 1) == "NCHW" and layout_of(last, 3) == "NCHW"
    assert layout_of(last, 1) == "NHWC"
    assert memory_format("NHWC", len(size)) == fmt
    assert memory_format("NCHW", len(size)) == torch.contiguous_format
    # the core's record of the channels_last call is NHWC (NDHWC for 3-D)
    w = (4, 3) + (1,) * (len(size) - 2)
    dims = len(size) - 2
    shape = conv_shape(size, w, (1,) * dims, (0,) * dims, (1,) * dims, 1, layout_of(last, 1))
    assert shape.layout == "NHWC" and shape.ndim == dims
