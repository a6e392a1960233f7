"""`ucudnn reproduce`: the grid, resuming, failures, the predicted (no GPU) mode, CSV."""
import csv
import json
import os
import stat

import pytest

from fake_caffe import fake_caffe as _fake_caffe
from repo_paths import LOGS, NETS, REPO
from ucudnn.experiments import caffe_run, grid, reproduce as rp, results, summary
from ucudnn.paths import nets_dir
from ucudnn.vocab import UNLIMITED, parse_size

from ucudnn import cli
from ucudnn.caffe.proto import load_caffe_pb2, read_net
from ucudnn.cli import reproduce as reproduce_cli
from ucudnn.experiments.plots import layer_type_bars
from ucudnn.experiments.predict import predict_point
from ucudnn.experiments.summary import format_summary, write_csv

MIB = 1 << 20


def test_grid_order_and_keys():
    pts = grid.grid(["alexnet", "resnet18"], [64 * MIB, 8 * MIB], shared=False)
    keys = [p.key for p in pts]
    assert len(pts) == 2 * (2 + 2 * 4)
    assert keys[:6] == ["alexnet/caffe/-", "alexnet/unlimited/-", "alexnet/undivided/64.0MiB",
                        "alexnet/powerOfTwo/64.0MiB", "alexnet/all/64.0MiB", "alexnet/ilp/64.0MiB"]
    assert len(set(keys)) == len(keys)
    assert grid.Point("a", "unlimited", UNLIMITED).policy == "undivided"
    assert grid.Point("a", "caffe").policy is None
    assert len(grid.grid(["alexnet"], [MIB], ilp=False, unlimited=False, stock=False,
                       shared=False)) == 3
    # the shared arena at every limit, then once at stock Caffe's memory, last of the net
    keys = [p.key for p in grid.grid(["alexnet"], [64 * MIB, 8 * MIB])]
    assert keys[5:7] == ["alexnet/ilp/64.0MiB", "alexnet/shared/64.0MiB"]
    assert keys[-2:] == ["alexnet/shared/8.0MiB", "alexnet/shared_stock/-"]


def test_results_file_is_written_atomically_and_checked(tmp_path):
    path = tmp_path / "r" / "reproduce.json"
    doc = results.load_results(path)
    doc["points"]["x"] = {"status": "ok"}
    results.save_results(path, doc)
    assert results.load_results(path)["points"] == {"x": {"status": "ok"}}
    assert [p.name for p in path.parent.iterdir()] == ["reproduce.json"]   # no temporaries
    path.write_text("{ truncated")
    with pytest.raises(results.ReproduceError, match="cannot read the results to resume"):
        results.load_results(path)
    path.write_text(json.dumps({"schema": 99, "points": {}}))
    with pytest.raises(results.ReproduceError, match="not a results file"):
        results.load_results(path)


def test_pending_skips_measured_points():
    pts = grid.grid(["alexnet"], [MIB], ilp=False, unlimited=False, stock=False, shared=False)
    doc = {"points": {pts[0].key: {"status": "ok"}, pts[1].key: {"status": "failed"}}}
    assert results.pending(pts, doc) == pts[2:]
    assert results.pending(pts, doc, retry_failed=True) == pts[1:]


def test_predicted_mode_from_shipped_data(tmp_path):
    opts = rp.Options(out=tmp_path, nets=["alexnet"], limits=[64 * MIB], predict=True,
                      prototxt_dir=NETS)
    said = []
    doc = rp.run(opts, say=said.append)
    pts = doc["points"]
    assert pts["alexnet/caffe/-"]["status"] == "skipped"
    for key in ("alexnet/undivided/64.0MiB", "alexnet/powerOfTwo/64.0MiB", "alexnet/ilp/64.0MiB",
                "alexnet/unlimited/-"):
        assert pts[key]["status"] == "predicted" and "no GPU" in pts[key]["source"]
    und = pts["alexnet/undivided/64.0MiB"]["predicted_conv_ms"]
    p2 = pts["alexnet/powerOfTwo/64.0MiB"]["predicted_conv_ms"]
    floor = pts["alexnet/unlimited/-"]["predicted_conv_ms"]
    assert floor <= p2 < und                      # micro-batching helps, unlimited is the floor
    assert all(k["ws_bytes"] <= 64 * MIB for k in pts["alexnet/powerOfTwo/64.0MiB"]["kernels"].values())
    assert doc["meta"]["mode"] == "predict"
    with open(tmp_path / "points.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["setting"] for r in rows} == {"caffe", "unlimited", "undivided", "powerOfTwo", "all",
                                            "ilp", "shared", "shared_stock"}
    # the shared arena at the ILP's budget: never slower than the ILP, holding less
    shared, ilp = pts["alexnet/shared/64.0MiB"], pts["alexnet/ilp/64.0MiB"]
    assert shared["status"] == "predicted" and shared["optimizer"] == "shared"
    assert shared["predicted_conv_ms"] <= ilp["predicted_conv_ms"]
    assert shared["workspace_bytes"] <= shared["ilp_budget_bytes"] == ilp["ilp_budget_bytes"]
    assert pts["alexnet/shared_stock/-"]["status"] == "skipped"
    table = summary.format_summary(doc)
    assert "predicted" in table and "alexnet" in table
    # resuming runs nothing
    said.clear()
    rp.run(opts, say=said.append)
    assert "0 to run" in said[0]


