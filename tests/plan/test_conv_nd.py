"""3-D convolution geometry (Note [N-D geometry] in ucudnn/plan/conv.py), transposed
convolutions (Note [Transposed convolutions]) and 3-D layer lists (Note [Layer list format])."""
import dataclasses

import pytest

from ucudnn.plan.conv import TRANSPOSED_OPS, ConvShape, out_size, transposed
from ucudnn.plan.layers import DEPTH_COLUMNS, LAYER_COLUMNS, LayerError, LayerSpec, read_layers, \
    write_layers


def _packed(dims, layout):
    """Strides of a packed tensor of ``dims`` (n, c, *spatial) by walking its memory order."""
    order = [0, 1, *range(2, len(dims))] if layout == "NCHW" else [0, *range(2, len(dims)), 1]
    strides, step = [0] * len(dims), 1
    for i in reversed(order):
        strides[i], step = step, step * dims[i]
    return tuple(strides)


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
def test_a_3d_shape_has_per_axis_geometry_and_packed_strides(layout):
    s = ConvShape.nd(6, 10, (5, 9, 11), (3, 1, 3), pad=(1, 0, 2), stride=(2, 1, 3),
                     dilation=(1, 2, 1), layout=layout)
    canonical = "NCHW" if layout == "NCDHW" else "NHWC"
    assert s.layout == canonical and s.ndim == 3
    assert (s.d, s.h, s.w, s.t, s.r, s.s) == (5, 9, 11, 3, 1, 3)
    assert s.pad == (1, 0, 2) and s.stride == (2, 1, 3) and s.dilation == (1, 2, 1)
    assert s.out_spatial == tuple(out_size(*a) for a in zip((5, 9, 11), (3, 1, 3), (1, 0, 2),
                                                             (2, 1, 3), (1, 2, 1)))
    assert s.packed_x_strides() == _packed(s.x_dims(1), canonical)
    assert s.packed_y_strides() == _packed(s.y_dims(1), canonical)
    assert s.filter_strides() == _packed(s.w_dims(), canonical)


def test_a_2d_shape_from_tuples_is_the_positional_one():
    a = ConvShape.nd(3, 16, (32, 30), (3, 5), pad=(1, 2), stride=2)
    b = ConvShape(3, 32, 30, 16, 3, 5, 1, 2, 2, 2, 1, 1)
    assert a == b and a.key() == b.key() and a.fields() == b.fields()
    assert "d=" not in a.key() and "d" not in a.fields() and a.ndim == 2


@pytest.mark.parametrize("kw,match", [
    (dict(t=3), "field 't': a 2-D convolution"),
    (dict(stride_d=2), "field 'stride_d': a 2-D convolution"),
    (dict(d=4, t=0), "field 't' must be a positive"),
    (dict(d=4, t=3, pad_d=-1), "field 'pad_d' must be >= 0"),
    (dict(d=2, t=3), "larger than the padded input"),
    (dict(d=4, t=3, x_strides=(1, 1, 1, 1)), "'x_strides': 5 positive strides"),
    (dict(layout="NCDHW"), "'layout': 'NCDHW' is not one of NCHW, NHWC$"),
])
def test_3d_shape_errors_name_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        ConvShape(4, 8, 8, 4, 3, 3, **kw)


