"""Whole-network plans (ucudnn.plan.network.plan_network, Note [One network planner]): one
settings record or one per layer, DP / ILP / shared groups in one net, the cap."""
import random

import pytest

import densenet_sized
from planner_brute import random_network
from repo_paths import SHARED, SHIPPED, needs_shared
from ucudnn.plan.layers import LayerSpec, read_layers
from ucudnn.plan.network import ALIGN, align, plan_network
from ucudnn.plan.settings import PlanSettings
from ucudnn.plan.table import AlgoPerf, group_by_kernel, read_table
from ucudnn.vocab import InputError, PlanError

MiB = 1 << 20


def _fast_benches(layers):
    """Every kernel at sizes 1, 2, 4: algorithm 1 four times as fast as the zero-workspace
    algorithm 0, 10 B of workspace per sample."""
    fast = lambda b: [AlgoPerf(0, 1.0 * b, 0), AlgoPerf(1, 0.25 * b, 10 * b)]   # noqa: E731
    return {(l.name, op): {b: fast(b) for b in (1, 2, 4)} for l in layers for op in l.ops}


def _tiny():
    layers = [LayerSpec("a", 4, 3, 8, 8, 4, 3, 3, 1, count=2, bwd_data=False),
              LayerSpec("b", 4, 4, 8, 8, 4, 3, 3, 1)]
    return layers, _fast_benches(layers)


def test_plan_network_instances_and_speedup():
    layers, benches = _tiny()
    plan = plan_network(layers, benches, PlanSettings(limit=20))
    # a: fwd + bwd_filter, twice; b: three ops once
    assert [k.name for k in plan.kernels] == ["a/fwd", "a/fwd#1", "a/bwd_filter",
                                              "a/bwd_filter#1", "b/fwd", "b/bwd_data",
                                              "b/bwd_filter"]
    assert all(k.plan.micro_batches == [2, 2] for k in plan.kernels)
    assert plan.time_ms == pytest.approx(7 * 1.0)
    assert plan.baseline_time_ms == pytest.approx(7 * 4.0)
    assert plan.speedup == pytest.approx(4.0)
    assert plan.ws_bytes == 7 * 20
    assert (plan.policy, plan.optimizer, plan.limit, plan.baseline_limit) == (
        "powerOfTwo", "dp", 20, 20)
    assert all((k.optimizer, k.limit) == ("dp", 20) for k in plan.kernels)
    # every kernel owns an aligned slot of its own: 7 x 256 B
    assert plan.workspace_bytes == plan.held_bytes == 7 * ALIGN and plan.arena_bytes is None
    und = plan_network(layers, benches, PlanSettings(policy="undivided", limit=20))
    assert und.speedup == 1.0


def _grouped():
    """Layer g: 2 groups (one plan, two calls); layer r: two identical layers (two plans)."""
    layers = [LayerSpec("g", 4, 8, 8, 8, 8, 3, 3, 1, groups=2, bwd_data=False),
              LayerSpec("r", 4, 4, 8, 8, 4, 3, 3, 1, count=2, bwd_data=False)]
    return layers, _fast_benches(layers)


def test_groups_run_one_plan_per_call_and_count_in_totals():
    layers, benches = _grouped()
    dp = plan_network(layers, benches, PlanSettings(limit=20))
    assert [(k.name, k.groups) for k in dp.kernels] == [
        ("g/fwd", 2), ("g/bwd_filter", 2), ("r/fwd", 1), ("r/fwd#1", 1),
        ("r/bwd_filter", 1), ("r/bwd_filter#1", 1)]
    # the limit applies per group call: each call of g takes 20 B
    assert all(k.plan.ws_bytes == 20 and k.plan.micro_batches == [2, 2] for k in dp.kernels)
    assert dp.n_calls == 8 == sum(l.calls for l in layers)
    assert dp.time_ms == pytest.approx(8 * 1.0) and dp.ws_bytes == 8 * 20
    assert dp.baseline_time_ms == pytest.approx(8 * 4.0)
    # ILP: default budget = limit x group calls; the baseline at the same total memory
    ilp = plan_network(layers, benches, PlanSettings(limit=20, optimizer="ilp"))
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
    plan = plan_network(layers, benches, PlanSettings(budget=80, optimizer="ilp"))
    ws = {k.layer: k.plan.ws_bytes for k in plan.kernels if k.op == "fwd"}
    # g at 20 B per call (40 B) + r undivided (40 B): 2 x 2.0 + 1.5 ms; g undivided would
    # need 80 B for itself alone
    assert ws == {"g": 20, "r": 40}
    assert plan.ws_bytes == 80 and plan.time_ms == pytest.approx(5.5)
    assert plan.ilp.total_time_ms == pytest.approx(plan.time_ms)
    # the kernel's limit is the workspace its chosen plan takes
    assert {k.layer: k.limit for k in plan.kernels if k.op == "fwd"} == ws


