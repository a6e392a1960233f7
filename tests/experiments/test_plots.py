"""Figures from saved results: each function writes a PNG, the same bytes twice."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import REPO

pytest.importorskip("matplotlib", reason="plots need the 'plot' extra")
from ucudnn.experiments import plots  # noqa: E402
from ucudnn.plan.layers import LayerSpec  # noqa: E402
from ucudnn.plan.table import AlgoPerf  # noqa: E402

import cli_run  # noqa: E402
from repo_paths import NETS  # noqa: E402
from ucudnn.experiments import reproduce as rp  # noqa: E402
from ucudnn.experiments.grid import point_of  # noqa: E402

BENCH = {1: [AlgoPerf(0, 0.1, 0), AlgoPerf(1, 0.05, 1 << 20)],
         2: [AlgoPerf(0, 0.2, 0), AlgoPerf(1, 0.08, 3 << 20)],
         4: [AlgoPerf(0, 0.4, 0), AlgoPerf(1, 0.12, 9 << 20), AlgoPerf(5, 0.1, 40 << 20)]}
RESULT = {"networks": [
    {"net": "tiny", "limit": 8 << 20, "policy": p, "predicted_ms": t, "measured_ms": t * 1.02}
    for p, t in (("undivided", 0.4), ("powerOfTwo", 0.24))],
    "kernels": [{"net": "tiny", "layer": "c1", "op": op, "count": 2, "limit": 8 << 20,
                 "policy": p, "measured_ms": t} for op in ("fwd", "bwd_filter")
                for p, t in (("undivided", 0.4), ("powerOfTwo", 0.24))]}


def _digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.mark.parametrize("draw", [
    lambda out: plots.kernel_algorithms(BENCH, "tiny", out),
    lambda out: plots.desirable_set_scatter(BENCH, 4, "tiny", out),
    lambda out: plots.measured_vs_predicted(RESULT, out),
    lambda out: plots.stacked_layers(RESULT, "tiny", out),
    lambda out: plots.ilp_vs_dp(
        [LayerSpec("c1", 4, 3, 8, 8, 4, 3, 3, pad=1, bwd_data=False)],
        {("c1", op): BENCH for op in ("fwd", "bwd_filter")}, "tiny", out,
        limits=(1 << 20, 4 << 20, 16 << 20)),
])
def test_figure_is_written_deterministically(tmp_path, draw):
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    draw(str(a))
    draw(str(b))
    assert a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and a.stat().st_size > 5000
    assert _digest(a) == _digest(b)


def _no_fake_zero(values):
    """Zero workspace drawn at 0, never at a tiny stand-in such as 1e-6 MiB on a log axis."""
    values = [float(v) for v in values]
    assert 0.0 in values
    assert not [v for v in values if 0 < v < 1e-3], values


def test_zero_workspace_is_drawn_at_zero_on_a_symlog_axis(tmp_path):
    fig = plots.kernel_algorithms(BENCH, "tiny", str(tmp_path / "k.png"), op="fwd")
    ax_w = fig.axes[1]
    assert ax_w.get_yscale() == "symlog"
    _no_fake_zero([y for line in ax_w.get_lines() for y in line.get_ydata()])
    assert "0" in [t.get_text() for t in ax_w.get_yticklabels()]
    # cuDNN's names, not "algo N"
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "IMPLICIT_GEMM" in labels and "WINOGRAD_NONFUSED" not in labels
    assert not [t for t in labels if t.startswith("algo ")]

    fig = plots.desirable_set_scatter(BENCH, 4, "tiny", str(tmp_path / "d.png"), op="fwd")
    ax = fig.axes[0]
    assert ax.get_xscale() == "symlog"
    _no_fake_zero([x for c in ax.collections for x, _ in c.get_offsets()])
    texts = [t.get_text() for t in ax.texts]
    assert any("8.0MiB" in t for t in texts) and all(t.get_rotation() == 0 for t in ax.texts)
    assert "undivided: FFT_TILING" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_kernel_names_are_horizontal_and_layer_shades_explained(tmp_path):
    doc = json.loads(FULL_GRID.read_text())
    fig = plots.reproduce_ilp_vs_dp(doc, "alexnet", str(tmp_path / "i.png"))
    ax_w = fig.axes[1]
    names = [t.get_text() for t in ax_w.get_yticklabels()]
    assert "conv2/fwd" in names and all(t.get_rotation() == 0 for t in ax_w.get_yticklabels())
    fig = plots.stacked_layers(RESULT, "tiny", str(tmp_path / "s.png"))
    legend = " ".join(t.get_text() for t in fig.axes[0].get_legend().get_texts())
    assert "one segment per layer" in legend


FIRST_RUN = REPO / "tests" / "data" / "h200_reproduce" / "first-run" / "reproduce.json"
FULL_GRID = REPO / "tests" / "data" / "h200_reproduce" / "reproduce.json"


@pytest.mark.parametrize("results,draw", [
    (FIRST_RUN, lambda doc, out: plots.reproduce_stacked(doc, "alexnet", out)),
    (FIRST_RUN, lambda doc, out: plots.reproduce_overhead(doc, out)),
    (FIRST_RUN, lambda doc, out: plots.reproduce_measured_vs_predicted(doc, out)),
    (FULL_GRID, lambda doc, out: plots.reproduce_stacked(doc, "resnet18", out)),
    (FULL_GRID, lambda doc, out: plots.reproduce_ilp_vs_dp(doc, "resnet18", out)),
    (FIRST_RUN, lambda doc, out: plots.reproduce_ilp_vs_dp(doc, "alexnet", out)),
], ids=["first-stacked", "first-overhead", "first-measured", "grid-stacked", "grid-ilp",
        "first-ilp"])
def test_reproduce_figures_from_a_saved_run(tmp_path, results, draw):
    """From saved `ucudnn reproduce` runs on the H200: the first (failed points included,
    one process per point) and the full grid (three processes per point)."""
    doc = json.loads(results.read_text())
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    draw(doc, str(a))
    draw(doc, str(b))
    assert a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and a.stat().st_size > 5000
    assert _digest(a) == _digest(b)


def test_reproduce_ilp_figure_needs_ilp_points(tmp_path):
    doc = json.loads(FULL_GRID.read_text())
    doc["points"] = {k: r for k, r in doc["points"].items() if r["setting"] != "ilp"}
    with pytest.raises(ValueError, match="no measured ILP and powerOfTwo points for 'alexnet'"):
        plots.reproduce_ilp_vs_dp(doc, "alexnet", str(tmp_path / "x.png"))


def test_reproduce_figure_without_data_says_so(tmp_path):
    with pytest.raises(ValueError, match="no measured points for 'vgg'"):
        plots.reproduce_stacked({"points": {}}, "vgg", str(tmp_path / "x.png"))


def test_load_bench_core_merges(tmp_path):
    for i in range(2):
        (tmp_path / f"r{i}.json").write_text(json.dumps(dict(RESULT, meta={"run": i})))
    merged = plots.load_bench_core([tmp_path / "r0.json", tmp_path / "r1.json"])
    assert len(merged["networks"]) == 4 and [m["run"] for m in merged["meta"]] == [0, 1]


def test_plot_figures_script_on_committed_results(tmp_path):
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "plot_figures.py"),
                          "--results", str(REPO / "tests" / "data" / "h200_reproduce"), "-o", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in tmp_path.glob("*.png"))
    assert "measured_vs_predicted.png" in names and "alexnet_stacked_layers.png" in names
    assert "alexnet_conv2_fwd_desirable_set.png" in names
    # and from the committed reproduce.json (caffe time grid): three nets, overhead, measured
    # against predicted
    assert {"alexnet_caffe_time_layers.png", "resnet18_caffe_time_layers.png",
            "cifar10_caffe_time_layers.png", "overhead.png", "caffe_measured_vs_predicted.png",
            "alexnet_caffe_ilp_vs_dp.png", "resnet18_caffe_ilp_vs_dp.png",
            "cifar10_caffe_ilp_vs_dp.png", "alexnet_time_vs_memory.png",
            "resnet18_time_vs_memory.png", "cifar10_time_vs_memory.png"} <= set(names)
    assert len(names) == 18


def test_time_against_memory_figure(tmp_path):
    """The shared arena's figure: every setting's iteration time against the workspace held and the
    peak GPU memory; stock Caffe's workspace from peak memory (Note [Shared arena at stock
    memory])."""
    MIB = 1 << 20

    def pt(setting, ms, limit, ws, peak):
        return {"net": "alexnet", "setting": setting, "limit_bytes": limit, "status": "ok",
                "median_ms": ms, "workspace_bytes": ws, "peak_gpu_memory_bytes": peak}
    pts = [pt("caffe", 55.0, None, None, 3000 * MIB),
           pt("undivided", 50.0, 8 * MIB, 20 * MIB, 2900 * MIB),
           pt("undivided", 46.0, 64 * MIB, 300 * MIB, 3180 * MIB),
           pt("shared", 22.0, 8 * MIB, 170 * MIB, 3050 * MIB),
           pt("shared_stock", 23.0, 120 * MIB, 118 * MIB, 2999 * MIB),
           pt("unlimited", 20.0, 1 << 62, 3300 * MIB, 6200 * MIB)]
    doc = {"points": {point_of(r).key: r for r in pts}}
    assert len(doc["points"]) == len(pts)
    got = {p["setting"] + str(p["limit_bytes"]): p for p in plots.time_memory_points(doc, "alexnet")}
    assert got["caffeNone"]["workspace_bytes"] == (3000 - (2900 - 20)) * MIB
    out = tmp_path / "tvm.png"
    plots.reproduce_time_vs_memory(doc, "alexnet", str(out))
    assert out.stat().st_size > 10000


def _description(png):
    """Where a figure's numbers come from: its PNG's Description (plots._save)."""
    from PIL import Image          # matplotlib's own dependency
    with Image.open(png) as im:
        return im.text.get("Description")


def _files(root):
    """(path, size, mtime) of every file under ``root``, less hidden folders (.git, .venv),
    Python's byte-code caches and ``third_party/`` (Caffe's fetched source and build, ignored by
    git and tens of thousands of files once built)."""
    found = set()
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")
                   and d not in ("__pycache__", "third_party")]
        for name in files:
            st = os.stat(os.path.join(top, name))
            found.add((os.path.join(top, name), st.st_size, st.st_mtime_ns))
    return found


def test_gpu_less_reproduce_then_plot_figures_makes_predicted_figures(tmp_path):
    """A newcomer without a GPU: ``ucudnn reproduce --out DIR``, then ``plot_figures.py DIR -o
    FIGDIR`` from another folder: the paper's figures from the predicted points, each saying it
    is predicted; the figures it cannot make named with why, one line each; nothing written
    into the checkout."""
    before = _files(REPO)
    rep, figdir = tmp_path / "reproduce", tmp_path / "figures"
    p = cli_run.run(tmp_path, "reproduce", "--out", rep, "--nets", "alexnet,cifar10",
                    "--limits", "8MiB,64MiB", "--no-pytorch",
                    env={"CUDA_VISIBLE_DEVICES": "", "UCUDNN_CAFFE": str(tmp_path / "none")})
    assert "predicting every point from the shipped H200 benchmark data" in p.stderr
    assert plots.PREDICTED in p.stdout and "no layers.csv" in p.stdout
    assert sorted(x.name for x in rep.iterdir()) == ["points.csv", "reproduce.json"]
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "plot_figures.py"), str(rep),
                          "-o", str(figdir)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    predicted = {f"{net}_{kind}_predicted.png" for net in ("alexnet", "cifar10")
                 for kind in ("stacked_layers", "time_vs_memory")}
    predicted |= {"alexnet_ilp_vs_dp.png", "resnet18_ilp_vs_dp.png"}
    tables = {"alexnet_conv2_fwd_algorithms.png", "alexnet_conv2_fwd_desirable_set.png"}
    assert {x.name for x in figdir.iterdir()} == predicted | tables
    for name in predicted:
        assert _description(figdir / name) == plots.PREDICTED, name
        assert f"{figdir / name}  ({plots.PREDICTED})" in res.stdout.splitlines()
    for name in tables:
        assert _description(figdir / name) == plots.H200_TABLES, name
    assert res.stdout.splitlines()[-1] == (
        f"plot_figures: 8 figures in {figdir}, 6 of them {plots.PREDICTED}; 11 not made "
        "(said above)")
    # what needs a GPU run: one line per kind of figure, with the reason
    missing = [line for line in res.stderr.splitlines() if "not made" in line]
    assert len(missing) == len(res.stderr.splitlines()) == 3, res.stderr
    assert any("overhead.png" in line and "holds predicted ones" in line for line in missing)
    assert any("deepbench_speedups.png" in line and "no deepbench.json" in line
               for line in missing)
    assert _files(REPO) == before


def test_plot_figures_needs_an_output_folder_and_results(tmp_path):
    script = str(REPO / "scripts" / "plot_figures.py")
    for args, said in (([str(tmp_path)], "-o/--out"), ([str(tmp_path / "none"), "-o",
                                                        str(tmp_path / "f")], "no folder")):
        res = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
        assert res.returncode == 2 and said in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "f").exists()


def test_a_panel_without_data_is_not_drawn(tmp_path):
    """Results without peak GPU memory: time against workspace only, no empty panel."""
    doc = json.loads(FULL_GRID.read_text())
    assert not any(r.get("peak_gpu_memory_bytes") for r in doc["points"].values())
    fig = plots.reproduce_time_vs_memory(doc, "alexnet", str(tmp_path / "t.png"))
    assert len(fig.axes) == 1 and fig.axes[0].collections
    assert _description(tmp_path / "t.png") == plots.MEASURED


def test_predicted_kernels_stack_to_the_predicted_time(tmp_path):
    doc = rp.run(rp.Options(out=tmp_path, nets=["alexnet"], limits=[64 << 20], predict=True,
                            prototxt_dir=NETS, pytorch=False), say=lambda m: None)
    rows = plots.predicted_kernel_rows(doc, "alexnet")["kernels"]
    got = sum(k["count"] * k["predicted_ms"] for k in rows if k["policy"] == "powerOfTwo")
    assert got == pytest.approx(doc["points"]["alexnet/powerOfTwo/64.0MiB"]["predicted_conv_ms"])
    assert [k["layer"] for k in rows][:1] == ["conv1"] and {k["count"] for k in rows} == {1, 2}
    fig = plots.stacked_layers({"kernels": rows}, "alexnet", str(tmp_path / "s.png"),
                               value="predicted_ms", source=plots.PREDICTED)
    assert "predicted from the shipped H200 benchmark data" in fig.axes[0].get_title()
    assert _description(tmp_path / "s.png") == plots.PREDICTED


def test_engines_figure_has_rows_of_at_most_four_panels(tmp_path):
    summary = [{"suite": f"net{i}", "dtype": "float32", "family": fam, "layout": "NCHW",
                "limit": str(8 << 20), "policy": pol, "measured_ms": 10.0 + i}
               for i in range(11) for fam in ("legacy", "graph")
               for pol in ("undivided", "powerOfTwo")]
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    fig = plots.engines_summary(summary, str(a))
    plots.engines_summary(summary, str(b))
    assert _digest(a) == _digest(b)
    assert len(fig.axes) == 11
    rows = {round(ax.get_position().y0, 3) for ax in fig.axes}
    cols = {round(ax.get_position().x0, 3) for ax in fig.axes}
    assert (len(rows), len(cols)) == (3, 4)
    width, height = fig.get_size_inches() * 110
    assert width < 2400 and height < 1400
