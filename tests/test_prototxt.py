"""Caffe prototxt parsing and shape inference, without Caffe."""
from collections import Counter
from pathlib import Path

import pytest

from ucudnn.plan.network import LayerSpec, read_layers
from ucudnn.caffe.prototxt import (PrototxtError, as_list, conv_layers, infer_shapes, merge_shapes,
                             parse_prototxt, read_prototxt)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "h200-cudnn9.14"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data not found at {SHARED}")


# -- text format ------------------------------------------------------------------------------

def test_parse_messages_repeated_fields_and_scalars():
    text = r'''
    # a comment
    name: "net"   # trailing comment
    input: "data" input: 'label'
    layer {
      name: "a\"b\\c\n\x41\101"  type: "Conv" 'olution'
      param { lr_mult: 1 } param { lr_mult: 2.5e0 }
      convolution_param: { num_output: 96 kernel_size: [3, 5] bias_term: false pad: 0x2 }
      include < phase: TEST >
      f1: -3 f2: +4.5 f3: 1e-3 f4: 2.f f5: inf f6: -inf f7: true f8: True; f9: MAX,
    }
    layer { name: "only" }
    empty {}
    '''
    d = parse_prototxt(text)
    assert d["name"] == "net"
    assert d["input"] == ["data", "label"]
    a, b = d["layer"]
    assert a["name"] == 'a"b\\c\nAA'
    assert a["type"] == "Convolution"                       # adjacent strings concatenate
    assert a["param"] == [{"lr_mult": 1}, {"lr_mult": 2.5}]
    assert a["convolution_param"] == {"num_output": 96, "kernel_size": [3, 5],
                                      "bias_term": False, "pad": 2}
    assert a["include"] == {"phase": "TEST"}
    assert (a["f1"], a["f2"], a["f3"], a["f4"]) == (-3, 4.5, 1e-3, 2.0)
    assert isinstance(a["f1"], int) and isinstance(a["f4"], float)
    assert a["f5"] == float("inf") and a["f6"] == float("-inf")
    assert a["f7"] is True and a["f8"] is True and a["f9"] == "MAX"
    assert b == {"name": "only"}
    assert d["empty"] == {}
    assert as_list(b.get("param")) == [] and as_list(7) == [7] and as_list([1, 2]) == [1, 2]


@pytest.mark.parametrize("text, where, what", [
    ('name: "x', ":1:", "unexpected character"),
    ("layer {\n  name: 'a'\n", ":end", "missing '}'"),
    ("layer {\n name: 'a' }\n}", ":3:1", "expected a field name"),
    ("a: 1\nb 2", ":2:3", "expected ':' or '{'"),
    ("a: {", ":end", "missing '}'"),
    ("a: [1, 2", ":end", "expected ',' or ']'"),
    ("a: 'x\\q'", ":1:4", "unknown escape"),
    ("a: :", ":1:4", "expected a value"),
    ("a: 1 $", ":1:6", "unexpected character"),
])
def test_parse_errors_name_the_place(text, where, what):
    with pytest.raises(PrototxtError) as e:
        parse_prototxt(text, source="t.prototxt")
    msg = str(e.value)
    assert msg.startswith("t.prototxt") and where in msg and what in msg, msg


# -- shape inference --------------------------------------------------------------------------

HEAD = '''
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 8 dim: 6 dim: 13 dim: 13 } shape { dim: 8 } } }
'''


def _conv(name, bottom, num, k, extra="", top=None, params=""):
    return (f'layer {{ name: "{name}" type: "Convolution" bottom: "{bottom}" '
            f'top: "{top or name}" {params} convolution_param {{ num_output: {num} '
            f'kernel_size: {k} {extra} }} }}\n')


def _specs(text, **kw):
    return {l.name: l for l in conv_layers(parse_prototxt(text), **kw)}


def test_grouped_convolution_is_per_group_with_count():
    text = HEAD + _conv("c1", "data", 12, 3, "pad: 1 stride: 2") \
        + _conv("c2", "c1", 16, 3, "pad: 1 group: 2")
    s = _specs(text)
    assert s["c1"] == LayerSpec("c1", 8, 6, 13, 13, 12, 3, 3, 1, 2, 1, 1, 1, False)
    # 13 -> (13 + 2 - 3) // 2 + 1 = 7; grouped: C and K halved, two cuDNN calls
    assert s["c2"] == LayerSpec("c2", 8, 6, 7, 7, 8, 3, 3, 1, 1, 1, 1, 2, True)


