"""`ucudnn prototxt`: variants written through Caffe's message classes, ucudnn's own
(caffe_net.proto, no Caffe needed) or those of a named caffe.proto (--caffe-proto); what it
refuses, and how it writes files."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ucudnn.caffe import proto as cp
from ucudnn.caffe.prototxt import read_prototxt

from repo_paths import NETS


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
    assert res.returncode == 2 and "--policy: not allowed with argument --sizes" in res.stderr
    res = _cli("prototxt", out, "-o", out2, "--layers", "conv1", "--sizes", "32,64",
               proto=proto)
    assert res.returncode == 0, res.stderr
    net = cp.read_net(pb2, out2)
    conv1 = [l for l in net.layer if l.name == "conv1"][0]
    assert list(conv1.ucudnn_param.micro_batch_size) == [32, 64]
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


def test_bad_ucudnn_param_values_are_named():
    from ucudnn.caffe.params import ParamError, settings_of
    pb2 = cp.load_caffe_pb2()
    for field, value, least in (("workspace_limit", -1, 0), ("total_workspace", -1, 0),
                                ("benchmark_repeats", 0, 1)):
        p = pb2.UcudnnParameter()
        setattr(p, field, value)
        with pytest.raises(ParamError, match=rf"^net x: field 'ucudnn_param.{field}' must be "
                           rf">= {least}, got {value}$"):
            settings_of(p, "net x")
    p = pb2.UcudnnParameter()
    p.micro_batch_size.extend([4, 0])
    with pytest.raises(ParamError, match=r"field 'ucudnn_param.micro_batch_size' must be >= 1"):
        settings_of(p, "net x")


def _net_with_data_layers(tmp_path):
    """cifar10.prototxt plus what train/test nets hold (a Data layer's transform_param and
    data_param, an HDF5 and a Python layer, weights): fields of Caffe's schema that
    deploy nets do not use."""
    text = (NETS / "cifar10.prototxt").read_text().rstrip("\n") + "\n"
    text += ('layer { name: "train" type: "Data" top: "t" include { phase: TRAIN }\n'
             '  transform_param { scale: 0.5 mirror: true crop_size: 28 }\n'
             '  data_param { source: "train_lmdb" batch_size: 64 backend: LMDB } }\n'
             'layer { name: "h5" type: "HDF5Data" top: "h" hdf5_data_param { source: "a.txt" '
             'batch_size: 10 } }\n'
             'layer { name: "py" type: "Python" bottom: "h" top: "p"\n'
             '  python_param { module: "m" layer: "L" param_str: "{\\"k\\": 1}" }\n'
             '  blobs { shape { dim: 2 } data: [0.5, 1.5] } }\n')
    path = tmp_path / "train.prototxt"
    path.write_text(text)
    return path


def test_train_nets_are_written_with_every_field(proto, tmp_path):
    src = _net_with_data_layers(tmp_path)
    out = tmp_path / "v.prototxt"
    res = _cli("prototxt", src, "-o", out, "--policy", "all", proto=proto)
    assert res.returncode == 0, res.stderr
    pb2 = cp.load_caffe_pb2(proto)
    original, variant = cp.read_net(pb2, src), cp.read_net(pb2, out)
    assert variant.layer[-3].transform_param.crop_size == 28
    assert variant.layer[-1].python_param.param_str == '{"k": 1}'
    assert list(variant.layer[-1].blobs[0].data) == [0.5, 1.5]
    assert variant.ucudnn_param.policy == variant.ucudnn_param.ALL
    variant.ClearField("ucudnn_param")
    assert variant == original


def _fork(tmp_path, patched_caffe_source):
    """A fork's caffe.proto: the patched one with PoolingParameter.ceil_mode added."""
    text = (patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto").read_text()
    head = "message PoolingParameter {\n"
    assert head in text
    fork = tmp_path / "fork" / "caffe.proto"
    fork.parent.mkdir()
    fork.write_text(text.replace(head, head + "  optional bool ceil_mode = 99;\n", 1))
    return fork


POOL_CEIL = ('layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"\n'
             '  pooling_param { pool: MAX kernel_size: 3 stride: 2\n    ceil_mode: true } }\n')


def test_a_forks_field_is_refused_by_name(tmp_path):
    src = tmp_path / "fork_net.prototxt"
    text = (NETS / "cifar10.prototxt").read_text().rstrip("\n") + "\n"
    line = text.count("\n") + 3
    src.write_text(text + POOL_CEIL)
    out = tmp_path / "v.prototxt"
    res = _cli("prototxt", src, "-o", out, "--policy", "all")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"ucudnn: error: {src}:{line}:5: layer 'pool1': "), res.stderr
    assert 'no field named "ceil_mode"' in res.stderr and "--caffe-proto PATH" in res.stderr
    assert "$UCUDNN_CAFFE_PROTO" in res.stderr and not out.exists()


