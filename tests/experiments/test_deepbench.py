"""DeepBench's 3x3/5x5 training layers: the list against its source, the summary math, the
figure on synthetic results and the runner's CPU-side parts (with a fake core)."""
import json

import pytest

from repo_paths import REPO, load_script
from ucudnn.experiments import deepbench as db
from ucudnn.plan.table import AlgoPerf

CSV = REPO / "ucudnn" / "data" / "deepbench" / "conv_train.csv"

# Every 3x3 and 5x5 tuple of DeepBench's code/kernels/conv_problems.h `training_set` (commit
# da81ba7820739e2e506dc27f382d15be5479f98f), by 0-based position, in the file's order:
# w, h, c, n, k, filter_w(s), filter_h(r), pad_w, pad_h, wstride, hstride.
SOURCE = {
    8: (480, 48, 1, 16, 16, 3, 3, 1, 1, 1, 1),
    9: (240, 24, 16, 16, 32, 3, 3, 1, 1, 1, 1),
    10: (120, 12, 32, 16, 64, 3, 3, 1, 1, 1, 1),
    11: (60, 6, 64, 16, 128, 3, 3, 1, 1, 1, 1),
    12: (108, 108, 3, 8, 64, 3, 3, 1, 1, 2, 2),
    13: (54, 54, 64, 8, 64, 3, 3, 1, 1, 1, 1),
    14: (27, 27, 128, 8, 128, 3, 3, 1, 1, 1, 1),
    15: (14, 14, 128, 8, 256, 3, 3, 1, 1, 1, 1),
    16: (7, 7, 256, 8, 512, 3, 3, 1, 1, 1, 1),
    17: (224, 224, 3, 8, 64, 3, 3, 1, 1, 1, 1),
    18: (112, 112, 64, 8, 128, 3, 3, 1, 1, 1, 1),
    19: (56, 56, 128, 8, 256, 3, 3, 1, 1, 1, 1),
    20: (28, 28, 256, 8, 512, 3, 3, 1, 1, 1, 1),
    21: (14, 14, 512, 8, 512, 3, 3, 1, 1, 1, 1),
    22: (7, 7, 512, 8, 512, 3, 3, 1, 1, 1, 1),
    23: (224, 224, 3, 16, 64, 3, 3, 1, 1, 1, 1),
    24: (112, 112, 64, 16, 128, 3, 3, 1, 1, 1, 1),
    25: (56, 56, 128, 16, 256, 3, 3, 1, 1, 1, 1),
    26: (28, 28, 256, 16, 512, 3, 3, 1, 1, 1, 1),
    27: (14, 14, 512, 16, 512, 3, 3, 1, 1, 1, 1),
    28: (7, 7, 512, 16, 512, 3, 3, 1, 1, 1, 1),
    30: (28, 28, 192, 16, 32, 5, 5, 2, 2, 1, 1),
    32: (14, 14, 512, 16, 48, 5, 5, 2, 2, 1, 1),
    35: (7, 7, 832, 16, 128, 5, 5, 2, 2, 1, 1),
    36: (56, 56, 64, 8, 64, 3, 3, 1, 1, 1, 1),
    38: (28, 28, 128, 8, 128, 3, 3, 1, 1, 1, 1),
    41: (14, 14, 256, 8, 256, 3, 3, 1, 1, 1, 1),
    45: (56, 56, 64, 16, 64, 3, 3, 1, 1, 1, 1),
    47: (28, 28, 128, 16, 128, 3, 3, 1, 1, 1, 1),
    50: (14, 14, 256, 16, 256, 3, 3, 1, 1, 1, 1),
    54: (700, 161, 1, 16, 64, 5, 5, 1, 1, 2, 2),
    55: (350, 80, 64, 16, 64, 3, 3, 1, 1, 1, 1),
    56: (350, 80, 64, 16, 128, 5, 5, 1, 1, 2, 2),
    57: (175, 40, 128, 16, 128, 3, 3, 1, 1, 1, 1),
    58: (175, 40, 128, 16, 256, 5, 5, 1, 1, 2, 2),
    59: (84, 20, 256, 16, 256, 3, 3, 1, 1, 1, 1),
    60: (84, 20, 256, 16, 512, 5, 5, 1, 1, 2, 2),
    61: (42, 10, 512, 16, 512, 3, 3, 1, 1, 1, 1),
    74: (7, 7, 512, 8, 512, 3, 3, 1, 1, 1, 1),
    90: (7, 7, 512, 16, 512, 3, 3, 1, 1, 1, 1),
}
# The "Source" column of DeepBenchKernels_train.xlsx for a few of those rows.
APPLICATIONS = {8: "OCR", 12: "Face Recognition", 17: "Vision", 30: "Vision", 36: "Face Recognition",
                54: "Speaker ID", 61: "Speaker ID", 74: "Resnet", 90: "Resnet"}


