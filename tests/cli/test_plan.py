"""`ucudnn plan`, as a subprocess (and in-process on the fake core where a GPU would
measure): tables, the shipped data, prototxt files and their ucudnn_param, --input-shape,
per-axis layers, the optimizers, the JSON document."""
import json
import re

import pytest

from cli_run import run, synthetic
from repo_paths import NETS, SHARED, SHIPPED, needs_shared
from ucudnn.cli import main
from ucudnn.plan.layers import LayerSpec, read_layers, write_layers
from ucudnn.plan.network import plan_network
from ucudnn.plan.settings import PlanSettings
from ucudnn.plan.table import group_by_kernel, read_table

MiB = 1 << 20
JSON_KEYS = {"ucudnn_version", "network", "source", "batch", "policy", "sizes", "optimizer",
             "limit_bytes", "budget_bytes", "baseline_limit_bytes", "kernels", "totals",
             "deterministic", "solver", "ilp", "notes"}
KERNEL_KEYS = {"kernel", "layer", "op", "instance", "groups", "optimizer", "plan",
               "micro_batches", "chunks", "time_ms", "ws_bytes", "undivided_plan",
               "undivided_time_ms", "undivided_ws_bytes", "speedup", "slot"}


def _library_plan(net, table, **kw):
    layers = read_layers(SHIPPED / f"{net}_layers.csv")
    return plan_network(layers, group_by_kernel(read_table(table)), PlanSettings(**kw))


@needs_shared
def test_plan_from_a_table(tmp_path):
    p = run(tmp_path, "plan", "--net", "alexnet", "--table", SHARED / "alexnet_default.csv",
            "--limit", "64MiB")
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
    assert d["totals"]["workspace_bytes"] == ref.workspace_bytes == d["totals"]["held_bytes"]
    assert [k["slot"] for k in d["kernels"]][0] == {"arena": False, "offset": 0,
                                                   "stride": ref.kernels[0].slot.stride,
                                                   "bytes": ref.kernels[0].plan.ws_bytes}


@needs_shared
def test_plan_ilp(tmp_path):
    """The ILP's default budget is the default limit (Caffe's 8 MiB) x the group calls."""
    table = SHARED / "alexnet_default.csv"
    dp = json.loads(run(tmp_path, "plan", "--table", table, "--json").stdout)
    ilp = json.loads(run(tmp_path, "plan", "--table", table, "--optimizer", "ilp",
                         "--json").stdout)
    assert ilp["optimizer"] == "ilp" and ilp["budget_bytes"] == 8 * MiB * 23
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


def test_plan_from_the_shipped_data_at_caffes_limit(no_gpu, tmp_path):
    """Without options: AlexNet, powerOfTwo, and 8 MiB per kernel (stock Caffe's limit, Note
    [Default settings]; the CLI's own default is no larger)."""
    p = run(tmp_path, "plan")
    assert "no GPU: planning from the shipped H200 benchmark data (cuDNN 9.14)" in p.stderr
    assert p.stdout.startswith("network alexnet, batch 256, policy powerOfTwo, limit 8.0MiB "
                               "(8388608 B) per kernel, data: shipped")
    ref = plan_network(read_layers(SHIPPED / "alexnet_layers.csv"),
                       group_by_kernel(read_table(SHIPPED / "alexnet_bench.csv")),
                       PlanSettings())
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
    layers, _ = synthetic(tmp_path)
    p = run(tmp_path, "plan", "--layers", layers, ok=False)
    assert p.returncode == 2
    assert "no benchmark data for these layers: no GPU is visible" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "To plan them" in p.stderr


def test_plan_prototxt_without_gpu_uses_the_shipped_data_and_its_ucudnn_param(no_gpu, tmp_path):
    for net in ("alexnet", "resnet18"):
        p = run(tmp_path, "plan", "--prototxt", NETS / f"{net}.prototxt")
        assert "data: shipped" in p.stdout
    text = (NETS / "alexnet.prototxt").read_text()
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


def test_plan_prototxt_asking_for_graph_engines_says_where_they_are_planned(no_gpu, tmp_path):
    text = (NETS / "alexnet.prototxt").read_text()
    variant = tmp_path / "g.prototxt"
    variant.write_text(text.replace('name: "conv2"\n', 'name: "conv2"\n'
                                    '  ucudnn_param { engines: GRAPH }\n', 1))
    p = run(tmp_path, "plan", "--prototxt", variant, ok=False)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "layer 'conv2': field 'ucudnn_param.engines': GRAPH is planned where the net runs" \
        in p.stderr and "Traceback" not in p.stderr