def test_budget_zero_is_zero_bytes():
    """Note [Workspace budget]: a budget that is set is that many bytes, 0 included (only
    zero-workspace plans); unset it is limit x calls."""
    layers, benches = _tiny()
    for optimizer in ("ilp", "shared"):
        zero = plan_network(layers, benches, PlanSettings(optimizer=optimizer, budget=0,
                                                          limit=1000))
        assert zero.budget == 0 and zero.ws_bytes == 0
        assert all(c.algo == 0 for k in zero.kernels for c in k.plan.chunks)
        assert zero.time_ms == pytest.approx(7 * 4.0)
        unset = plan_network(layers, benches, PlanSettings(optimizer=optimizer, limit=1000))
        assert unset.budget == 1000 * 7 and unset.time_ms == pytest.approx(7 * 1.0)


def test_plan_network_errors():
    layers, benches = _tiny()
    with pytest.raises(PlanError, match="layer 'b': no benchmark for op 'bwd_data'"):
        plan_network(layers, {k: v for k, v in benches.items() if k != ("b", "bwd_data")},
                     PlanSettings(limit=1))
    # the settings are checked where they are made, naming the field
    with pytest.raises(InputError, match="optimizer: unknown optimizer 'greedy'"):
        PlanSettings(optimizer="greedy")
    with pytest.raises(InputError, match="policy: unknown policy 'fast'"):
        PlanSettings(policy="fast")
    with pytest.raises(InputError, match="limit: size must not be negative"):
        PlanSettings(limit=-1)
    with pytest.raises(PlanError, match="layer 'b': no settings given"):
        plan_network(layers, benches, {"a": PlanSettings()})
    with pytest.raises(PlanError, match="cap: must not be negative"):
        plan_network(layers, benches, PlanSettings(), cap=-1)
    # (the undivided baseline at budget / kernels fails first: "no plan ... within 0B")
    with pytest.raises(PlanError, match="no plan|below the smallest total workspace"):
        plan_network(layers, {k: {b: [p for p in v[b] if p.algo == 1] for b in v}
                              for k, v in benches.items()},
                     PlanSettings(budget=5, optimizer="ilp"))
    sparse = {k: {4: v[4]} for k, v in benches.items()}
    with pytest.raises(PlanError, match="no measurements for micro-batch size"):
        plan_network(layers, sparse, PlanSettings(limit=100))
    loose = plan_network(layers, sparse, PlanSettings(limit=100), strict=False)
    assert loose.notes and "skipped" in loose.notes[0]
    # strict per kernel: the callable says which kernels may skip sizes (no note then)
    per_kernel = plan_network(layers, sparse, PlanSettings(limit=100),
                              strict=lambda layer, op: False)
    assert not per_kernel.notes
    with pytest.raises(PlanError, match="layer 'b' op fwd: no measurements"):
        plan_network(layers, sparse, PlanSettings(limit=100), strict=lambda layer, op: layer == "b")
    # explicit sizes larger than the mini-batch are refused, naming the layer
    with pytest.raises(PlanError, match="layer 'a'.*micro_batch_size 8 is larger than the "
                                        r"mini-batch \(4\)"):
        plan_network(layers, benches, PlanSettings(sizes=(2, 8)))


