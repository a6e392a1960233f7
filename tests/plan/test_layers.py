"""Layer lists (ucudnn.plan.layers): LayerSpec's per-axis geometry, the CSV both ways, errors
naming file, line, layer and field."""
import pytest

from repo_paths import SHARED, SHIPPED, needs_shared
from ucudnn.plan.layers import LAYER_COLUMNS, LayerError, LayerSpec, read_layers, write_layers

SQUARE = "name,N,C,H,W,K,R,S,pad,stride,dilation,groups,count,bwd_data\n"


@needs_shared
def test_read_layers_both_formats_agree():
    for net in ("alexnet", "resnet18"):
        shared = read_layers(SHARED / f"layers_{net}.csv")          # '# name,...' comment header
        ours = read_layers(SHIPPED / f"{net}_layers.csv")           # plain header with counts
        # the shared list gives one group's channels; ours the layer's totals with groups
        strip = lambda ls: [(l.name, l.n, l.c // l.groups, l.h, l.w, l.k // l.groups,  # noqa
                             l.r, l.s, l.pad, l.stride) for l in ls]
        assert strip(shared) == strip(ours)
        assert all(l.count == 1 and l.groups == 1 and l.bwd_data for l in shared)


def test_comment_header_with_a_remark_after_the_columns(tmp_path):
    """The shared lists' header: ``# name,...,stride,unused   (a remark)``; the remark is not a
    column."""
    p = tmp_path / "l.csv"
    p.write_text("# name,N,C,H,W,K,R,S,pad,stride,unused   (bvlc_alexnet, grouped layers per "
                 "group)\nconv1,256,3,227,227,96,11,11,0,4,0\n")
    (l,) = read_layers(p)
    assert (l.name, l.n, l.c, l.r, l.pad, l.stride) == ("conv1", 256, 3, 11, (0, 0), (4, 4))


def test_shipped_layer_counts():
    alex = {l.name: l for l in read_layers(SHIPPED / "alexnet_layers.csv")}
    assert {n: (l.c, l.k, l.groups, l.count) for n, l in alex.items()} == {
        "conv1": (3, 96, 1, 1), "conv2": (96, 256, 2, 1), "conv3": (256, 384, 1, 1),
        "conv4": (384, 384, 2, 1), "conv5": (384, 256, 2, 1)}
    res = {l.name: l for l in read_layers(SHIPPED / "resnet18_layers.csv")}
    assert sum(l.count for l in res.values()) == 20       # 17 3x3/7x7 + 3 projections
    assert all(l.groups == 1 for l in res.values())
    for layers in (alex, res):
        assert [n for n, l in layers.items() if not l.bwd_data] == ["conv1"]
    # calls per pass: every op of every identical layer, once per group
    assert sum(l.calls for l in alex.values()) == 2 + 3 * (2 + 1 + 2 + 2)


