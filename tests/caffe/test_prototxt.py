"""Caffe prototxt through protobuf's text_format and Caffe's shape inference, without Caffe."""
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ucudnn.plan.network import LayerSpec, read_layers
from ucudnn.caffe import proto as cp
from ucudnn.caffe.prototxt import (PrototxtError, UcudnnSettings, conv_layers, infer_shapes,
                                   load_prototxt, merge_shapes, parse_net_text, read_prototxt,
                                   ucudnn_settings)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "h200-cudnn9.14"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data not found at {SHARED}")


# -- text format (protobuf's) -----------------------------------------------------------------

def test_text_format_features_and_unknown_fields():
    text = r'''
    # a comment
    name: "a\"b\\c\n\x41\101"   # trailing comment
    input: "data" input: 'label'
    layer {
      name: "c" type: "Conv" 'olution'
      param { lr_mult: 1 } param { lr_mult: 2.5e0 }
      convolution_param: { num_output: 96 kernel_size: [3, 5] bias_term: false pad: 0x2 };
      include < phase: TEST >,
      no_such_field: 3 no_such_message { x: [1, 2] y < z: MAX > }
    }
    layer { name: "only" }
    '''
    net = parse_net_text(text)
    assert net.name == 'a"b\\c\nAA'
    assert list(net.input) == ["data", "label"]
    a, b = net.layer
    assert a.type == "Convolution"                          # adjacent strings concatenate
    assert [p.lr_mult for p in a.param] == [1, 2.5]
    c = a.convolution_param
    assert (c.num_output, list(c.kernel_size), c.bias_term, list(c.pad)) == (96, [3, 5], False, [2])
    assert not c.HasField("group") and c.group == 1           # Caffe's defaults
    assert a.include[0].phase == 1                           # TEST
    assert b.name == "only" and not b.HasField("type")


@pytest.mark.parametrize("text, where, what", [
    ('name: "x', ":1:7:", "String missing ending quote"),
    ("layer {\n  name: 'a'\n", ":2:9:", 'Expected "}"'),
    ("layer {\n name: 'a' }\n}", ":3:1:", "Expected identifier"),
    ("name: 'a'\nlayer 2", ":2:7:", 'Expected "{"'),
    ("input: ['a', 'b'", ":1:17:", 'Expected ","'),
    ("name: :", ":1:7:", "Expected string"),
    ("name: 'a' $", ":1:11:", "Expected identifier"),
    ("force_backward: maybe", ":1:17:", 'Expected "true" or "false"'),
    ("input_dim: 1.5", ":1:12:", "Couldn't parse integer"),
    ("ucudnn_param { policy: FAST }", ":1:24:", '"caffe.UcudnnParameter.Policy" has no value named FAST'),
])
def test_parse_errors_name_file_line_and_column(tmp_path, text, where, what):
    path = tmp_path / "t.prototxt"
    path.write_text(text)
    with pytest.raises(PrototxtError) as e:
        read_prototxt(path)
    msg = str(e.value)
    assert msg.startswith(str(path) + where) and what in msg, msg


