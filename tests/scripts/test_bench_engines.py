"""scripts/bench_engines.py without a GPU: the suites' kernels, the per-net sums and which of
them are complete, and the figure drawn again from the committed points.csv."""
from functools import lru_cache

from repo_paths import REPO, load_script

POINTS = REPO / "results" / "h200" / "engines" / "points.csv"


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
