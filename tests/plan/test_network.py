"""Layer lists and whole-network plans."""
from pathlib import Path

import pytest


from ucudnn.plan.dp import PlanError
from ucudnn.plan.network import LayerError, LayerSpec, plan_network, read_layers, write_layers
from ucudnn.plan.table import AlgoPerf, group_by_kernel, read_table

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
        # the shared list gives one group's channels; ours the layer's totals with groups
        strip = lambda ls: [(l.name, l.n, l.c // l.groups, l.h, l.w, l.k // l.groups,  # noqa
                             l.r, l.s, l.pad, l.stride) for l in ls]
        assert strip(shared) == strip(ours)
        assert all(l.count == 1 and l.groups == 1 and l.bwd_data for l in shared)


def test_shipped_layer_counts():
    alex = {l.name: l for l in read_layers(SHIPPED / "alexnet_layers.csv")}
    assert {n: (l.c, l.k, l.groups, l.count) for n, l in alex.items()} == {
        "conv1": (3, 96, 1, 1), "conv2": (96, 256, 2, 1), "conv3": (256, 384, 1, 1),
        "conv4": (384, 384, 2, 1), "conv5": (384, 256, 2, 1)}
    res = {l.name: l for l in read_layers(SHIPPED / "resnet18_layers.csv")}
    assert sum(l.count for l in res.values()) == 20       # 17 3x3/7x7 + 3 projections
    assert all(l.groups == 1 for l in res.values())
    for layers in (alex, res):
        assert [n for n, l in layers.items() if not l.bwd_data] == ["conv1"]


def test_grouped_layer_is_the_kernel_caffe_runs():
    """caffe_patch/0002 (UcudnnConv::Create): C/g, K/g channels, cuDNN groups 1, strides into
    the whole blobs: x (C*H*W, H*W, W, 1), y (K*OH*OW, OH*OW, OW, 1)."""
    from ucudnn.plan.conv import ConvShape
    conv2 = LayerSpec("conv2", 256, 96, 27, 27, 256, 5, 5, pad=2, groups=2)
    s = ConvShape.from_layer(conv2)
    assert (s.c, s.k, s.groups, s.h, s.w, s.out_h, s.out_w) == (48, 128, 1, 27, 27, 27, 27)
    assert s.x_strides == (96 * 27 * 27, 27 * 27, 27, 1)
    assert s.y_strides == (256 * 27 * 27, 27 * 27, 27, 1)
    # what Caffe passes for a group-1 layer (explicit packed strides) is the packed key
    conv3 = LayerSpec("conv3", 256, 256, 13, 13, 384, 3, 3, pad=1)
    caffe = ConvShape(256, 13, 13, 384, 3, 3, 1, 1, x_strides=(256 * 169, 169, 13, 1),
                      y_strides=(384 * 169, 169, 13, 1))
    assert ConvShape.from_layer(conv3).key() == caffe.key()
    assert ConvShape.from_layer(conv3).x_strides is None
    # a packed half-size layer is another kernel than the strided group
    half = LayerSpec("half", 256, 48, 27, 27, 128, 5, 5, pad=2)
    assert ConvShape.from_layer(half).key() != s.key()
    with pytest.raises(LayerError, match="layer 'g': field 'groups': 4 does not divide C=6"):
        LayerSpec("g", 1, 6, 8, 8, 8, 3, 3, groups=4)


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
    ("a,8,3,9,9,4,3,3,1,1,1,2,1,1", r"l.csv:2: layer 'a': field 'groups': 2 does not divide"),
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


def _grouped():
    """Layer g: 2 groups (one plan, two calls); layer r: two identical layers (two plans)."""
    layers = [LayerSpec("g", 4, 8, 8, 8, 8, 3, 3, 1, groups=2, bwd_data=False),
              LayerSpec("r", 4, 4, 8, 8, 4, 3, 3, 1, count=2, bwd_data=False)]
    fast = lambda b: [AlgoPerf(0, 1.0 * b, 0), AlgoPerf(1, 0.25 * b, 10 * b)]   # noqa: E731
    benches = {(l.name, op): {b: fast(b) for b in (1, 2, 4)} for l in layers for op in l.ops}
    return layers, benches