def test_binary_and_non_utf8_files_are_named(tmp_path):
    for name, data, what in (("model.caffemodel", b"\n\x05conv1\x00\x12\x01", "a binary file (NUL bytes)"),
                             ("latin1.prototxt", b'name: "caf\xe9"', "not UTF-8 text (byte 0xe9")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(PrototxtError, match="^" + re.escape(f"{tmp_path / name}: {what}")):
            read_prototxt(tmp_path / name)
    with pytest.raises(PrototxtError, match="nope.prototxt: cannot read"):
        read_prototxt(tmp_path / "nope.prototxt")


def test_strict_reading_names_an_unknown_field(tmp_path):
    """Variants are written from strictly read nets: a skipped field would be lost."""
    path = tmp_path / "n.prototxt"
    path.write_text('name: "n"\nlayer {\n  name: "c"\n  warp_param { x: 1 }\n}\n')
    pb2 = cp.load_caffe_pb2()
    with pytest.raises(PrototxtError, match=rf"^{path}:4:3: .*no field named \"warp_param\".*--caffe-proto"):
        cp.read_net(pb2, path)
    assert cp.read_net(pb2, path, lenient=True).layer[0].name == "c"


LENET_TRAIN = """name: "LeNet"
layer {
  name: "mnist" type: "Data" top: "data" top: "label"
  include { phase: TRAIN }
  transform_param { scale: 0.00390625 }
  data_param { source: "mnist_train_lmdb" batch_size: 64 backend: LMDB }
}
"""


def test_fields_outside_the_subset(tmp_path):
    """caffe_subset.proto leaves out data layers' parameters and transform_param: shape
    inference skips them (and refuses the Data layer by name); a strict read names the file,
    line, column and field, and says how to name Caffe's patched caffe.proto instead."""
    path = tmp_path / "lenet.prototxt"
    path.write_text(LENET_TRAIN)
    pb2 = cp.load_caffe_pb2()
    with pytest.raises(PrototxtError) as e:
        cp.read_net(pb2, path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:5:3: ") and 'no field named "transform_param"' in msg, msg
    for hint in ("--caffe-proto PATH", "$UCUDNN_CAFFE_PROTO", "patched caffe.proto",
                 "third_party/caffe/src/src/caffe/proto/caffe.proto",
                 "scripts/build_caffe.sh --skip-build"):
        assert hint in msg, msg
    net = cp.read_net(pb2, path, lenient=True)
    assert net.layer[0].type == "Data" and list(net.layer[0].top) == ["data", "label"]
    with pytest.raises(PrototxtError, match="layer 'mnist' \\(type Data\\)"):
        read_prototxt(path)


def test_v1_layers_are_refused_by_name(tmp_path):
    path = tmp_path / "v1.prototxt"
    path.write_text('name: "old"\nlayers {\n  name: "conv1"\n  type: CONVOLUTION\n}\n')
    with pytest.raises(PrototxtError, match=rf"^{path}:3:3: .*V1 'layers' definitions are not "
                                            "supported.*upgrade_net_proto_text"):
        cp.read_net(cp.load_caffe_pb2(), path)
    path.write_text('name: "old"\nlayers { }\n')
    with pytest.raises(PrototxtError, match="V1 'layers' definitions are not supported"):
        read_prototxt(path)


@pytest.mark.parametrize("net", ["alexnet", "resnet18", "cifar10"])
def test_shipped_nets_round_trip_strictly_with_the_subset(tmp_path, net):
    """The shipped nets use no field outside caffe_subset.proto: read strictly, written, read
    back, they are the same message (and write the same text again)."""
    pb2 = cp.load_caffe_pb2()
    original = cp.read_net(pb2, REPO / "ucudnn" / "data" / "nets" / f"{net}.prototxt")
    out = tmp_path / "out.prototxt"
    cp.write_net(original, out)
    again = cp.read_net(pb2, out)
    assert again == original
    out2 = tmp_path / "out2.prototxt"
    cp.write_net(again, out2)
    assert out2.read_text() == out.read_text()


#: one layer of each type whose parameters the subset declares, every field of those set to a
#: non-default value (the usual nets' layers: VGG/AlexNet, ResNet, GoogLeNet's Concat, ...)
EVERY_PARAM = """name: "every" input: "x" input_shape { dim: 2 dim: 4 dim: 8 dim: 8 }
input_dim: 2 force_backward: true debug_info: true
state { phase: TRAIN level: 2 stage: "s" }
ucudnn_param { policy: ALL optimizer: ILP workspace_limit: 1 total_workspace: 2
  micro_batch_size: 1 micro_batch_size: 2 math: TENSOR_OP benchmark_repeats: 4
  cache_path: "c" exclude_winograd: true }
layer { name: "in" type: "Input" top: "in" input_param { shape { dim: 2 dim: 4 } } }
layer { name: "dd" type: "DummyData" top: "d" dummy_data_param {
  data_filler { type: "gaussian" value: 1 min: -1 max: 2 mean: 0.5 std: 3 sparse: 2
                variance_norm: AVERAGE }
  shape { dim: 1 } num: 1 channels: 2 height: 3 width: 4 } }
layer { name: "c" type: "Convolution" bottom: "x" top: "c" phase: TEST loss_weight: 0.5
  param { name: "w" share_mode: PERMISSIVE lr_mult: 2 decay_mult: 0 } propagate_down: true
  include { phase: TRAIN min_level: 1 max_level: 3 stage: "s" not_stage: "t" }
  convolution_param { num_output: 4 bias_term: false pad: 1 kernel_size: 3 stride: 1
    dilation: 1 pad_h: 1 pad_w: 1 kernel_h: 3 kernel_w: 3 stride_h: 1 stride_w: 1 group: 2
    weight_filler { type: "msra" } bias_filler { type: "constant" } engine: CUDNN axis: 1
    force_nd_im2col: true }
  ucudnn_param { policy: UNDIVIDED } }
layer { name: "e" type: "Deconvolution" exclude { phase: TEST } }
layer { name: "a" type: "Accuracy" accuracy_param { top_k: 5 axis: 2 ignore_label: 3 } }
layer { name: "bn" type: "BatchNorm" batch_norm_param { use_global_stats: true
  moving_average_fraction: 0.9 eps: 0.001 engine: CUDNN } }
layer { name: "b" type: "Bias" bias_param { axis: 0 num_axes: 2 filler { value: 1 } } }
layer { name: "cl" type: "Clip" clip_param { min: -1 max: 1 } }
layer { name: "cc" type: "Concat" concat_param { axis: 2 concat_dim: 2 } }
layer { name: "dr" type: "Dropout" dropout_param { dropout_ratio: 0.3 } }
layer { name: "el" type: "Eltwise" eltwise_param { operation: MAX coeff: 1 coeff: -1
  stable_prod_grad: false } }
layer { name: "elu" type: "ELU" elu_param { alpha: 0.5 } }
layer { name: "f" type: "Flatten" flatten_param { axis: 2 end_axis: 3 } }
layer { name: "ip" type: "InnerProduct" inner_product_param { num_output: 3 bias_term: false
  weight_filler { type: "xavier" } bias_filler { value: 2 } axis: 2 transpose: true } }
layer { name: "lrn" type: "LRN" lrn_param { local_size: 3 alpha: 0.1 beta: 0.5
  norm_region: WITHIN_CHANNEL k: 2 engine: CAFFE } }
layer { name: "l" type: "SoftmaxWithLoss" loss_param { ignore_label: 1 normalization: FULL
  normalize: false } }
layer { name: "p" type: "Pooling" pooling_param { pool: AVE pad: 1 pad_h: 1 pad_w: 1
  kernel_size: 2 kernel_h: 2 kernel_w: 2 stride: 2 stride_h: 2 stride_w: 2 engine: CUDNN
  global_pooling: true round_mode: FLOOR } }
layer { name: "pw" type: "Power" power_param { power: 2 scale: 3 shift: 4 } }
layer { name: "pr" type: "PReLU" prelu_param { filler { value: 0.25 } channel_shared: true } }
layer { name: "r" type: "ReLU" relu_param { negative_slope: 0.1 engine: CAFFE } }
layer { name: "rs" type: "Reshape" reshape_param { shape { dim: 0 dim: -1 } axis: 1
  num_axes: 2 } }
layer { name: "sc" type: "Scale" scale_param { axis: 0 num_axes: 2 filler { value: 1 }
  bias_term: true bias_filler { value: 0 } } }
layer { name: "sg" type: "Sigmoid" sigmoid_param { engine: CUDNN } }
layer { name: "sm" type: "Softmax" softmax_param { engine: CAFFE axis: 2 } }
layer { name: "th" type: "TanH" tanh_param { engine: CUDNN } }
layer { name: "t" type: "Threshold" threshold_param { threshold: 0.5 } }
"""


def test_every_subset_parameter_round_trips(tmp_path):
    path = tmp_path / "every.prototxt"
    path.write_text(EVERY_PARAM)
    pb2 = cp.load_caffe_pb2()
    net = cp.read_net(pb2, path)
    out = tmp_path / "out.prototxt"
    cp.write_net(net, out)
    assert cp.read_net(pb2, out) == net
    # every field of the per-type messages was set (a field added to the subset belongs here)
    from ucudnn.caffe.prototxt import _values
    unset, seen = [], set()
    for layer in net.layer:
        for f, msg in layer.ListFields():
            if f.message_type and f.name.endswith("_param") and f.name != "ucudnn_param":
                seen.add(f.name)
                unset += [f"{f.name}.{g.name}" for g in msg.DESCRIPTOR.fields
                          if not _values(msg, g.name)]
    assert unset == []
    assert seen == {f.name for f in net.layer[0].DESCRIPTOR.fields
                    if f.name.endswith("_param") and f.name != "ucudnn_param"}


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
    return {l.name: l for l in conv_layers(parse_net_text(text), **kw)}


def test_grouped_convolution_keeps_total_channels_and_groups():
    text = HEAD + _conv("c1", "data", 12, 3, "pad: 1 stride: 2") \
        + _conv("c2", "c1", 16, 3, "pad: 1 group: 2")
    s = _specs(text)
    assert s["c1"] == LayerSpec("c1", 8, 6, 13, 13, 12, 3, 3, 1, 2, 1, 1, 1, False)
    # 13 -> (13 + 2 - 3) // 2 + 1 = 7; grouped: the total C and K, and Caffe's group count
    assert s["c2"] == LayerSpec("c2", 8, 12, 7, 7, 16, 3, 3, 1, 1, 1, groups=2, count=1,
                                bwd_data=True)


def test_two_bottoms_are_two_runs():
    text = HEAD + _conv("a", "data", 6, 1) + _conv("b", "data", 6, 1) + \
        'layer { name: "shared" type: "Convolution" bottom: "a" bottom: "b" top: "sa" ' \
        'top: "sb" convolution_param { num_output: 4 kernel_size: 3 group: 2 } }\n'
    assert _specs(text)["shared"] == LayerSpec("shared", 8, 6, 13, 13, 4, 3, 3, groups=2,
                                               count=2, bwd_data=True)
    shapes = infer_shapes(parse_net_text(text))
    assert shapes["sa"] == shapes["sb"] == (8, 4, 11, 11)


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
    assert infer_shapes(parse_net_text(text))["p"] == (2, 3, out, out)


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
    shapes = infer_shapes(parse_net_text(text))
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
        infer_shapes(parse_net_text(bad_cat))
    bad_sum = bad_cat.replace('"Concat"', '"Eltwise"')
    with pytest.raises(PrototxtError, match="'cat'.*differ in shape"):
        infer_shapes(parse_net_text(bad_sum))


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
    with pytest.raises(PrototxtError, match="'both'.*include or exclude rules, not both"):
        _specs(text.replace('top: "both"', 'top: "both" include { phase: TRAIN } '
                            'exclude { phase: TEST }'))


def test_state_level_and_stages():
    """Caffe's StateMeetsRule with the net's own state (the phase is the caller's)."""
    rules = {"deploy": 'include { stage: "deploy" }', "lvl3": "include { min_level: 3 }",
             "not_deploy": 'exclude { stage: "deploy" }',
             "max2": 'include { max_level: 2 not_stage: "train" }'}
    text = 'state { level: 2 stage: "deploy" }\n' + HEAD + "".join(
        _conv(name, "data", 4, 1).replace("convolution_param", rule + " convolution_param")
        for name, rule in rules.items())
    assert list(_specs(text)) == ["deploy", "max2"]


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
    assert infer_shapes(parse_net_text(legacy))["y"] == (6, 1, 1, 1)
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
    (HEAD + _conv("c", "data", 0, 3), r"'c'.*'convolution_param.num_output' must be >= 1"),
    (HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
     'convolution_param { kernel_size: 3 } }', r"'c'.*'convolution_param.num_output' is missing"),
    (HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
     'convolution_param { num_output: 4 kernel_size: 3 kernel_h: 3 kernel_w: 3 } }',
     r"'c'.*either kernel_size or kernel_h/kernel_w"),
    (HEAD + 'layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc" }',
     r"'fc'.*'inner_product_param.num_output' is missing"),
    ('input: "x" input_shape { dim: 2 dim: -3 dim: 5 dim: 5 }\n' + _conv("c", "x", 4, 3),
     r"net input: field 'input_shape.dim' must be >= 0, got -3"),
])
def test_errors_name_the_layer(layer, match):
    with pytest.raises(PrototxtError, match=match):
        conv_layers(parse_net_text(layer))


