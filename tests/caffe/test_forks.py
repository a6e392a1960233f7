"""Real Caffe forks (tests/data/forks/*/SOURCES): each fork's net is planned with the fork's
caffe.proto (``--caffe-proto``), or refused with Caffe's own reason in one line, with no
traceback. The fork's schema gets UcudnnParameter in memory, and the fields it lacks read as
BVLC's defaults (Note [Caffe forks] in ucudnn/caffe/fork.py)."""
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ucudnn.caffe import proto as cp
from ucudnn.caffe.fork import add_ucudnn
from ucudnn.caffe.proto import as_bvlc
from ucudnn.caffe.prototxt import load_prototxt
from ucudnn.cli import main

FORKS = Path(__file__).resolve().parents[1] / "data" / "forks"
needs_grpc = pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None,
                                reason="compiling a fork's caffe.proto needs grpcio-tools "
                                "(pip install 'ucudnn[caffe-proto]')")

#: fork -> (its net, what a user passes besides --prototxt and --caffe-proto): the shapes of
#: the fork's own layers' tops, which no rule of BVLC Caffe's gives
CASES = {
    "tsn": ("tsn_bn_inception_rgb_deploy.prototxt", ["--layer-shape", "BN=same"]),
    "py-faster-rcnn": ("zf_faster_rcnn_end2end_test.prototxt", []),
    "ssd": ("MobileNetSSD_deploy.prototxt", []),
    "bvlc-rc2": ("bvlc_googlenet_deploy.prototxt", []),
}


def _paths(fork):
    net, args = CASES[fork]
    return FORKS / fork / net, FORKS / fork / "caffe.proto", args


def test_every_fork_has_its_sources_and_a_case():
    assert sorted(p.name for p in FORKS.iterdir() if p.is_dir()) == sorted(CASES)
    for fork, (net, _) in CASES.items():
        sources = (FORKS / fork / "SOURCES").read_text()
        for f in ("caffe.proto", net):
            assert (FORKS / fork / f).is_file() and f in sources, (fork, f)
        assert sources.count("commit:") == 2 and sources.count("license:") == 2, fork
        assert sources.count("repo:") == 2 and sources.count("path:") == 2, fork


def _convolutions(pb2, net_path):
    net = cp.read_net(pb2, net_path)
    return [l.name for l in net.layer if l.type == "Convolution"]


@needs_grpc
@pytest.mark.parametrize("fork", sorted(CASES))
def test_each_forks_net_is_planned_with_its_caffe_proto(fake_core, capsys, fork):
    net, proto, args = _paths(fork)
    rc = main(["plan", "--prototxt", str(net), "--caffe-proto", str(proto), "--phase", "TEST",
               "--batch", "1", "--json", *args])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err, err
    doc = json.loads(out)
    planned = {k["layer"] for k in doc["kernels"]}
    off = [r["layer"] for r in doc.get("without_cudnn", ())]
    # every Convolution of the net is planned or listed as running without cuDNN
    convs = _convolutions(cp.load_caffe_pb2(str(proto)), net)
    assert planned and sorted(planned | set(off)) == sorted(convs)
    assert not planned & set(off)


@needs_grpc
@pytest.mark.parametrize("fork", sorted(CASES))
def test_without_its_caffe_proto_a_forks_net_is_planned_or_refused_in_one_line(
        fake_core, capsys, fork):
    net, _, args = _paths(fork)
    rc = main(["plan", "--prototxt", str(net), "--phase", "TEST", "--batch", "1", *args])
    err = capsys.readouterr().err
    assert rc in (0, 2) and "Traceback" not in err, err
    if rc == 2:
        assert err.count("\n") == 1 and err.startswith(f"ucudnn: error: --prototxt: {net}:")
    if fork == "tsn":       # the fork's layer type, as Caffe's Net::Init refuses it
        assert 'no field named "bn_param"' in err, err


@needs_grpc
def test_fields_a_fork_lacks_read_as_bvlcs_defaults():
    owned = cp.owned_pb2()
    default = owned.PoolingParameter.DESCRIPTOR.fields_by_name["round_mode"].default_value
    rc2 = cp.load_caffe_pb2(str(FORKS / "bvlc-rc2" / "caffe.proto"))
    assert "round_mode" not in rc2.PoolingParameter.DESCRIPTOR.fields_by_name
    pooling = as_bvlc(rc2.PoolingParameter(kernel_size=3))
    assert pooling.round_mode == default == pooling.CEIL and not pooling.HasField("round_mode")
    assert pooling.kernel_size == 3                 # the fork's own field, as it is
    layer = as_bvlc(rc2.LayerParameter(name="c"))
    assert layer.convolution_param.dilation == [] and layer.convolution_param.axis == 1
    assert type(layer.input_param) is owned.InputParameter   # a message rc2 lacks: BVLC's
    assert not layer.HasField("input_param")
    with pytest.raises(AttributeError):
        layer.name = "d"


