"""The ``ucudnn`` command as a whole, as a subprocess: bad input is one line naming the field
(exit status 2), bugs are reported as such, help, info, config."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from cli_run import run, synthetic
from repo_paths import NETS


def _bad_inputs(tmp_path):
    layers, table = synthetic(tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_text("layer,op,batch,algo,time_ms,ws_bytes,math\n")
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 50)
    data = tmp_path / "data.prototxt"
    data.write_text('layer { name: "d" type: "Data" top: "data" }\n')
    t = ["--layers", layers, "--table", table]
    return [
        (["plan", "--limit", "64XB"], "--limit: cannot parse '64XB'"),
        (["plan", "--limit=-1MiB"], "--limit: size must not be negative"),
        (["plan", "--policy", "fast"], "--policy: unknown policy 'fast'"),
        (["plan", *t, "--budget", "1MiB"],
         "--budget: 1.0MiB (1048576 B) is below the smallest total workspace"),
        (["plan", *t, "--optimizer", "ilp", "--limit", "1MiB"],
         "--limit: 1.0MiB x 2 kernel calls = 2.0MiB is below the smallest total workspace"),
        (["plan", *t, "--budget", "1GiB", "--optimizer", "dp"], "--budget: only the ilp"),
        (["plan", "--table", empty], "--table: " + str(empty) + ": the table holds no measurements"),
        (["plan", "--table", tmp_path / "nope.csv"], "--table: cannot read"),
        (["plan", "--sizes", "1,x"], "--sizes: expected comma-separated positive integers"),
        (["plan", "--sizes", "-2"], "--sizes: expected comma-separated positive integers"),
        (["plan", "--batch", "0"], "--batch: must be a positive integer"),
        (["plan", "--net", "vgg"], "--net: unknown network 'vgg'"),
        (["plan", "--math", "fast"], "--math: unknown math mode 'fast'"),
        (["plan", "--optimizer", "greedy"], "--optimizer: unknown optimizer 'greedy' (expected "
                                             "one of dp, ilp, shared)"),
        (["plan", "--layers", tmp_path / "nope.csv"], "--layers: cannot read"),
        (["plan", "--layers", table, "--table", table], "--layers: "),
        (["plan", "--cache", junk], f"--cache: benchmark cache {junk}: not an SQLite database"),
        # a data layer without a batch size: refused at its line
        (["plan", "--prototxt", data], "--prototxt: " + str(data) + ":1: layer 'd' (type Data): "
                                       "field 'data_param.batch_size' must be >= 1"),
        (["bench", "--net", "alexnet", "--ops", "fwd,back"], "--ops: unknown op(s) ['back']"),
        (["bench", "--net", "alexnet", "--workspace-cap", "lots"], "--workspace-cap: cannot parse"),
        (["bench"], "one of --net, --layers or --prototxt is required"),
        (["cache", "list", "--cache", junk], "not an SQLite database"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "the following arguments are required"),
    ]


def test_bad_inputs_exit_2_naming_the_field(tmp_path):
    junk = tmp_path / "junk.sqlite"
    wrong = []
    for args, message in _bad_inputs(tmp_path):
        before = junk.read_bytes()
        p = run(tmp_path, *args, ok=False, traceback=True)
        if not (p.returncode == 2 and message in p.stderr
                and len(p.stderr.strip().splitlines()) == 1
                and re.match(r"ucudnn( \w+)*: error: ", p.stderr)):
            wrong.append((args, message, p.returncode, p.stderr))
        assert junk.read_bytes() == before
    assert not wrong, "\n".join(f"{a}: expected {m!r}, got exit {rc}: {err}"
                                 for a, m, rc, err in wrong)


def test_info(tmp_path, gpu_visible):
    p = run(tmp_path, "info")
    assert p.stdout.startswith("ucudnn ")
    assert "compiled core: " in p.stdout
    d = json.loads(run(tmp_path, "info", "--json").stdout)
    assert {"ucudnn_version", "core", "gpu", "no_gpu_reason"} <= set(d)
    assert d["core"]["status"] in ("ok", "missing", "error")
    if not gpu_visible:
        assert "no GPU visible: " in p.stdout
        assert d["gpu"] is None and d["no_gpu_reason"]
    else:
        assert d["gpu"] and d["no_gpu_reason"] is None


def test_help(tmp_path):
    p = run(tmp_path, "--help")
    for cmd in ("info", "bench", "plan", "cache"):
        assert cmd in p.stdout
    assert "--budget" in run(tmp_path, "plan", "--help").stdout


def test_config_prints_the_flags_of_the_installed_core(tmp_path):
    """`ucudnn config` of the installed package (the one with the compiled core)."""
    import ucudnn
    from ucudnn import config
    env = dict(os.environ, PYTHONPATH=str(Path(ucudnn.__file__).resolve().parents[1]))

    def cfg(*args):
        return subprocess.run([sys.executable, "-m", "ucudnn", "config", *args],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    res = cfg("--cflags")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == config.cflags()
    assert f"-I{config.get_include()}" in res.stdout
    res = cfg("--libs")
    assert res.returncode == 0 and "-l:libcudnn.so.9" in res.stdout
    res = cfg()
    assert res.returncode == 2 and "one of the arguments" in res.stderr


def test_every_option_has_help_with_its_default():
    import argparse
    from ucudnn.cli import build_parser

    def walk(parser):
        yield parser
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    yield from walk(sub)
    for parser in walk(build_parser()):
        for a in parser._actions:
            if a.option_strings and a.help != argparse.SUPPRESS:
                assert a.help, (parser.prog, a.option_strings)
        text = parser.format_help()
        if parser.prog.endswith(" plan"):
            # the limit's default is Caffe's (Note [Default settings])
            assert "else 8MiB, Caffe's" in " ".join(text.split())
            assert "(default: float32)" in text


def test_files_are_named_and_inputs_not_overwritten(tmp_path):
    binary = tmp_path / "b.prototxt"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    latin = tmp_path / "t.csv"
    latin.write_bytes("layer,op\nconv\xe9,fwd\n".encode("latin-1"))
    for args, option, path in ((["plan", "--prototxt", binary], "--prototxt", binary),
                               (["plan", "--table", latin], "--table", latin)):
        p = run(tmp_path, *args, ok=False)
        assert p.returncode == 2 and option in p.stderr and str(path) in p.stderr, p.stderr
        assert "codec" not in p.stderr
    src = tmp_path / "net.prototxt"
    src.write_text((NETS / "alexnet.prototxt").read_text())
    before = src.read_text()
    p = run(tmp_path, "prototxt", src, "-o", src, "--policy", "all", ok=False)
    assert p.returncode == 2 and "--force" in p.stderr and src.read_text() == before
    p = run(tmp_path, "prototxt", src, "-o", tmp_path / "missing" / "v.prototxt", ok=False)
    assert p.returncode == 2 and str(tmp_path / "missing") in p.stderr and ".tmp" not in p.stderr


def test_internal_errors_are_reported_as_bugs(monkeypatch, capsys):
    from ucudnn import cli
    from ucudnn.cli import info

    def broken(args):
        raise ValueError("an internal inconsistency")
    monkeypatch.setattr(info, "run", broken)
    assert cli.main(["info"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ucudnn: internal error: ValueError: an internal inconsistency (a bug; "
                          "please report it with the command)")
    assert "Traceback" in err