@pytest.mark.parametrize("groups", [1, 2])
def test_a_3d_layer_is_the_kernel_of_one_group(groups):
    layer = LayerSpec("c3", 4, 8, 12, 10, 16, 3, 3, pad=(1, 1, 1), stride=(2, 1, 1),
                      groups=groups, d=6, t=3)
    s = ConvShape.from_layer(layer)
    assert (s.c, s.k, s.spatial, s.kernel) == (8 // groups, 16 // groups, (6, 12, 10), (3, 3, 3))
    assert s.out_spatial == layer.out_spatial == (3, 12, 10)
    if groups == 1:
        assert s.x_strides is None
    else:       # a view into the whole blobs, as Note [Grouped layers] says for 2-D
        assert s.x_strides == _packed((1, 8, 6, 12, 10), "NCHW")
        assert s.y_strides == _packed((1, 16, 3, 12, 10), "NCHW")
    assert "12x10" in layer.describe() and "6x12x10" in layer.describe()


@pytest.mark.parametrize("spatial,kernel,pad,stride,dil,outpad", [
    ((4, 5), (3, 3), 1, 2, 1, 1),
    ((3, 4, 5), (3, 2, 3), (1, 0, 1), (2, 2, 1), (1, 1, 2), (1, 0, 0)),
    ((2, 2, 2), (1, 1, 1), 0, 1, 1, 0),
])
def test_a_transposed_convolution_is_backward_data_of_its_shape(spatial, kernel, pad, stride,
                                                                dil, outpad):
    """PyTorch's output-size rule for ConvTranspose, checked against the shape: its input is
    the transposed convolution's output and its output the transposed input."""
    n = len(spatial)
    per = lambda v: (v,) * n if isinstance(v, int) else v
    s = transposed(6, 4, spatial, kernel, pad, stride, dil, outpad)
    want = tuple((i - 1) * st - 2 * p + d * (k - 1) + o + 1 for i, st, p, d, k, o in
                 zip(spatial, per(stride), per(pad), per(dil), kernel, per(outpad)))
    assert s.spatial == want and s.out_spatial == spatial
    assert (s.c, s.k) == (4, 6) and s.w_dims() == (6, 4, *kernel)
    assert TRANSPOSED_OPS == {"fwd": "bwd_data", "bwd_data": "fwd",
                              "bwd_filter": "bwd_filter"}


def test_transposed_output_padding_must_be_below_stride_or_dilation():
    with pytest.raises(ValueError, match="'output_padding'"):
        transposed(2, 2, (4, 4), (3, 3), 1, 2, 1, 2)


def test_3d_layer_lists_round_trip_and_2d_lists_keep_their_columns(tmp_path):
    flat = LayerSpec("c2", 8, 3, 16, 16, 8, 3, 3, pad=1)
    deep = LayerSpec("c3", 2, 4, 16, 12, 8, 3, 1, pad=(1, 1, 0), stride=(1, 2, 1),
                     dilation=(2, 1, 1), d=8, t=3)
    write_layers(tmp_path / "2d.csv", [flat])
    assert (tmp_path / "2d.csv").read_text().splitlines()[0] == ",".join(LAYER_COLUMNS)
    write_layers(tmp_path / "3d.csv", [flat, deep])
    assert (tmp_path / "3d.csv").read_text().splitlines()[0] == ",".join(
        LAYER_COLUMNS + DEPTH_COLUMNS)
    assert read_layers(tmp_path / "3d.csv") == [flat, deep]


def test_3d_layer_list_square_columns_apply_to_every_axis(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("name,N,C,D,H,W,K,T,R,S,pad,stride\nc,2,4,8,8,8,4,3,3,3,1,2\n")
    (layer,) = read_layers(p)
    assert layer.pad == (1, 1, 1) and layer.stride == (2, 2, 2) and layer.spatial == (8, 8, 8)


@pytest.mark.parametrize("header,row,match", [
    ("name,N,C,D,H,W,K,R,S", "c,2,4,8,8,8,4,3,3", "'D' and 'T' must be given together"),
    ("name,N,C,H,W,K,R,S,pad_d", "c,2,4,8,8,4,3,3,1", "field 'pad_d' is given for a 2-D layer"),
    ("name,N,C,D,H,W,K,T,R,S,pad_h,pad_w", "c,2,4,8,8,8,4,3,3,3,1,1",
     "pad_d and pad_h and pad_w must be given together"),
    ("name,N,C,D,H,W,K,T,R,S", "c,2,4,2,8,8,4,3,3,3", "larger than the padded input along D"),
])
def test_3d_layer_list_errors_name_file_line_field(tmp_path, header, row, match):
    p = tmp_path / "l.csv"
    p.write_text(f"{header}\n{row}\n")
    with pytest.raises(LayerError, match=match) as e:
        read_layers(p)
    assert f"{p}:2" in str(e.value)


def test_plan_records_carry_the_3d_geometry(fake_core):
    """A kernel's plan-record fields (Note [Plan records] in ucudnn/caffe/records.py): a 3-D
    shape's with its depth fields and five strides, a 2-D one's without them."""
    import json

    from ucudnn.measure.records import kernel_fields
    deep = ConvShape.nd(4, 8, (3, 6, 6), (3, 3, 3), pad=1, layout="NDHWC")
    got = json.loads(json.dumps(kernel_fields(fake_core.Kernel(deep, "fwd", 2, name="c"))))
    assert {k: got["shape"][k] for k in ("d", "t", "pad_d", "stride_d", "dil_d", "layout")} == \
        {"d": 3, "t": 3, "pad_d": 1, "stride_d": 1, "dil_d": 1, "layout": "NHWC"}
    flat = kernel_fields(fake_core.Kernel(ConvShape(4, 6, 6, 8, 3, 3), "fwd", 2))["shape"]
    assert not {"d", "t", "pad_d", "stride_d", "dil_d", "layout"} & set(flat)