@pytest.fixture(scope="module")
def layers():
    return db.read_layers()


def test_layer_counts_match_the_source(layers):
    assert len(layers) == 40 == len(SOURCE)
    assert sum(l.filter == "3x3" for l in layers) == 33
    assert sum(l.filter == "5x5" for l in layers) == 7
    uniq = db.unique_layers(layers)
    assert len(uniq) == 29
    assert sum(l.filter == "3x3" for l, _ in uniq) == 22
    # ResNet's 7x7x512 -> 512 3x3 layer: listed four times at N = 8 and 16
    assert [same for l, same in uniq if l.name == "db_22"] == [["db_22", "db_28", "db_74", "db_90"]]


def test_every_row_is_its_source_tuple_at_batch_256(layers):
    assert [l.index for l in layers] == sorted(SOURCE)
    for l in layers:
        w, h, c, n, k, s, r, pad_w, pad_h, wstride, hstride = SOURCE[l.index]
        assert l.name == f"db_{l.index:02d}"
        assert (l.w, l.h, l.c, l.n_original, l.k, l.s, l.r) == (w, h, c, n, k, s, r), l.name
        assert (l.pad_w, l.pad_h, l.stride_w, l.stride_h) == (pad_w, pad_h, wstride, hstride)
        assert l.n == 256
        assert l.application and l.application != "unspecified"
    for i, app in APPLICATIONS.items():
        assert next(l for l in layers if l.index == i).application == app


def test_header_names_source_commit_and_license():
    head = "".join(line for line in CSV.read_text().splitlines(True) if line.startswith("#"))
    assert "baidu-research/DeepBench" in head and "conv_problems.h" in head
    assert "da81ba7820739e2e506dc27f382d15be5479f98f" in head
    assert "Apache License 2.0" in head


def test_shapes_keep_both_dimensions(layers):
    ocr = next(l for l in layers if l.index == 8).shape
    assert (ocr.h, ocr.w, ocr.pad_h, ocr.pad_w, ocr.stride_h, ocr.stride_w) == (48, 480, 1, 1, 1, 1)
    spk = next(l for l in layers if l.index == 54).shape
    assert (spk.out_h, spk.out_w) == (80, 349)  # (161 + 2 - 5) // 2 + 1, (700 + 2 - 5) // 2 + 1


