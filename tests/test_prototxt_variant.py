"""`ucudnn prototxt`: variants written through Caffe's message classes, ucudnn's own
(caffe_subset.proto, no Caffe needed) or those of the patched caffe.proto (--caffe-proto)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ucudnn.caffe import proto as cp
from ucudnn.caffe.prototxt import read_prototxt

NETS = Path(__file__).resolve().parents[1] / "ucudnn" / "data" / "nets"


@pytest.fixture(params=["owned", "patched"])
def proto(request):
    """None: ucudnn's own classes; else the path of the patched caffe.proto."""
    if request.param == "owned":
        return None
    src = request.getfixturevalue("patched_caffe_source")
    return str(src / "src" / "caffe" / "proto" / "caffe.proto")


def _cli(*args, proto=None, env_proto=None):
    import ucudnn       # the same package as this test process, compiled core and all
    env = dict(os.environ, PYTHONPATH=str(Path(ucudnn.__file__).resolve().parents[1]))
    env.pop("UCUDNN_CAFFE_PROTO", None)
    if env_proto:
        env["UCUDNN_CAFFE_PROTO"] = env_proto
    extra = ["--caffe-proto", proto] if proto else []
    return subprocess.run([sys.executable, "-m", "ucudnn", *map(str, args), *extra],
                          capture_output=True, text=True, env=env, cwd="/", timeout=120)


def test_net_wide_variant_round_trip(proto, tmp_path):
    out = tmp_path / "alexnet_64.prototxt"
    res = _cli("prototxt", NETS / "alexnet.prototxt", "-o", out, "--policy", "all",
               "--limit", "64MiB", "--math", "fma", proto=proto)
    assert res.returncode == 0, res.stderr
    pb2 = cp.load_caffe_pb2(proto)
    original, variant = cp.read_net(pb2, NETS / "alexnet.prototxt"), cp.read_net(pb2, out)
    p = variant.ucudnn_param
    assert (p.policy, p.workspace_limit, p.math) == (p.ALL, 64 << 20, p.FMA)
    assert p.optimizer == p.DP
    variant.ClearField("ucudnn_param")
    assert variant == original            # nothing else changed
    assert "#" not in out.read_text()     # text_format writes no comments
    # and shape inference still sees the same convolution shapes
    assert read_prototxt(out, caffe_proto=proto) == read_prototxt(NETS / "alexnet.prototxt")


def test_ilp_budget_and_layer_override(proto, tmp_path):
    out = tmp_path / "v.prototxt"
    res = _cli("prototxt", NETS / "resnet18.prototxt", "-o", out, "--budget", "1GiB",
               proto=proto)
    assert res.returncode == 0, res.stderr
    pb2 = cp.load_caffe_pb2(proto)
    net = cp.read_net(pb2, out)
    assert net.ucudnn_param.optimizer == net.ucudnn_param.ILP
    assert net.ucudnn_param.total_workspace == 1 << 30
    out2 = tmp_path / "v2.prototxt"
    res = _cli("prototxt", out, "-o", out2, "--layers", "conv1", "--sizes", "32,64",
               "--policy", "undivided", proto=proto)
    assert res.returncode == 0, res.stderr
    net = cp.read_net(pb2, out2)
    conv1 = [l for l in net.layer if l.name == "conv1"][0]
    assert list(conv1.ucudnn_param.micro_batch_size) == [32, 64]
    assert conv1.ucudnn_param.policy == conv1.ucudnn_param.UNDIVIDED
    assert net.ucudnn_param.total_workspace == 1 << 30   # the net default is kept


@pytest.mark.parametrize("args, field", [
    (["--policy", "fast"], "--policy"),
    (["--limit", "-1MiB"], "--limit"),
    (["--layers", "nosuch"], "--layers"),
    (["--math", "tf64"], "--math"),
    (["--repeats", "0"], "--repeats"),
])
def test_bad_input_names_the_option(tmp_path, args, field):
    out = tmp_path / "v.prototxt"
    res = _cli("prototxt", NETS / "alexnet.prototxt", "-o", out, *args)
    assert res.returncode == 2 and field in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists()


