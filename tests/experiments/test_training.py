"""``ucudnn training`` on a CPU: nets and solvers, settings, batches, curves.csv, the summary
maths, the figure, CLI errors; and, where pycaffe imports here, a short CPU-mode run of the
digits net (engine CAFFE). The GPU run is tests/gpu/test_training_gpu.py."""
import csv
import io
import json
import math
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from ucudnn.caffe.proto import load_caffe_pb2, read_net, write_net
from ucudnn.caffe.prototxt import load_prototxt
from ucudnn.experiments.training import runner
from ucudnn.experiments.training.child import CHILD_MODULE, child_env, kernel_plans_of, probe
from ucudnn.experiments.training.comparison import SMOOTHING, compare, compare_seeds
from ucudnn.experiments.training.curves import Row, read_curves, write_curves
from ucudnn.experiments.training.metadata import metadata
from ucudnn.experiments.training.nets import (NETS, base_net, digits_data, solver_text,
                                              synthetic_data)
from ucudnn.experiments.training.options import Options, check_options
from ucudnn.experiments.training.report import format_seeds_summary, format_summary, plot_curves
from ucudnn.experiments.training.runner import regenerate, run
from ucudnn.experiments.training.settings import (BENCH_REPEATS, DEFAULT_SETTINGS, SETTINGS,
                                                  Setting, TrainingError, variant)

MiB = 1 << 20


@pytest.fixture(scope="module")
def pb2():
    return load_caffe_pb2()


def _write(pb2, net, path):
    write_net(net, str(path))
    return path


# ---------------------------------------------------------------------------- nets, settings

@pytest.mark.parametrize("name,batch,convs", [("digits", 128, ["conv1", "conv2"]),
                                              ("cifar10", 1024, ["conv1", "conv2", "conv3"])])
def test_nets_parse_with_the_subset_and_feed_from_input(pb2, tmp_path, name, batch, convs):
    net = base_net(pb2, name)
    path = _write(pb2, net, tmp_path / f"{name}.prototxt")
    again = read_net(pb2, str(path))                  # strict: every field in caffe_subset
    assert again == net
    assert [l.type for l in again.layer].count("Input") == 1
    assert "DummyData" not in [l.type for l in again.layer]
    data = again.layer[0]
    assert list(data.top) == ["data", "label"]
    assert [list(s.dim) for s in data.input_param.shape][1] == [batch]
    tops = {t for l in again.layer for t in l.top}
    assert {"loss", "accuracy"} <= tops
    p = load_prototxt(path)                           # Caffe's shape rules over the Input
    assert [l.name for l in p.layers] == convs
    assert all(l.n == batch for l in p.layers)
    assert p.net_ucudnn is None
    if name == "digits":
        assert (p.layers[0].c, p.layers[0].h, p.layers[0].k, p.layers[0].r) == (1, 32, 20, 5)
        assert (p.layers[1].c, p.layers[1].h, p.layers[1].k) == (20, 14, 50)


def test_base_net_batch_override(pb2):
    net = base_net(pb2, "cifar10", batch=64)
    assert [list(s.dim) for s in net.layer[0].input_param.shape] == [[64, 3, 32, 32], [64]]


@pytest.mark.parametrize("setting,policy,optimizer,layout", [
    ("undivided", "undivided", "dp", "NCHW"), ("powerOfTwo", "powerOfTwo", "dp", "NCHW"),
    ("all", "all", "dp", "NCHW"), ("ilp", "powerOfTwo", "ilp", "NCHW"),
    ("shared", "powerOfTwo", "shared", "NCHW"), ("shared-nhwc", "powerOfTwo", "shared", "NHWC")])
