"""Layer lists and whole-network plans."""
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    # pulp 3.0 imports its own test modules, which pytest then rewrites; their invalid escape
    # sequences warn, and filterwarnings=error would turn that into a SyntaxError
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.simplefilter("ignore", SyntaxWarning)
    import pulp  # noqa: F401

from ucudnn.plan.dp import PlanError  # noqa: E402
from ucudnn.plan.network import LayerError, LayerSpec, plan_network, read_layers, write_layers  # noqa: E402
from ucudnn.plan.table import AlgoPerf, group_by_kernel, read_table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "ucudnn" / "data" / "h200"
SHARED = REPO.parent / "shared" / "data" / "h200-cudnn9.14"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data not found at {SHARED}")
MiB = 1 << 20


@needs_shared
def test_read_layers_both_formats_agree():
    for net in ("alexnet", "resnet18"):
        shared = read_layers(SHARED / f"layers_{net}.csv")          # '# name,...' comment header
        ours = read_layers(SHIPPED / f"{net}_layers.csv")           # plain header with counts
        strip = lambda ls: [(l.name, l.n, l.c, l.h, l.w, l.k, l.r, l.s, l.pad, l.stride)  # noqa
                            for l in ls]
        assert strip(shared) == strip(ours)
        assert all(l.count == 1 and l.bwd_data for l in shared)


def test_shipped_layer_counts():
    alex = {l.name: l for l in read_layers(SHIPPED / "alexnet_layers.csv")}
    assert {n: l.count for n, l in alex.items()} == {"conv1": 1, "conv2": 2, "conv3": 1,
                                                     "conv4": 2, "conv5": 2}
    res = {l.name: l for l in read_layers(SHIPPED / "resnet18_layers.csv")}
    assert sum(l.count for l in res.values()) == 20       # 17 3x3/7x7 + 3 projections
    for layers in (alex, res):
        assert [n for n, l in layers.items() if not l.bwd_data] == ["conv1"]


def test_write_read_round_trip(tmp_path):
    layers = [LayerSpec("a", 8, 3, 9, 9, 4, 3, 3, 1, 2, 1, 1, 3, False),
              LayerSpec("b", 8, 4, 5, 5, 4, 1, 1)]
    write_layers(tmp_path / "l.csv", layers)
    assert read_layers(tmp_path / "l.csv") == layers


@pytest.mark.parametrize("body, match", [
    ("a,8,3,9,9,4,3,3,1,1\na,8,3,9,9,4,3,3,1,1", r"duplicate layer name\(s\) \['a'\]"),
    ("a,8,x,9,9,4,3,3,1,1", r"l.csv:2: layer 'a': field 'C': cannot parse 'x'"),
    ("a,8,3,9,9,4,3,3,1", r"l.csv:2: layer 'a': field 'stride' is missing"),
    ("a,8,3,9,9,4,3,3,1,1,1,1,1,2", r"l.csv:2: layer 'a': field 'bwd_data' must be 0 or 1"),
    ("a,8,3,9,9,4,3,3,1,1,1,1,0,1", r"l.csv:2: layer 'a': field 'count' must be a positive"),
    ("a,8,3,9,9,4,3,3,-1,1", r"l.csv:2: layer 'a': field 'pad' must be >= 0"),
    ("a,8,3,2,2,4,7,7,0,1", r"l.csv:2: layer 'a': filter larger than padded input"),
    ("a,8,3,9,9,4,3,3,1,1,1,1,1,1,9", r"l.csv:2: 15 fields, expected at most 14"),
    ("", r"l.csv: the layer list is empty"),
])
def test_layer_errors_name_file_line_field(tmp_path, body, match):
    p = tmp_path / "l.csv"
    p.write_text("name,N,C,H,W,K,R,S,pad,stride,dilation,groups,count,bwd_data\n" + body + "\n")
    with pytest.raises(LayerError, match=match):
        read_layers(p)