def test_explicit_budgets_of_a_group_must_agree():
    layers, benches = _tiny()
    settings = {"a": PlanSettings(optimizer="ilp", budget=100),
                "b": PlanSettings(optimizer="ilp", budget=200)}
    with pytest.raises(PlanError, match="layer 'b': field 'total_workspace' 200 differs from "
                                        r"layer 'a''s 100 \(one ILP budget per net\)"):
        plan_network(layers, benches, settings)
    # a layer without a budget of its own takes the one its group sets
    settings["b"] = PlanSettings(optimizer="ilp")
    assert plan_network(layers, benches, settings).budget == 100


def _by_kernel(plan):
    return {(k.layer, k.op, k.instance): (k.plan, k.baseline, k.optimizer, k.limit)
            for k in plan.kernels}


def test_mixed_optimizers_plan_each_group_as_alone():
    """Note [One network planner]: layers group by their optimizer, and a net may mix them;
    each group is planned as it would be alone (a DP layer within its own limit, the ILP's
    layers dividing their budget, the shared layers one arena)."""
    layers = [LayerSpec("d", 8, 3, 8, 8, 4, 3, 3, 1, bwd_data=False),
              LayerSpec("i", 8, 4, 8, 8, 4, 3, 3, 1, groups=2),
              LayerSpec("i2", 8, 4, 8, 8, 4, 3, 3, 1, count=2),
              LayerSpec("s", 8, 4, 8, 8, 4, 3, 3, 1, groups=2)]
    rng = random.Random(5)
    from planner_brute import random_bench
    benches = {(l.name, op): random_bench(rng, 8, zero_ws=1.0) for l in layers for op in l.ops}
    settings = {"d": PlanSettings(limit=12), "i": PlanSettings(optimizer="ilp", limit=9),
                "i2": PlanSettings(optimizer="ilp", limit=9, policy="all"),
                "s": PlanSettings(optimizer="shared", budget=40)}
    mixed = plan_network(layers, benches, settings)
    alone = {}
    for names in (["d"], ["i", "i2"], ["s"]):
        group = [l for l in layers if l.name in names]
        alone.update(_by_kernel(plan_network(group, benches, {n: settings[n] for n in names})))
    assert _by_kernel(mixed) == alone
    assert [k.name for k in mixed.kernels] == [
        "d/fwd", "d/bwd_filter", "i/fwd", "i/bwd_data", "i/bwd_filter", "i2/fwd", "i2/fwd#1",
        "i2/bwd_data", "i2/bwd_data#1", "i2/bwd_filter", "i2/bwd_filter#1", "s/fwd",
        "s/bwd_data", "s/bwd_filter"]
    assert (mixed.optimizer, mixed.policy, mixed.limit, mixed.baseline_limit) == (
        "mixed", "per layer", None, None)
    assert mixed.ilp is not None and mixed.budget == 9 * (3 * 2 + 3 * 2)    # the ILP's
    ilp_ws = sum(k.ws_bytes for k in mixed.kernels if k.optimizer == "ilp")
    assert ilp_ws <= mixed.budget
    # owned: the DP's and the ILP's kernels; the arena: the shared layer's larger pass
    owned = [k for k in mixed.kernels if k.optimizer != "shared"]
    assert mixed.workspace_bytes == sum(align(k.plan.ws_bytes) * k.groups for k in owned)
    shared = [k for k in mixed.kernels if k.optimizer == "shared"]
    assert mixed.arena_bytes == max(
        align(shared[0].plan.ws_bytes) * 2,
        sum(align(k.plan.ws_bytes) * 2 for k in shared[1:])) <= 40
    assert mixed.held_bytes == mixed.workspace_bytes + mixed.arena_bytes
    assert mixed.baseline_time_ms == pytest.approx(sum(k.groups * k.baseline.time_ms
                                                       for k in mixed.kernels))


