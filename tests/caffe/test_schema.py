"""caffe.proto with the ucudnn patch: `ucudnn_param` is accepted where it belongs and bad
values are rejected by protobuf itself (protoc parses the text format against the schema,
as Caffe's ReadProtoFromTextFile does); and ucudnn's own caffe_net.proto is that file's
schema of nets, complete."""
import subprocess
import sys

import pytest

from ucudnn.caffe import proto as cp
from ucudnn.caffe.protoc import descriptor_set, find_protoc

from repo_paths import REPO  # noqa: E402
NETS = REPO / "prototxt"


@pytest.fixture(scope="module")
def proto_dir(patched_caffe_source):
    return patched_caffe_source / "src" / "caffe" / "proto"


def _encode(proto_dir, text, message="caffe.NetParameter"):
    """protoc --encode: the C++ text-format parser (protoc, or grpcio-tools' compiler)."""
    return subprocess.run(find_protoc() + [f"--proto_path={proto_dir}", f"--encode={message}",
                                           str(proto_dir / "caffe.proto")], input=text.encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)


VALID = """
name: "net"
ucudnn_param { policy: ALL optimizer: ILP total_workspace: 1006632960 }
layer {
  name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 kernel_size: 3 }
  ucudnn_param {
    policy: UNDIVIDED workspace_limit: 67108864 micro_batch_size: 32
    micro_batch_size: 64 math: FMA benchmark_repeats: 5 cache_path: "/tmp/c.sqlite"
  }
}
"""


def test_valid_ucudnn_param_is_accepted(proto_dir):
    res = _encode(proto_dir, VALID)
    assert res.returncode == 0, res.stderr.decode()
    assert res.stdout  # the encoded message


@pytest.mark.parametrize("bad, message", [
    ("ucudnn_param { policy: FAST }", 'Unknown enumeration value of "FAST" for field "policy"'),
    ("ucudnn_param { optimizer: GREEDY }", 'Unknown enumeration value of "GREEDY"'),
    ("ucudnn_param { workspace_limit: \"64MiB\" }", "Expected integer"),
    ("ucudnn_param { limit: 1 }", 'no field named "limit"'),
    ("layer { name: 'c' ucudnn_param { math: TF64 } }", 'Unknown enumeration value of "TF64"'),
])
def test_invalid_ucudnn_param_is_rejected(proto_dir, bad, message):
    res = _encode(proto_dir, bad)
    assert res.returncode != 0
    assert message in res.stderr.decode(), res.stderr.decode()


def test_ids_follow_the_next_available_comments(proto_dir):
    text = (proto_dir / "caffe.proto").read_text()
    assert "optional UcudnnParameter ucudnn_param = 149;" in text
    assert "optional UcudnnParameter.Layout layout = 150;" in text
    assert "LayerParameter next available layer-specific ID: 151 (last added: layout)" in text
    assert "optional Layout layout = 11 [default = NCHW];" in text
    assert "UcudnnParameter next available ID: 12 (last added: layout)" in text
    assert "optional UcudnnParameter ucudnn_param = 9;" in text
    assert "optional bool share_diffs = 10 [default = false];" in text
    assert "optional FusionParameter fusion = 11;" in text
    assert "NetParameter next available ID: 12 (last added: fusion)" in text
    assert "optional bool batch_norm_relu = 2 [default = true];" in text
    assert "optional bool split_sum = 3 [default = true];" in text
    assert "optional bool batch_norm_eltwise = 4 [default = true];" in text


@pytest.mark.parametrize("net", ["alexnet", "resnet18", "resnet50", "cifar10"])
def test_shipped_nets_parse_as_caffe_nets(proto_dir, net):
    """What `caffe time -model prototxt/NET.prototxt` reads first: the text format itself."""
    res = _encode(proto_dir, (NETS / f"{net}.prototxt").read_text())
    assert res.returncode == 0, res.stderr.decode()


# -- ucudnn's caffe_net.proto against the patched caffe.proto ---------------------------------

def _file(data: bytes):
    from google.protobuf import descriptor_pb2
    (fd,) = [f for f in descriptor_pb2.FileDescriptorSet.FromString(data).file
             if f.package == "caffe"]
    return fd