def _tiny():
    layers = [LayerSpec("a", 4, 3, 8, 8, 4, 3, 3, 1, count=2, bwd_data=False),
              LayerSpec("b", 4, 4, 8, 8, 4, 3, 3, 1)]
    fast = lambda b: [AlgoPerf(0, 1.0 * b, 0), AlgoPerf(1, 0.25 * b, 10 * b)]   # noqa: E731
    benches = {(l.name, op): {b: fast(b) for b in (1, 2, 4)} for l in layers for op in l.ops}
    return layers, benches


def test_plan_network_instances_and_speedup():
    layers, benches = _tiny()
    plan = plan_network(layers, benches, limit=20)
    # a: fwd + bwd_filter, twice; b: three ops once
    assert [k.name for k in plan.kernels] == ["a/fwd", "a/fwd#1", "a/bwd_filter",
                                              "a/bwd_filter#1", "b/fwd", "b/bwd_data",
                                              "b/bwd_filter"]
    assert all(k.plan.micro_batches == [2, 2] for k in plan.kernels)
    assert plan.time_ms == pytest.approx(7 * 1.0)
    assert plan.baseline_time_ms == pytest.approx(7 * 4.0)
    assert plan.speedup == pytest.approx(4.0)
    assert plan.ws_bytes == 7 * 20
    und = plan_network(layers, benches, policy="undivided", limit=20)
    assert und.speedup == 1.0


def test_plan_network_errors():
    layers, benches = _tiny()
    with pytest.raises(PlanError, match="layer 'b': no benchmark for op 'bwd_data'"):
        plan_network(layers, {k: v for k, v in benches.items() if k != ("b", "bwd_data")},
                     limit=1)
    with pytest.raises(PlanError, match="unknown optimizer"):
        plan_network(layers, benches, limit=1, optimizer="greedy")
    with pytest.raises(PlanError, match="unknown policy"):
        plan_network(layers, benches, limit=1, policy="fast")
    with pytest.raises(PlanError, match="needs a per-layer limit"):
        plan_network(layers, benches)
    with pytest.raises(PlanError, match="workspace_limit: must not be negative"):
        plan_network(layers, benches, limit=-1)
    # (the undivided baseline at budget / kernels fails first: "no plan ... within 0B")
    with pytest.raises(PlanError, match="no plan|below the smallest total workspace"):
        plan_network(layers, {k: {b: [p for p in v[b] if p.algo == 1] for b in v}
                              for k, v in benches.items()}, budget=5, optimizer="ilp")
    sparse = {k: {4: v[4]} for k, v in benches.items()}
    with pytest.raises(PlanError, match="no measurements for micro-batch size"):
        plan_network(layers, sparse, limit=100)
    loose = plan_network(layers, sparse, limit=100, strict=False)
    assert loose.notes and "skipped" in loose.notes[0]


@needs_shared
def test_h200_alexnet_and_resnet18():
    for net, low in (("alexnet", 1.5), ("resnet18", 1.5)):
        layers = read_layers(SHIPPED / f"{net}_layers.csv")
        benches = group_by_kernel(read_table(SHARED / f"{net}_default.csv"))
        dp = plan_network(layers, benches, policy="powerOfTwo", limit=64 * MiB)
        assert dp.speedup > low, (net, dp.speedup)
        assert len(dp.kernels) == sum(l.count * len(l.ops) for l in layers)
        assert all(k.plan.ws_bytes <= 64 * MiB for k in dp.kernels)
        assert all(k.plan.time_ms <= k.baseline.time_ms + 1e-12 for k in dp.kernels)
        ilp = plan_network(layers, benches, policy="powerOfTwo", limit=64 * MiB,
                           optimizer="ilp")
        assert ilp.time_ms <= dp.time_ms * (1 + 1e-9)
        assert ilp.ws_bytes <= 64 * MiB * len(dp.kernels)
        # 'all' at sizes the table lacks: non-strict skips them with a note
        loose = plan_network(layers, benches, policy="all", limit=64 * MiB, strict=False)
        assert loose.notes and loose.time_ms == pytest.approx(dp.time_ms)