def test_a_baseline_that_does_not_fit_leaves_the_totals_unknown():
    """A kernel without an undivided plan within its limit (every algorithm needs workspace at
    the whole mini-batch) has baseline None, and so have the net's baseline and speedup."""
    layers = [LayerSpec("a", 4, 3, 8, 8, 4, 3, 3, 1, bwd_data=False)]
    benches = {("a", op): {1: [AlgoPerf(0, 1.0, 0)], 2: [AlgoPerf(0, 2.0, 0)],
                           4: [AlgoPerf(1, 1.0, 100)]} for op in layers[0].ops}
    plan = plan_network(layers, benches, PlanSettings(limit=50))
    assert all(k.baseline is None and k.plan.micro_batches == [2, 2] for k in plan.kernels)
    assert plan.baseline_time_ms is None and plan.speedup is None
    assert plan.time_ms == pytest.approx(2 * 4.0)


@pytest.mark.parametrize("seed", range(8))
def test_cap_keeps_the_whole_net_within_it(seed):
    """``cap`` (a host's allocation failed): owned workspace and arena together within the
    cap, whatever the optimizers; a cap above what the plan holds changes nothing."""
    rng = random.Random(900 + seed)
    layers, benches = random_network(rng, rng.randint(2, 4))
    opts = ("dp", "ilp", "shared")
    settings = {l.name: PlanSettings(optimizer=rng.choice(opts), limit=rng.choice([20, 60]))
                for l in layers}
    free = plan_network(layers, benches, settings)
    for cap in (0, 100, 1000, 5000, free.held_bytes):
        capped = plan_network(layers, benches, settings, cap=cap)
        assert capped.held_bytes <= cap, (cap, capped.held_bytes)
        assert capped.time_ms >= free.time_ms - 1e-9
    roomy = plan_network(layers, benches, settings, cap=10 * free.held_bytes + 10 ** 6)
    assert _by_kernel(roomy) == _by_kernel(free)


@needs_shared
def test_h200_alexnet_and_resnet18():
    for net, low in (("alexnet", 1.5), ("resnet18", 1.5)):
        layers = read_layers(SHIPPED / f"{net}_layers.csv")
        benches = group_by_kernel(read_table(SHARED / f"{net}_default.csv"))
        dp = plan_network(layers, benches, PlanSettings(limit=64 * MiB))
        assert dp.speedup > low, (net, dp.speedup)
        assert len(dp.kernels) == sum(l.count * len(l.ops) for l in layers)
        assert dp.n_calls == sum(l.count * l.groups * len(l.ops) for l in layers)
        assert all(k.plan.ws_bytes <= 64 * MiB for k in dp.kernels)
        assert all(k.plan.time_ms <= k.baseline.time_ms + 1e-12 for k in dp.kernels)
        ilp = plan_network(layers, benches, PlanSettings(limit=64 * MiB, optimizer="ilp"))
        assert ilp.time_ms <= dp.time_ms * (1 + 1e-9)
        assert ilp.ws_bytes <= 64 * MiB * dp.n_calls == ilp.budget
        # 'all' at sizes the table lacks: non-strict skips them with a note
        loose = plan_network(layers, benches, PlanSettings(policy="all", limit=64 * MiB),
                             strict=False)
        assert loose.notes and loose.time_ms == pytest.approx(dp.time_ms)


def test_an_ilp_past_its_time_limit_plans_and_says_so():
    """Note [ILP time limit] in ucudnn/plan/ilp.py: CBC's best plan so far, every kernel
    planned within the budget, and a note saying it is not proven optimal."""
    layers = densenet_sized.layers()
    benches = densenet_sized.benches(layers)
    settings = PlanSettings(policy="undivided", budget=densenet_sized.BUDGET, optimizer="ilp")
    lines = []
    plan = plan_network(layers, benches, settings, ilp_time_limit=1, progress=lines.append)
    assert plan.ilp.status == "TimeLimit" and not plan.ilp.proven
    assert plan.notes == [plan.ilp.note] and "not proven optimal" in plan.ilp.note
    assert lines[0].startswith("ILP: CBC chooses among ")
    assert len(plan.kernels) == 359 and plan.ws_bytes <= densenet_sized.BUDGET
    for k in plan.kernels:
        assert k.optimizer == "ilp" and k.plan == plan.ilp.choices[k.layer, k.op, k.instance]