@needs_grpc
def test_pooling_of_a_fork_without_round_mode_rounds_up_as_bvlc_does():
    """rc2's GoogLeNet: pool1/3x3_s2 (3x3, stride 2) over conv1's 112x112 gives 56x56 with
    BVLC's CEIL (55 with FLOOR), the input of conv2/3x3_reduce."""
    net, proto, _ = _paths("bvlc-rc2")
    layers = {l.name: l for l in load_prototxt(net, "TEST", caffe_proto=str(proto)).layers}
    assert layers["conv1/7x7_s2"].stride == (2, 2)
    conv1 = (224 + 2 * 3 - 7) // 2 + 1
    assert layers["conv2/3x3_reduce"].h == math.ceil((conv1 - 3) / 2) + 1 == conv1 // 2


@needs_grpc
@pytest.mark.parametrize("fork", sorted(CASES))
def test_a_forks_schema_gets_ucudnn_parameter_at_free_numbers(fork):
    pb2 = cp.load_caffe_pb2(str(FORKS / fork / "caffe.proto"))
    owned = cp.owned_pb2()
    assert pb2.UcudnnParameter.DESCRIPTOR.fields_by_name.keys() == \
        owned.UcudnnParameter.DESCRIPTOR.fields_by_name.keys()
    for message in ("NetParameter", "LayerParameter"):
        fields = getattr(pb2, message).DESCRIPTOR.fields
        assert "ucudnn_param" in {f.name for f in fields}
        assert len({f.number for f in fields}) == len(fields)


def test_a_taken_number_moves_above_the_forks_highest():
    from google.protobuf import descriptor_pb2
    owned = descriptor_pb2.FileDescriptorSet.FromString(cp._owned_descriptor_set())
    fork = descriptor_pb2.FileDescriptorSet()
    f = fork.file.add(name="fork.proto", package="caffe", syntax="proto2")
    want = {m.name: {x.name: x.number for x in m.field} for m in owned.file[0].message_type}
    net = f.message_type.add(name="NetParameter")
    net.field.add(name="layer", number=100, label=3, type=11, type_name=".caffe.LayerParameter")
    net.field.add(name="mine", number=want["NetParameter"]["ucudnn_param"], label=1, type=9)
    layer = f.message_type.add(name="LayerParameter")
    layer.field.add(name="name", number=1, label=1, type=9)
    layer.field.add(name="mine", number=7, label=1, type=9)
    reserved = want["LayerParameter"]["ucudnn_param"]
    layer.reserved_range.add(start=reserved, end=reserved + 1)
    add_ucudnn(fork, owned)
    numbers = {m.name: {x.name: x.number for x in m.field} for m in f.message_type}
    assert numbers["NetParameter"]["ucudnn_param"] == 101          # its own was taken
    assert numbers["LayerParameter"]["ucudnn_param"] == 8          # its own is reserved
    assert numbers["LayerParameter"]["layout"] == want["LayerParameter"]["layout"]
    assert "UcudnnParameter" in numbers


@needs_grpc
def test_a_variant_of_a_forks_net_carries_ucudnn_param(tmp_path, fake_core, capsys):
    net, proto, args = _paths("ssd")
    out = tmp_path / "v.prototxt"
    assert main(["prototxt", str(net), "-o", str(out), "--caffe-proto", str(proto),
                 "--policy", "all", "--limit", "32MiB"]) == 0
    assert cp.read_net(cp.load_caffe_pb2(str(proto)), out).layer[-1].type == "DetectionOutput"
    planned = load_prototxt(out, "TEST", caffe_proto=str(proto))
    assert (planned.net_ucudnn.policy, planned.net_ucudnn.limit) == ("all", 32 << 20)


def test_without_grpcio_tools_one_line_says_how_to_install_it(tmp_path):
    net, proto, _ = _paths("ssd")
    code = ("import sys; sys.modules['grpc_tools'] = None\n"
            "from ucudnn.cli import main\n"
            f"sys.exit(main(['plan', '--prototxt', {str(net)!r}, '--caffe-proto', "
            f"{str(proto)!r}]))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PROTOC", "UCUDNN_CAFFE_PROTO")}
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"ucudnn: error: --caffe-proto: {proto}: "), res.stderr
    assert "pip install 'ucudnn[caffe-proto]'" in res.stderr


@needs_grpc
def test_a_proto_protoc_refuses_and_caffe_proto_without_prototxt_are_one_line(tmp_path, capsys):
    bad = tmp_path / "caffe.proto"
    bad.write_text('syntax = "proto2";\npackage caffe;\nmessage NetParameter {\n'
                   '  optional Nope layer = 1;\n  optional string name = 1;\n}\n')
    net, _, _ = _paths("ssd")
    assert main(["plan", "--prototxt", str(net), "--caffe-proto", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ucudnn: error: --caffe-proto: {bad}: ")
    assert '"Nope" is not defined' in err, err
    assert main(["plan", "--net", "alexnet", "--caffe-proto", str(bad)]) == 2
    assert "--caffe-proto: only with --prototxt" in capsys.readouterr().err