@pytest.mark.parametrize("how", ["--caffe-proto", "UCUDNN_CAFFE_PROTO"])
def test_a_forks_caffe_proto_writes_its_fields(tmp_path, patched_caffe_source, how):
    fork = str(_fork(tmp_path, patched_caffe_source))
    src = tmp_path / "fork_net.prototxt"
    src.write_text((NETS / "cifar10.prototxt").read_text().rstrip("\n") + "\n" + POOL_CEIL)
    out = tmp_path / "v.prototxt"
    kw = dict(proto=fork) if how == "--caffe-proto" else dict(env_proto=fork)
    res = _cli("prototxt", src, "-o", out, "--policy", "all", **kw)
    assert res.returncode == 0, res.stderr
    pb2 = cp.load_caffe_pb2(fork)
    original, variant = cp.read_net(pb2, src), cp.read_net(pb2, out)
    assert variant.layer[-1].pooling_param.ceil_mode
    variant.ClearField("ucudnn_param")
    assert variant == original


def test_a_proto_without_caffes_net_is_refused(tmp_path):
    pytest.importorskip("grpc_tools", reason="compiling a fork's caffe.proto needs grpcio-tools")
    plain = tmp_path / "caffe.proto"
    plain.write_text('syntax = "proto2";\npackage caffe;\nmessage NetParameter { optional string name = 1; }\n')
    with pytest.raises(cp.PrototxtError, match="has no NetParameter.layer: not a Caffe"):
        cp.load_caffe_pb2(str(plain))
    with pytest.raises(cp.PrototxtError, match="--caffe-proto: .*nope.proto: no such file"):
        cp.load_caffe_pb2(str(tmp_path / "nope.proto"))


# -- the files `ucudnn prototxt` writes, and the inputs it refuses ------------------------------

def _main(capsys, *args):
    from ucudnn.cli import main
    status = main([str(a) for a in args])
    return status, capsys.readouterr().err


def test_an_existing_output_needs_force(tmp_path, capsys):
    src = NETS / "cifar10.prototxt"
    out = tmp_path / "v.prototxt"
    out.write_text("precious\n")
    status, err = _main(capsys, "prototxt", src, "-o", out, "--policy", "all")
    assert status == 2 and f"--output: {out} exists; pass --force" in err, err
    assert out.read_text() == "precious\n"
    assert _main(capsys, "prototxt", src, "-o", out, "--policy", "all", "--force")[0] == 0
    assert cp.read_net(cp.load_caffe_pb2(), out).ucudnn_param.policy == 2      # ALL
    # the input too, and with --force it is replaced by its variant
    own = tmp_path / "own.prototxt"
    own.write_text(src.read_text())
    status, err = _main(capsys, "prototxt", own, "-o", own, "--limit", "1MiB")
    assert status == 2 and "--force" in err and own.read_text() == src.read_text()
    assert _main(capsys, "prototxt", own, "-o", own, "--limit", "1MiB", "--force")[0] == 0
    assert cp.read_net(cp.load_caffe_pb2(), own).ucudnn_param.workspace_limit == 1 << 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["own.prototxt", "v.prototxt"]


def test_write_text_never_overwrites_without_replace(tmp_path):
    from ucudnn.plan.table import write_text
    path = tmp_path / "f.txt"
    write_text(path, "one\n", replace=False)
    with pytest.raises(FileExistsError):
        write_text(path, "two\n", replace=False)
    assert path.read_text() == "one\n" and os.listdir(tmp_path) == ["f.txt"]
    write_text(path, "three\n")
    assert path.read_text() == "three\n" and os.listdir(tmp_path) == ["f.txt"]
    # a name taken while the file is written is not overwritten either (the link fails)
    import ucudnn.plan.table as table
    real = os.link

    def racing_link(src, dst, **kw):
        Path(dst).write_text("theirs\n")
        return real(src, dst, **kw)
    try:
        table.os.link = racing_link
        with pytest.raises(FileExistsError):
            write_text(tmp_path / "g.txt", "mine\n", replace=False)
    finally:
        table.os.link = real
    assert (tmp_path / "g.txt").read_text() == "theirs\n"
    assert sorted(os.listdir(tmp_path)) == ["f.txt", "g.txt"]


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_get_the_umasks_mode(tmp_path, capsys, umask):
    old = os.umask(umask)
    try:
        out = tmp_path / "v.prototxt"
        assert _main(capsys, "prototxt", NETS / "cifar10.prototxt", "-o", out,
                     "--policy", "all")[0] == 0
        assert os.stat(out).st_mode & 0o777 == 0o666 & ~umask
        # a replaced file keeps its mode
        os.chmod(out, 0o640)
        assert _main(capsys, "prototxt", NETS / "cifar10.prototxt", "-o", out, "--force",
                     "--policy", "undivided")[0] == 0
        assert os.stat(out).st_mode & 0o777 == 0o640
        assert cp.read_net(cp.load_caffe_pb2(), out).ucudnn_param.policy == 0
    finally:
        os.umask(old)