def test_caffe_mode_records_failures_and_resumes(tmp_path, monkeypatch, patched_caffe_source):
    monkeypatch.setenv("UCUDNN_CAFFE_PROTO",
                       str(patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto"))
    out = tmp_path / "out"
    opts = rp.Options(out=out, nets=["alexnet"], limits=[8 * MIB], pytorch=False, shared=False,
                      caffe=_fake_caffe(tmp_path, "powerOfTwo"), prototxt_dir=NETS)
    doc = rp.run(opts, say=lambda m: None)
    pts = doc["points"]
    failed = pts["alexnet/powerOfTwo/8.0MiB"]
    assert failed["status"] == "failed" and "exit status 134" in failed["error"]
    assert "CUDNN_STATUS" in failed["log_tail"]
    ok = pts["alexnet/all/8.0MiB"]
    assert ok["status"] == "ok" and ok["median_ms"] > 0 and len(ok["kernels"]) == 15
    assert [l["name"] for l in ok["layers"]][:2] == ["data", "conv1"]
    # plans, predictions and planning times come from the plan records, not the log
    assert ok["repeats"][0]["records"] == "alexnet_all_8.0MiB.records.jsonl"
    assert (out / "logs" / "alexnet_all_8.0MiB.records.jsonl").is_file()
    conv2 = ok["kernels"]["conv2/fwd"]
    assert conv2["instances"] == 2 and conv2["batch"] == 256 and conv2["stage"] == "dp"
    assert conv2["chunks"][0]["algo_name"] == "IMPLICIT_PRECOMP_GEMM"
    assert conv2["plan"] == "128x2:algo1" and conv2["sizes_cached"] == 256
    assert ok["predicted_conv_ms"] == pytest.approx(2.0 * 24)   # 15 kernels, 24 instances
    assert ok["bench_s"] == pytest.approx(0.25 * 15)
    ilp = pts["alexnet/ilp/8.0MiB"]
    assert ilp["ilp_solve_s"] == pytest.approx(0.011) and ilp["ilp_budget_bytes"] == 23 * 8 * MIB
    assert ilp["kernels"]["conv1/fwd"]["stage"] == "ilp"
    assert ilp["kernels"]["conv1/fwd"]["bench_s"] == 0.25      # the benchmark before the ILP
    assert pts["alexnet/caffe/-"]["kernels"] == {}
    assert pts["alexnet/unlimited/-"]["limit_bytes"] == UNLIMITED
    assert results.speedup(doc, ok) == pytest.approx(
        pts["alexnet/undivided/8.0MiB"]["median_ms"] / ok["median_ms"])
    assert (out / "logs" / "alexnet_powerOfTwo_8.0MiB.log").is_file()
    # the variant prototxt: net-wide ucudnn_param, data filled once
    text = (out / "prototxt" / "alexnet_powerOfTwo_8.0MiB.prototxt").read_text()
    assert "policy: POWER_OF_TWO" in text and "workspace_limit: 8388608" in text
    data_layer = text[:text.index('name: "conv1"')]
    assert 'type: "gaussian"' not in data_layer and 'type: "constant"' in data_layer
    assert "ucudnn_param" not in (out / "prototxt" / "alexnet_caffe_-.prototxt").read_text()

    # resume: nothing runs again but the failed point with retry_failed, which now passes
    opts.caffe = _fake_caffe(tmp_path, "no-such-setting")
    assert results.pending(grid.grid(["alexnet"], [8 * MIB], shared=False),
                      results.load_results(out / "reproduce.json")) == []
    opts.retry_failed = True
    doc = rp.run(opts, say=lambda m: None)
    assert all(r["status"] == "ok" for r in doc["points"].values())
    assert len(doc["runs"]) == 2 and doc["points"]["alexnet/powerOfTwo/8.0MiB"]["run"] == 1
    assert doc["points"]["alexnet/all/8.0MiB"]["run"] == 0
    with open(out / "layers.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["layer"] for r in rows} >= {"conv1", "fc8"}


def test_caffe_mode_needs_a_binary(tmp_path):
    with pytest.raises(results.ReproduceError, match="no Caffe binary"):
        rp.run(rp.Options(out=tmp_path, nets=["alexnet"], caffe=str(tmp_path / "nope"),
                          prototxt_dir=NETS), say=lambda m: None)
    with pytest.raises(results.ReproduceError, match="no vgg.prototxt in"):
        rp.run(rp.Options(out=tmp_path, nets=["vgg"], predict=True,
                          prototxt_dir=NETS), say=lambda m: None)


def test_cli_without_gpu_falls_back_to_predictions(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(reproduce_cli, "device_status", lambda: (None, "no CUDA device (test)"))
    rc = cli.main(["reproduce", "--out", str(tmp_path), "--nets", "resnet18", "--limits",
                   "64MiB", "--no-pytorch"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "predicting every point from the shipped H200 benchmark data" in err
    assert "resnet18" in out and "(predicted)" in out
    assert json.loads((tmp_path / "reproduce.json").read_text())["meta"]["mode"] == "predict"
    assert parse_size("64MiB") == 64 * MIB


def test_fill_once_makes_dummy_data_constant(patched_caffe_source):
    pb2 = load_caffe_pb2(str(patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto"))
    net = read_net(pb2, NETS / "alexnet.prototxt")
    caffe_run.fill_once(net)
    fillers = net.layer[0].dummy_data_param.data_filler
    assert [(f.type, f.value) for f in fillers] == [("constant", 1.0), ("constant", 0.0)]
    assert os.path.basename(str(REPO)) != ""


def test_merge_repeats_takes_medians_and_keeps_every_process():
    def proc(ms, conv1_fwd, run):
        return {"median_ms": ms, "mean_ms": ms + 1, "forward_ms": ms / 2, "backward_ms": ms / 2,
                "conv_ms": ms / 4, "run": run, "log": f"x.{run}.log", "iteration_ms": [ms],
                "layers": [{"name": "conv1", "forward": conv1_fwd, "backward": 1.0},
                           {"name": "relu1", "forward": 0.5, "backward": 0.5}]}
    first = dict(proc(150.0, 9.0, 0), status="ok", kernels={"conv1/fwd": {}}, bench_s=2.0)
    reps = [proc(150.0, 9.0, 0), proc(126.0, 3.0, 1), proc(130.0, 4.0, 1)]
    rec = results.merge_repeats(first, reps)
    assert rec["median_ms"] == 130.0 and (rec["min_ms"], rec["max_ms"]) == (126.0, 150.0)
    assert rec["mean_ms"] == 131.0 and rec["conv_ms"] == 32.5
    assert rec["layers"][0] == {"name": "conv1", "forward": 4.0, "backward": 1.0}
    assert rec["kernels"] == {"conv1/fwd": {}} and rec["bench_s"] == 2.0   # the first's plans
    assert "iteration_ms" not in rec and "log" not in rec                  # per process only
    assert results.measured_repeats(rec) == reps
    assert rec["timing"] == "per layer"          # processes that did not say: per layer
    whole = [dict(r, timing="whole iterations", per_layer_median_ms=r["median_ms"] + 5,
                  whole_iteration_ms=[r["median_ms"]]) for r in reps]
    rec = results.merge_repeats(first, whole)
    assert rec["timing"] == "whole iterations" and rec["per_layer_median_ms"] == 135.0
    assert "whole_iteration_ms" not in rec
    assert results.merge_repeats(first, [whole[0], reps[1]])["timing"] == "mixed"
    # a record from before repeats existed is one process
    legacy = {"status": "ok", "median_ms": 5.0, "layers": []}
    assert [r["median_ms"] for r in results.measured_repeats(legacy)] == [5.0]
    assert results.measured_repeats({"status": "failed"}) == []


def test_repeats_run_in_rounds_and_resume_adds_processes(tmp_path, monkeypatch,
                                                          patched_caffe_source):
    monkeypatch.setenv("UCUDNN_CAFFE_PROTO",
                       str(patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto"))
    out = tmp_path / "out"
    opts = rp.Options(out=out, nets=["alexnet"], limits=[8 * MIB], policies=["undivided", "all"],
                      shared=False,
                      ilp=False, unlimited=False, pytorch=False, repeats=2,
                      caffe=_fake_caffe(tmp_path, "no-such-setting"),
                      prototxt_dir=NETS)
    said = []
    doc = rp.run(opts, say=said.append)
    assert "3 to run (6 Caffe processes, 2 per point)" in said[0]
    order = [m.split(":")[0] for m in said[1:]]
    assert order == ["[1/6] alexnet/caffe/- #1", "[2/6] alexnet/undivided/8.0MiB #1",
                     "[3/6] alexnet/all/8.0MiB #1", "[4/6] alexnet/caffe/- #2",
                     "[5/6] alexnet/undivided/8.0MiB #2", "[6/6] alexnet/all/8.0MiB #2"]
    rec = doc["points"]["alexnet/all/8.0MiB"]
    assert [r["log"] for r in rec["repeats"]] == ["alexnet_all_8.0MiB.log",
                                                 "alexnet_all_8.0MiB.2.log"]
    assert (out / "logs" / "alexnet_all_8.0MiB.2.log").is_file()
    # the replayed log's conv1..conv5, forward + backward, from Caffe's per-layer timer
    layers = {l["name"]: l for l in rec["layers"]}
    assert rec["conv_ms"] == pytest.approx(sum(layers[f"conv{i}"]["forward"]
                                               + layers[f"conv{i}"]["backward"]
                                               for i in range(1, 6)))
    assert doc["points"]["alexnet/caffe/-"]["conv_ms"] > rec["conv_ms"]
    assert "2 runs]" in summary.format_summary(doc)
    with open(out / "points.csv", newline="") as f:
        rows = {r["setting"]: r for r in csv.DictReader(f)}
    assert rows["all"]["processes"] == "2" and float(rows["all"]["conv_speedup_vs_undivided"]) > 0

    # resume with three per point: one more process each, in a new run
    opts.repeats = 3
    said.clear()
    doc = rp.run(opts, say=said.append)
    assert "3 to run (3 Caffe processes, 3 per point)" in said[0]
    rec = doc["points"]["alexnet/all/8.0MiB"]
    assert [r["run"] for r in rec["repeats"]] == [0, 0, 1] and rec["run"] == 0

    # a later process that fails marks the point failed and keeps what was measured
    opts.repeats, opts.caffe = 4, _fake_caffe(tmp_path, "all")
    doc = rp.run(opts, say=lambda m: None)
    rec = doc["points"]["alexnet/all/8.0MiB"]
    assert rec["status"] == "failed" and rec["error"].startswith("repeat 4: caffe time")
    assert len(rec["repeats"]) == 3
    assert len(doc["points"]["alexnet/undivided/8.0MiB"]["repeats"]) == 4


def test_ratio_to_pytorch_in_summary_and_csv(tmp_path):
    pt = {"net": "alexnet", "setting": "all", "limit_bytes": 64 * MIB, "status": "ok",
          "median_ms": 10.0}
    doc = {"points": {"alexnet/all/64.0MiB": pt,
                      "alexnet/undivided/64.0MiB": dict(pt, setting="undivided", median_ms=25.0)},
           "pytorch": {"alexnet": {"status": "ok", "median_ms": 20.0}}}
    assert results.vs_pytorch(doc, pt) == 0.5
    assert results.vs_pytorch(dict(doc, pytorch={}), pt) is None
    assert "best Caffe point all/64.0MiB: 0.50x PyTorch's time" in summary.format_summary(doc)
    summary.write_csv(tmp_path, doc)
    with open(tmp_path / "points.csv", newline="") as f:
        rows = {r["setting"]: r for r in csv.DictReader(f)}
    assert rows["all"]["vs_pytorch"] == "0.5" and rows["undivided"]["vs_pytorch"] == "1.25"


def test_ratio_to_pytorchs_fastest_mode_beside_eager_and_its_memory(tmp_path):
    """scripts/time_pytorch.py times three modes; the baseline is the fastest
    (``vs_pytorch_best``, ``pytorch_mode``), ``vs_pytorch`` stays eager NCHW's."""
    pt = {"net": "resnet18", "setting": "shared", "limit_bytes": 64 * MIB, "status": "ok",
          "median_ms": 30.0, "peak_gpu_memory_bytes": 13 << 30}
    torch = {"status": "ok", "pytorch_mode": "compile", "pytorch_ms": 25.0, "median_ms": 25.0,
             "peak_gpu_memory_bytes": 10 << 30,
             "modes": {"eager": {"median_ms": 48.0}, "channels_last": {"median_ms": 28.0},
                       "compile": {"median_ms": 25.0}}}
    doc = {"points": {"resnet18/shared/64.0MiB": pt}, "pytorch": {"resnet18": torch}}
    assert results.vs_pytorch(doc, pt) == pytest.approx(1.2)
    assert results.vs_pytorch(doc, pt, "eager") == pytest.approx(0.625)
    assert results.vs_pytorch(doc, pt, "channels_last") == pytest.approx(30 / 28)
    table = summary.format_summary(doc)
    assert "(fastest of its modes: compile, peak 10.00 GiB)" in table, table
    assert "1.20x PyTorch's time, 1.30x its peak memory" in table, table
    assert "30.00 ms" in table and "peak 13.00 GiB" in table, table
    summary.write_csv(tmp_path, doc)
    with open(tmp_path / "points.csv", newline="") as f:
        (row,) = csv.DictReader(f)
    assert (row["pytorch_mode"], float(row["pytorch_ms"])) == ("compile", 25.0)
    assert float(row["vs_pytorch_best"]) == pytest.approx(1.2)
    assert float(row["vs_pytorch"]) == pytest.approx(0.625)
    assert int(row["pytorch_peak_gpu_memory_bytes"]) == 10 << 30


def test_caffe_mode_without_records_fails_the_point(tmp_path, monkeypatch, patched_caffe_source):
    """A Caffe whose core writes no records (an old build): ucudnn points fail, saying so."""
    monkeypatch.setenv("UCUDNN_CAFFE_PROTO",
                       str(patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto"))
    exe = tmp_path / "caffe"
    exe.write_text(f'#!/bin/bash\ncat "{LOGS}/alexnet_all_8MiB.log"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    opts = rp.Options(out=tmp_path / "out", nets=["alexnet"], limits=[8 * MIB], pytorch=False,
                      policies=["all"], ilp=False, unlimited=False, repeats=1, caffe=str(exe))
    doc = rp.run(opts, say=lambda m: None)
    assert doc["points"]["alexnet/caffe/-"]["status"] == "ok"
    rec = doc["points"]["alexnet/all/8.0MiB"]
    assert rec["status"] == "failed" and "no plan records" in rec["error"]


def test_options_are_recorded_and_paths_do_not_depend_on_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                 # no prototxt/ here
    opts = rp.Options(out=tmp_path / "o", nets=["cifar10"], limits=[8 * MIB], predict=True,
                      policies=["undivided"], ilp=False, stock=False)
    assert opts.nets_dir == nets_dir() and opts.nets_dir.is_absolute()
    doc = rp.run(opts, say=lambda m: None)
    meta = doc["meta"]
    assert meta["options"]["nets"] == ["cifar10"] and meta["options"]["predict"] is True
    assert meta["options"]["prototxt_dir"] == str(nets_dir())
    assert "command" not in meta                # no argv given: none recorded (not sys.argv)
    assert meta["ucudnn_commit"] is None or len(meta["ucudnn_commit"]) == 40
    opts.argv = ["ucudnn", "reproduce", "--nets", "cifar10"]     # as the CLI passes it
    assert rp.metadata(opts, "predict")["command"] == "ucudnn reproduce --nets cifar10"
    assert doc["schema"] == 2
    assert doc["points"]["cifar10/unlimited/-"]["limit_bytes"] == UNLIMITED
    assert "unlimited" in summary.format_summary(doc)


def test_old_results_still_load_and_summarise(tmp_path):
    """The committed H200 grid (schema 1, unlimited stored as 1 TiB, kernels with groups)."""
    path = REPO / "tests" / "data" / "h200_reproduce" / "reproduce.json"
    doc = results.load_results(path)
    assert doc["schema"] == 2
    unl = doc["points"]["alexnet/unlimited/-"]
    assert unl["limit_bytes"] == 1 << 40 and grid.is_unlimited(unl["limit_bytes"])
    assert grid.Point("alexnet", "unlimited", 1 << 40).key == "alexnet/unlimited/-"
    k = doc["points"]["alexnet/all/64.0MiB"]["kernels"]["conv2/fwd"]
    assert k["instances"] == k["groups"] == 2
    table = summary.format_summary(doc)
    line = next(l for l in table.splitlines() if l.startswith("alexnet   unlimited"))
    assert line.split()[2] == "unlimited"
    summary.write_csv(tmp_path, doc)
    # resuming on a copy writes schema 2
    results.save_results(tmp_path / "reproduce.json", doc)
    assert json.loads((tmp_path / "reproduce.json").read_text())["schema"] == 2


# -- BatchNorm engines (caffe_patch/0009, Note [BatchNorm engines]) ---------------------------

def test_grid_adds_batchnorm_engine_points_only_for_nets_with_batchnorm():
    pts = grid.grid(["alexnet", "resnet18"], [MIB], ["undivided"], ilp=True, shared=False,
                  bn_engines=grid.BN_ENGINES, has_batchnorm={"resnet18"}.__contains__)
    keys = [p.key for p in pts]
    assert keys == ["alexnet/caffe/-", "alexnet/unlimited/-", "alexnet/undivided/1.0MiB",
                    "alexnet/ilp/1.0MiB",
                    "resnet18/caffe/-", "resnet18/unlimited/-", "resnet18/undivided/1.0MiB",
                    "resnet18/ilp/1.0MiB",
                    "resnet18/caffe/-/cudnn-bn", "resnet18/unlimited/-/cudnn-bn",
                    "resnet18/undivided/1.0MiB/cudnn-bn", "resnet18/ilp/1.0MiB/cudnn-bn",
                    "resnet18/caffe/-/fused-bn", "resnet18/unlimited/-/fused-bn",
                    "resnet18/undivided/1.0MiB/fused-bn", "resnet18/ilp/1.0MiB/fused-bn"]
    # the keys of BVLC-engine points are those written before the BatchNorm engines: old results resume
    assert grid.Point("resnet18", "all", 64 * MIB).key == "resnet18/all/64.0MiB"
    assert grid.Point("resnet18", "all", 64 * MIB, "cudnn").stem == "resnet18_all_64.0MiB_cudnn-bn"
    assert rp.has_batchnorm(NETS / "resnet18.prototxt")
    assert not rp.has_batchnorm(NETS / "alexnet.prototxt")
    assert rp.has_cudnn_batchnorm({"caffe_patches": ["source=x", "0001-a.patch 1",
                                                     "0009-batch-norm-engines.patch 2"]})
    assert not rp.has_cudnn_batchnorm({"caffe_patches": ["source=x", "0001-a.patch 1"]})
    assert not rp.has_cudnn_batchnorm({"caffe_patches": ["source=x", "0001-a.patch 1",
                                                         "0004-pycaffe-numpy2-python312.patch 2"]})
    assert not rp.has_cudnn_batchnorm({})


def test_variant_prototxt_writes_the_batchnorm_engine(tmp_path):
    pb2 = load_caffe_pb2()
    src = NETS / "resnet18.prototxt"

    def engines(point, field):
        dest = tmp_path / f"{point.stem}.{field}.prototxt"
        types = caffe_run.variant_prototxt(pb2, src, point, dest, None, "powerOfTwo",
                                    bn_engine_field=field)
        net = read_net(pb2, str(dest))
        assert list(types) == [l.name for l in net.layer]
        return {l.batch_norm_param.engine for l in net.layer if l.type == "BatchNorm"}, types

    got, types = engines(grid.Point("resnet18", "all", 64 * MIB, "cudnn"), True)
    assert got == {pb2.BatchNormParameter.CUDNN}
    assert sum(t == "BatchNorm" for t in types.values()) == 20
    assert types["conv1"] == "Convolution" and types["scale_conv1"] == "Scale"
    assert engines(grid.Point("resnet18", "all", 64 * MIB), True)[0] == {pb2.BatchNormParameter.CAFFE}
    assert engines(grid.Point("resnet18", "shared", 64 * MIB, "fused"), True)[0] == {
        pb2.BatchNormParameter.FUSED}
    # a binary without the BatchNorm engines rejects the field: not written, and a cuDNN point cannot be made
    dest = tmp_path / "old.prototxt"
    caffe_run.variant_prototxt(pb2, src, grid.Point("resnet18", "caffe"), dest, None, "powerOfTwo")
    assert "engine" not in dest.read_text()
    for bn in ("cudnn", "fused"):
        with pytest.raises(ValueError, match="caffe_patch/0009"):
            caffe_run.variant_prototxt(pb2, src, grid.Point("resnet18", "caffe", bn=bn), dest, None,
                                "powerOfTwo")


def test_time_by_kind_of_layer_and_speedup_within_one_engine(tmp_path):
    layers = [{"name": "conv1", "forward": 1.0, "backward": 2.0},
              {"name": "bn_conv1", "forward": 0.5, "backward": 0.25},
              {"name": "scale_conv1", "forward": 0.125, "backward": 0.5},
              {"name": "conv1_relu", "forward": 0.25, "backward": 0.25},
              {"name": "pool1_pool1_0_split", "forward": 0.0, "backward": 1.0}]   # Caffe-made
    types = {"conv1": "Convolution", "bn_conv1": "BatchNorm", "scale_conv1": "Scale",
             "conv1_relu": "ReLU"}
    got = results.type_ms(layers, types)
    assert got == {"convolution": 3.0, "batchnorm": 0.75, "scale": 0.625, "relu": 0.5,
                   "other": 1.0}
    pt = lambda setting, ms, bn, limit=64 * MIB: {       # noqa: E731
        "net": "resnet18", "setting": setting, "limit_bytes": limit, "status": "ok",
        "median_ms": ms, "bn_engine": bn, "type_ms": dict(got, convolution=ms)}
    pts = [pt("undivided", 200.0, "caffe"), pt("all", 100.0, "caffe"),
           pt("undivided", 120.0, "cudnn"), pt("all", 60.0, "cudnn"), pt("ilp", 80.0, "cudnn"),
           pt("caffe", 250.0, "caffe", None), pt("caffe", 170.0, "cudnn", None)]
    doc = {"points": {grid.Point(p["net"], p["setting"], p["limit_bytes"], p["bn_engine"]).key: p
                      for p in pts},
           "pytorch": {"resnet18": {"status": "ok", "median_ms": 47.0,
                                    "by_type_ms": {"convolution": 20.0, "batchnorm": 9.0}}}}
    assert len(doc["points"]) == len(pts)
    assert results.speedup(doc, pts[1]) == pytest.approx(2.0)
    assert results.speedup(doc, pts[3]) == pytest.approx(2.0)        # against cuDNN-BN undivided
    bars = layer_type_bars(doc, "resnet18", 64 * MIB)
    assert [(b[0].split("\n")[0], b[2]) for b in bars] == [
        ("stock Caffe", 250.0), ("ucudnn all 64.0MiB", 100.0), ("stock Caffe", 170.0),
        ("ucudnn all 64.0MiB", 60.0), ("PyTorch eager", 47.0)]
    assert "cuDNN BatchNorm" in bars[3][0] and "BVLC" in bars[1][0]
    summary.write_csv(tmp_path, doc)
    with open(tmp_path / "points.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["setting"], r["bn_engine"]) for r in rows} >= {("all", "cudnn"), ("all", "caffe")}
    cud = next(r for r in rows if r["setting"] == "all" and r["bn_engine"] == "cudnn")
    assert float(cud["vs_pytorch"]) == pytest.approx(60 / 47)
    assert float(cud["speedup_vs_undivided"]) == pytest.approx(2.0)


# -- the shared arena in the grid --------------------------------------------------------------

def test_shared_points_write_the_net_wide_arena(tmp_path):
    pb2 = load_caffe_pb2()
    src = NETS / "alexnet.prototxt"
    dest = tmp_path / "s.prototxt"
    caffe_run.variant_prototxt(pb2, src, grid.Point("alexnet", "shared", 8 * MIB), dest, None, "all")
    u = read_net(pb2, str(dest)).ucudnn_param
    assert (u.optimizer, u.workspace_limit, u.total_workspace) == (
        u.Optimizer.Value("SHARED"), 8 * MIB, 0)              # budget: limit x kernels
    assert u.policy == u.Policy.Value("ALL")                 # the ILP's policy
    caffe_run.variant_prototxt(pb2, src, grid.Point("alexnet", "shared_stock", 123 * MIB), dest, None,
                        "powerOfTwo")
    u = read_net(pb2, str(dest)).ucudnn_param
    assert (u.optimizer, u.total_workspace) == (u.Optimizer.Value("SHARED"), 123 * MIB)
    with pytest.raises(ValueError, match="no budget"):
        caffe_run.variant_prototxt(pb2, src, grid.Point("alexnet", "shared_stock"), dest, None, "all")


def test_stock_workspace_from_peak_memory():
    """Note [Shared arena at stock memory]: stock's workspace = its peak minus the net's memory
    without workspace, which an undivided point (peak - its workspace) gives."""
    doc = {"points": {}}
    p = grid.Point("resnet18", "shared_stock", bn="cudnn")
    _, why = rp.with_stock_budget(p, doc)
    assert "needs the measured peak GPU memory" in why
    add = lambda **r: doc["points"].__setitem__(                       # noqa: E731
        grid.Point(r["net"], r["setting"], r.get("limit_bytes"), r["bn_engine"]).key,
        dict(r, status="ok"))
    add(net="resnet18", setting="caffe", bn_engine="cudnn", peak_gpu_memory_bytes=9000 * MIB)
    add(net="resnet18", setting="undivided", limit_bytes=64 * MIB, bn_engine="cudnn",
        peak_gpu_memory_bytes=8900 * MIB, workspace_bytes=300 * MIB)
    add(net="resnet18", setting="undivided", limit_bytes=8 * MIB, bn_engine="cudnn",
        peak_gpu_memory_bytes=8700 * MIB, workspace_bytes=50 * MIB)
    add(net="resnet18", setting="caffe", bn_engine="caffe", peak_gpu_memory_bytes=1 * MIB)
    ws, how = results.stock_workspace(doc, "resnet18", "cudnn")
    assert ws == (9000 - (8700 - 50)) * MIB and "undivided 8.0MiB" in how   # the least workspace
    q, why = rp.with_stock_budget(p, doc)
    assert why is None and q.limit == ws and q.key == p.key == "resnet18/shared_stock/-/cudnn-bn"
    # a stock peak below the net's own memory is refused, not turned into a budget
    assert results.stock_workspace(doc, "resnet18", "caffe")[0] is None


# -- families of convolution choices in the grid ----------------------------------------------

def test_grid_runs_ucudnn_points_once_per_engine_family_and_stock_once(tmp_path):
    pts = grid.grid(["resnet18"], [64 * MIB], ["powerOfTwo"], ilp=False, shared=True,
                    unlimited=False, engines=("legacy", "both"))
    assert [p.key for p in pts] == [
        "resnet18/caffe/-", "resnet18/powerOfTwo/64.0MiB", "resnet18/shared/64.0MiB",
        "resnet18/powerOfTwo/64.0MiB/both-engines", "resnet18/shared/64.0MiB/both-engines"]
    # the legacy points keep the keys results had before the graph family
    assert grid.Point("resnet18", "all", 64 * MIB).key == "resnet18/all/64.0MiB"
    rec = {"net": "resnet18", "setting": "shared", "limit_bytes": 64 * MIB, "engines": "both"}
    assert grid.point_of(rec) == pts[-1]
    assert grid.engines_of({"net": "resnet18"}) == "legacy"
    pb2 = load_caffe_pb2()
    dest = tmp_path / "both.prototxt"
    caffe_run.variant_prototxt(pb2, NETS / "resnet18.prototxt", pts[-1], dest, None, "powerOfTwo")
    net = read_net(pb2, str(dest))
    assert net.ucudnn_param.engines == pb2.UcudnnParameter.BOTH
    assert net.ucudnn_param.optimizer == pb2.UcudnnParameter.SHARED
    caffe_run.variant_prototxt(pb2, NETS / "resnet18.prototxt", pts[1], dest, None, "powerOfTwo")
    # written for legacy too: ucudnn_param's default is BOTH
    assert read_net(pb2, str(dest)).ucudnn_param.engines == pb2.UcudnnParameter.LEGACY


def test_speedup_compares_within_one_engine_family_and_prediction_skips_graph():
    pt = lambda setting, ms, eng: {"net": "resnet18", "setting": setting,  # noqa: E731
                                   "limit_bytes": 64 * MIB, "status": "ok", "median_ms": ms,
                                   "engines": eng}
    pts = [pt("undivided", 90.0, "legacy"), pt("powerOfTwo", 45.0, "legacy"),
           pt("undivided", 30.0, "both"), pt("powerOfTwo", 25.0, "both")]
    doc = {"points": {grid.point_of(p).key: p for p in pts}}
    assert results.speedup(doc, pts[1]) == pytest.approx(2.0)
    assert results.speedup(doc, pts[3]) == pytest.approx(1.2)
    got = predict_point(grid.Point("resnet18", "powerOfTwo", 64 * MIB, engines="graph"),
                        "powerOfTwo")
    assert got["status"] == "skipped" and "legacy algorithms only" in got["error"]


# -- nets at another batch ---------------------------------------------------------------------

def test_nets_at_another_batch_are_their_own_points_and_set_the_inputs(tmp_path):
    """Note [Nets at another batch]: NAME@BATCH is NAME's prototxt with its inputs at BATCH,
    keyed apart; a bad spelling or a net whose input cannot be resized is refused."""
    assert grid.parse_net("resnet50@256") == ("resnet50", 256)
    assert grid.parse_net("resnet50") == ("resnet50", None)
    for bad in ("resnet50@", "@256", "resnet50@0", "resnet50@x"):
        with pytest.raises(ValueError, match="NAME@BATCH"):
            grid.parse_net(bad)
    assert {"resnet50", "resnet50@256"} <= set(grid.NETS)
    keys = [p.key for p in grid.grid(["resnet50", "resnet50@256"], [64 * MIB], ["powerOfTwo"],
                                     ilp=False, shared=False, unlimited=False)]
    assert keys == ["resnet50/caffe/-", "resnet50/powerOfTwo/64.0MiB",
                    "resnet50@256/caffe/-", "resnet50@256/powerOfTwo/64.0MiB"]
    pb2 = load_caffe_pb2()
    dest = tmp_path / "r50.prototxt"
    caffe_run.variant_prototxt(pb2, NETS / "resnet50.prototxt",
                               grid.Point("resnet50@256", "powerOfTwo", 64 * MIB), dest, None,
                               "powerOfTwo")
    net = read_net(pb2, str(dest))
    dims = [list(s.dim) for l in net.layer if l.type == "DummyData"
            for s in l.dummy_data_param.shape]
    assert dims and all(d[0] == 256 for d in dims)
    assert [list(s.dim)[0] for l in read_net(pb2, str(NETS / "resnet50.prototxt")).layer
            if l.type == "DummyData" for s in l.dummy_data_param.shape][0] == 128
    no_input = pb2.NetParameter()
    with pytest.raises(ValueError, match="x.prototxt: a batch can be set only"):
        caffe_run.set_batch(no_input, 8, "x.prototxt")
    with pytest.raises(rp.ReproduceError, match="--nets: net 'resnet50@x'"):
        rp.run(rp.Options(out=tmp_path / "o", nets=["resnet50@x"], predict=True),
               say=lambda m: None)


def test_predicted_mode_leaves_out_nets_without_shipped_data(tmp_path):
    said = []
    doc = rp.run(rp.Options(out=tmp_path / "o", nets=["cifar10", "resnet50@256"], limits=[MIB],
                            policies=["undivided"], ilp=False, shared=False, predict=True),
                 say=said.append)
    assert {r["net"] for r in doc["points"].values()} == {"cifar10"}
    assert any("no shipped benchmark data for resnet50@256" in m and "left out" in m
               for m in said), said


def test_pytorch_runs_a_net_at_its_batch(tmp_path, monkeypatch):
    """run_pytorch passes NAME@BATCH on as --net NAME --batch BATCH and reads NAME's result."""
    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        out = cmd[cmd.index("--json") + 1]
        name = cmd[cmd.index("--net") + 1]
        with open(out, "w") as f:
            json.dump({"meta": {}, "nets": {name: {"median_ms": 40.0,
                                                  "pytorch_mode": "compile"}}}, f)
        return type("R", (), {"returncode": 0, "stdout": ""})()
    monkeypatch.setattr(rp.subprocess, "run", fake_run)
    script = tmp_path / "time_pytorch.py"
    script.write_text("")
    doc = {"pytorch": {}}
    rp.run_pytorch(rp.Options(out=tmp_path, nets=["resnet50@256", "resnet18"],
                              pytorch_script=script), doc, say=lambda m: None)
    assert seen[0][seen[0].index("--net") + 1] == "resnet50" and seen[0][-2:] == ["--batch", "256"]
    assert "--batch" not in seen[1] and "--profile" in seen[1]
    assert seen[0][seen[0].index("--processes") + 1] == "3"
    assert doc["pytorch"]["resnet50@256"]["median_ms"] == 40.0
    assert doc["pytorch"]["resnet18"]["status"] == "ok"
    seen.clear()
    doc = {"pytorch": {}}
    rp.run_pytorch(rp.Options(out=tmp_path, nets=["resnet18"], pytorch_script=script,
                              pytorch_profile=False), doc, say=lambda m: None)
    assert "--profile" not in seen[0] and doc["pytorch"]["resnet18"]["status"] == "ok"


def test_variant_prototxt_writes_share_diffs_only_when_asked(tmp_path):
    pb2 = load_caffe_pb2()
    src = NETS / "resnet18.prototxt"
    for asked in (False, True):
        dest = tmp_path / f"{asked}.prototxt"
        caffe_run.variant_prototxt(pb2, src, grid.Point("resnet18", "shared", 64 * MIB), dest,
                                   None, "powerOfTwo", share_diffs=asked)
        net = read_net(pb2, str(dest))
        assert net.HasField("share_diffs") == asked and net.share_diffs == asked
        assert not net.HasField("fusion")
    assert rp.Options(out=tmp_path).to_json()["share_diffs"] is False
    assert rp.Options(out=tmp_path).to_json()["fusions"] is None


@pytest.mark.parametrize("on", [["eltwise_relu"], ["batch_norm_relu"], ["split_sum"],
                                ["batch_norm_eltwise"], [], list(grid.FUSIONS)])
def test_variant_prototxt_turns_on_the_fusions_asked_and_off_the_others(tmp_path, on):
    pb2 = load_caffe_pb2()
    dest = tmp_path / "fused.prototxt"
    caffe_run.variant_prototxt(pb2, NETS / "resnet18.prototxt",
                               grid.Point("resnet18", "shared", 64 * MIB), dest, None,
                               "powerOfTwo", fusions=on)
    net = read_net(pb2, str(dest))
    assert net.HasField("fusion")
    for name in grid.FUSIONS:
        assert net.fusion.HasField(name) and getattr(net.fusion, name) == (name in on), name


@pytest.mark.parametrize("arg, recorded", [("none", []), ("all", list(grid.FUSIONS)),
                                           ("batch_norm_relu", ["batch_norm_relu"])])
def test_fusions_option_is_recorded(tmp_path, arg, recorded):
    rc = cli.main(["reproduce", "--out", str(tmp_path), "--nets", "resnet18", "--limits",
                   "64MiB", "--policies", "", "--no-ilp", "--no-stock", "--fusions", arg,
                   "--no-pytorch", "--predict"])
    assert rc == 0
    doc = json.loads((tmp_path / "reproduce.json").read_text())
    assert doc["meta"]["options"]["fusions"] == recorded


def test_an_empty_fusions_option_is_refused(tmp_path, capsys):
    rc = cli.main(["reproduce", "--out", str(tmp_path), "--nets", "resnet18", "--fusions", "",
                   "--no-pytorch", "--predict"])
    assert rc != 0 and "--fusions: empty" in capsys.readouterr().err
    assert not (tmp_path / "reproduce.json").exists()


def test_an_unknown_fusion_is_refused_naming_the_option(tmp_path, capsys):
    rc = cli.main(["reproduce", "--out", str(tmp_path), "--nets", "resnet18", "--fusions",
                   "eltwise_relu,conv_bn", "--no-pytorch", "--predict"])
    err = capsys.readouterr().err
    assert rc != 0 and ("--fusions: 'conv_bn' is not one of eltwise_relu, batch_norm_relu, "
                        "split_sum, batch_norm_eltwise, or all, or none") in err, err
    assert not (tmp_path / "reproduce.json").exists()


# -- activations' layouts in the grid ----------------------------------------------------------

def test_grid_runs_ucudnn_points_once_per_layout_and_writes_the_nets_layout(tmp_path):
    """``--layouts NCHW,NHWC``: each ucudnn point once per layout (keys of NCHW points as
    before), stock Caffe once; a point's net carries its ``ucudnn_param.layout`` (NHWC only:
    a Caffe without caffe_patch/0011 has no such field), and its record's layout reaches
    points.csv, layers.csv and the summary; speedups compare within one layout."""
    pts = grid.grid(["resnet18"], [64 * MIB], ["undivided"], ilp=False, shared=True,
                    unlimited=False, layouts=("NCHW", "NHWC"))
    assert [p.key for p in pts] == [
        "resnet18/caffe/-", "resnet18/undivided/64.0MiB", "resnet18/shared/64.0MiB",
        "resnet18/shared_stock/-", "resnet18/undivided/64.0MiB/nhwc",
        "resnet18/shared/64.0MiB/nhwc", "resnet18/shared_stock/-/nhwc"]
    rec = {"net": "resnet18", "setting": "shared", "limit_bytes": 64 * MIB, "layout": "NHWC"}
    assert grid.point_of(rec) == pts[5]
    assert grid.layout_of({"net": "resnet18"}) == "NCHW"
    pb2 = load_caffe_pb2()
    dest = tmp_path / "nhwc.prototxt"
    caffe_run.variant_prototxt(pb2, NETS / "resnet18.prototxt", pts[5], dest, None, "powerOfTwo")
    assert read_net(pb2, str(dest)).ucudnn_param.layout == pb2.UcudnnParameter.NHWC
    caffe_run.variant_prototxt(pb2, NETS / "resnet18.prototxt", pts[2], dest, None, "powerOfTwo")
    assert not read_net(pb2, str(dest)).ucudnn_param.HasField("layout")
    ok = dict(status="ok", layers=[{"name": "conv1", "forward": 1.0, "backward": 2.0}])
    doc = {"points": {
        pts[1].key: dict(ok, net="resnet18", setting="undivided", limit_bytes=64 * MIB,
                         median_ms=60.0),
        pts[4].key: dict(ok, net="resnet18", setting="undivided", limit_bytes=64 * MIB,
                         median_ms=50.0, layout="NHWC"),
        pts[5].key: dict(ok, net="resnet18", setting="shared", limit_bytes=64 * MIB,
                         median_ms=40.0, layout="NHWC")}, "pytorch": {}}
    assert results.speedup(doc, doc["points"][pts[5].key]) == pytest.approx(50.0 / 40.0)
    write_csv(tmp_path, doc)
    with open(tmp_path / "points.csv", newline="") as f:
        rows = {(r["setting"], r["layout"]) for r in csv.DictReader(f)}
    assert rows == {("undivided", "NCHW"), ("undivided", "NHWC"), ("shared", "NHWC")}
    with open(tmp_path / "layers.csv", newline="") as f:
        assert {r["layout"] for r in csv.DictReader(f)} == {"NCHW", "NHWC"}
    assert format_summary(doc).splitlines()[-1].endswith("(NHWC)")

