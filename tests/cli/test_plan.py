"""The ``ucudnn`` command end to end, as a subprocess."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


from ucudnn.plan.network import plan_network, read_layers
from ucudnn.plan.table import group_by_kernel, read_table

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "ucudnn" / "data" / "h200"
SHARED = REPO.parent / "shared" / "data" / "h200-cudnn9.14"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data not found at {SHARED}")
MiB = 1 << 20
JSON_KEYS = {"ucudnn_version", "network", "source", "batch", "policy", "sizes", "optimizer",
             "limit_bytes", "budget_bytes", "baseline_limit_bytes", "kernels", "totals",
             "solver", "ilp", "notes"}
KERNEL_KEYS = {"kernel", "layer", "op", "instance", "groups", "plan", "micro_batches", "chunks", "time_ms",
               "ws_bytes", "undivided_plan", "undivided_time_ms", "undivided_ws_bytes", "speedup"}




def run(tmp_path, *args, ok=True):
    env = dict(os.environ, PYTHONPATH=str(REPO), UCUDNN_CACHE=str(tmp_path / "default.sqlite"))
    p = subprocess.run([sys.executable, "-m", "ucudnn", *map(str, args)], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def _library_plan(net, table, **kw):
    layers = read_layers(SHIPPED / f"{net}_layers.csv")
    return plan_network(layers, group_by_kernel(read_table(table)), **kw)


@needs_shared
def test_plan_from_a_table(tmp_path):
    p = run(tmp_path, "plan", "--net", "alexnet", "--table", SHARED / "alexnet_default.csv")
    lines = p.stdout.splitlines()
    assert lines[1].split() == ["kernel", "micro-batches", "time(ms)", "workspace",
                                "undivided(ms)", "speedup"]
    assert any(l.startswith("conv2/fwd x2 ") for l in lines)
    assert any(l.startswith("conv1/bwd_filter ") for l in lines)
    assert not any(l.startswith("conv1/bwd_data") for l in lines)     # first layer
    ref = _library_plan("alexnet", SHARED / "alexnet_default.csv", limit=64 * MiB)
    speedup = float(re.search(r"^speedup: +([0-9.]+)x", p.stdout, re.M).group(1))
    assert speedup == pytest.approx(ref.speedup, abs=1e-3) and speedup > 1.5
    total = float(re.search(r"^planned total: +([0-9.]+) ms", p.stdout, re.M).group(1))
    assert total == pytest.approx(ref.time_ms, abs=1e-3)
    assert "undivided total:" in p.stdout and "total workspace:" in p.stdout


@needs_shared
def test_plan_json(tmp_path):
    p = run(tmp_path, "plan", "--net", "resnet18", "--table", SHARED / "resnet18_default.csv",
            "--limit", "64MiB", "--json")
    d = json.loads(p.stdout)
    assert set(d) == JSON_KEYS
    assert all(set(k) == KERNEL_KEYS for k in d["kernels"])
    assert d["optimizer"] == "dp" and d["ilp"] is None and d["limit_bytes"] == 64 * MiB
    assert d["source"]["kind"] == "table" and d["batch"] == 256 and d["policy"] == "powerOfTwo"
    assert d["totals"]["kernels"] == len(d["kernels"]) == 59
    assert d["totals"]["time_ms"] == pytest.approx(sum(k["time_ms"] for k in d["kernels"]))
    assert all(k["ws_bytes"] <= 64 * MiB and sum(k["micro_batches"]) == 256
               for k in d["kernels"])
    ref = _library_plan("resnet18", SHARED / "resnet18_default.csv", limit=64 * MiB)
    assert d["totals"]["speedup"] == pytest.approx(ref.speedup)


@needs_shared
def test_plan_ilp(tmp_path):
    table = SHARED / "alexnet_default.csv"
    dp = json.loads(run(tmp_path, "plan", "--table", table, "--json").stdout)
    ilp = json.loads(run(tmp_path, "plan", "--table", table, "--optimizer", "ilp",
                         "--json").stdout)
    assert ilp["optimizer"] == "ilp" and ilp["budget_bytes"] == 64 * MiB * 23
    assert ilp["solver"]["name"] == "cbc" and ilp["solver"]["status"] == "Optimal"
    assert ilp["totals"]["ws_bytes"] <= ilp["budget_bytes"]
    assert ilp["totals"]["time_ms"] <= dp["totals"]["time_ms"] * (1 + 1e-9)
    assert ilp["ilp"]["expected_speedup"] == pytest.approx(
        ilp["totals"]["undivided_time_ms"] / ilp["totals"]["time_ms"])
    p = run(tmp_path, "plan", "--table", table, "--budget", "512MiB")
    assert "budget:          512.0MiB" in p.stdout
    assert re.search(r"expected speedup vs undivided at the same total memory .*: [0-9.]+x",
                     p.stdout)
    assert "optimizer:       ilp (CBC), status Optimal" in p.stdout


def test_plan_from_the_shipped_data(no_gpu, tmp_path):
    p = run(tmp_path, "plan")
    assert "no GPU: planning from the shipped H200 benchmark data (cuDNN 9.14)" in p.stderr
    assert p.stdout.startswith("network alexnet, batch 256, policy powerOfTwo, limit 64.0MiB "
                             "(67108864 B) per kernel, data: shipped")
    ref = plan_network(read_layers(SHIPPED / "alexnet_layers.csv"),
                       group_by_kernel(read_table(SHIPPED / "alexnet_bench.csv")),
                       limit=64 * MiB)
    speedup = float(re.search(r"^speedup: +([0-9.]+)x", p.stdout, re.M).group(1))
    assert speedup == pytest.approx(ref.speedup, abs=1e-3)
    assert not (tmp_path / "default.sqlite").exists()      # no cache made without a GPU
    # 'all' names sizes the shipped tables lack: a note, or an error with --strict
    p = run(tmp_path, "plan", "--net", "resnet18", "--policy", "all", "--batch", "64")
    assert "sizes without measurements skipped" in p.stderr
    assert "batch 64" in p.stdout
    p = run(tmp_path, "plan", "--net", "resnet18", "--policy", "all", "--strict", ok=False)
    assert p.returncode == 2 and "not in the shipped data" in p.stderr


def test_plan_layers_without_gpu_or_table(no_gpu, tmp_path):
    layers, _ = _synthetic(tmp_path)
    p = run(tmp_path, "plan", "--layers", layers, ok=False)
    assert p.returncode == 2
    assert "no benchmark data for these layers: no GPU is visible" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "To plan them" in p.stderr


@needs_shared
def test_cache_import_list_export_and_plan(tmp_path):
    cache = tmp_path / "c.sqlite"
    table = SHARED / "alexnet_default.csv"
    p = run(tmp_path, "cache", "import", table, "--net", "alexnet", "--cache", cache,
            "--gpu", "NVIDIA H200", "--cudnn-version", "91400")
    assert "imported 135 entries (648 rows)" in p.stderr
    p = run(tmp_path, "cache", "list", "--cache", cache)
    assert p.stdout.splitlines()[0] == f"{cache}: 15 kernels, 135 entries"
    listing = json.loads(run(tmp_path, "cache", "list", "--cache", cache, "--json").stdout)
    assert len(listing) == 15 and listing[0]["batches"] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    out = tmp_path / "out.csv"
    run(tmp_path, "cache", "export", "--net", "alexnet", "--cache", cache, "--csv", out)
    assert group_by_kernel(read_table(out)) == group_by_kernel(read_table(table))
    stdout = run(tmp_path, "cache", "export", "--net", "alexnet", "--cache", cache).stdout
    assert stdout == out.read_text()
    # plan from the cache; the prototxt finds the same shapes under its own layer names
    from_table = json.loads(run(tmp_path, "plan", "--table", table, "--json").stdout)
    for src in (["--net", "alexnet"], ["--prototxt", REPO / "ucudnn" / "data" / "nets" / "alexnet.prototxt"]):
        d = json.loads(run(tmp_path, "plan", *src, "--cache", cache, "--json",
                           "--gpu", "NVIDIA H200").stdout)
        assert d["source"]["kind"] == "cache"
        assert d["totals"] == from_table["totals"]
    # nothing cached for another math mode
    p = run(tmp_path, "cache", "export", "--net", "alexnet", "--cache", cache, "--math", "fma",
            ok=False)
    assert p.returncode == 2 and "no cached measurements" in p.stderr


def test_cache_import_needs_device_without_gpu(no_gpu, tmp_path):
    p = run(tmp_path, "cache", "import", SHIPPED / "alexnet_bench.csv", "--net", "alexnet",
            "--cache", tmp_path / "c.sqlite", ok=False)
    assert p.returncode == 2 and "--gpu: needed when no GPU is visible" in p.stderr


def _synthetic(tmp_path):
    layers = tmp_path / "l.csv"
    layers.write_text("name,N,C,H,W,K,R,S,pad,stride,dilation,groups,count,bwd_data\n"
                      "c,2,3,8,8,4,3,3,1,1,1,1,1,0\n")
    table = tmp_path / "t.csv"
    table.write_text("layer,op,batch,algo,time_ms,ws_bytes,math\n"
                     "c,fwd,1,1,0.1,2000000,0\nc,fwd,2,1,0.2,4000000,0\n"
                     "c,bwd_filter,1,1,0.1,2000000,0\nc,bwd_filter,2,1,0.2,4000000,0\n")
    return layers, table


def _bad_inputs(tmp_path):
    layers, table = _synthetic(tmp_path)
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
        (["plan", *t, "--budget", "5MB"], "--budget: 5.0MiB (5242880 B) leaves 2.5MiB per kernel"),
        (["plan", *t, "--budget", "1GiB", "--optimizer", "dp"], "--budget: only the ilp"),
        (["plan", "--table", empty], "--table: " + str(empty) + ": the table holds no measurements"),
        (["plan", "--table", tmp_path / "nope.csv"], "--table: cannot read"),
        (["plan", "--sizes", "1,x"], "--sizes: expected comma-separated positive integers"),
        (["plan", "--sizes", "-2"], "--sizes: expected comma-separated positive integers"),
        (["plan", "--batch", "0"], "--batch: must be a positive integer"),
        (["plan", "--net", "vgg"], "--net: unknown network 'vgg'"),
        (["plan", "--math", "fast"], "--math: unknown math mode 'fast'"),
        (["plan", "--optimizer", "greedy"], "argument --optimizer: invalid choice"),
        (["plan", "--layers", tmp_path / "nope.csv"], "--layers: cannot read"),
        (["plan", "--layers", table, "--table", table], "--layers: "),
        (["plan", "--cache", junk], f"--cache: benchmark cache {junk}: not an SQLite database"),
        (["plan", "--prototxt", data], "--prototxt: " + str(data) + ": layer 'd' (type Data)"),
        (["bench", "--net", "alexnet", "--ops", "fwd,back"], "--ops: unknown op(s) ['back']"),
        (["bench", "--net", "alexnet", "--workspace-cap", "lots"], "--workspace-cap: cannot parse"),
        (["bench"], "one of --net, --layers or --prototxt is required"),
        (["cache", "list", "--cache", junk], "not an SQLite database"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "the following arguments are required"),
    ]


def test_bad_inputs_exit_2_naming_the_field(tmp_path):
    junk = tmp_path / "junk.sqlite"
    for args, message in _bad_inputs(tmp_path):
        before = junk.read_bytes()
        p = run(tmp_path, *args, ok=False)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert message in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
        assert re.match(r"ucudnn( \w+)*: error: ", p.stderr), p.stderr
        assert junk.read_bytes() == before


def test_bench_without_gpu(no_gpu, tmp_path):
    p = run(tmp_path, "bench", "--net", "alexnet", "--cache", tmp_path / "c.sqlite",
            "--csv", tmp_path / "o.csv", ok=False)
    assert p.returncode == 2
    assert p.stderr.startswith("ucudnn: error: bench needs a GPU: no GPU visible: ")
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / "c.sqlite").exists()


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


# -- with a stand-in for the GPU module (in-process: the real one needs a GPU) ------------------



def test_bench_and_plan_with_a_gpu(fake_gpu, tmp_path, capsys):
    from ucudnn.cli import main
    cache, out = tmp_path / "c.sqlite", tmp_path / "o.csv"
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--csv", str(out),
                 "--repeats", "2", "--workspace-cap", "1GiB"]) == 0
    assert len(fake_gpu.calls) == 14                 # 5 layers x 3 ops, conv1 without bwd_data
    assert all(c[3] == [1, 2, 4, 8, 16, 32, 64, 128, 256] and c[4] == 2 and c[6] == 1 << 30
               for c in fake_gpu.calls)
    err = capsys.readouterr().err
    assert "[1/14] conv1 fwd: measuring 9 of 9 sizes" in err and "9/9 sizes done" in err
    assert len(read_table(out)) == 14 * 9 * 2
    # everything is cached now (for a cap of at most 1 GiB); --force measures again
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--workspace-cap",
                 "1GiB"]) == 0
    assert len(fake_gpu.calls) == 14
    assert "[14/14] conv5 bwd_filter: 9 sizes cached" in capsys.readouterr().err
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--ops", "fwd",
                 "--sizes", "4,256", "--force"]) == 0
    assert [c[3] for c in fake_gpu.calls[14:]] == [[4, 256]] * 5
    # plan benchmarks what the default cache lacks, then finds it there
    capsys.readouterr()
    assert main(["plan", "--net", "resnet18", "--batch", "32", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["source"]["kind"] == "benchmark" and first["batch"] == 32
    n_calls = len(fake_gpu.calls)
    assert n_calls == 19 + 32                        # 11 shapes x 3 ops - conv1 bwd_data
    assert main(["plan", "--net", "resnet18", "--batch", "32", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["source"]["kind"] == "cache" and len(fake_gpu.calls) == n_calls
    assert second["totals"] == first["totals"]
    # 1 MiB per sample, 64 MiB limit: chunks of 32 fit whole; 8 MiB: chunks of 8
    assert all(k["micro_batches"] == [32] for k in second["kernels"])
    assert main(["plan", "--net", "resnet18", "--batch", "32", "--limit", "8MiB", "--json"]) == 0
    small = json.loads(capsys.readouterr().out)
    assert all(k["micro_batches"] == [8, 8, 8, 8] for k in small["kernels"])
    # info shows the device
    assert main(["info"]) == 0
    assert "gpu: Fake GPU" in capsys.readouterr().out


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


# -- the newcomer items: inputs used or refused, files, sizes, explanations -------------------

def test_plan_prototxt_without_gpu_uses_the_shipped_data_and_its_ucudnn_param(no_gpu, tmp_path):
    for net in ("alexnet", "resnet18"):
        p = run(tmp_path, "plan", "--prototxt", REPO / "ucudnn" / "data" / "nets" / f"{net}.prototxt")
        assert "data: shipped" in p.stdout
    text = (REPO / "ucudnn" / "data" / "nets" / "alexnet.prototxt").read_text()
    variant = tmp_path / "v.prototxt"
    variant.write_text("ucudnn_param { policy: UNDIVIDED workspace_limit: 8388608 }\n" + text)
    d = json.loads(run(tmp_path, "plan", "--prototxt", variant, "--json").stdout)
    assert d["policy"] == "undivided" and d["limit_bytes"] == 8 * MiB
    assert all(k["micro_batches"] == [256] for k in d["kernels"])
    d = json.loads(run(tmp_path, "plan", "--prototxt", variant, "--policy", "powerOfTwo",
                       "--limit", "64MiB", "--json").stdout)
    assert d["policy"] == "powerOfTwo" and d["limit_bytes"] == 64 * MiB
    for bad, field in (("policy: FOO", "FOO"), ("workspace_limit: -5", "workspace_limit")):
        variant.write_text(text.replace('name: "conv2"\n', f'name: "conv2"\n'
                                        f'  ucudnn_param {{ {bad} }}\n', 1))
        p = run(tmp_path, "plan", "--prototxt", variant, ok=False)
        assert p.returncode == 2 and field in p.stderr and "--prototxt" in p.stderr, p.stderr


def test_plan_refuses_shipped_data_that_does_not_match(no_gpu, tmp_path):
    for args, what in ((["--gpu", "Tesla P100"], "Tesla P100"),
                       (["--cudnn-version", "8905"], "cuDNN 8905"),
                       (["--dtype", "float64"], "float64"), (["--math", "fma"], "fma")):
        p = run(tmp_path, "plan", *args, ok=False)
        assert p.returncode == 2 and what in p.stderr and "shipped" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1


def test_plan_table_names_algorithms_and_explains_itself(no_gpu, tmp_path):
    p = run(tmp_path, "plan", "--limit", "64M")
    assert "64x4:IMPLICIT_PRECOMP_GEMM" in p.stdout and "algo" not in p.stdout.split("legend")[0]
    assert re.search(r"^legend: \S+ = \w+ micro-batch.*predicted.*not measured", p.stdout, re.M)
    assert "limit 64.0MiB (67108864 B) per kernel" in p.stdout.splitlines()[0]
    d = json.loads(run(tmp_path, "plan", "--json").stdout)
    chunk = d["kernels"][2]["chunks"][0]
    from ucudnn.vocab import algo_name
    assert chunk["algo_name"] == algo_name(d["kernels"][2]["op"], chunk["algo"])
    p = run(tmp_path, "plan", "--limit", "-5MiB", ok=False)
    assert p.returncode == 2 and "--limit: size must not be negative" in p.stderr


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
            assert "(default: 64MiB" in text and "(default: float32)" in text


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
    src.write_text((REPO / "ucudnn" / "data" / "nets" / "alexnet.prototxt").read_text())
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


def test_plan_benchmarks_in_the_asked_dtype(fake_gpu, tmp_path, capsys):
    from ucudnn.cli import main
    assert main(["plan", "--net", "alexnet", "--batch", "8", "--dtype", "float64",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["source"]["kind"] == "benchmark" and d["source"]["dtype"] == "float64"
    assert fake_gpu.dtypes and set(fake_gpu.dtypes) == {"float64"}
    n = len(fake_gpu.calls)
    assert main(["plan", "--net", "alexnet", "--batch", "8", "--dtype", "float64"]) == 0
    assert len(fake_gpu.calls) == n and "data: cache" in capsys.readouterr().out


def test_bench_shards_and_devices(fake_gpu, tmp_path, monkeypatch, capsys):
    """Note [Benchmarks over several GPUs]: --shard i/N measures one of N disjoint,
    equal-cost shares; --devices starts one `ucudnn bench --shard i/N` per GPU (here run in
    this process by a stand-in for Popen, which records each child's GPU) and, with --csv,
    reads the table back from the shared cache without measuring again."""
    import types

    from ucudnn.cli import main
    from ucudnn.measure import shipped
    from ucudnn.measure.sources import kernel_cost, shard_kernels
    from ucudnn.plan.dp import candidate_sizes
    layers = shipped.layers("resnet18")
    sizes_of = lambda l: candidate_sizes("all", l.n)                 # noqa: E731
    shards = shard_kernels(layers, ("fwd", "bwd_data", "bwd_filter"), sizes_of, 2)
    every = [(l.name, op) for l in layers for op in l.ops]
    assert sorted(shards[0] + shards[1]) == sorted(every) and not set(shards[0]) & set(shards[1])
    cost = {(l.name, op): kernel_cost(l, op, sizes_of(l)) for l in layers for op in l.ops}
    loads = [sum(cost[k] for k in s) for s in shards]
    assert max(loads) <= 1.1 * min(loads)                   # ResNet-18 splits evenly
    assert shard_kernels(layers, ("fwd", "bwd_data", "bwd_filter"), sizes_of, 2) == shards

    cache = tmp_path / "c.sqlite"
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--shard", "0/2"]) == 0
    first = len(fake_gpu.calls)
    assert 0 < first < 14

    children = []

    def popen(cmd, env):
        assert cmd[1:4] == ["-m", "ucudnn", "bench"] and "--devices" not in cmd
        assert "--csv" not in cmd
        children.append((env["CUDA_VISIBLE_DEVICES"], cmd[cmd.index("--shard") + 1]))
        rc = main(cmd[3:])                                 # the child, in this process
        return types.SimpleNamespace(wait=lambda: rc, returncode=rc)

    monkeypatch.setattr("subprocess.Popen", popen)
    out = tmp_path / "t.csv"
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--devices", "2,3",
                 "--csv", str(out)]) == 0
    assert children == [("2", "0/2"), ("3", "1/2")]
    assert len(fake_gpu.calls) == 14                      # shard 0 was cached: shard 1 only
    assert len(read_table(out)) == 14 * 9 * 2             # read back, nothing measured
    assert "2 GPUs done" in capsys.readouterr().err

    monkeypatch.setattr("subprocess.Popen", lambda cmd, env: types.SimpleNamespace(
        wait=lambda: 3, returncode=3))
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--devices", "0,1"]) == 1
    assert "bench --devices: failed on GPU 0 (exit status 3), GPU 1" in capsys.readouterr().err
    for bad in (["--devices", "0,0"], ["--devices", "0", "--shard", "0/1"], ["--shard", "1/1"]):
        assert main(["bench", "--net", "alexnet", *bad]) == 2


def test_bench_pruned_search(fake_gpu, tmp_path, capsys):
    """`bench --policy all --search pruned --limit`: every kernel measured by the runtime's
    pruned search (what Caffe runs with UCUDNN_SEARCH=pruned), far fewer sizes than `all`;
    a second run finds everything in the cache; bad combinations are refused."""
    from ucudnn.cli import main
    cache = tmp_path / "c.sqlite"
    args = ["bench", "--net", "alexnet", "--cache", str(cache), "--policy", "all",
            "--search", "pruned", "--limit", "64MiB"]
    assert main(args) == 0
    sizes = [len(c[3]) for c in fake_gpu.calls]
    assert sizes and sum(sizes) < 0.25 * 14 * 256
    assert {c[2] for c in fake_gpu.calls} == {256}
    assert "[14/14] conv5 bwd_filter: pruned search looked at" in capsys.readouterr().err
    n = len(fake_gpu.calls)
    assert main(args) == 0 and len(fake_gpu.calls) == n
    for bad, msg in ((["--policy", "powerOfTwo", "--search", "pruned", "--limit", "8MiB"],
                      "--search pruned: only with --policy all"),
                     (["--policy", "all", "--search", "pruned"], "needs --limit"),
                     (["--policy", "all", "--limit", "8MiB"], "--limit: only with --search")):
        assert main(["bench", "--net", "alexnet", "--cache", str(cache), *bad]) == 2
        assert msg in capsys.readouterr().err