def test_ucudnn_settings_write_their_param(pb2, tmp_path, setting, policy, optimizer, layout):
    net = variant(pb2, base_net(pb2, "digits"), setting, 3 * MiB)
    p = load_prototxt(_write(pb2, net, tmp_path / "v.prototxt"))
    s = p.net_ucudnn
    # the budget is unset (None): limit x calls for the ILP and the arena (Note [Workspace
    # budget]; a total_workspace of 0 would be 0 bytes)
    assert (s.policy, s.optimizer, s.limit, s.budget) == (policy, optimizer, 3 * MiB, None)
    assert s.layout == layout and net.ucudnn_param.HasField("layout") == (layout != "NCHW")
    assert not net.ucudnn_param.HasField("total_workspace")
    assert s.math == "fma" and s.repeats == BENCH_REPEATS
    assert all(p.ucudnn[l.name] == s for l in p.layers)
    assert not any(l.HasField("ucudnn_param") for l in net.layer)


def test_stock_settings_have_no_ucudnn_param(pb2, tmp_path):
    base = variant(pb2, base_net(pb2, "cifar10"), "powerOfTwo", MiB)
    for setting in ("stock", "stock-rerun"):
        net = variant(pb2, base, setting, MiB)     # clears what the input had
        assert not net.HasField("ucudnn_param")
        p = load_prototxt(_write(pb2, net, tmp_path / f"{setting}.prototxt"))
        assert p.net_ucudnn is None and set(p.ucudnn.values()) == {None}


def test_cpu_engine_and_refused_settings(pb2, monkeypatch):
    net = variant(pb2, base_net(pb2, "digits"), "stock", MiB, engine="CAFFE")
    engines = {l.name: l for l in net.layer}
    caffe = pb2.ConvolutionParameter.CAFFE
    assert engines["conv1"].convolution_param.engine == caffe
    assert engines["pool1"].pooling_param.engine == pb2.PoolingParameter.CAFFE
    assert engines["relu1"].relu_param.engine == pb2.ReLUParameter.CAFFE
    assert engines["loss"].softmax_param.engine == pb2.SoftmaxParameter.CAFFE
    with pytest.raises(TrainingError, match=r"^--settings: unknown setting 'fast'"):
        variant(pb2, net, "fast", MiB)
    # the hook for a setting Caffe cannot run yet: listed, refused with its reason
    later = Setting("later", "powerOfTwo", "dp", "a future setting", available=False,
                       why_not="needs a later Caffe")
    monkeypatch.setitem(SETTINGS, "later", later)
    with pytest.raises(TrainingError, match=r"^--settings: later: needs a later Caffe"):
        variant(pb2, net, "later", MiB)
    opts = Options(out=Path("unused"), nets=["cifar10"], settings={"cifar10": ["later"]})
    with pytest.raises(TrainingError, match=r"^--settings: later: needs a later Caffe"):
        check_options(opts)
    for net_name, settings in DEFAULT_SETTINGS.items():
        assert settings[0] == "stock" and all(SETTINGS[s].available for s in settings)


def test_solver_text():
    cfg = NETS["digits"]
    text = solver_text(cfg, "digits_all.prototxt", 300, 7)
    fields = dict(line.split(": ", 1) for line in text.splitlines())
    assert fields["net"] == '"digits_all.prototxt"'
    assert fields["random_seed"] == "7" and fields["max_iter"] == "300"
    assert fields["lr_policy"] == '"inv"' and float(fields["gamma"]) == cfg.gamma
    assert fields["solver_mode"] == "GPU" and fields["snapshot_after_train"] == "false"
    assert "test_iter" not in fields and "test_interval" not in fields
    cpu = solver_text(NETS["cifar10"], "c.prototxt", 5, 1, mode="cpu")
    assert "solver_mode: CPU" in cpu and "gamma" not in cpu


# ----------------------------------------------------------------------------------- data