def test_kernel_h_w_dilation_and_errors():
    s = _specs(HEAD + _conv("c", "data", 4, 3, "dilation: 2 pad: 2"))["c"]
    assert (s.r, s.dilation, s.pad) == (3, 2, 2)
    with pytest.raises(PrototxtError, match="non-square"):
        _specs(HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
               'convolution_param { num_output: 4 kernel_h: 3 kernel_w: 3 pad_h: 1 pad_w: 0 } }')
    with pytest.raises(PrototxtError, match="'c'.*group.*does not divide"):
        _specs(HEAD + _conv("c", "data", 4, 3, "group: 4"))
    with pytest.raises(PrototxtError, match="'c'.*kernel_size.*missing"):
        _specs(HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
               'convolution_param { num_output: 4 } }')
    with pytest.raises(PrototxtError, match="'c'.*larger than the padded input"):
        _specs(HEAD + _conv("c", "data", 4, 15))


def _pool(name, bottom, k, s, pad=0, extra=""):
    return (f'layer {{ name: "{name}" type: "Pooling" bottom: "{bottom}" top: "{name}" '
            f'pooling_param {{ pool: MAX kernel_size: {k} stride: {s} pad: {pad} {extra} }} }}\n')


@pytest.mark.parametrize("h, k, s, pad, extra, out", [
    (55, 3, 2, 0, "", 27),          # AlexNet pool1
    (6, 3, 2, 0, "", 3),            # ceil: floor would give 2
    (13, 3, 2, 0, "", 6),
    (3, 2, 2, 1, "", 2),            # ceil gives 3, but the last window would start in the pad
    (5, 3, 2, 1, "", 3),
    (6, 3, 2, 0, "round_mode: FLOOR", 2),
    (7, 1, 1, 0, "", 7),
])
def test_pooling_uses_caffes_ceil_rounding(h, k, s, pad, extra, out):
    text = ('input: "x" input_shape { dim: 2 dim: 3 dim: %d dim: %d }\n' % (h, h)
            + _pool("p", "x", k, s, pad, extra) + _conv("c", "p", 4, 1))
    assert _specs(text)["c"].h == out
    assert infer_shapes(parse_prototxt(text))["p"] == (2, 3, out, out)


def test_global_pooling_inner_product_flatten_concat_eltwise_reshape():
    text = HEAD + _conv("a", "data", 10, 3, "pad: 1") + _conv("b", "data", 6, 1) + '''
    layer { name: "cat" type: "Concat" bottom: "a" bottom: "b" top: "cat" }
    layer { name: "sum" type: "Eltwise" bottom: "cat" bottom: "cat" top: "sum" }
    layer { name: "gp" type: "Pooling" bottom: "sum" top: "gp"
            pooling_param { pool: AVE global_pooling: true } }
    layer { name: "flat" type: "Flatten" bottom: "gp" top: "flat" }
    layer { name: "rs" type: "Reshape" bottom: "sum" top: "rs"
            reshape_param { shape { dim: 0 dim: -1 dim: 13 } } }
    layer { name: "fc" type: "InnerProduct" bottom: "sum" top: "fc"
            inner_product_param { num_output: 7 } }
    layer { name: "sm" type: "Softmax" bottom: "fc" top: "sm" }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss"
            top: "prob" }
    layer { name: "acc" type: "Accuracy" bottom: "fc" bottom: "label" top: "acc" }
    layer { name: "silence" type: "Silence" bottom: "acc" }
    '''
    shapes = infer_shapes(parse_prototxt(text))
    assert shapes["cat"] == (8, 16, 13, 13)
    assert shapes["sum"] == (8, 16, 13, 13)
    assert shapes["gp"] == (8, 16, 1, 1)
    assert shapes["flat"] == (8, 16)
    assert shapes["rs"] == (8, 16 * 13, 13)
    assert shapes["fc"] == (8, 7) and shapes["sm"] == (8, 7)
    assert shapes["loss"] == () and shapes["prob"] == (8, 7) and shapes["acc"] == ()


