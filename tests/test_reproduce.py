"""`ucudnn reproduce`: the grid, resuming, failures, the predicted (no GPU) mode, CSV."""
import csv
import json
import os
import stat
from pathlib import Path

import pytest

from ucudnn.experiments import reproduce as rp
from ucudnn.vocab import parse_size

REPO = Path(__file__).resolve().parents[1]
LOGS = Path(__file__).parent / "data" / "caffe_logs"
MIB = 1 << 20


def test_grid_order_and_keys():
    pts = rp.grid(["alexnet", "resnet18"], [64 * MIB, 8 * MIB])
    keys = [p.key for p in pts]
    assert len(pts) == 2 * (2 + 2 * 4)
    assert keys[:6] == ["alexnet/caffe/-", "alexnet/unlimited/-", "alexnet/undivided/64.0MiB",
                        "alexnet/powerOfTwo/64.0MiB", "alexnet/all/64.0MiB", "alexnet/ilp/64.0MiB"]
    assert len(set(keys)) == len(keys)
    assert rp.Point("a", "unlimited", rp.UNLIMITED).policy == "undivided"
    assert rp.Point("a", "caffe").policy is None
    assert len(rp.grid(["alexnet"], [MIB], ilp=False, unlimited=False, stock=False)) == 3


def test_results_file_is_written_atomically_and_checked(tmp_path):
    path = tmp_path / "r" / "reproduce.json"
    doc = rp.load_results(path)
    doc["points"]["x"] = {"status": "ok"}
    rp.save_results(path, doc)
    assert rp.load_results(path)["points"] == {"x": {"status": "ok"}}
    assert [p.name for p in path.parent.iterdir()] == ["reproduce.json"]   # no temporaries
    path.write_text("{ truncated")
    with pytest.raises(rp.ReproduceError, match="cannot read the results to resume"):
        rp.load_results(path)
    path.write_text(json.dumps({"schema": 99, "points": {}}))
    with pytest.raises(rp.ReproduceError, match="not a results file"):
        rp.load_results(path)


def test_pending_skips_measured_points():
    pts = rp.grid(["alexnet"], [MIB], ilp=False, unlimited=False, stock=False)
    doc = {"points": {pts[0].key: {"status": "ok"}, pts[1].key: {"status": "failed"}}}
    assert rp.pending(pts, doc) == pts[2:]
    assert rp.pending(pts, doc, retry_failed=True) == pts[1:]


def test_predicted_mode_from_shipped_data(tmp_path):
    opts = rp.Options(out=tmp_path, nets=["alexnet"], limits=[64 * MIB], predict=True,
                      prototxt_dir=REPO / "prototxt")
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
                                            "ilp"}
    table = rp.format_summary(doc)
    assert "predicted" in table and "alexnet" in table
    # resuming runs nothing
    said.clear()
    rp.run(opts, say=said.append)
    assert "0 to run" in said[0]