def test_batches_are_a_function_of_the_iteration_only():
    a = synthetic_data(batch=16, seed=3, n_train=64, n_test=32)
    b = synthetic_data(batch=16, seed=3, n_train=64, n_test=32)
    for it in (0, 1, 5, 17):
        (xa, ya), (xb, yb) = a.train_batch(it), b.train_batch(it)
        assert xa.shape == (16, 3, 32, 32) and xa.dtype.name == "float32"
        assert (xa == xb).all() and (ya == yb).all()
    # an epoch visits every sample once; the next epoch in another order
    epoch = [i for it in range(4) for i in a.train_indices(it)]
    assert sorted(epoch) == list(range(64))
    assert list(a.train_indices(4)) != list(a.train_indices(0))
    assert not (a.train_batch(0)[0] == a.train_batch(1)[0]).all()
    # upscaled 4x: every 4x4 block is one value
    x = a.train_batch(0)[0]
    assert (x[:, :, ::4, ::4].repeat(4, 2).repeat(4, 3) == x).all()
    # held-out set: fixed, whole batches, labels of several classes
    tests = list(a.test_batches())
    assert len(tests) == 2 and all(len(y) == 16 for _, y in tests)
    assert len(set(a.y_train.tolist())) > 5
    assert a.fingerprint() == b.fingerprint()
    assert synthetic_data(batch=16, seed=4, n_train=64, n_test=32).fingerprint() != \
        a.fingerprint()


def test_dataset_checks_whole_batches():
    with pytest.raises(TrainingError, match="not whole batches"):
        synthetic_data(batch=16, n_train=64, n_test=24)