def test_groups_run_one_plan_per_call_and_count_in_totals():
    layers, benches = _grouped()
    dp = plan_network(layers, benches, limit=20)
    assert [(k.name, k.groups) for k in dp.kernels] == [
        ("g/fwd", 2), ("g/bwd_filter", 2), ("r/fwd", 1), ("r/fwd#1", 1),
        ("r/bwd_filter", 1), ("r/bwd_filter#1", 1)]
    # the limit applies per group call: each call of g takes 20 B
    assert all(k.plan.ws_bytes == 20 and k.plan.micro_batches == [2, 2] for k in dp.kernels)
    assert dp.n_calls == 8
    assert dp.time_ms == pytest.approx(8 * 1.0) and dp.ws_bytes == 8 * 20
    assert dp.baseline_time_ms == pytest.approx(8 * 4.0)
    # ILP: default budget = limit x group calls; the baseline at the same total memory
    ilp = plan_network(layers, benches, limit=20, optimizer="ilp")
    assert ilp.budget == 8 * 20 and ilp.baseline_limit == 20
    assert ilp.ilp.weights[("g", "fwd", 0)] == 2 and ilp.ilp.weights[("r", "fwd", 1)] == 1
    assert ilp.ws_bytes <= ilp.budget and ilp.time_ms == pytest.approx(dp.time_ms)


def test_ilp_weighs_a_grouped_kernel_by_its_groups():
    """g runs twice per pass with one plan: making it faster costs twice the workspace."""
    layers = [LayerSpec("g", 4, 8, 8, 8, 8, 3, 3, 1, groups=2, bwd_data=False),
              LayerSpec("r", 4, 4, 8, 8, 4, 3, 3, 1, bwd_data=False)]
    # a per-call overhead: undivided 1.5 ms / 40 B, 2x2 2.0 ms / 20 B, 4x1 3.0 ms / 10 B
    perf = lambda b: [AlgoPerf(0, 1.0 * b, 0), AlgoPerf(1, 0.25 * b + 0.5, 10 * b)]  # noqa
    benches = {(l.name, "fwd"): {b: perf(b) for b in (1, 2, 4)} for l in layers}
    benches.update({(l.name, "bwd_filter"): {b: [AlgoPerf(0, 0.0, 0)] for b in (1, 2, 4)}
                    for l in layers})
    plan = plan_network(layers, benches, budget=80, optimizer="ilp")
    ws = {k.layer: k.plan.ws_bytes for k in plan.kernels if k.op == "fwd"}
    # g at 20 B per call (40 B) + r undivided (40 B): 2 x 2.0 + 1.5 ms; g undivided would
    # need 80 B for itself alone
    assert ws == {"g": 20, "r": 40}
    assert plan.ws_bytes == 80 and plan.time_ms == pytest.approx(5.5)
    assert plan.ilp.total_time_ms == pytest.approx(plan.time_ms)


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
        assert dp.n_calls == sum(l.count * l.groups * len(l.ops) for l in layers)
        assert all(k.plan.ws_bytes <= 64 * MiB for k in dp.kernels)
        assert all(k.plan.time_ms <= k.baseline.time_ms + 1e-12 for k in dp.kernels)
        ilp = plan_network(layers, benches, policy="powerOfTwo", limit=64 * MiB,
                           optimizer="ilp")
        assert ilp.time_ms <= dp.time_ms * (1 + 1e-9)
        assert ilp.ws_bytes <= 64 * MiB * dp.n_calls == ilp.budget
        # 'all' at sizes the table lacks: non-strict skips them with a note
        loose = plan_network(layers, benches, policy="all", limit=64 * MiB, strict=False)
        assert loose.notes and loose.time_ms == pytest.approx(dp.time_ms)