# -- ucudnn_param -----------------------------------------------------------------------------

def test_ucudnn_settings_net_wide_and_per_layer(tmp_path):
    text = ('ucudnn_param { policy: ALL optimizer: ILP total_workspace: 1073741824 '
            'micro_batch_size: 8 micro_batch_size: 16 }\n' + HEAD + _conv("a", "data", 4, 3)
            + _conv("b", "a", 4, 3).replace(
                "convolution_param", "ucudnn_param { policy: UNDIVIDED math: FMA "
                "micro_batch_size: 4 } convolution_param"))
    path = tmp_path / "u.prototxt"
    path.write_text(text)
    net = load_prototxt(path, batch=32)
    assert [l.name for l in net.layers] == ["a", "b"] and net.layers[0].n == 32
    assert net.net_ucudnn == UcudnnSettings(
        policy="all", optimizer="ilp", workspace_limit=8 << 20, total_workspace=1 << 30,
        micro_batch_sizes=(8, 16), math="default", benchmark_repeats=1, cache_path="",
        exclude_winograd=False)
    assert net.ucudnn["a"] == net.net_ucudnn
    # the layer's set fields win; its micro_batch_size replaces the net's (Caffe's Net::Init)
    b = net.ucudnn["b"]
    assert (b.policy, b.math, b.micro_batch_sizes, b.optimizer, b.total_workspace) == \
        ("undivided", "fma", (4,), "ilp", 1 << 30)
    # a layer of its own only, and none at all
    only = HEAD + _conv("a", "data", 4, 3) + _conv("b", "a", 4, 3).replace(
        "convolution_param", "ucudnn_param { workspace_limit: 0 } convolution_param")
    net_s, per_layer = ucudnn_settings(parse_net_text(only))
    assert net_s is None and per_layer["a"] is None
    assert per_layer["b"].workspace_limit == 0 and per_layer["b"].policy == "powerOfTwo"