def test_digits_need_scikit_learn(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(TrainingError, match=r"pip install 'ucudnn\[training\]'"):
        digits_data()


def test_digits_split():
    pytest.importorskip("sklearn", reason="scikit-learn not installed (ucudnn[training])")
    d = digits_data(batch=128, seed=1)
    assert len(d.x_train) == 1797 - 512 and len(d.x_test) == 512
    x, y = d.train_batch(0)
    assert x.shape == (128, 1, 32, 32) and 0.0 <= x.min() and x.max() <= 1.0
    assert d.fingerprint() == digits_data(batch=128, seed=1).fingerprint()


# -------------------------------------------------------------------------------- curves

def _rows(net, setting, losses, accs=None):
    accs = accs or {}
    return [Row(net, setting, i, l, accs.get(i)) for i, l in enumerate(losses)]


def test_curves_csv_round_trip(tmp_path):
    import numpy as np
    f32 = float(np.float32(2.3025851))
    rows = (_rows("digits", "powerOfTwo", [f32, 1.5], {0: 0.125}) +
            _rows("digits", "stock", [f32, 1.25], {0: 0.125, 1: 0.5}))
    path = tmp_path / "curves.csv"
    write_curves(path, rows)
    text = path.read_text()
    assert text.splitlines()[0] == "net,setting,iteration,loss,test_accuracy"
    assert text.splitlines()[1].startswith("digits,stock,0,")          # stock first
    assert "digits,powerOfTwo,1,1.5,\n" in text                          # empty accuracy
    back = read_curves(path)
    assert sorted(back, key=lambda r: (r.setting, r.iteration)) == \
        sorted(rows, key=lambda r: (r.setting, r.iteration))
    assert np.float32(back[0].loss) == np.float32(f32)


@pytest.mark.parametrize("text,error", [
    ("net,setting,iteration,loss\n", r":1: expected the columns"),
    ("net,setting,iteration,loss,test_accuracy\nd,s,x,1,\n", r":2: iteration: not an integer"),
    ("net,setting,iteration,loss,test_accuracy\nd,s,0,one,\n", r":2: loss: not a number"),
    ("net,setting,iteration,loss,test_accuracy\nd,s,0,1,\nd,s,0,1,\n", r":3: d/s iteration 0 "
     "appears twice"),
    ("net,setting,iteration,loss,test_accuracy\nd,s,0,1\n", r":2: expected 5 fields"),
])
def test_curves_csv_errors(tmp_path, text, error):
    path = tmp_path / "curves.csv"
    path.write_text(text)
    with pytest.raises(TrainingError, match=error):
        read_curves(path)


def test_compare_maths():
    stock = _rows("n", "stock", [2.0, 1.0, 0.5, 0.25], {0: 0.1, 2: 0.5, 3: 0.9})
    close = _rows("n", "powerOfTwo", [2.0, 1.004, 0.496, 0.25], {0: 0.1, 2: 0.5, 3: 0.904})
    far = _rows("n", "all", [2.0000002, 1.0, 0.5, 0.26], {0: 0.1, 2: 0.5, 3: 0.89})
    same = _rows("n", "stock-rerun", [2.0, 1.0, 0.5, 0.25], {0: 0.1, 2: 0.5, 3: 0.9})
    s = compare(stock + close + far + same)
    assert list(s["nets"]["n"]) == ["stock", "stock-rerun", "powerOfTwo", "all"]
    p = s["nets"]["n"]["powerOfTwo"]
    assert p["max_rel_loss_diff"] == pytest.approx(0.008)          # 0.496 vs 0.5
    assert p["max_rel_loss_diff_iteration"] == 2
    assert p["rel_loss_diff_iteration0"] == 0.0
    assert p["median_rel_loss_diff"] == pytest.approx((0.004 + 0.0) / 2)
    assert p["final_accuracy_diff_pp"] == pytest.approx(0.4)
    assert p["final_accuracy_iteration"] == 3
    assert p["loss_within_target"] and p["accuracy_within_target"]
    assert not p["bitwise_equal"]
    a = s["nets"]["n"]["all"]
    assert a["rel_loss_diff_iteration0"] == pytest.approx(1e-7, rel=1e-3)
    assert a["max_rel_loss_diff"] == pytest.approx(0.04) and a["max_rel_loss_diff_iteration"] == 3
    assert a["final_accuracy_diff_pp"] == pytest.approx(-1.0)
    assert a["max_abs_accuracy_diff_pp"] == pytest.approx(1.0)
    assert not a["loss_within_target"] and not a["accuracy_within_target"]
    r = s["nets"]["n"]["stock-rerun"]
    assert r["bitwise_equal"] and r["max_rel_loss_diff"] == 0.0
    assert s["nets"]["n"]["stock"]["final_accuracy"] == 0.9
    assert "max_rel_loss_diff" not in s["nets"]["n"]["stock"]
    text = format_summary(s)
    assert "| powerOfTwo | - | 0.00e+00 | 8.00e-03 (2) | 2.00e-03 | - |" in text
    assert "| all |" in text and "NOT met" in text and "bitwise equal" in text


def test_smoothed_loss_difference():
    n = SMOOTHING
    ref = [1.0] * (n + 1)
    noisy = [1.0 + (0.05 if i % 2 else -0.05) for i in range(n)] + [1.0]   # +-5 %, mean 1
    s = compare(_rows("n", "stock", ref) + _rows("n", "ilp", noisy))["nets"]["n"]["ilp"]
    assert s["max_rel_loss_diff"] == pytest.approx(0.05)
    assert s["max_rel_smoothed_loss_diff"] == pytest.approx(0.05 / n)   # the last window
    short = compare(_rows("n", "stock", [1.0]) + _rows("n", "ilp", [1.1]))
    assert short["nets"]["n"]["ilp"]["max_rel_smoothed_loss_diff"] is None


def test_compare_edge_cases(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "plot_curves", lambda rows, out: None)
    rows = _rows("n", "stock", [0.0, 1.0]) + _rows("n", "ilp", [1e-9, 1.0])
    s = compare(rows)
    assert math.isinf(s["nets"]["n"]["ilp"]["max_rel_loss_diff"])
    write_curves(tmp_path / "curves.csv", rows)          # summary.json stays strict JSON
    regenerate(tmp_path, from_csv=True, say=lambda m: None)
    assert json.loads((tmp_path / "summary.json").read_text())["nets"]["n"]["ilp"][
        "max_rel_loss_diff"] == "inf"
    # only the iterations both recorded count; no stock: no differences
    s = compare(_rows("n", "stock", [1.0, 1.0]) + _rows("n", "ilp", [1.0, 1.0, 5.0]))
    assert s["nets"]["n"]["ilp"]["compared_iterations"] == 2
    s = compare(_rows("m", "ilp", [1.0]))
    assert "max_rel_loss_diff" not in s["nets"]["m"]["ilp"]


def _kernel_record(layer, op, batch, chunks):
    return {"kind": "kernel", "pid": 1, "kernel_id": hash((layer, op)), "layer": layer,
            "op": op, "instances": 1, "batch": batch, "stage": "dp", "math": "fma",
            "plan": [{"batch": b, "count": n, "algo": 1, "algo_name": "X", "ws_bytes": 8}
                     for b, n in chunks],
            "plan_text": ", ".join(f"{b}x{n}" for b, n in chunks), "predicted_ms": 1.0,
            "ws_bytes": 8}


def test_kernel_plans_and_split_counts():
    recs = [_kernel_record("conv2", "bwd_filter", 128, [(128, 1)]),
            _kernel_record("conv2", "bwd_filter", 128, [(32, 4)]),    # the last plan wins
            _kernel_record("conv1", "fwd", 128, [(64, 1), (32, 2)]),
            _kernel_record("conv1", "bwd_filter", 128, [(128, 1)])]
    k = kernel_plans_of(recs)
    assert set(k) == {"conv2/bwd_filter", "conv1/fwd", "conv1/bwd_filter"}
    assert k["conv2/bwd_filter"]["split"] and k["conv1/fwd"]["split"]
    assert not k["conv1/bwd_filter"]["split"]
    assert k["conv2/bwd_filter"]["chunks"] == [{"batch": 32, "count": 4, "algo": 1,
                                                "algo_name": "X", "ws_bytes": 8}]
    assert k["conv1/fwd"]["math"] == "fma"
    s = compare(_rows("n", "stock", [1.0]) + _rows("n", "all", [1.0]),
                   plans={"n": {"all": {"kernels": k, "initial_weights_sha256": "ab"}}})
    assert s["nets"]["n"]["all"]["kernels_split"] == 2
    assert s["nets"]["n"]["all"]["split_kernels"] == ["conv1/fwd", "conv2/bwd_filter"]
    assert "| all | 2/3 |" in format_summary(s)


def test_figure(tmp_path):
    pytest.importorskip("matplotlib")
    rows = (_rows("digits", "stock", [2.0, 1.0, 0.5], {0: 0.1, 2: 0.8})
            + _rows("digits", "powerOfTwo", [2.0, 1.001, 0.5], {0: 0.1, 2: 0.8})
            + _rows("cifar10", "stock", [2.3, 2.2]))
    fig = plot_curves(rows, str(tmp_path / "f.png"))
    assert (tmp_path / "f.png").stat().st_size > 1000
    axes = fig.get_axes()
    assert len(axes) == 6
    titles = [a.get_title() for a in axes]
    assert "digits: relative difference to stock" in titles
    # the relative panel holds powerOfTwo's curve (0, 1e-3, 0) and the 1 % line
    diff = axes[titles.index("digits: relative difference to stock")]
    ys = [list(l.get_ydata()) for l in diff.get_lines() if l.get_label() == "powerOfTwo"]
    assert ys[0] == pytest.approx([0.0, 1e-3, 0.0])


# ----------------------------------------------------------------------------------- CLI

def _cli(*args):
    from ucudnn.cli import main
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        rc = main(["training", *map(str, args)])
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("args,error", [
    (["--nets", "mnist"], "--nets: unknown net 'mnist'"),
    (["--nets", "cifar10", "--settings", "powerOfTwo,fast"], "--settings: unknown setting "
     "'fast'"),
    (["--nets", "cifar10", "--iterations", "0"], "--iterations: must be a positive integer"),
    (["--nets", "cifar10", "--iterations", "cifar10=x"], "--iterations: expected a positive "
     "integer, got 'x'"),
    (["--nets", "cifar10", "--test-interval", "digits=5"], "--test-interval: 'digits' is not "
     "one of --nets"),
    (["--nets", "cifar10", "--limit", "lots"], "--limit: cannot parse 'lots'"),
    (["--nets", "cifar10", "--pycaffe", "/nonexistent/python"], "--pycaffe: no pycaffe at "
     "/nonexistent/python"),
    (["--nets", "cifar10", "--cpu", "--settings", "stock,powerOfTwo"], "--settings: powerOfTwo "
     "needs a GPU"),
    (["--nets", "cifar10", "--timeout", "0"], "--timeout: must be positive"),
])
def test_cli_errors(tmp_path, args, error):
    rc, _, err = _cli("--out", tmp_path / "o", *args)
    assert rc == 2, err
    assert err.startswith(f"ucudnn: error: {error}"), err
    assert not (tmp_path / "o").exists()


def test_cli_plot_only(tmp_path, monkeypatch):
    drawn = []          # the figure itself: test_figure
    monkeypatch.setattr(runner, "plot_curves", lambda rows, out: drawn.append((list(rows), out)))
    rc, _, err = _cli("--out", tmp_path, "--plot-only")
    assert rc == 2 and "curves.csv" in err and "no such file" in err.lower(), err
    write_curves(tmp_path / "curves.csv",
                    _rows("digits", "stock", [2.0, 1.0], {1: 0.5})
                    + _rows("digits", "ilp", [2.0, 1.02], {1: 0.495}))
    rc, out, err = _cli("--out", tmp_path, "--plot-only")
    assert rc == 0, err
    s = json.loads((tmp_path / "summary.json").read_text())
    ilp = s["nets"]["digits"]["ilp"]
    assert ilp["max_rel_loss_diff"] == pytest.approx(0.02) and not ilp["loss_within_target"]
    assert ilp["final_accuracy_diff_pp"] == pytest.approx(-0.5)
    assert "| ilp |" in (tmp_path / "summary.md").read_text() and "| ilp |" in out
    assert len(drawn) == 1 and len(drawn[0][0]) == 4
    assert drawn[0][1] == str(tmp_path / "training_curves.png")


def test_help_lists_settings():
    from ucudnn.cli import build_parser
    with pytest.raises(SystemExit), redirect_stdout(io.StringIO()) as out:
        build_parser().parse_args(["training", "--help"])
    text = out.getvalue()
    assert "--plot-only" in text and "--pycaffe" in text and "shared:" in text


# -------------------------------------------------------------- pycaffe on the CPU, if here

def test_cpu_run_through_pycaffe(tmp_path):
    """A few CPU-mode iterations of the digits net through pycaffe (engine CAFFE): the whole
    pipeline, children and files included. Skipped where pycaffe does not import."""
    pytest.importorskip("sklearn", reason="scikit-learn not installed (ucudnn[training])")
    opts = Options(out=tmp_path / "o", nets=["digits"], mode="cpu",
                      settings={"digits": ["stock", "stock-rerun"]}, iterations={"digits": 3},
                      test_interval={"digits": 2}, batch={"digits": 32})
    try:
        check_options(opts)
        probe(opts)
    except TrainingError as e:
        pytest.skip(f"pycaffe does not import here: {e}")
    meta = run(opts, say=lambda m: None)
    assert meta["failed"] == [] and meta["nets"]["digits"]["initial_weights_identical"]
    with open(tmp_path / "o" / "curves.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["setting"], r["iteration"]) for r in rows] == [
        (s, str(i)) for s in ("stock", "stock-rerun") for i in range(4)]
    assert [r["test_accuracy"] != "" for r in rows[:4]] == [True, False, True, True]
    assert all(math.isfinite(float(r["loss"])) for r in rows)
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["nets"]["digits"]["stock-rerun"]["max_rel_loss_diff"] < 1e-5


def test_regenerate_from_run_records(tmp_path, monkeypatch):
    """What the children leave under runs/ becomes curves.csv and the summary; a failed run
    is named with its error."""
    monkeypatch.setattr(runner, "plot_curves", lambda rows, out: None)
    runs = tmp_path / "runs" / "digits"
    runs.mkdir(parents=True)
    ok = {"net": "digits", "status": "ok", "curve": [[0, 2.5, 0.1], [1, 2.0, None]]}
    (runs / "stock.json").write_text(json.dumps(dict(ok, setting="stock")))
    (runs / "powerOfTwo.json").write_text(json.dumps(dict(
        ok, setting="powerOfTwo", curve=[[0, 2.5, 0.1], [1, 2.002, None]],
        kernels={"conv2/bwd_filter": {"split": True}, "conv1/fwd": {"split": False}})))
    (runs / "all.json").write_text(json.dumps({"net": "digits", "setting": "all",
                                               "status": "failed", "error": "timed out"}))
    s = regenerate(tmp_path, say=lambda m: None)
    rows = read_curves(tmp_path / "curves.csv")
    assert [(r.setting, r.iteration) for r in rows] == [("stock", 0), ("stock", 1),
                                                        ("powerOfTwo", 0), ("powerOfTwo", 1)]
    p = s["nets"]["digits"]["powerOfTwo"]
    assert p["max_rel_loss_diff"] == pytest.approx(0.001) and p["kernels_split"] == 1
    assert s["failed"] == {"digits/all": "timed out"}
    text = (tmp_path / "summary.md").read_text()
    assert "- digits/all failed: timed out" in text and "| powerOfTwo | 1/2 |" in text


def test_metadata_checks_weights_plans_and_math(tmp_path):
    opts = Options(out=tmp_path, nets=["digits"], mode="cpu", argv=["ucudnn", "training"])
    k = {"conv1/fwd": {"split": False, "math": "fma"},
         "conv2/bwd_filter": {"split": False, "math": "default"}}
    runs = {"digits": {
        "stock": {"status": "ok", "initial_weights_sha256": "aa"},
        "powerOfTwo": {"status": "ok", "initial_weights_sha256": "bb", "kernels": k},
        "ilp": {"status": "ok", "initial_weights_sha256": "aa",
                "kernels": {"conv1/fwd": {"split": True, "math": "fma"}}}}}
    meta = metadata(opts, {"caffe_version": "1.0.0"}, runs)
    d = meta["nets"]["digits"]
    assert d["initial_weights_identical"] is False
    assert d["run_with"]["batch"] == 128 and "random_seed: 1" in d["solver"]
    assert any(w.startswith("powerOfTwo: no kernel split") for w in d["warnings"])
    assert any("powerOfTwo: kernels planned with math" in w for w in d["warnings"])
    assert not any(w.startswith("ilp") for w in d["warnings"])
    assert meta["environment"] == {"NVIDIA_TF32_OVERRIDE": "0"}
    assert meta["command"] == "ucudnn training" and d["runs"]["ilp"]["kernels"]


def test_child_env_gives_absolute_paths(tmp_path, monkeypatch):
    """The child runs in the prototxt folder: a relative --out must still reach the records
    file (a relative path would name a file under the prototxt folder, and the run would have
    no plan records)."""
    from ucudnn.measure.records import ENV
    monkeypatch.chdir(tmp_path)
    opts = Options(out=Path("rel-out"), nets=["digits"])
    env = child_env(opts, Path("rel-out") / "logs" / "x.records.jsonl")
    assert env[ENV] == str(tmp_path / "rel-out" / "logs" / "x.records.jsonl")
    assert child_env(opts, None).get(ENV) is None


def test_child_starts_as_the_package_module(tmp_path):
    """The runner starts its children as ``python -m ucudnn.experiments.training --child
    SPEC``: the package's __main__ runs the child. Its probe imports caffe from --pycaffe and
    answers in probe.out.json; here a stand-in caffe package (no pycaffe is built on this
    machine) has the probe report its version and file, and a folder without one gives the
    import error, naming --pycaffe."""
    import importlib.util
    import subprocess
    opts = Options(out=tmp_path, nets=["digits"])
    r = subprocess.run([sys.executable, "-m", CHILD_MODULE], capture_output=True, text=True,
                       env=child_env(opts, None), cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "usage: python -m ucudnn.experiments.training --child" \
        in r.stderr, r.stderr
    fake = tmp_path / "pycaffe"
    (fake / "caffe").mkdir(parents=True)
    (fake / "caffe" / "__init__.py").write_text('__version__ = "stand-in"\n')
    res = probe(Options(out=tmp_path, nets=["digits"], pycaffe=fake))
    assert res["caffe_version"] == "stand-in" and res["pycaffe"] == str(fake.resolve())
    assert res["caffe_module"] == str(fake.resolve() / "caffe" / "__init__.py")
    assert res["stubbed"] == [m for m in ("skimage", "scipy")
                              if importlib.util.find_spec(m) is None]
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainingError, match=r"^--pycaffe: cannot import caffe from .*empty: "
                       r"ModuleNotFoundError: No module named 'caffe'"):
        probe(Options(out=tmp_path, nets=["digits"], pycaffe=tmp_path / "empty"))


def test_compare_seeds_maths(tmp_path):
    """Several seeds (Note [Training equivalence]): accuracies averaged over each run's last
    evaluations and over the seeds, their difference and standard error; the seed-mean and
    paired trailing-mean loss differences; the verdicts against stock's own re-run."""
    n = SMOOTHING + 10
    runs = {}
    for seed, (a_ref, a_rerun, a_x) in enumerate([(0.50, 0.51, 0.48), (0.52, 0.50, 0.50),
                                                   (0.54, 0.55, 0.52)], start=1):
        base = [2.0 - 0.01 * i + 0.001 * seed for i in range(n)]

        def rows(setting, scale, a):
            return _rows("cifar10", setting, [v * scale for v in base],
                         {i: a for i in range(0, n, 5)})
        runs[seed] = (rows("stock", 1.0, a_ref) + rows("stock-rerun", 1.01, a_rerun)
                      + rows("x", 1.005, a_x) + rows("far", 1.05, a_x))
    s = compare_seeds(runs)
    st = s["nets"]["cifar10"]
    assert st["stock"]["accuracy_mean_pp"] == pytest.approx(52.0)
    assert st["stock"]["accuracy_sd_pp"] == pytest.approx(2.0)
    x = st["x"]
    assert x["accuracy_diff_pp"] == pytest.approx(-2.0)
    assert x["accuracy_diff_se_pp"] == pytest.approx(math.sqrt((4 + 4) / 3))
    assert x["seed_mean_loss_diff"] == pytest.approx(0.005)
    assert x["paired_loss_diff"] == pytest.approx([0.005] * 3)
    assert st["stock-rerun"]["seed_mean_loss_diff"] == pytest.approx(0.01)
    assert x["within_noise"] and not x["issue_targets"]          # |-2 pp| <= 2 se = 2.31
    assert not st["far"]["within_noise"]                           # 5 % > 1.5 x 1 %
    md = format_seeds_summary(s)
    assert "| x | 50.00 ± 2.00 | -2.00 ± 1.63 | 0.50% |" in md


def test_seeds_summary_from_folders(tmp_path, capsys):
    for seed in (1, 2):
        d = tmp_path / f"seed{seed}"
        d.mkdir()
        write_curves(d / "curves.csv",
                        _rows("digits", "stock", [2.0] * 25, {24: 0.5})
                        + _rows("digits", "ilp", [2.0] * 25, {24: 0.5}))
    rc, out, err = _cli("--out", tmp_path, "--plot-only")
    assert rc == 0, err
    s = json.loads((tmp_path / "seeds_summary.json").read_text())
    assert s["seeds"] == [1, 2] and s["nets"]["digits"]["ilp"]["accuracy_diff_pp"] == 0
    assert "| ilp |" in (tmp_path / "seeds_summary.md").read_text()
    rc, _, err = _cli("--out", tmp_path / "o", "--nets", "digits", "--seeds", "1")
    assert rc == 2 and "--seeds: expected two or more distinct seeds" in err