def test_asymmetric_rows_are_read_faithfully(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("# c\n" + ",".join(db.CSV_COLUMNS) + "\n"
                 "a,0,OCR,4,1,2,9,20,3,3,5,1,2,1,3\n")
    (l,) = db.read_layers(p)
    assert (l.pad_h, l.pad_w, l.stride_h, l.stride_w) == (1, 2, 1, 3)
    assert (l.shape.out_h, l.shape.out_w) == (9, 7)  # W: (20 + 2 * 2 - 5) // 3 + 1


def test_bad_list_is_refused(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text(",".join(db.CSV_COLUMNS) + "\na,0,OCR,4,1,2,9,x,3,3,3,1,1,1,1\n")
    with pytest.raises(db.DeepBenchError, match="field 'W'"):
        db.read_layers(p)
    p.write_text("name,N\na,4\n")
    with pytest.raises(db.DeepBenchError, match="header lacks"):
        db.read_layers(p)


def test_select_layers(layers):
    assert [l.name for l in db.select_layers(layers, ["db_30", "54"])] == ["db_30", "db_54"]
    assert len(db.select_layers(layers, filters=["5x5"])) == 7
    with pytest.raises(db.DeepBenchError, match="unknown layer"):
        db.select_layers(layers, ["db_00"])


# --- results and summary -------------------------------------------------------------------

def _rec(layer, op, limit, policy, ms, filt="3x3", pred=None):
    return {"layer": layer, "filter": filt, "op": op, "limit": limit, "policy": policy,
            "measured_ms": ms, "predicted_ms": ms if pred is None else pred}


MIB = 1 << 20
SYNTH = {"schema": db.SCHEMA, "version": 1, "meta": {}, "complete": True, "kernels": [
    _rec("a", "fwd", 128 * MIB, "undivided", 4.0), _rec("a", "fwd", 128 * MIB, "powerOfTwo", 2.0),
    _rec("b", "fwd", 128 * MIB, "undivided", 1.0), _rec("b", "fwd", 128 * MIB, "powerOfTwo", 2.0),
    _rec("c", "fwd", 128 * MIB, "undivided", 3.0, "5x5"),
    _rec("c", "fwd", 128 * MIB, "powerOfTwo", 1.0, "5x5", pred=1.5),
    _rec("a", "fwd", 512 * MIB, "undivided", 2.0), _rec("a", "fwd", 512 * MIB, "powerOfTwo", 2.0),
    _rec("a", "bwd_data", 128 * MIB, "undivided", 2.0),
    _rec("a", "bwd_data", 128 * MIB, "powerOfTwo", None),  # no plan: left out
]}


def test_summary_math():
    rows = {(r["op"], r["limit"]): r for r in db.summary(SYNTH)}
    assert set(rows) == {("fwd", 128 * MIB), ("fwd", 512 * MIB)}
    r = rows["fwd", 128 * MIB]
    assert r["n"] == 3 and r["max"] == 3.0 and r["min"] == 0.5
    assert r["geomean"] == pytest.approx((2.0 * 0.5 * 3.0) ** (1 / 3))
    assert r["gain_share"] == pytest.approx(2 / 3)
    assert rows["fwd", 512 * MIB]["gain_share"] == 0.0  # 1.00x is no gain
    pred = {(r["op"], r["limit"]): r for r in db.summary(SYNTH, basis="predicted")}
    assert pred["fwd", 128 * MIB]["max"] == 2.0
    by = {(r["limit"], r["filter"]): r["n"] for r in db.summary(SYNTH, by_filter=True)}
    assert by == {(128 * MIB, "3x3"): 2, (128 * MIB, "5x5"): 1, (512 * MIB, "3x3"): 1}
    table = db.format_summary(db.summary(SYNTH))
    assert "| fwd | 128.0MiB | powerOfTwo (measured) | 3 | 3.00x |" in table
    assert "3.00x" in table and "67 %" in table


def test_unchanged_plans_are_no_speedup_and_layers_sum_their_ops():
    """Noise between two timings of the same plan is not a speedup; a layer's speedup is its
    three ops' undivided time over the policy's."""
    def rec(op, pol, ms, plan):
        return {"layer": "L", "filter": "3x3", "op": op, "limit": MIB, "policy": pol,
                "measured_ms": ms, "predicted_ms": ms, "plan": plan}
    recs = [rec("fwd", "undivided", 1.02, "256x1:algo1"), rec("fwd", "powerOfTwo", 1.0, "256x1:algo1"),
            rec("bwd_data", "undivided", 4.0, "256x1:algo0"),
            rec("bwd_data", "powerOfTwo", 1.0, "128x2:algo1"),
            rec("bwd_filter", "undivided", 1.0, "256x1:algo0"),
            rec("bwd_filter", "powerOfTwo", 1.0, "256x1:algo0")]
    assert db.speedups(recs)[("L", "fwd", MIB)] == 1.0
    assert db.speedups(recs)[("L", "bwd_data", MIB)] == 4.0
    assert db.layer_speedups(recs)[("L", "all", MIB)] == pytest.approx(6.02 / 3.0)
    (row,) = db.summary(recs, per_layer=True)
    assert row["op"] == "all" and row["gain_share"] == 1.0


def test_load_results_checks_schema(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(SYNTH))
    assert db.load_results(p)["kernels"] == SYNTH["kernels"]
    with pytest.raises(db.DeepBenchError):
        db.load_results({"networks": []})


def test_deadline():
    now = [100.0]
    d = db.Deadline(5, clock=lambda: now[0])
    assert not d.expired()
    now[0] = 105.0
    assert d.expired() and d.elapsed() == 5.0
    assert not db.Deadline(None).expired()


def test_figure_on_synthetic_results(tmp_path):
    pytest.importorskip("matplotlib")
    from ucudnn.experiments import plots
    out = tmp_path / "f.png"
    fig = plots.deepbench_speedups(SYNTH, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = fig.axes
    assert [a.get_title() for a in axes] == ["fwd, 3x3", "fwd, 5x5", "bwd_data, 3x3", "bwd_data, 5x5"]
    fwd3 = axes[0]
    heights = sorted(round(p.get_height(), 3) for p in fwd3.patches)
    # layers a, b; limits 128 and 512 MiB: a 2.0 / 1.0, b 0.5 / (none -> 0)
    assert heights == [0.0, 0.5, 1.0, 2.0]
    assert [t.get_text() for t in fwd3.get_xticklabels()] == ["a", "b"]
    assert any(list(l.get_ydata()) == [1.0, 1.0] for l in fwd3.get_lines())
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["128.0MiB", "512.0MiB"]
    out2 = tmp_path / "g.png"
    plots.deepbench_speedups(SYNTH, str(out2))
    assert out.read_bytes() == out2.read_bytes()


# --- the runner, with a fake core --------------------------------------------------------

def _runner():
    return load_script("bench_deepbench")


def fast_algorithm(kern, b):
    """algo 0: slow, no workspace; algo 1: 4x faster, 1 MiB per sample."""
    return [AlgoPerf(1, 0.25 * b, b * MIB), AlgoPerf(0, 1.0 * b, 0)]


@pytest.fixture
def core(fake_core):
    """The fake core, its runs measured 10 % over the prediction."""
    fake_core.model = fast_algorithm
    fake_core.time_factor = 1.1
    return fake_core


def test_runner_measures_plans_and_reports(tmp_path, core):
    from ucudnn.measure import bench
    bd = _runner()
    assert bd.sizes_for(["undivided", "powerOfTwo"], 256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert bd.sizes_for(["undivided", "all"], 8) == list(range(1, 9))
    x, y, w = object(), object(), object()
    assert bd.operands("bwd_data", x, y, w) == (w, y, x)
    layers = db.read_layers()
    todo = bd.jobs(layers, ["fwd", "bwd_filter"])
    assert len(todo) == 2 * 29 and todo[0][2] == "fwd" and todo[1][2] == "bwd_filter"

    args = bd.parse_args(["--json", str(tmp_path / "r.json"), "--limits", "128MiB", "512MiB",
                          "--iters", "4", "--policies", "powerOfTwo"])
    assert args.policy_list == ["undivided", "powerOfTwo"] and args.repeats == 1
    layer, same = db.unique_layers(layers)[0]
    recs = bd.measure_kernel(core, bench, layer, same, "fwd", args.limit_bytes,
                             args.policy_list, args, lambda m: None)
    assert core.calls[-1].sizes == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    r = {(x["limit"], x["policy"]): x for x in recs}
    # 128 MiB: undivided runs algo 0 (256 ms); powerOfTwo 2 x 128 on algo 1 (2 x 32 ms)
    assert r[128 * MIB, "undivided"]["plan"] == "256x1:algo0"
    assert r[128 * MIB, "powerOfTwo"]["chunks"][0]["count"] == 2
    assert r[128 * MIB, "powerOfTwo"]["chunks"][0]["batch"] == 128
    assert r[128 * MIB, "powerOfTwo"]["workspace"] == 128 * MIB
    assert r[128 * MIB, "powerOfTwo"]["measured_ms"] == pytest.approx(64 * 1.1)
    assert r[512 * MIB, "undivided"]["plan"] == "256x1:algo1"
    assert isinstance(r[128 * MIB, "undivided"]["chunks"][0]["algo_name"], str)

    doc = db.new_document({"command": "x", "device": {"gpu": "fake"}, "iters": 4})
    doc["kernels"] += recs
    doc["complete"] = True
    text = bd.write(doc, args, args.policy_list)
    assert json.loads((tmp_path / "r.json").read_text())["kernels"] == recs
    assert (tmp_path / "r.txt").read_text().strip() == text
    assert "4.00x" in text  # 256 ms / 64 ms measured at 128 MiB
    rows = db.summary(doc)
    assert [(x["limit"], round(x["max"], 2)) for x in rows] == [(128 * MIB, 4.0), (512 * MIB, 1.0)]


def test_runner_without_gpu_says_so(tmp_path, fake_core, capsys):
    bd = _runner()
    fake_core.gpus = []                     # a core that sees no device
    assert bd.main(["--json", str(tmp_path / "r.json"), "--layers", "db_30"]) == 2
    assert "bench_deepbench: no CUDA device is visible" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists() and not fake_core.calls


def test_runner_shares_buffers_across_ops(tmp_path, monkeypatch, core):
    bd = _runner()
    made = []
    real = bd.make_buffers

    def counting(core, kern, n):
        made.append(kern.name)
        return real(core, kern, n)
    monkeypatch.setattr(bd, "make_buffers", counting)
    out = tmp_path / "r.json"
    assert bd.main(["--json", str(out), "--layers", "db_22", "db_30", "--limits", "128MiB",
                    "--iters", "2"]) == 0
    doc = json.loads(out.read_text())
    assert doc["complete"] and made == ["db_22", "db_30"]
    assert {(r["layer"], r["op"]) for r in doc["kernels"]} == {
        (l, op) for l in ("db_22", "db_30") for op in ("fwd", "bwd_data", "bwd_filter")}
    assert next(r for r in doc["kernels"] if r["layer"] == "db_22")["same_as"] == ["db_22"]
    # --max-seconds 0: stops before the first kernel, writes an incomplete document
    assert bd.main(["--json", str(out), "--layers", "db_30", "--max-seconds", "0"]) == 0
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["kernels"] == []
