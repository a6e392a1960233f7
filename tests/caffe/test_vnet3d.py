"""prototxt/vnet3d.prototxt, a small V-Net-style 3-D net: every Convolution has 3 spatial axes
and engine DEFAULT, so the patched Caffe runs each on its cuDNN layer through ucudnn (Note
[Convolutions that reach cuDNN] in ucudnn/caffe/shapes.py) and ``ucudnn plan --prototxt``
plans each as a 3-D kernel (here over the fake core). The GPU tier runs the net in Caffe
(tests/gpu/test_caffe_3d_gpu.py)."""
import json
import sqlite3

from ucudnn.caffe.proto import load_caffe_pb2, read_net
from ucudnn.caffe.prototxt import load_prototxt
from ucudnn.cli import main
from ucudnn.plan.conv import ConvShape

from repo_paths import REPO

VNET = REPO / "prototxt" / "vnet3d.prototxt"


def _axes(values, default):
    """A convolution_param field as Caffe reads it for 3 spatial axes."""
    values = tuple(values)
    return values * 3 if len(values) == 1 else values or (default,) * 3


def test_every_convolution_is_a_3d_layer_of_the_prototxt_s_geometry():
    convs = [l for l in read_net(load_caffe_pb2(), VNET).layer if l.type == "Convolution"]
    net = load_prototxt(VNET)
    assert net.off_cudnn == {}
    assert [l.name for l in net.layers] == [l.name for l in convs]
    for spec, layer in zip(net.layers, convs):
        p = layer.convolution_param
        assert len(spec.spatial) == 3, spec
        assert spec.kernel == _axes(p.kernel_size, None), spec.name
        assert spec.pad == _axes(p.pad, 0) and spec.stride == _axes(p.stride, 1), spec.name
        assert spec.dilation == _axes(p.dilation, 1), spec.name
        assert spec.k == p.num_output and spec.layout == "NCHW" and spec.groups == 1
    by = {l.name: l for l in net.layers}
    data = tuple(read_net(load_caffe_pb2(), VNET).layer[0].dummy_data_param.shape[0].dim)
    assert (by["conv_in"].n, by["conv_in"].c) + by["conv_in"].spatial == data
    # the stride-2 convolutions halve the volume, the Deconvolutions double it back, and the
    # Concats give the up path both halves' channels
    assert by["conv2a"].spatial == tuple(x // 2 for x in data[2:])
    assert by["conv3a"].spatial == tuple(x // 4 for x in data[2:])
    assert by["conv4"].spatial == by["conv2a"].spatial
    assert by["conv4"].c == by["conv3b"].k // 2 + by["conv2b"].k
    assert by["conv5"].spatial == by["conv_in"].spatial
    # force_backward: every layer runs backward-data, the first one too
    assert all(l.bwd_data for l in net.layers)


def test_vnet3d_is_planned_as_3d_kernels(fake_core, capsys, tmp_path):
    cache = tmp_path / "c.sqlite"
    capsys.readouterr()
    assert main(["plan", "--prototxt", str(VNET), "--optimizer", "shared", "--limit", "64MiB",
                 "--cache", str(cache), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    net = load_prototxt(VNET)
    want = {(ConvShape.from_layer(l), op) for l in net.layers for op in l.ops}
    assert {(c.shape, c.op) for c in fake_core.calls} == want
    assert all(s.ndim == 3 for s, _ in want)
    assert {(k["layer"], k["op"]) for k in doc["kernels"]} == \
        {(l.name, op) for l in net.layers for op in l.ops}
    conn = sqlite3.connect(cache)
    keys = {r[0] for r in conn.execute("SELECT shape FROM entries")}
    conn.close()
    assert keys == {s.key() for s, _ in want} and all(",d=" in k for k in keys)


def test_a_3d_convolution_in_an_nhwc_net_is_refused_as_caffe_refuses_it(tmp_path, capsys):
    text = VNET.read_text().replace("ucudnn_param { policy: POWER_OF_TWO",
                                    "ucudnn_param { layout: NHWC policy: POWER_OF_TWO")
    path = tmp_path / "vnet_nhwc.prototxt"
    path.write_text(text)
    assert main(["plan", "--prototxt", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "layer 'conv_in'" in err and "layout NHWC needs ucudnn, one group and 2 spatial " \
        "axes" in err, err
