"""Convolution geometry (ucudnn.plan.conv): the output rule per axis and the kernel Caffe runs
for a layer (Note [Grouped layers])."""
import pytest

from ucudnn.plan.conv import ConvShape, out_size
from ucudnn.plan.layers import LayerError, LayerSpec


def test_grouped_layer_is_the_kernel_caffe_runs():
    """caffe_patch/0002 (UcudnnConv::Create): C/g, K/g channels, cuDNN groups 1, strides into
    the whole blobs: x (C*H*W, H*W, W, 1), y (K*OH*OW, OH*OW, OW, 1)."""
    conv2 = LayerSpec("conv2", 256, 96, 27, 27, 256, 5, 5, pad=2, groups=2)
    s = ConvShape.from_layer(conv2)
    assert (s.c, s.k, s.groups, s.h, s.w, s.out_h, s.out_w) == (48, 128, 1, 27, 27, 27, 27)
    assert s.x_strides == (96 * 27 * 27, 27 * 27, 27, 1)
    assert s.y_strides == (256 * 27 * 27, 27 * 27, 27, 1)
    # what Caffe passes for a group-1 layer (explicit packed strides) is the packed key
    conv3 = LayerSpec("conv3", 256, 256, 13, 13, 384, 3, 3, pad=1)
    caffe = ConvShape(256, 13, 13, 384, 3, 3, 1, 1, x_strides=(256 * 169, 169, 13, 1),
                      y_strides=(384 * 169, 169, 13, 1))
    assert ConvShape.from_layer(conv3).key() == caffe.key()
    assert ConvShape.from_layer(conv3).x_strides is None
    # a packed half-size layer is another kernel than the strided group
    half = LayerSpec("half", 256, 48, 27, 27, 128, 5, 5, pad=2)
    assert ConvShape.from_layer(half).key() != s.key()
    with pytest.raises(LayerError, match="layer 'g': field 'groups': 4 does not divide C=6"):
        LayerSpec("g", 1, 6, 8, 8, 8, 3, 3, groups=4)


def test_per_axis_kernel_of_a_layer():
    """A 1x7 layer and a 7x1 layer are two kernels; each axis has its own pad, stride and
    dilation in the shape (and so in the cache key)."""
    row = ConvShape.from_layer(LayerSpec("row", 8, 16, 17, 17, 32, 1, 7, pad=(0, 3)))
    col = ConvShape.from_layer(LayerSpec("col", 8, 16, 17, 17, 32, 7, 1, pad=(3, 0)))
    assert (row.r, row.s, row.pad_h, row.pad_w) == (1, 7, 0, 3)
    assert (col.r, col.s, col.pad_h, col.pad_w) == (7, 1, 3, 0)
    assert (row.out_h, row.out_w) == (col.out_h, col.out_w) == (17, 17)
    assert row.key() != col.key()
    assert "r=1,s=7,pad_h=0,pad_w=3" in row.key()
    odd = ConvShape.from_layer(LayerSpec("odd", 2, 4, 10, 30, 4, 3, 5, pad=(1, 2),
                                         stride=(1, 3), dilation=(2, 1)))
    assert (odd.stride_h, odd.stride_w, odd.dil_h, odd.dil_w) == (1, 3, 2, 1)
    assert (odd.out_h, odd.out_w) == (8, 10)


@pytest.mark.parametrize("size, kernel, pad, stride, dilation, out", [
    (227, 11, 0, 4, 1, 55), (27, 5, 2, 1, 1, 27), (56, 3, 1, 2, 1, 28), (17, 7, 3, 1, 1, 17),
    (10, 3, 1, 1, 2, 8), (2, 7, 0, 1, 1, -4)])
def test_out_size(size, kernel, pad, stride, dilation, out):
    assert out_size(size, kernel, pad, stride, dilation) == out


def test_shape_errors_name_the_field():
    with pytest.raises(ValueError, match="'pad_w' must be >= 0"):
        ConvShape(4, 8, 8, 4, 3, 3, 0, -1)
    with pytest.raises(ValueError, match="'stride_w' must be a positive integer"):
        ConvShape(4, 8, 8, 4, 3, 3, stride_w=0)
    with pytest.raises(ValueError, match="filter is larger than the padded input"):
        ConvShape(4, 8, 2, 4, 3, 3)