def _fake_caffe(tmp_path, fail_setting):
    """A stand-in for the Caffe binary on a machine without a GPU: it replays logs that the
    real one wrote on the GPU host, and fails (like the real one did) for one setting."""
    exe = tmp_path / "caffe"
    exe.write_text(f"""#!/bin/bash
model="$3"
case "$model" in
  *{fail_setting}*) cat "{LOGS}/alexnet_powerOfTwo_64MiB_failed.log"; exit 134 ;;
  *ilp*) cat "{LOGS}/alexnet_ilp_8MiB.log" ;;
  *caffe_-*) cat "{LOGS}/alexnet_stock.log" ;;
  *) cat "{LOGS}/alexnet_all_8MiB.log" ;;
esac
""")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def test_caffe_mode_records_failures_and_resumes(tmp_path, monkeypatch, patched_caffe_source):
    monkeypatch.setenv("UCUDNN_CAFFE_PROTO",
                       str(patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto"))
    out = tmp_path / "out"
    opts = rp.Options(out=out, nets=["alexnet"], limits=[8 * MIB], pytorch=False,
                      caffe=_fake_caffe(tmp_path, "powerOfTwo"), prototxt_dir=REPO / "prototxt")
    doc = rp.run(opts, say=lambda m: None)
    pts = doc["points"]
    failed = pts["alexnet/powerOfTwo/8.0MiB"]
    assert failed["status"] == "failed" and "exit status 134" in failed["error"]
    assert "CUDNN_STATUS" in failed["log_tail"]
    ok = pts["alexnet/all/8.0MiB"]
    assert ok["status"] == "ok" and ok["median_ms"] > 0 and len(ok["kernels"]) == 15
    assert [l["name"] for l in ok["layers"]][:2] == ["data", "conv1"]
    assert pts["alexnet/ilp/8.0MiB"]["ilp_solve_s"] > 0
    assert rp.speedup(doc, ok) == pytest.approx(
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
    assert rp.pending(rp.grid(["alexnet"], [8 * MIB]), rp.load_results(out / "reproduce.json")) == []
    opts.retry_failed = True
    doc = rp.run(opts, say=lambda m: None)
    assert all(r["status"] == "ok" for r in doc["points"].values())
    assert len(doc["runs"]) == 2 and doc["points"]["alexnet/powerOfTwo/8.0MiB"]["run"] == 1
    assert doc["points"]["alexnet/all/8.0MiB"]["run"] == 0
    with open(out / "layers.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["layer"] for r in rows} >= {"conv1", "fc8"}


def test_caffe_mode_needs_a_binary(tmp_path):
    with pytest.raises(rp.ReproduceError, match="no Caffe binary"):
        rp.run(rp.Options(out=tmp_path, nets=["alexnet"], caffe=str(tmp_path / "nope"),
                          prototxt_dir=REPO / "prototxt"), say=lambda m: None)
    with pytest.raises(rp.ReproduceError, match="no prototxt/vgg.prototxt"):
        rp.run(rp.Options(out=tmp_path, nets=["vgg"], predict=True,
                          prototxt_dir=REPO / "prototxt"), say=lambda m: None)


def test_cli_without_gpu_falls_back_to_predictions(tmp_path, capsys, monkeypatch):
    from ucudnn import cli
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(cli, "_gpu_status", lambda: (None, "no CUDA device (test)"))
    rc = cli.main(["reproduce", "--out", str(tmp_path), "--nets", "resnet18", "--limits",
                   "64MiB", "--no-pytorch"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "predicting every point from the shipped H200 benchmark data" in err
    assert "resnet18" in out and "(predicted)" in out
    assert json.loads((tmp_path / "reproduce.json").read_text())["meta"]["mode"] == "predict"
    assert parse_size("64MiB") == 64 * MIB


def test_fill_once_makes_dummy_data_constant(patched_caffe_source):
    from ucudnn.caffe import proto as cp
    pb2 = cp.load_caffe_pb2(str(patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto"))
    net = cp.read_net(pb2, REPO / "prototxt" / "alexnet.prototxt")
    rp.fill_once(net)
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
    rec = rp.merge_repeats(first, reps)
    assert rec["median_ms"] == 130.0 and (rec["min_ms"], rec["max_ms"]) == (126.0, 150.0)
    assert rec["mean_ms"] == 131.0 and rec["conv_ms"] == 32.5
    assert rec["layers"][0] == {"name": "conv1", "forward": 4.0, "backward": 1.0}
    assert rec["kernels"] == {"conv1/fwd": {}} and rec["bench_s"] == 2.0   # the first's plans
    assert "iteration_ms" not in rec and "log" not in rec                  # per process only
    assert rp.measured_repeats(rec) == reps
    # a record from before repeats existed is one process
    legacy = {"status": "ok", "median_ms": 5.0, "layers": []}
    assert [r["median_ms"] for r in rp.measured_repeats(legacy)] == [5.0]
    assert rp.measured_repeats({"status": "failed"}) == []


def test_repeats_run_in_rounds_and_resume_adds_processes(tmp_path, monkeypatch,
                                                          patched_caffe_source):
    monkeypatch.setenv("UCUDNN_CAFFE_PROTO",
                       str(patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto"))
    out = tmp_path / "out"
    opts = rp.Options(out=out, nets=["alexnet"], limits=[8 * MIB], policies=["undivided", "all"],
                      ilp=False, unlimited=False, pytorch=False, repeats=2,
                      caffe=_fake_caffe(tmp_path, "no-such-setting"),
                      prototxt_dir=REPO / "prototxt")
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
    assert "2 runs]" in rp.format_summary(doc)
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
    assert rp.vs_pytorch(doc, pt) == 0.5
    assert rp.vs_pytorch(dict(doc, pytorch={}), pt) is None
    assert "best Caffe point all/64.0MiB: 0.50x PyTorch's time" in rp.format_summary(doc)
    rp.write_csv(tmp_path, doc)
    with open(tmp_path / "points.csv", newline="") as f:
        rows = {r["setting"]: r for r in csv.DictReader(f)}
    assert rows["all"]["vs_pytorch"] == "0.5" and rows["undivided"]["vs_pytorch"] == "1.25"
