"""Every net of the pinned Caffe tarball (models/ and examples/: deploy, train_val,
train_test, HDF5, Python-layer and window-data nets) through `ucudnn prototxt` with each
optimizer: the variant is the input plus ucudnn_param, compared as messages, and Caffe's own
parser reads it."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from caffe_nets import TARBALL_NETS, cxx_parse, tarball_nets  # noqa: E402

from ucudnn.caffe import proto as cp  # noqa: E402
from ucudnn.cli import main  # noqa: E402

#: the options of each optimizer's variant, and what they set
OPTIMIZERS = {
    "dp": (["--optimizer", "dp", "--limit", "64MiB", "--policy", "all"],
           dict(optimizer="DP", workspace_limit=64 << 20, policy="ALL")),
    "ilp": (["--budget", "1GiB", "--sizes", "1"],
            dict(optimizer="ILP", total_workspace=1 << 30, micro_batch_size=[1])),
    "shared": (["--optimizer", "shared", "--budget", "512MiB", "--math", "tensor_op"],
               dict(optimizer="SHARED", total_workspace=512 << 20, math="TENSOR_OP")),
}


@pytest.fixture(scope="module")
def nets(patched_caffe_source):
    found = tarball_nets(patched_caffe_source)
    assert len(found) == TARBALL_NETS, [str(p) for p in found]
    return found


def _comment_lines(text: str) -> int:
    return sum(line.lstrip().startswith("#") for line in text.splitlines())


def _same_but_ucudnn(pb2, src: Path, out: Path, expect: dict) -> None:
    original, variant = cp.read_net(pb2, src), cp.read_net(pb2, out)
    p = variant.ucudnn_param
    for field, value in expect.items():
        got = getattr(p, field)
        if isinstance(value, str):
            got = p.DESCRIPTOR.fields_by_name[field].enum_type.values_by_number[got].name
        elif isinstance(value, list):
            got = list(got)
        assert got == value, (src, field, got)
    variant.ClearField("ucudnn_param")
    assert variant == original, src


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_every_net_of_the_tarball_gets_a_variant(nets, optimizer, tmp_path, capsys):
    pb2 = cp.load_caffe_pb2()
    args, expect = OPTIMIZERS[optimizer]
    commented = 0
    for src in nets:
        out = tmp_path / f"{src.parent.name}-{src.name}"
        assert main(["prototxt", str(src), "-o", str(out), *args]) == 0, (
            src, capsys.readouterr().err)
        _same_but_ucudnn(pb2, src, out, expect)
        commented += _comment_lines(src.read_text()) > 0
        assert _comment_lines(out.read_text()) == 0, out      # comments are dropped
    assert commented >= 5


def test_caffes_parser_reads_every_variant(nets, patched_caffe_source, tmp_path):
    """What `caffe` reads first: the written variants, by the C++ parser (protoc --encode)
    against the patched caffe.proto."""
    from ucudnn.caffe.protoc import find_protoc
    texts = []
    for optimizer, (args, _) in sorted(OPTIMIZERS.items()):
        for src in nets:
            out = tmp_path / f"{optimizer}-{src.parent.name}-{src.name}"
            assert main(["prototxt", str(src), "-o", str(out), *args]) == 0
            texts.append(out.read_text())
    proto = patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto"
    verdicts = cxx_parse(find_protoc(), proto, texts)
    assert all(ok for ok, _ in verdicts), [m for ok, m in verdicts if not ok][:3]
    assert len(verdicts) == len(OPTIMIZERS) * TARBALL_NETS


def test_the_installed_command(nets, tmp_path):
    """The `ucudnn` console script of this environment, as a user runs it."""
    exe = shutil.which("ucudnn", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip(f"no ucudnn command beside {sys.executable} (pip install the package)")
    src = next(p for p in nets if p.parent.name == "bvlc_googlenet" and "train" in p.name)
    out = tmp_path / "googlenet.prototxt"
    env = {k: v for k, v in os.environ.items() if k != "UCUDNN_CAFFE_PROTO"}
    args, expect = OPTIMIZERS["ilp"]
    res = subprocess.run([exe, "prototxt", str(src), "-o", str(out), *args], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0 and res.stderr == f"wrote {out}\n", res.stderr
    _same_but_ucudnn(cp.load_caffe_pb2(), src, out, expect)
    # and again onto the existing file: only with --force
    res = subprocess.run([exe, "prototxt", str(src), "-o", str(out), "--policy", "all"],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 2 and "--force" in res.stderr and "Traceback" not in res.stderr
    _same_but_ucudnn(cp.load_caffe_pb2(), src, out, expect)
