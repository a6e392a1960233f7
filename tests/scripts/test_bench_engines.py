"""scripts/bench_engines.py without a GPU: the suites' kernels, the per-net sums and which of
them are complete, and the figure drawn again from the committed points.csv."""
from functools import lru_cache

import pytest

from repo_paths import REPO, load_script

POINTS = REPO / "tests" / "data" / "h200_engines" / "points.csv"


@lru_cache(maxsize=None)
def _module():
    return load_script("bench_engines")


def test_suites_give_each_kernel_once_with_its_calls_per_iteration():
    m = _module()
    r18, r50 = m.suite_kernels("resnet18", 0), m.suite_kernels("resnet50", 0)
    assert (len(r18), len(r50)) == (11, 20)
    # calls per iteration: 20 convolutions x 3 ops, conv1 without backward-data
    assert sum(k.count * len(k.ops) for k in r18) == 20 * 3 - 1
    assert sum(k.count * len(k.ops) for k in r50) == 53 * 3 - 1
    assert len(m.suite_kernels("deepbench", 8)) == 8


def test_a_grouped_layer_counts_one_call_per_group():
    alexnet = {k.name: k for k in _module().suite_kernels("alexnet", 0)}
    # AlexNet: conv2, conv4 and conv5 have two groups; each runs its group's kernel twice
    assert {n: k.count for n, k in alexnet.items()} == {
        "conv1": 1, "conv2": 2, "conv3": 1, "conv4": 2, "conv5": 2}
    assert alexnet["conv2"].shape.x_strides == (96 * 27 * 27, 27 * 27, 27, 1)


def test_a_sum_missing_a_kernel_is_marked_incomplete():
    m = _module()
    row = dict(suite="s", family="graph", layout="NHWC", dtype="float32", policy="undivided",
               limit_bytes=1, predicted_ms=1.0, measured_ms=2.0, count=3)
    rows = [dict(row, kernel="a", op="fwd"), dict(row, kernel="b", op="fwd"),
            dict(row, kernel="b", op="fwd", limit_bytes=2)]
    by_limit = {s["limit"]: s for s in m.summarise(rows)}
    assert by_limit["1"]["complete"] and by_limit["1"]["measured_ms"] == 12.0
    assert not by_limit["2"]["complete"] and by_limit["2"]["kernels"] == 1


def test_figure_is_drawn_again_from_the_committed_points(tmp_path):
    m = _module()
    rows = m.read_points(POINTS)
    assert {r["suite"] for r in rows} == {"alexnet", "resnet18", "resnet50", "deepbench"}
    assert len(rows) > 3000
    assert m.main(["--replot", str(POINTS), "--out", str(tmp_path / "fig")]) == 0
    png = (tmp_path / "fig" / "engines.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_divided_plans_are_timed_beside_their_undivided_plans(fake_core, tmp_path, capsys):
    """Note [Divided against undivided, side by side] over the fake core, whose time_run
    gives each plan its predicted time: at 8 MiB the two-algorithm model's undivided plan is
    the slow algorithm and powerOfTwo divides into the fast one; unlimited, nothing divides,
    so no row is written for that limit."""
    import csv
    import statistics
    m = _module()
    out = tmp_path / "out"
    assert m.main(["--suites", "deepbench", "--deepbench-layers", "1", "--families", "legacy",
                   "--layouts", "NCHW", "--limits", "8MiB", "--versus-rounds", "3",
                   "--out", str(out)]) == 0
    with open(out / "versus_undivided.csv", newline="") as f:
        versus = list(csv.DictReader(f))
    points = m.read_points(out / "points.csv")
    assert [v["op"] for v in versus] == ["fwd", "bwd_data", "bwd_filter"]
    for v in versus:
        assert v["limit_bytes"] == str(8 << 20) and v["rounds"] == "3"
        undivided, divided = (next(p for p in points if (p["op"], p["policy"]) == (v["op"], pol)
                                   and p["limit_bytes"] == v["limit_bytes"])
                              for pol in ("undivided", "powerOfTwo"))
        assert (v["undivided_choice"], v["divided_choice"]) == (undivided["choice"],
                                                                divided["choice"])
        assert float(v["undivided_ms"]) == undivided["predicted_ms"]
        assert float(v["ratio"]) == round(divided["predicted_ms"] / undivided["predicted_ms"], 4)
        assert float(v["ratio"]) < 1
    line = next(l for l in capsys.readouterr().out.splitlines() if "side by side" in l)
    # each divided plan is 32 x 8 samples of the fast algorithm against 256 of the slow one
    assert {v["divided_choice"] for v in versus} == {"8x32:IMPLICIT_PRECOMP_GEMM", "8x32:ALGO_1"}
    geomean = statistics.geometric_mean(1 / float(v["ratio"]) for v in versus)
    assert f"3 kernels, 3 divided, geomean speedup {geomean:.3f}x" in line
    assert line.endswith("slower than 1.03x: none")
    # the same line from the files alone
    assert m.main(["--replot", str(out / "points.csv"), "--out", str(tmp_path / "fig")]) == 0
    assert line in capsys.readouterr().out.splitlines()


def test_side_by_side_takes_the_median_ratio_of_the_rounds():
    row = _module().side_by_side([(1.0, 0.9), (2.0, 1.0), (1.0, 1.5)])
    assert (row["ratio"], row["ratio_min"], row["ratio_max"]) == (0.9, 0.5, 1.5)
    assert (row["undivided_ms"], row["divided_ms"], row["rounds"]) == (1.0, 1.0, 3)


def test_kernels_named_run_in_the_order_given():
    m = _module()
    got = [(k.name, op) for k, op in m.kernel_ops(["deepbench"], 0,
                                                   ["db61", "db8/bwd_data", "db55"])]
    assert got == [("db61", "fwd"), ("db61", "bwd_data"), ("db61", "bwd_filter"),
                   ("db8", "bwd_data"),
                   ("db55", "fwd"), ("db55", "bwd_data"), ("db55", "bwd_filter")]
    assert len(m.kernel_ops(["resnet18"], 0)) == sum(len(k.ops) for k in
                                                     m.suite_kernels("resnet18", 0))


def test_bad_arguments_are_named_before_any_gpu_is_asked(capsys):
    m = _module()
    for argv, msg in ((["--suites", "deepbench", "--kernels", "db8", "db99", "db8/fwd2"],
                       "--kernels: db8/fwd2, db99: no such kernel in the suites deepbench"),
                      (["--versus-rounds", "-1"], "--versus-rounds: must be >= 0, got -1")):
        with pytest.raises(SystemExit) as e:
            m.main(argv)
        assert e.value.code == 2 and msg in capsys.readouterr().err
