"""`ucudnn plan --prototxt NET --json` against the plan records the patched Caffe writes for the
same net: the same kernels, for public nets with convolutions that Caffe runs with im2col
(`engine: CAFFE`: MobileNet's depthwise layers; dilated ones of `engine: DEFAULT`) and dilated
ones of `engine: CUDNN`, which reach cuDNN (Note [Convolutions that reach cuDNN] in
ucudnn/caffe/shapes.py, Note [Dilated convolutions on cuDNN] in the patched
src/caffe/layer_factory.cpp).

Needs a Caffe built by scripts/build_caffe.sh and a GPU (the caffe_tools fixture); skipped
otherwise. The nets are tests/data/nets/ at a small batch, with `force_backward: true` so that
Caffe computes every gradient (a deploy net has no loss, and Caffe skips the backward pass of
layers that contribute to none, which the planner does not model: Note [Backward-data of the
first convolution]).
"""
import json
import subprocess
import sys

import pytest

from repo_paths import DATA
from ucudnn.caffe.records import ENV as RECORDS_ENV
from ucudnn.caffe.records import read_records, summarize

pytestmark = pytest.mark.gpu

NETS = DATA / "nets"
SETTINGS = {"policy": "powerOfTwo", "limit": 64 << 20}


def _variant(tmp_path, name, batch, hw=None, dilated_engine=None):
    """tests/data/nets/NAME with net-wide ucudnn_param SETTINGS, force_backward, its input at
    mini-batch ``batch`` (and ``hw`` x ``hw`` when given), and ``dilated_engine`` (a name) on
    its dilated convolutions when given; the written path and the parsed net."""
    from ucudnn.caffe.params import set_param
    from ucudnn.caffe.proto import load_caffe_pb2, read_net, write_net
    net = read_net(load_caffe_pb2(), str(NETS / f"{name}.prototxt"))
    shapes = list(net.input_shape) + [s for l in net.layer if l.type == "Input"
                                      for s in l.input_param.shape]
    for s in shapes:
        s.dim[0] = batch
        if hw:
            s.dim[2] = s.dim[3] = hw
    for i in range(0, len(net.input_dim), 4):
        net.input_dim[i] = batch
        if hw:
            net.input_dim[i + 2] = net.input_dim[i + 3] = hw
    assert shapes or net.input_dim, name
    for l in net.layer:
        p = l.convolution_param
        if dilated_engine and l.type == "Convolution" and any(d > 1 for d in p.dilation):
            p.engine = p.Engine.Value(dilated_engine)
    net.force_backward = True
    set_param(net.ucudnn_param, SETTINGS)
    path = tmp_path / f"{name}.prototxt"
    write_net(net, str(path))
    return path, net


@pytest.mark.parametrize("name, batch, hw, dilated_engine", [
    ("mobilenet_v1_deploy", 4, None, None),
    ("mobilenet_v2_deploy", 4, None, None),
    ("dilation8_pascal_voc_deploy", 1, 500, None),
    ("dilation8_pascal_voc_deploy", 1, 500, "CUDNN"),
])
def test_plan_lists_the_kernels_caffe_plans(caffe_tools, tmp_path, name, batch, hw,
                                            dilated_engine):
    path, net = _variant(tmp_path, name, batch, hw, dilated_engine)
    convs = [l for l in net.layer if l.type == "Convolution"]
    dilated = {l.name for l in convs if any(d > 1 for d in l.convolution_param.dilation)}
    im2col = {l.name for l in convs
              if l.convolution_param.engine == l.convolution_param.CAFFE
              or (l.name in dilated and l.convolution_param.engine == l.convolution_param.DEFAULT)}
    assert im2col or dilated, name

    env = dict(caffe_tools["env"], **{RECORDS_ENV: str(tmp_path / "records.jsonl")})
    r = subprocess.run([str(caffe_tools["bin"] / "caffe"), "time", "-model", str(path),
                        "-iterations", "1", "-gpu", "0"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:]
    caffe = summarize(read_records(tmp_path / "records.jsonl")).kernels

    # the planner, from the benchmark cache Caffe filled; caffe time builds the TRAIN net
    r = subprocess.run([sys.executable, "-m", "ucudnn", "plan", "--prototxt", str(path),
                        "--phase", "TRAIN", "--json"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=caffe_tools["env"], timeout=1200)
    assert r.returncode == 0, r.stderr[-4000:]
    doc = json.loads(r.stdout)
    planned = {(k["layer"], k["op"]): k["groups"] for k in doc["kernels"]}

    assert sorted(planned) == sorted((k.layer, k.op) for k in caffe.values())
    for k in caffe.values():
        assert k.instances == planned[k.layer, k.op], (k.layer, k.op)
        assert k.batch == batch, (k.layer, k.op)
    assert {w["layer"] for w in doc.get("without_cudnn", [])} == im2col
    assert {layer for layer, _ in planned} == {l.name for l in convs} - im2col
    if dilated:                     # on cuDNN with engine CUDNN only
        on_cudnn = dilated & {layer for layer, _ in planned}
        assert on_cudnn == (dilated if dilated_engine == "CUDNN" else set())
    print(f"{name}: {len(planned)} kernels planned by both; {len(im2col)} convolutions on "
          f"im2col, {len(dilated - im2col)} dilated on cuDNN")