def _net_schema(fd):
    """{message or enum name: its descriptor proto} for NetParameter and every top-level
    message and enum that its fields reach, fields sorted by number (their order in the
    file is not part of the interface), nested enums and messages by name."""
    messages = {m.name: m for m in fd.message_type}
    enums = {e.name: e for e in fd.enum_type}
    out, todo = {}, ["NetParameter"]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        m = type(messages[name])()
        m.CopyFrom(messages[name])
        _canonical(m)
        out[name] = m
        for f in m.field:
            top = f.type_name.split(".")[-1]
            if f.type_name == f".caffe.{top}" and top in messages:
                todo.append(top)
            elif f.type_name == f".caffe.{top}" and top in enums:
                out[top] = enums[top]
    return out


def _canonical(m):
    fields = sorted(m.field, key=lambda f: f.number)
    del m.field[:]
    m.field.extend(fields)
    for what in ("enum_type", "nested_type"):
        items = sorted(getattr(m, what), key=lambda x: x.name)
        del getattr(m, what)[:]
        getattr(m, what).extend(items)
    for n in m.nested_type:
        _canonical(n)


def test_schema_is_caffes_nets_complete(proto_dir):
    """caffe_net.proto holds exactly the messages and enums a NetParameter reaches in the
    patched caffe.proto -- LayerParameter with every *_param, TransformationParameter, the
    data layers' parameters, BlobProto, V1LayerParameter, V0LayerParameter -- each field
    identical (name, number, type, label, default, options, message or enum type), each
    enum's values identical, and nothing else (no solver, no Datum)."""
    caffe = _net_schema(_file(descriptor_set(proto_dir / "caffe.proto")))
    ours_fd = _file(descriptor_set(cp.OWNED_PROTO))
    ours = _net_schema(ours_fd)
    assert set(ours) == set(caffe), (set(caffe) - set(ours), set(ours) - set(caffe))
    for name in caffe:
        assert ours[name] == caffe[name], name
    declared = {m.name for m in ours_fd.message_type} | {e.name for e in ours_fd.enum_type}
    assert declared == set(caffe), declared - set(caffe)
    assert {"LayerParameter", "TransformationParameter", "HDF5DataParameter",
            "PythonParameter", "WindowDataParameter", "BlobProto", "V1LayerParameter",
            "V0LayerParameter", "UcudnnParameter", "Phase"} <= set(ours)
    assert not {"SolverParameter", "SolverState", "Datum", "BlobProtoVector"} & set(ours)
    layer = {f.name: f.number for f in ours["LayerParameter"].field}
    assert layer["ucudnn_param"] == 149 and {f.name: f.number for f in ours[
        "NetParameter"].field}["ucudnn_param"] == 9
    # the classes shipped (caffe_net.desc) are those of caffe_net.proto
    pb2 = cp.load_caffe_pb2()
    assert pb2.source == cp.OWNED_PROTO
    assert len(pb2.LayerParameter.DESCRIPTOR.fields) == len(caffe["LayerParameter"].field)


def test_schema_is_what_the_generator_writes(proto_dir):
    """caffe_net.proto is exactly scripts/gen_caffe_schema.py's output for the patched file
    (regenerate it, never edit it)."""
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_caffe_schema.py"),
                          str(proto_dir / "caffe.proto"), "--check"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def _all_nets(patched_caffe_source):
    from caffe_nets import tarball_nets
    return [NETS / f"{n}.prototxt" for n in ("alexnet", "resnet18", "cifar10")] + \
        tarball_nets(patched_caffe_source)


def test_owned_and_patched_write_the_same_bytes(proto_dir, patched_caffe_source):
    """Every net (the shipped ones and the tarball's) read with caffe_net.proto serializes
    (wire format) and prints (text format) exactly as with the patched caffe.proto: nothing
    is lost or renumbered."""
    from google.protobuf import text_format
    owned_pb2, caffe_pb2 = cp.load_caffe_pb2(), cp.load_caffe_pb2(str(proto_dir / "caffe.proto"))
    for path in _all_nets(patched_caffe_source):
        owned, caffe = cp.read_net(owned_pb2, path), cp.read_net(caffe_pb2, path)
        assert owned.SerializeToString(deterministic=True) == caffe.SerializeToString(
            deterministic=True), path
        assert text_format.MessageToString(owned) == text_format.MessageToString(caffe), path


@pytest.mark.parametrize("net", ["alexnet", "resnet18", "cifar10"])
def test_owned_and_patched_classes_give_the_same_layers(proto_dir, net):
    from ucudnn.caffe.prototxt import load_prototxt
    path = NETS / f"{net}.prototxt"
    for phase in ("TRAIN", "TEST"):
        assert load_prototxt(path, phase) == load_prototxt(
            path, phase, caffe_proto=str(proto_dir / "caffe.proto"))