def test_shape_mismatches_are_errors():
    bad_cat = HEAD + _conv("a", "data", 4, 3) + _conv("b", "data", 4, 1) + \
        'layer { name: "cat" type: "Concat" bottom: "a" bottom: "b" top: "cat" }'
    with pytest.raises(PrototxtError, match="'cat'.*differ outside axis 1"):
        infer_shapes(parse_prototxt(bad_cat))
    bad_sum = bad_cat.replace('"Concat"', '"Eltwise"')
    with pytest.raises(PrototxtError, match="'cat'.*differ in shape"):
        infer_shapes(parse_prototxt(bad_sum))


def test_phases_include_exclude():
    text = HEAD + _conv("both", "data", 4, 3) + '''
    layer { name: "train_only" type: "Convolution" bottom: "data" top: "t"
            include { phase: TRAIN } convolution_param { num_output: 4 kernel_size: 5 } }
    layer { name: "test_only" type: "Convolution" bottom: "data" top: "t"
            include { phase: TEST } convolution_param { num_output: 4 kernel_size: 7 } }
    layer { name: "not_test" type: "Convolution" bottom: "t" top: "u"
            exclude { phase: TEST } convolution_param { num_output: 4 kernel_size: 1 } }
    '''
    assert list(_specs(text)) == ["both", "train_only", "not_test"]
    assert list(_specs(text, phase="TEST")) == ["both", "test_only"]
    assert _specs(text)["not_test"].h == 13 - 4
    with pytest.raises(PrototxtError, match="phase"):
        _specs(text, phase="VAL")


def test_batch_override_and_net_inputs():
    text = 'input: "x" input_dim: 4 input_dim: 3 input_dim: 9 input_dim: 9\n' + \
        _conv("c", "x", 8, 3)
    assert _specs(text)["c"].n == 4
    assert _specs(text, batch=32)["c"].n == 32
    text = 'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 ' \
        'dim: 9 dim: 9 } } }\n' + _conv("c", "x", 8, 3)
    assert _specs(text, batch=5)["c"] == LayerSpec("c", 5, 3, 9, 9, 8, 3, 3, bwd_data=False)
    legacy = '''layer { name: "d" type: "DummyData" top: "x" top: "y"
        dummy_data_param { num: 6 channels: 3 height: 11 width: 11 num: 6 channels: 1
        height: 1 width: 1 } }\n''' + _conv("c", "x", 8, 3)
    assert _specs(legacy)["c"] == LayerSpec("c", 6, 3, 11, 11, 8, 3, 3, bwd_data=False)
    assert infer_shapes(parse_prototxt(legacy))["y"] == (6, 1, 1, 1)
    with pytest.raises(PrototxtError, match="input_dim"):
        _specs('input: "x" input_dim: 4 input_dim: 3\n' + _conv("c", "x", 8, 3))
    with pytest.raises(PrototxtError, match="batch"):
        _specs(text, batch=0)


def test_backward_data_only_where_a_gradient_is_needed():
    text = HEAD + _conv("first", "data", 6, 3, "pad: 1") + '''
    layer { name: "relu" type: "ReLU" bottom: "first" top: "first" }
    ''' + _conv("second", "first", 6, 3, "pad: 1") + \
        _conv("frozen", "data", 6, 3, "pad: 1",
              params="param { lr_mult: 0 } param { lr_mult: 0 }") + \
        _conv("after_frozen", "frozen", 6, 3, "pad: 1") + '''
    layer { name: "bn" type: "BatchNorm" bottom: "data" top: "bn" }
    ''' + _conv("after_bn", "bn", 6, 3, "pad: 1") + '''
    layer { name: "sc" type: "Scale" bottom: "data" top: "sc" scale_param { bias_term: true } }
    ''' + _conv("after_scale", "sc", 6, 3, "pad: 1") + \
        _conv("no_prop", "second", 6, 3, "pad: 1").replace(
            "convolution_param", "propagate_down: false convolution_param") + \
        _conv("prop", "data", 6, 3, "pad: 1").replace(
            "convolution_param", "propagate_down: true convolution_param")
    s = _specs(text)
    assert s["first"].bwd_data is False
    assert s["second"].bwd_data is True
    assert s["frozen"].bwd_data is False
    assert s["after_frozen"].bwd_data is False      # nothing learnable before it
    assert s["after_bn"].bwd_data is False          # BatchNorm statistics are not learned
    assert s["after_scale"].bwd_data is True        # Scale has learnable parameters
    assert s["no_prop"].bwd_data is False
    assert s["prop"].bwd_data is True
    forced = _specs("force_backward: true\n" + text)
    assert all(l.bwd_data for l in forced.values())


