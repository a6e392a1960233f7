"""`ucudnn prototxt`: variants written through caffe_pb2 of the patched caffe.proto."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ucudnn.caffe import proto as cp
from ucudnn.caffe.prototxt import read_prototxt

NETS = Path(__file__).resolve().parents[1] / "prototxt"


@pytest.fixture(scope="module")
def proto(patched_caffe_source):
    return str(patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto")


def _cli(*args):
    import ucudnn       # the same package as this test process, compiled core and all
    env = dict(os.environ, PYTHONPATH=str(Path(ucudnn.__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, "-m", "ucudnn", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd="/", timeout=120)


def test_net_wide_variant_round_trip(proto, tmp_path):
    out = tmp_path / "alexnet_64.prototxt"
    res = _cli("prototxt", NETS / "alexnet.prototxt", "-o", out, "--policy", "all",
               "--limit", "64MiB", "--math", "fma", "--caffe-proto", proto)
    assert res.returncode == 0, res.stderr
    pb2 = cp.load_caffe_pb2(proto)
    original, variant = cp.read_net(pb2, NETS / "alexnet.prototxt"), cp.read_net(pb2, out)
    p = variant.ucudnn_param
    assert (p.policy, p.workspace_limit, p.math) == (p.ALL, 64 << 20, p.FMA)
    assert p.optimizer == p.DP
    variant.ClearField("ucudnn_param")
    assert variant == original            # nothing else changed
    # and our own reader still sees the same convolution shapes
    assert read_prototxt(out) == read_prototxt(NETS / "alexnet.prototxt")


def test_ilp_budget_and_layer_override(proto, tmp_path):
    out = tmp_path / "v.prototxt"
    res = _cli("prototxt", NETS / "resnet18.prototxt", "-o", out, "--budget", "1GiB",
               "--caffe-proto", proto)
    assert res.returncode == 0, res.stderr
    pb2 = cp.load_caffe_pb2(proto)
    net = cp.read_net(pb2, out)
    assert net.ucudnn_param.optimizer == net.ucudnn_param.ILP
    assert net.ucudnn_param.total_workspace == 1 << 30
    res = _cli("prototxt", out, "-o", out, "--layers", "conv1", "--sizes", "32,64",
               "--policy", "undivided", "--caffe-proto", proto)
    assert res.returncode == 0, res.stderr
    net = cp.read_net(pb2, out)
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
def test_bad_input_names_the_option(proto, tmp_path, args, field):
    out = tmp_path / "v.prototxt"
    res = _cli("prototxt", NETS / "alexnet.prototxt", "-o", out, "--caffe-proto", proto, *args)
    assert res.returncode == 2 and field in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists()


def test_unpatched_proto_is_refused(tmp_path):
    plain = tmp_path / "caffe.proto"
    plain.write_text('syntax = "proto2";\npackage caffe;\nmessage NetParameter { optional string name = 1; }\n')
    with pytest.raises(cp.CaffeProtoError, match="caffe_patch/0002"):
        cp.load_caffe_pb2(str(plain))