def test_plan_prototxt_asking_for_both_families_plans_the_legacy_one_and_says_so(no_gpu,
                                                                                 tmp_path):
    """BOTH is the default; one layer asking for LEGACY leaves four that plan BOTH from the
    legacy data, with the same totals."""
    text = (NETS / "alexnet.prototxt").read_text()
    variant = tmp_path / "b.prototxt"
    variant.write_text(text.replace('name: "conv2"\n', 'name: "conv2"\n'
                                    '  ucudnn_param { engines: LEGACY }\n', 1))
    mixed = json.loads(run(tmp_path, "plan", "--prototxt", variant, "--json").stdout)
    plain = json.loads(run(tmp_path, "plan", "--prototxt", NETS / "alexnet.prototxt",
                           "--json").stdout)
    assert any("engines BOTH (4 of 5 layers): planned from the legacy family" in n
               for n in mixed["notes"]), mixed["notes"]
    assert any("engines BOTH (5 of 5 layers)" in n for n in plain["notes"]), plain["notes"]
    assert mixed["totals"] == plain["totals"]


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


def test_plan_benchmarks_in_the_asked_dtype(fake_core, tmp_path, capsys):
    assert main(["plan", "--net", "alexnet", "--batch", "8", "--dtype", "float64",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["source"]["kind"] == "benchmark" and d["source"]["dtype"] == "float64"
    assert fake_core.calls and {c.dtype for c in fake_core.calls} == {"float64"}
    n = len(fake_core.calls)
    assert main(["plan", "--net", "alexnet", "--batch", "8", "--dtype", "float64"]) == 0
    assert len(fake_core.calls) == n and "data: cache" in capsys.readouterr().out


def test_cli_plans_a_shared_arena(capsys):
    assert main(["plan", "--net", "alexnet", "--optimizer", "shared", "--limit", "8MiB",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["optimizer"] == "shared" and doc["budget_bytes"] == 8 * MiB * 23   # group calls
    assert doc["ilp"]["arena_bytes"] == doc["totals"]["held_bytes"] <= doc["budget_bytes"]
    assert doc["totals"]["held_bytes"] < doc["totals"]["ws_bytes"]
    assert doc["totals"]["workspace_bytes"] == 0
    assert all(k["slot"]["arena"] for k in doc["kernels"])
    assert main(["plan", "--net", "alexnet", "--optimizer", "shared", "--budget", "64MiB"]) == 0
    out = capsys.readouterr().out
    assert "shared arena:" in out and "budget:          64.0MiB" in out
    # every layer has zero-workspace algorithms: even 1 KiB plans (slowly)
    assert main(["plan", "--net", "alexnet", "--optimizer", "shared", "--budget", "1KiB",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["held_bytes"] <= 1024
    assert main(["plan", "--net", "alexnet", "--optimizer", "dp", "--budget", "1GiB"]) == 2
    assert "ilp and shared" in capsys.readouterr().err


@pytest.mark.parametrize("optimizer", ["ilp", "shared"])
def test_budget_zero_is_zero_bytes(capsys, optimizer):
    """--budget 0 is a budget of 0 bytes (only zero-workspace algorithms), as
    ``total_workspace: 0`` is (Note [Workspace budget]), not limit x calls."""
    assert main(["plan", "--net", "alexnet", "--optimizer", optimizer, "--budget", "0",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["budget_bytes"] == 0 and doc["totals"]["ws_bytes"] == 0
    assert doc["totals"]["held_bytes"] == 0


MIXED = """ucudnn_param { policy: POWER_OF_TWO optimizer: ILP workspace_limit: 8388608 }
"""


def test_a_prototxt_with_mixed_optimizers_plans(tmp_path, capsys):
    """Layers of one net may ask for different optimizers (the net's ILP, a layer's own DP
    limit, planned alone): ``plan`` plans them together, as Caffe's net does."""
    text = (NETS / "alexnet.prototxt").read_text()
    own = 'name: "conv3"\n  ucudnn_param { optimizer: DP workspace_limit: 1048576 }\n'
    variant = tmp_path / "mixed.prototxt"
    variant.write_text(MIXED + text.replace('name: "conv3"\n', own, 1))
    assert main(["plan", "--prototxt", str(variant), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["optimizer"] == "mixed" and doc["limit_bytes"] is None
    by_layer = {}
    for k in doc["kernels"]:
        by_layer.setdefault(k["layer"], set()).add(k["optimizer"])
    assert by_layer == {"conv1": {"ilp"}, "conv2": {"ilp"}, "conv3": {"dp"}, "conv4": {"ilp"},
                        "conv5": {"ilp"}}
    assert all(k["ws_bytes"] <= 1 << 20 for k in doc["kernels"] if k["layer"] == "conv3")
    # the ILP's budget: 8 MiB x the ILP layers' calls (conv3 is not one of them)
    assert doc["budget_bytes"] == 8 * MiB * (23 - 3)


INPUTS = """name: "py"
layer { name: "reader" type: "Python" top: "data" top: "label" }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
        convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
"""


def test_plan_prototxt_with_input_shape(fake_core, tmp_path, capsys):
    """A blob the prototxt does not settle (a Python data layer's top) is given with
    --input-shape BLOB=N,C,H,W; without it the error names the blob and the layer."""
    net = tmp_path / "py.prototxt"
    net.write_text(INPUTS)
    assert main(["plan", "--prototxt", str(net), "--input-shape", "data=8,3,32,32",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["batch"] == 8 and doc["source"]["kind"] == "benchmark"
    assert [k["kernel"] for k in doc["kernels"]] == ["conv1/fwd", "conv1/bwd_filter",
                                                     "conv2/fwd", "conv2/bwd_data",
                                                     "conv2/bwd_filter"]
    assert {c.shape.c for c in fake_core.calls} == {3, 16}
    # --batch replaces the given batch too
    assert main(["plan", "--prototxt", str(net), "--input-shape", "data=8,3,32,32",
                 "--batch", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"] == 4
    for args, message in (
            ([], "--prototxt: " + str(net) + ":3: layer 'conv1' (type Convolution): the shape of "
                 "its input 'data' is not known: layer 'reader' (type Python) reads it from files "
                 "or computes "
                 "it outside Caffe's shape rules; pass --input-shape data=N,C,H,W"),
            (["--input-shape", "data=8,3"], None),
            (["--input-shape", "data"], "--input-shape: expected BLOB=N,C,H,W (positive "
                                        "integers), got 'data'"),
            (["--input-shape", "data=8,3,32,32", "--input-shape", "nope=1,1,1,1"],
             "--input-shape: no layer of phase TRAIN makes a blob 'nope'")):
        rc = main(["plan", "--prototxt", str(net), *args])
        err = capsys.readouterr().err
        assert rc == 2, (args, err)
        if message is not None:
            assert message in err, err
    assert main(["plan", "--net", "alexnet", "--input-shape", "data=8,3,32,32"]) == 2
    assert "--input-shape: only with --prototxt" in capsys.readouterr().err


def test_plan_prototxt_with_input_shape_from_the_shipped_data(no_gpu, tmp_path):
    """Without a GPU the given shape's kernels are looked up in the shipped data: not there,
    said as such (one line, exit status 2)."""
    net = tmp_path / "py.prototxt"
    net.write_text(INPUTS)
    p = run(tmp_path, "plan", "--prototxt", net, "--input-shape", "data=8,3,32,32", ok=False)
    assert p.returncode == 2 and "no benchmark data for these layers" in p.stderr
    assert "kernel not in the shipped data (C=3 32x32 K=16 3x3 pad 1 stride 1" in p.stderr


def test_plan_per_axis_layers_from_a_table(tmp_path):
    """A layer list with per-axis columns (an Inception 1x7 and 7x1) plans from a table."""
    layers = [LayerSpec("row", 4, 8, 17, 17, 8, 1, 7, pad=(0, 3), bwd_data=False),
              LayerSpec("col", 4, 8, 17, 17, 8, 7, 1, pad=(3, 0))]
    write_layers(tmp_path / "l.csv", layers)
    rows = ["layer,op,batch,algo,time_ms,ws_bytes,math"]
    for l in layers:
        for op in l.ops:
            for b in (1, 2, 4):
                rows.append(f"{l.name},{op},{b},0,{1.0 * b},0,0")
                rows.append(f"{l.name},{op},{b},1,{0.2 * b + 0.1},{1000 * b * l.s},0")
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    p = run(tmp_path, "plan", "--layers", tmp_path / "l.csv", "--table", tmp_path / "t.csv",
            "--limit", "15000", "--json")
    doc = json.loads(p.stdout)
    plans = {k["kernel"]: k["micro_batches"] for k in doc["kernels"]}
    assert plans == {"row/fwd": [2, 2], "row/bwd_filter": [2, 2], "col/fwd": [4],
                     "col/bwd_data": [4], "col/bwd_filter": [4]}


def test_plan_a_net_without_convolutions_says_so(tmp_path):
    net = tmp_path / "noconv.prototxt"
    net.write_text('layer { name: "data" type: "DummyData" top: "data" '
                   'dummy_data_param { shape { dim: 8 dim: 6 dim: 13 dim: 13 } } }\n')
    p = run(tmp_path, "plan", "--prototxt", net, ok=False)
    assert p.returncode == 0 and p.stdout == ""
    assert p.stderr == (f"ucudnn: note: {net}: no Convolution layer in phase TRAIN: nothing to "
                        "plan\n")
    p = run(tmp_path, "plan", "--prototxt", net, "--json")
    assert json.loads(p.stdout)["kernels"] == []