def test_geometry_is_per_axis():
    """An integer is both axes; a (height, width) pair each its own (Inception's 1x7 / 7x1)."""
    sq = LayerSpec("sq", 8, 16, 17, 17, 32, 3, 3, pad=1, stride=2)
    assert (sq.pad, sq.stride, sq.dilation) == ((1, 1), (2, 2), (1, 1))
    assert sq.out_hw == (9, 9)
    assert sq.describe() == "C=16 17x17 K=32 3x3 pad 1 stride 2"
    row = LayerSpec("row", 8, 16, 17, 17, 32, 1, 7, pad=(0, 3))
    col = LayerSpec("col", 8, 16, 17, 17, 32, 7, 1, pad=(3, 0))
    assert row.out_hw == col.out_hw == (17, 17)
    assert row.describe() == "C=16 17x17 K=32 1x7 pad 0x3 stride 1"
    assert col.describe() == "C=16 17x17 K=32 7x1 pad 3x0 stride 1"
    wide = LayerSpec("wide", 2, 4, 10, 30, 4, 3, 5, pad=(1, 2), stride=(1, 3), dilation=(2, 1),
                     groups=2)
    assert wide.out_hw == ((10 + 2 - 2 * 2 - 1) // 1 + 1, (30 + 4 - 4 - 1) // 3 + 1) == (8, 10)
    assert wide.describe() == "C=4 10x30 K=4 3x5 pad 1x2 stride 1x3 dilation 2x1, group 2"
    assert LayerSpec("b", 4, 4, 8, 8, 4, 3, 3, groups=2, count=3, bwd_data=False).calls == 12


@pytest.mark.parametrize("kw, match", [
    (dict(pad=(0, 3, 1)), r"layer 'x': field 'pad' must be an integer or a \(height, width\)"),
    (dict(stride=[1, 1]), r"layer 'x': field 'stride' must be an integer or a \(height, width\)"),
    (dict(pad=(0, -1)), r"layer 'x': field 'pad_w' must be >= 0, got -1"),
    (dict(stride=(0, 1)), r"layer 'x': field 'stride_h' must be >= 1, got 0"),
    (dict(dilation=(1, 0)), r"layer 'x': field 'dilation_w' must be >= 1, got 0"),
    (dict(s=9), "the filter is larger than the padded input along W"),
    (dict(r=9, pad=(0, 4)), "the filter is larger than the padded input along H"),
    (dict(groups=3), r"layer 'x': field 'groups': 3 does not divide C=4 and K=4"),
    (dict(count=0), r"layer 'x': field 'count' must be a positive integer, got 0"),
])
def test_layer_spec_errors_name_the_field(kw, match):
    args = dict(name="x", n=2, c=4, h=8, w=8, k=4, r=3, s=3)
    args.update(kw)
    with pytest.raises(LayerError, match=match):
        LayerSpec(**args)


def test_write_read_round_trip(tmp_path):
    layers = [LayerSpec("a", 8, 3, 9, 9, 4, 3, 3, 1, 2, 1, 1, 3, False),
              LayerSpec("b", 8, 4, 5, 5, 4, 1, 1),
              LayerSpec("row", 8, 4, 17, 17, 4, 1, 7, pad=(0, 3), stride=(1, 2),
                        dilation=(2, 1))]
    write_layers(tmp_path / "l.csv", layers)
    assert read_layers(tmp_path / "l.csv") == layers
    text = (tmp_path / "l.csv").read_text().splitlines()
    assert text[0] == ",".join(LAYER_COLUMNS)                 # the per-axis columns
    assert text[3] == "row,8,4,17,17,4,1,7,0,3,1,2,2,1,1,1,1"


def test_square_and_per_axis_columns_read_alike(tmp_path):
    square = tmp_path / "square.csv"
    square.write_text(SQUARE + "a,8,3,9,9,4,3,3,1,2,1,1,1,1\n")
    axes = tmp_path / "axes.csv"
    axes.write_text("name,N,C,H,W,K,R,S,pad_h,pad_w,stride_h,stride_w\n"
                    "a,8,3,9,9,4,3,3,1,1,2,2\n")
    assert read_layers(square) == read_layers(axes)
    # stride and dilation default to 1, pad to 0; the geometry's columns need not all be there
    short = tmp_path / "short.csv"
    short.write_text("name,N,C,H,W,K,R,S\nb,8,3,9,9,4,3,3\n")
    assert read_layers(short) == [LayerSpec("b", 8, 3, 9, 9, 4, 3, 3)]


@pytest.mark.parametrize("body, match", [
    ("a,8,3,9,9,4,3,3,1,1\na,8,3,9,9,4,3,3,1,1", r"duplicate layer name\(s\) \['a'\]"),
    ("a,8,x,9,9,4,3,3,1,1", r"l.csv:2: layer 'a': field 'C': cannot parse 'x'"),
    ("a,8,3,9,9,4,3", r"l.csv:2: layer 'a': field 'S' is missing"),
    ("a,8,3,9,9,4,3,3,1,1,1,1,1,2", r"l.csv:2: layer 'a': field 'bwd_data' must be 0 or 1"),
    ("a,8,3,9,9,4,3,3,1,1,1,1,0,1", r"l.csv:2: layer 'a': field 'count' must be a positive"),
    ("a,8,3,9,9,4,3,3,1,1,1,2,1,1", r"l.csv:2: layer 'a': field 'groups': 2 does not divide"),
    ("a,8,3,9,9,4,3,3,-1,1", r"l.csv:2: layer 'a': field 'pad_h' must be >= 0"),
    ("a,8,3,2,2,4,7,7,0,1", r"l.csv:2: layer 'a': the filter is larger than the padded input"),
    ("a,8,3,9,9,4,3,3,1,1,1,1,1,1,9", r"l.csv:2: 15 fields, expected at most 14"),
    ("", r"l.csv: the layer list is empty"),
])
def test_layer_errors_name_file_line_field(tmp_path, body, match):
    p = tmp_path / "l.csv"
    p.write_text(SQUARE + body + "\n")
    with pytest.raises(LayerError, match=match):
        read_layers(p)


@pytest.mark.parametrize("header, row, match", [
    ("name,N,C,H,W,K,R,S,padding", "a,8,3,9,9,4,3,3,1",
     r"l.csv: unknown column\(s\) padding \(expected name, N, .*Note \[Layer list format\]"),
    ("name,N,C,H,W,K,R,S,pad,pad_h,pad_w", "a,8,3,9,9,4,3,3,1,1,1",
     r"l.csv:2: layer 'a': give 'pad' or pad_h/pad_w, not both"),
    ("name,N,C,H,W,K,R,S,stride_h", "a,8,3,9,9,4,3,3,2",
     r"l.csv:2: layer 'a': stride_h and stride_w must be given together"),
    ("name,N,C,H,W,K,R,S,dilation_h,dilation_w", "a,8,3,9,9,4,3,3,1,x",
     r"l.csv:2: layer 'a': field 'dilation_w': cannot parse 'x'"),
])
def test_per_axis_column_errors(tmp_path, header, row, match):
    p = tmp_path / "l.csv"
    p.write_text(f"{header}\n{row}\n")
    with pytest.raises(LayerError, match=match):
        read_layers(p)


def test_layout_of_a_layer():
    """A LayerSpec's layout is the kernel's (Note [NHWC kernels]); a grouped layer runs NCHW
    only, and an unknown layout is named."""
    from ucudnn.plan.conv import ConvShape
    spec = LayerSpec("c", 8, 64, 56, 56, 64, 3, 3, 1, layout="NHWC")
    shape = ConvShape.from_layer(spec)
    assert shape.layout == "NHWC" and shape.packed_x_strides() == (56 * 56 * 64, 1, 56 * 64, 64)
    assert "layout=NHWC" in shape.key()
    assert "layout" not in ConvShape.from_layer(LayerSpec("c", 8, 64, 56, 56, 64, 3, 3)).key()
    with pytest.raises(LayerError, match=r"^layer 'g': field 'layout': a grouped layer runs "
                                         "NCHW only"):
        LayerSpec("g", 8, 64, 56, 56, 64, 3, 3, groups=2, layout="NHWC")
    with pytest.raises(LayerError, match=r"^layer 'c': field 'layout': 'NWHC' is not one of "
                                         "NCHW, NHWC"):
        LayerSpec("c", 8, 64, 56, 56, 64, 3, 3, layout="NWHC")
