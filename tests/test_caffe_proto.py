"""caffe.proto with the ucudnn patch: `ucudnn_param` is accepted where it belongs and bad
values are rejected by protobuf itself (protoc parses the text format against the schema,
as Caffe's ReadProtoFromTextFile does)."""
import subprocess

import pytest


@pytest.fixture(scope="module")
def proto_dir(patched_caffe_source):
    return patched_caffe_source / "src" / "caffe" / "proto"


def _encode(proto_dir, text, message="caffe.NetParameter"):
    return subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--encode={message}",
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
    assert "LayerParameter next available layer-specific ID: 150 (last added: ucudnn_param)" in text
    assert "optional UcudnnParameter ucudnn_param = 9;" in text
    assert "NetParameter next available ID: 10 (last added: ucudnn_param)" in text


@pytest.mark.parametrize("net", ["alexnet", "resnet18", "cifar10"])
def test_shipped_nets_parse_as_caffe_nets(proto_dir, net):
    """What `caffe time -model prototxt/NET.prototxt` reads first: the text format itself."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "ucudnn" / "data" / "nets" / f"{net}.prototxt").read_text()
    res = _encode(proto_dir, text)
    assert res.returncode == 0, res.stderr.decode()


# -- ucudnn's own caffe_subset.proto against the patched caffe.proto ----------------------------

def _fields(desc):
    return {f.name: (f.number, f.type, f.is_repeated if hasattr(f, "is_repeated") else f.label,
                     f.has_default_value, f.default_value if f.has_default_value else None,
                     f.message_type.full_name if f.message_type else None,
                     f.enum_type.full_name if f.enum_type else None) for f in desc.fields}


def _enums(desc):
    return {e.name: {v.name: v.number for v in e.values} for e in desc.enum_types}


#: the messages of which caffe_subset.proto declares only some fields; every other message it
#: declares has all of Caffe's fields (so a net using it round-trips), V1LayerParameter none
PARTIAL = {"NetParameter", "LayerParameter"}
STUB = {"V1LayerParameter"}


def _messages(pb2):
    return {n: getattr(pb2, n).DESCRIPTOR for n in vars(pb2) if isinstance(getattr(pb2, n), type)}


def test_owned_subset_is_caffes_schema(proto_dir):
    """Every message, field (name, number, type, label, default, message/enum type) and enum
    of caffe_subset.proto is the patched caffe.proto's; messages other than NetParameter and
    LayerParameter are complete, V1LayerParameter an empty stub."""
    from ucudnn.caffe import proto as cp
    owned, caffe = cp.load_caffe_pb2(), cp.load_caffe_pb2(str(proto_dir / "caffe.proto"))
    assert caffe.source != owned.source
    mine, theirs = _messages(owned), _messages(caffe)
    assert {"NetParameter", "LayerParameter", "UcudnnParameter", "BlobShape", "NetStateRule",
            "ParamSpec", "FillerParameter", "ConvolutionParameter"} <= set(mine)
    assert set(mine) <= set(theirs), set(mine) - set(theirs)
    for name, o in mine.items():
        c = theirs[name]
        of, cf = _fields(o), _fields(c)
        if name in STUB:
            assert of == {} and _enums(o) == {}, name
            continue
        assert _enums(o) == _enums(c), name
        assert set(of) <= set(cf), (name, set(of) - set(cf))
        assert of == {k: cf[k] for k in of}, name
        if name not in PARTIAL:
            assert set(of) == set(cf), (name, "missing", set(cf) - set(of))
        for f in o.fields:       # every message a field refers to is declared here too
            if f.message_type:
                assert f.message_type.name in mine, (name, f.name)
    # top-level enums (Phase)
    assert {n: v.number for n, v in owned.pool.FindEnumTypeByName("caffe.Phase")
            .values_by_name.items()} == {n: v.number for n, v in caffe.pool.FindEnumTypeByName(
                "caffe.Phase").values_by_name.items()}
    assert owned.TRAIN == caffe.TRAIN == 0 and owned.TEST == caffe.TEST == 1
    assert owned.NetParameter.DESCRIPTOR.fields_by_name["ucudnn_param"].number == 9
    assert owned.LayerParameter.DESCRIPTOR.fields_by_name["ucudnn_param"].number == 149
    # what the subset covers (the *_param of the layer types shape inference and usual nets use)
    layer = set(owned.LayerParameter.DESCRIPTOR.fields_by_name)
    assert {f"{t}_param" for t in (
        "accuracy", "batch_norm", "bias", "concat", "convolution", "dropout", "dummy_data",
        "eltwise", "elu", "flatten", "inner_product", "input", "lrn", "pooling", "power",
        "prelu", "relu", "reshape", "scale", "sigmoid", "softmax", "tanh", "threshold", "clip",
        "loss", "ucudnn")} <= layer
    assert not {"data_param", "image_data_param", "hdf5_data_param", "memory_data_param",
                "window_data_param", "blobs"} & layer


@pytest.mark.parametrize("net", ["alexnet", "resnet18", "cifar10"])
def test_owned_and_patched_write_the_same_bytes(proto_dir, net):
    """A shipped net read strictly with the subset serializes (wire format) and prints (text
    format) exactly as with the patched caffe.proto: nothing is lost or renumbered."""
    from pathlib import Path
    from google.protobuf import text_format
    from ucudnn.caffe import proto as cp
    path = Path(__file__).resolve().parents[1] / "ucudnn" / "data" / "nets" / f"{net}.prototxt"
    owned = cp.read_net(cp.load_caffe_pb2(), path)
    caffe = cp.read_net(cp.load_caffe_pb2(str(proto_dir / "caffe.proto")), path)
    assert owned.SerializeToString(deterministic=True) == caffe.SerializeToString(
        deterministic=True)
    assert text_format.MessageToString(owned) == text_format.MessageToString(caffe)


@pytest.mark.parametrize("net", ["alexnet", "resnet18", "cifar10"])
def test_owned_and_patched_classes_give_the_same_layers(proto_dir, net):
    from pathlib import Path
    from ucudnn.caffe.prototxt import load_prototxt
    path = Path(__file__).resolve().parents[1] / "ucudnn" / "data" / "nets" / f"{net}.prototxt"
    for phase in ("TRAIN", "TEST"):
        assert load_prototxt(path, phase) == load_prototxt(
            path, phase, caffe_proto=str(proto_dir / "caffe.proto"))
