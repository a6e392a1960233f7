"""Caffe's net messages through protobuf only (ucudnn.caffe.proto): the text format, files
named in errors, strict reading, the schema, writing nets."""
import os
import re
import subprocess
import sys

import pytest

import child_env
from repo_paths import NETS, SHIPPED
from ucudnn.caffe import proto as cp
from ucudnn.caffe.prototxt import PrototxtError, parse_net_text, read_prototxt


# -- text format (protobuf's) -----------------------------------------------------------------

def test_text_format_features():
    text = r'''
    # a comment
    name: "a\"b\\c\n\x41\101"   # trailing comment
    input: "data" input: 'label'
    layer {
      name: "c" type: "Conv" 'olution'
      param { lr_mult: 1 } param { lr_mult: 2.5e0 }
      convolution_param: { num_output: 96 kernel_size: [3, 5] bias_term: false pad: 0x2 };
      include < phase: TEST >,
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


def test_nets_are_read_as_caffe_reads_them_an_unknown_field_is_an_error():
    """parse_net_text reads as Caffe does: an unknown field is an error naming the line,
    column, layer and field (there is no lenient read that would skip it)."""
    text = ('layer {\n  name: "c" type: "Convolution"\n'
            '  no_such_field: 3 no_such_message { x: [1, 2] y < z: MAX > }\n}\n')
    with pytest.raises(PrototxtError, match=r'^<prototxt>:3:3: layer \'c\': .*no field named '
                                            r'"no_such_field"'):
        parse_net_text(text)


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


LENET_TRAIN = """name: "LeNet"
layer {
  name: "mnist" type: "Data" top: "data" top: "label"
  include { phase: TRAIN }
  transform_param { scale: 0.00390625 }
  data_param { source: "mnist_train_lmdb" batch_size: 64 backend: LMDB }
}
"""


def test_fields_of_train_nets_are_read(tmp_path):
    """The schema holds every field of Caffe's nets: a data layer's data_param and
    transform_param (what every train_val net has) are read, kept and written back."""
    path = tmp_path / "lenet.prototxt"
    path.write_text(LENET_TRAIN)
    pb2 = cp.load_caffe_pb2()
    net = cp.read_net(pb2, path)
    d = net.layer[0]
    assert d.type == "Data" and list(d.top) == ["data", "label"]
    assert d.transform_param.scale == pytest.approx(0.00390625)
    assert (d.data_param.source, d.data_param.batch_size) == ("mnist_train_lmdb", 64)
    out = tmp_path / "out.prototxt"
    cp.write_net(net, out)
    assert cp.read_net(pb2, out) == net


def test_v1_layers_are_upgraded_as_caffe_does(tmp_path, capsys):
    """Note [Upgrading V1 nets]: type enums become names, blobs_lr/weight_decay the param
    specs, a DATA layer's own crop_size and mirror its transform_param; a note says so."""
    path = tmp_path / "v1.prototxt"
    path.write_text('name: "old"\nlayers { name: "data" type: DATA top: "data" top: "label"\n'
                    '  data_param { source: "db" batch_size: 4 crop_size: 9 mirror: true }\n'
                    '  include { phase: TRAIN } }\n'
                    'layers { name: "conv1" type: CONVOLUTION bottom: "data" top: "conv1"\n'
                    '  blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0\n'
                    '  convolution_param { num_output: 4 kernel_size: 3 } }\n'
                    'layers { name: "loss" type: SOFTMAX_LOSS bottom: "conv1" bottom: "label" }\n')
    net = cp.read_net(cp.load_caffe_pb2(), path)
    assert len(net.layers) == 0 and [l.type for l in net.layer] == ["Data", "Convolution",
                                                                    "SoftmaxWithLoss"]
    data, conv = net.layer[0], net.layer[1]
    assert (data.transform_param.crop_size, data.transform_param.mirror) == (9, True)
    assert not data.data_param.HasField("crop_size") and data.include[0].phase == 0
    assert [(p.lr_mult, p.decay_mult) for p in conv.param] == [(1, 1), (2, 0)]
    assert list(conv.bottom) == ["data"] and conv.convolution_param.num_output == 4
    err = capsys.readouterr().err
    assert err.startswith(f"ucudnn: note: {path}: 3 V1 'layers' definitions upgraded"), err
    assert err.count("\n") == 1
    path.write_text('name: "old"\nlayers { layer { name: "c" type: "conv" } }\n')
    with pytest.raises(PrototxtError, match=rf"^{path}:2:1: layer 'c': V0 layer definitions "
                                            ".*upgrade_net_proto_text"):
        cp.read_net(cp.load_caffe_pb2(), path)
    path.write_text('layer { name: "a" type: "ReLU" }\nlayers { name: "b" type: RELU }\n')
    with pytest.raises(PrototxtError, match="Refusing to upgrade inconsistent NetParameter"):
        read_prototxt(path)


@pytest.mark.parametrize("net", ["alexnet", "resnet18", "resnet50", "cifar10"])
def test_shipped_nets_round_trip_strictly(tmp_path, net):
    """The shipped nets, read strictly, written, read
    back, they are the same message (and write the same text again)."""
    pb2 = cp.load_caffe_pb2()
    original = cp.read_net(pb2, NETS / f"{net}.prototxt")
    out = tmp_path / "out.prototxt"
    cp.write_net(original, out)
    again = cp.read_net(pb2, out)
    assert again == original
    out2 = tmp_path / "out2.prototxt"
    cp.write_net(again, out2)
    assert out2.read_text() == out.read_text()


#: one layer of each of these types, every field of their parameters set to a
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


def test_every_parameter_of_these_layers_round_trips(tmp_path):
    path = tmp_path / "every.prototxt"
    path.write_text(EVERY_PARAM)
    pb2 = cp.load_caffe_pb2()
    net = cp.read_net(pb2, path)
    out = tmp_path / "out.prototxt"
    cp.write_net(net, out)
    assert cp.read_net(pb2, out) == net
    # every field of the per-type messages above was set, so all of them round-tripped
    from ucudnn.caffe.shapes import _values
    unset = [f"{f.name}.{g.name}" for layer in net.layer for f, msg in layer.ListFields()
             if f.message_type and f.name.endswith("_param") and f.name != "ucudnn_param"
             for g in msg.DESCRIPTOR.fields if not _values(msg, g.name)]
    assert unset == []



def test_owned_classes_need_no_protoc_at_run_time(tmp_path):
    """`ucudnn plan --prototxt` with no protoc on PATH (a user's machine): the classes come
    from the shipped caffe_net.desc (compiled here first where a source tree lacks it); no
    compiler is found in the child (no protoc on PATH, grpcio-tools hidden)."""
    desc = cp.OWNED_DESCRIPTOR
    if not desc.is_file():
        from ucudnn.caffe.protoc import descriptor_set, find_protoc
        if find_protoc() is None:
            pytest.skip("a source tree without caffe_net.desc and no protoc to make one")
        desc = tmp_path / "caffe_net.desc"
        desc.write_bytes(descriptor_set(cp.OWNED_PROTO))
    code = ("import sys, pathlib; sys.modules['grpc_tools'] = None; "
            "import ucudnn.caffe.proto as cp; "
            "cp.OWNED_DESCRIPTOR = pathlib.Path(sys.argv[1]); "
            "from ucudnn.caffe import protoc; assert protoc.find_protoc() is None; "
            "from ucudnn.cli import main; sys.exit(main(sys.argv[2:]))")
    env = {k: v for k, v in os.environ.items() if k not in ("PROTOC", "UCUDNN_CAFFE_PROTO")}
    env.update(PATH=str(tmp_path / "empty"), PYTHONPATH=child_env.python_path(),
               UCUDNN_CACHE=str(tmp_path / "c.sqlite"))
    table = SHIPPED / "alexnet_bench.csv"
    res = subprocess.run([sys.executable, "-c", code, str(desc), "plan", "--prototxt",
                          str(NETS / "alexnet.prototxt"), "--table", str(table)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "conv2/fwd" in res.stdout and "Traceback" not in res.stderr