def test_set_ucudnn_param_refuses_bad_values(tmp_path):
    pb2 = cp.load_caffe_pb2()
    net = cp.read_net(pb2, NETS / "cifar10.prototxt")
    for kw, match in ((dict(limit=-1), r"--limit \(workspace_limit\): must be >= 0"),
                      (dict(budget=-1), r"--budget \(total_workspace\): must be >= 0"),
                      (dict(repeats=0), r"--repeats \(benchmark_repeats\): must be >= 1"),
                      (dict(sizes=[4, 0]), r"--sizes \(micro_batch_size\)"),
                      (dict(policy="fast"), "--policy: unknown value 'fast'")):
        with pytest.raises(cp.PrototxtError, match=match):
            cp.set_ucudnn_param(net, **kw)
    # and a net edited by hand is refused when written, naming the layer and field
    net.layer[1].ucudnn_param.workspace_limit = -8
    out = tmp_path / "v.prototxt"
    with pytest.raises(cp.PrototxtError, match=r"layer 'conv1': field 'ucudnn_param.workspace_limit'"):
        cp.write_net(net, out)
    assert not out.exists()


def _net_outside_the_subset(tmp_path):
    """cifar10.prototxt plus a layer with a transform_param (Caffe's, not in
    caffe_subset.proto); the path, and the line:col of transform_param."""
    text = (NETS / "cifar10.prototxt").read_text().rstrip("\n") + "\n"
    line = text.count("\n") + 2
    text += 'layer { name: "extra" type: "Silence" bottom: "data"\n' \
            '  transform_param { scale: 0.5 mirror: true }\n}\n'
    path = tmp_path / "outside.prototxt"
    path.write_text(text)
    return path, f"{line}:3"


def test_fields_outside_the_subset_need_the_patched_proto(tmp_path):
    src, where = _net_outside_the_subset(tmp_path)
    out = tmp_path / "v.prototxt"
    res = _cli("prototxt", src, "-o", out, "--policy", "all")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"{src}:{where}:" in res.stderr and '"transform_param"' in res.stderr, res.stderr
    assert "--caffe-proto PATH" in res.stderr and "$UCUDNN_CAFFE_PROTO" in res.stderr
    assert not out.exists()
    # shape inference reads it all the same (lenient)
    assert read_prototxt(src) == read_prototxt(NETS / "cifar10.prototxt")


@pytest.mark.parametrize("how", ["--caffe-proto", "UCUDNN_CAFFE_PROTO"])
def test_patched_proto_writes_fields_outside_the_subset(tmp_path, patched_caffe_source, how):
    proto = str(patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto")
    src, _ = _net_outside_the_subset(tmp_path)
    out = tmp_path / "v.prototxt"
    kw = dict(proto=proto) if how == "--caffe-proto" else dict(env_proto=proto)
    res = _cli("prototxt", src, "-o", out, "--policy", "all", **kw)
    assert res.returncode == 0, res.stderr
    pb2 = cp.load_caffe_pb2(proto)
    original, variant = cp.read_net(pb2, src), cp.read_net(pb2, out)
    assert variant.layer[-1].transform_param.scale == 0.5
    assert variant.ucudnn_param.policy == variant.ucudnn_param.ALL
    variant.ClearField("ucudnn_param")
    assert variant == original


def test_unpatched_proto_is_refused(tmp_path):
    plain = tmp_path / "caffe.proto"
    plain.write_text('syntax = "proto2";\npackage caffe;\nmessage NetParameter { optional string name = 1; }\n')
    with pytest.raises(cp.CaffeProtoError, match="caffe_patch/0002"):
        cp.load_caffe_pb2(str(plain))
    with pytest.raises(cp.PrototxtError, match="--caffe-proto: .*nope.proto: no such file"):
        cp.load_caffe_pb2(str(tmp_path / "nope.proto"))