@pytest.mark.parametrize("ucudnn, match", [
    ("ucudnn_param { workspace_limit: -1 }", r"net: field 'ucudnn_param.workspace_limit' must be >= 0, got -1"),
    ("ucudnn_param { total_workspace: -5 }", r"net: field 'ucudnn_param.total_workspace' must be >= 0"),
    ("ucudnn_param { benchmark_repeats: 0 }", r"net: field 'ucudnn_param.benchmark_repeats' must be >= 1"),
    ("ucudnn_param { micro_batch_size: 0 }", r"net: field 'ucudnn_param.micro_batch_size' must be >= 1"),
])
def test_bad_ucudnn_param_is_refused(ucudnn, match):
    net = parse_net_text(ucudnn + HEAD + _conv("a", "data", 4, 3), "u.prototxt")
    with pytest.raises(PrototxtError, match="^u.prototxt: " + match):
        ucudnn_settings(net, source="u.prototxt")
    layer = parse_net_text(HEAD + _conv("a", "data", 4, 3).replace(
        "convolution_param", ucudnn + " convolution_param"), "u.prototxt")
    with pytest.raises(PrototxtError, match=r"layer 'a' \(type Convolution\): field"):
        ucudnn_settings(layer, source="u.prototxt")


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
    inferred = read_prototxt(REPO / "ucudnn" / "data" / "nets" / f"{net}.prototxt")
    shipped = read_layers(REPO / "ucudnn" / "data" / "h200" / f"{net}_layers.csv")
    shared = read_layers(SHARED / f"layers_{net}.csv")
    assert _shape_counts(inferred) == _shape_counts(shipped)
    # the shared list gives each shape once, per group, without counts or bwd_data
    geometry = lambda ls: {(l.n, l.c // l.groups, l.h, l.w, l.k // l.groups, l.r, l.s, l.pad,  # noqa
                            l.stride) for l in ls}
    assert geometry(inferred) == geometry(shared)
    assert [l.name for l in inferred if not l.bwd_data] == ["conv1"]
    expected_calls = {"alexnet": 8, "resnet18": 20}[net]     # cuDNN calls per op and pass
    assert sum(l.count * l.groups for l in inferred) == expected_calls
    assert all(l.n == 64 for l in read_prototxt(REPO / "ucudnn" / "data" / "nets" / f"{net}.prototxt", batch=64))