def test_write_text_keeps_fsync_and_atomicity(tmp_path, monkeypatch):
    from ucudnn.plan import table
    synced = []
    monkeypatch.setattr(table.os, "fsync", lambda fd: synced.append(fd))
    table.write_text(tmp_path / "r.json", "{}\n", fsync=True)
    table.write_text(tmp_path / "s.json", "{}\n")
    assert len(synced) == 1 and (tmp_path / "r.json").read_text() == "{}\n"

    def broken(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(table.os, "replace", broken)
    with pytest.raises(OSError):
        table.write_text(tmp_path / "r.json", "new\n")
    assert (tmp_path / "r.json").read_text() == "{}\n"        # the old file, no temporary
    assert sorted(os.listdir(tmp_path)) == ["r.json", "s.json"]


@pytest.mark.parametrize("edit, line, col, layer, field", [
    ("ucudnn_param {\n  workspace_limit: -1\n}\n", 2, 3, None, "workspace_limit"),
    ("layer:conv1 ucudnn_param {\n  micro_batch_size: 4\n  micro_batch_size: 0 }", 3, 3,
     "conv1", "micro_batch_size"),
    ("layer:conv2 ucudnn_param { optimizer: SHARED }", 1, 16, "conv2", "optimizer"),
])
def test_invalid_values_name_the_input_and_its_line(tmp_path, capsys, edit, line, col, layer,
                                                    field):
    text = (NETS / "cifar10.prototxt").read_text()
    if edit.startswith("layer:"):
        name, body = edit[len("layer:"):].split(" ", 1)
        head = f'  name: "{name}"\n'
        at = text.index(head) + len(head)
        line += text.count("\n", 0, at)
        text = text[:at] + body + "\n" + text[at:]
    else:
        text = edit + text
    src = tmp_path / "bad.prototxt"
    src.write_text(text)
    out = tmp_path / "out" / "variant.prototxt"
    out.parent.mkdir()
    status, err = _main(capsys, "prototxt", src, "-o", out, "--math", "fma")
    want = f"ucudnn: error: {src}:{line}:{col}: " + (f"layer {layer!r}: " if layer else "")
    assert status == 2 and err.startswith(want + f"field 'ucudnn_param.{field}'"), err
    assert str(out) not in err and not out.exists()


@pytest.mark.parametrize("text, what", [
    ("", "an empty file"), ("\n\n", "an empty file"), ("# only a comment\n", "an empty file"),
    ('name: "no layers"\ninput: "data"\n', "a net without layers"),
])
def test_a_net_without_layers_is_refused(tmp_path, capsys, text, what):
    src = tmp_path / "empty.prototxt"
    src.write_text(text)
    out = tmp_path / "v.prototxt"
    status, err = _main(capsys, "prototxt", src, "-o", out, "--policy", "all")
    assert status == 2 and err.startswith(f"ucudnn: error: {src}: {what}"), err
    assert not out.exists()


@pytest.mark.parametrize("text, where, words", [
    ('layer { name: "conv1" type: "Convolution"\n  convolution_param { strid: 4 } }\n',
     ":2:23: layer 'conv1': ", ['no field named "strid"', "BVLC Caffe has no such field"]),
    ('layer { name: "a" type: "ReLU" }\nlayers {\n  name: "conv1"\n  type: CONVOLUTION\n}\n', ": ",
     ["Refusing to upgrade inconsistent NetParameter", "'layer' and 'layers'"]),
    ('layers { layer { name: "c" type: "conv" } }\n', ":1:1: layer 'c': ",
     ["V0 layer definitions", "upgrade_net_proto_text"]),
    ('layer { name: "c" type: "Clip" clip_param { min: 0 } }\n', ":1:32: layer 'c': ",
     ["required field 'layer[0].clip_param.max' is missing"]),
    ('layer { name: "' + "n" * 5000 + '" type: 7 }\n', ":1:5024: layer 'nnnn",
     ["Expected string", "..."]),
])
def test_what_caffe_refuses_is_refused_by_name(tmp_path, capsys, text, where, words):
    src = tmp_path / "bad.prototxt"
    src.write_text(text)
    status, err = _main(capsys, "prototxt", src, "-o", tmp_path / "v.prototxt")
    assert status == 2 and err.startswith(f"ucudnn: error: {src}{where}"), err
    assert all(w in err for w in words) and len(err) < 500 and "Traceback" not in err, err


def test_help_says_comments_are_dropped(capsys):
    from ucudnn.cli import main
    with pytest.raises(SystemExit):
        main(["prototxt", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "comments are dropped" in text and "strictly as Caffe reads it" in text