@pytest.mark.parametrize("layer, match", [
    ('layer { name: "d" type: "Data" top: "data" data_param { batch_size: 4 } }',
     r"layer 'd' \(type Data\).*DummyData"),
    ('layer { name: "d" type: "ImageData" top: "data" }', r"'d' \(type ImageData\).*Input"),
    (HEAD + 'layer { name: "w" type: "Warp" bottom: "data" top: "w" }',
     r"layer 'w' \(type Warp\): unknown layer type 'Warp'"),
    (HEAD + _conv("c", "nothing", 4, 3), r"'c'.*bottom blob 'nothing'"),
    (HEAD + 'layer { name: "r" bottom: "data" top: "r" }', r"'r'.*'type' is missing"),
    (HEAD, "no Convolution layer"),
    (HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" }',
     r"'c'.*convolution_param"),
    (HEAD + _conv("c", "data", 4, 3) + _conv("c", "c", 4, 3), r"'c'.*duplicate"),
    ('layers { name: "old" type: CONVOLUTION }', "V1"),
])
def test_errors_name_the_layer(layer, match):
    with pytest.raises(PrototxtError, match=match):
        conv_layers(parse_prototxt(layer))


def test_read_prototxt_missing_file(tmp_path):
    with pytest.raises(PrototxtError, match="nope.prototxt: cannot read"):
        read_prototxt(tmp_path / "nope.prototxt")


def test_merge_shapes_sums_counts():
    a = LayerSpec("a", 8, 3, 9, 9, 4, 3, 3)
    b = LayerSpec("b", 8, 3, 9, 9, 4, 3, 3, count=2)
    c = LayerSpec("c", 8, 3, 9, 9, 4, 3, 3, bwd_data=False)
    assert merge_shapes([a, c, b]) == [LayerSpec("a", 8, 3, 9, 9, 4, 3, 3, count=3), c]


# -- the full networks ------------------------------------------------------------------------

def _shape_counts(layers):
    """{geometry and bwd_data: kernel instances per iteration}."""
    out = Counter()
    for l in layers:
        out[l.n, l.c, l.h, l.w, l.k, l.r, l.s, l.pad, l.stride, l.dilation, l.groups,
            l.bwd_data] += l.count
    return out


@needs_shared
@pytest.mark.parametrize("net", ["alexnet", "resnet18"])
def test_full_networks_match_the_benchmarked_shapes(net):
    inferred = read_prototxt(REPO / "prototxt" / f"{net}.prototxt")
    shipped = read_layers(REPO / "ucudnn" / "data" / "h200" / f"{net}_layers.csv")
    shared = read_layers(SHARED / f"layers_{net}.csv")
    assert _shape_counts(inferred) == _shape_counts(shipped)
    # the shared list gives each shape once, without counts or bwd_data
    geometry = lambda ls: {(l.n, l.c, l.h, l.w, l.k, l.r, l.s, l.pad, l.stride) for l in ls}  # noqa
    assert geometry(inferred) == geometry(shared)
    assert [l.name for l in inferred if not l.bwd_data] == ["conv1"]
    expected_instances = {"alexnet": 8, "resnet18": 20}[net]
    assert sum(l.count for l in inferred) == expected_instances
    assert all(l.n == 64 for l in read_prototxt(REPO / "prototxt" / f"{net}.prototxt", batch=64))


def test_cifar10_quick_net_shapes():
    nets = Path(__file__).resolve().parents[1] / "prototxt"
    convs = read_prototxt(nets / "cifar10.prototxt")
    assert [(l.name, l.n, l.c, l.h, l.k, l.r, l.pad, l.bwd_data) for l in convs] == [
        ("conv1", 1024, 3, 32, 32, 5, 2, False), ("conv2", 1024, 32, 16, 32, 5, 2, True),
        ("conv3", 1024, 32, 8, 64, 5, 2, True)]