def test_cifar10_quick_net_shapes():
    nets = Path(__file__).resolve().parents[1] / "ucudnn" / "data" / "nets"
    convs = read_prototxt(nets / "cifar10.prototxt")
    assert [(l.name, l.n, l.c, l.h, l.k, l.r, l.pad, l.bwd_data) for l in convs] == [
        ("conv1", 1024, 3, 32, 32, 5, 2, False), ("conv2", 1024, 32, 16, 32, 5, 2, True),
        ("conv3", 1024, 32, 8, 64, 5, 2, True)]


def test_owned_classes_need_no_protoc_at_run_time(tmp_path):
    """`ucudnn plan --prototxt` with no protoc on PATH (a user's machine): the classes come
    from the shipped caffe_subset.desc (compiled here first where a source tree lacks it)."""
    desc = cp.OWNED_DESCRIPTOR
    if not desc.is_file():
        from ucudnn.caffe.protoc import descriptor_set, find_protoc
        if find_protoc() is None:
            pytest.skip("a source tree without caffe_subset.desc and no protoc to make one")
        desc = tmp_path / "caffe_subset.desc"
        desc.write_bytes(descriptor_set(cp.OWNED_PROTO))
    code = ("import sys, pathlib, ucudnn.caffe.proto as cp; "
            "cp.OWNED_DESCRIPTOR = pathlib.Path(sys.argv[1]); "
            "from ucudnn.caffe import protoc; assert protoc.find_protoc() is None; "
            "from ucudnn.cli import main; sys.exit(main(sys.argv[2:]))")
    env = {k: v for k, v in os.environ.items() if k not in ("PROTOC", "UCUDNN_CAFFE_PROTO")}
    env.update(PATH=str(tmp_path / "empty"), PYTHONPATH=str(REPO),
               UCUDNN_CACHE=str(tmp_path / "c.sqlite"))
    table = REPO / "ucudnn" / "data" / "h200" / "alexnet_bench.csv"
    res = subprocess.run([sys.executable, "-c", code, str(desc), "plan", "--prototxt",
                          str(REPO / "ucudnn" / "data" / "nets" / "alexnet.prototxt"), "--table", str(table)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "conv2/fwd" in res.stdout and "Traceback" not in res.stderr
