"""Deterministic planning (Note [Deterministic plans] in ucudnn/plan/dp.py): the DP, the ILP and
the shared arena with settings ``deterministic`` against brute-force twins that enumerate the
plans of the choices marked deterministic."""
import itertools
import random

import pytest

from planner_brute import brute_best, brute_front, caffe_passes, random_bench, random_network
from ucudnn.plan.dp import (DIVIDE_MARGIN, determinism_problem, deterministic_only,
                            plan_kernel)
from ucudnn.plan.layers import LayerSpec
from ucudnn.plan.network import ALIGN, plan_network
from ucudnn.plan.settings import PlanSettings, candidate_sizes
from ucudnn.plan.table import AlgoPerf, TableError, format_table, parse_table, rows_from_kernel
from ucudnn.vocab import UNLIMITED, PlanError


def _choices(bench):
    """{(batch, algo, math, engine): deterministic} of a table."""
    return {(b, p.algo, p.math, p.engine): p.deterministic for b, perfs in bench.items()
            for p in perfs}


def _all_deterministic(plan, bench) -> bool:
    known = _choices(bench)
    return all(known[c.batch, c.algo, c.math, c.engine] is True for c in plan.chunks)


def _instances(layers):
    return [(l, op, i) for l in layers for op in l.ops for i in range(l.count)]


@pytest.mark.parametrize("seed", range(20))
def test_dp_plans_deterministic_choices_as_brute_force_does(seed):
    rng = random.Random(7000 + seed)
    n = rng.randint(1, 10)
    bench = random_bench(rng, n, zero_ws=0.6, deterministic=0.6)
    policy = rng.choice(["all", "powerOfTwo"])
    sizes = candidate_sizes(policy, n)
    only = deterministic_only(bench)
    assert sorted(only) == sorted(bench)            # every size stays a key
    max_ws = max(p.ws_bytes for perfs in bench.values() for p in perfs)
    for limit in sorted({0, 3, max_ws // 2, max_ws, UNLIMITED}):
        expected = brute_best(bench, n, sizes, limit, deterministic=True)
        if expected == float("inf"):
            with pytest.raises(PlanError):
                plan_kernel(only, n, policy, limit, margin=1)
            continue
        plan = plan_kernel(only, n, policy, limit, margin=1)
        assert plan.time_ms == pytest.approx(expected, rel=1e-12)
        assert _all_deterministic(plan, bench)
        # the network planner's DP: the same choices, the margin of Note [Dividing must beat
        # the noise] against the fastest deterministic undivided plan
        layer = LayerSpec("L", n, 3, 8, 8, 4, 3, 3, pad=1, bwd_data=False)
        net = plan_network([layer], {("L", op): bench for op in layer.ops},
                           PlanSettings(policy=policy, limit=limit, deterministic=True))
        whole = brute_best(bench, n, [n], limit, deterministic=True)
        for k in net.kernels:
            assert _all_deterministic(k.plan, bench)
            want = whole if expected * DIVIDE_MARGIN > whole else expected
            assert k.plan.time_ms == pytest.approx(want, rel=1e-12)
            if k.baseline is not None:
                assert k.baseline.time_ms == pytest.approx(whole, rel=1e-12)


def test_unknown_determinism_is_never_planned():
    """A choice of unknown determinism (measured before it was recorded) is left out like a
    non-deterministic one; without the flag the fastest is planned."""
    bench = {4: [AlgoPerf(0, 1.0, 0), AlgoPerf(1, 2.0, 0, deterministic=False),
                 AlgoPerf(2, 3.0, 0, deterministic=True)]}
    assert plan_kernel(bench, 4, "undivided").chunks[0].algo == 0
    assert plan_kernel(deterministic_only(bench), 4, "undivided").chunks[0].algo == 2


def _ilp_brute(layers, benches, budget):
    """Least total time of one plan per kernel instance from its deterministic brute-force
    front, each group call paying time and workspace, within ``budget``."""
    keys = _instances(layers)
    fronts = [brute_front(benches[l.name, op], l.n, candidate_sizes("powerOfTwo", l.n),
                          deterministic=True) for l, op, _ in keys]
    best = float("inf")
    for combo in itertools.product(*fronts):
        ws = sum(l.groups * w for (l, _, _), (_, w) in zip(keys, combo))
        if ws <= budget:
            best = min(best, sum(l.groups * t for (l, _, _), (t, _) in zip(keys, combo)))
    return best


def _shared_brute(layers, benches, budget):
    """The shared arena's time: each pass of each layer chosen over every combination of
    deterministic plans within the budget less 256 B per call the pass runs at once."""
    total = 0.0
    for l in layers:
        for pass_ in caffe_passes(l.groups):
            ops = [op for op in pass_ if op in l.ops]
            within = max(0, budget - ALIGN * len(ops) * l.groups)
            fronts = [brute_front(benches[l.name, op], l.n, candidate_sizes("powerOfTwo", l.n),
                                  deterministic=True) for op in ops]
            best = min((sum(l.groups * t for t, _ in combo) for combo in
                        itertools.product(*fronts)
                        if sum(l.groups * w for _, w in combo) <= within), default=None)
            if best is None:
                return float("inf")
            total += l.count * best
    return total


def _network(seed):
    """A small random network whose every kernel has a deterministic plan, and a budget."""
    rng = random.Random(9000 + seed)
    while True:
        layers, benches = random_network(rng, rng.randint(1, 2), deterministic=0.6)
        if all(brute_front(benches[l.name, op], l.n, candidate_sizes("powerOfTwo", l.n),
                           deterministic=True) for l in layers for op in l.ops):
            return layers, benches, rng


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("optimizer", ["ilp", "shared"])
def test_netwide_optimizers_plan_deterministic_choices_as_brute_force_does(seed, optimizer):
    layers, benches, rng = _network(seed)
    brute = _ilp_brute if optimizer == "ilp" else _shared_brute
    calls = sum(l.calls for l in layers)
    slack = ALIGN * calls if optimizer == "shared" else 0
    for budget in (slack, slack + 10, slack + 40, slack + 300):
        settings = PlanSettings(optimizer=optimizer, budget=budget, deterministic=True)
        expected = brute(layers, benches, budget)
        if expected == float("inf"):
            with pytest.raises(PlanError):
                plan_network(layers, benches, settings)
            continue
        net = plan_network(layers, benches, settings)
        assert net.time_ms == pytest.approx(expected, abs=1e-9)
        for k in net.kernels:
            assert _all_deterministic(k.plan, benches[k.layer, k.op])
        free = plan_network(layers, benches, settings.replace(deterministic=False))
        assert free.time_ms <= net.time_ms + 1e-9


def test_without_the_flag_the_random_networks_do_plan_non_deterministic_choices():
    """The tests above are not vacuous: the same networks, planned without the flag, take a
    choice that is not known deterministic."""
    taken = 0
    for seed in range(8):
        layers, benches, _ = _network(seed)
        net = plan_network(layers, benches, PlanSettings(optimizer="ilp", budget=1 << 20))
        taken += sum(not _all_deterministic(k.plan, benches[k.layer, k.op])
                     for k in net.kernels)
    assert taken > 0


@pytest.mark.parametrize("optimizer", ["dp", "ilp", "shared"])
def test_a_kernel_without_a_deterministic_choice_names_the_layer(optimizer):
    layer = LayerSpec("conv2", 4, 3, 8, 8, 4, 3, 3, pad=1, bwd_data=False)
    good = {4: [AlgoPerf(0, 1.0, 0, deterministic=True)]}
    bad = {4: [AlgoPerf(0, 1.0, 0, deterministic=False), AlgoPerf(1, 2.0, 0),
               AlgoPerf(2, 3.0, 0)]}
    settings = PlanSettings(optimizer=optimizer, policy="undivided", deterministic=True)
    with pytest.raises(PlanError) as e:
        plan_network([layer], {("conv2", "fwd"): good, ("conv2", "bwd_filter"): bad}, settings)
    msg = str(e.value)
    assert msg.startswith("layer 'conv2' op bwd_filter (N=4 C=3 8x8 K=4 3x3")
    assert "1 of its 3 choices are non-deterministic, 2 of unknown determinism" in msg
    assert determinism_problem(good) is None
    # without the flag the same kernels plan
    plan_network([layer], {("conv2", "fwd"): good, ("conv2", "bwd_filter"): bad},
                 settings.replace(deterministic=False))


def test_the_flag_is_per_layer():
    """A layer without the flag keeps its fastest choice beside a deterministic one."""
    a = LayerSpec("a", 4, 3, 8, 8, 4, 3, 3, bwd_data=False)
    b = LayerSpec("b", 4, 3, 8, 8, 4, 3, 3, bwd_data=False)
    bench = {4: [AlgoPerf(0, 1.0, 0, deterministic=False),
                 AlgoPerf(1, 2.0, 0, deterministic=True)]}
    benches = {(l, op): bench for l in "ab" for op in ("fwd", "bwd_filter")}
    s = PlanSettings(policy="undivided")
    net = plan_network([a, b], benches, {"a": s, "b": s.replace(deterministic=True)})
    assert {(k.layer, k.plan.chunks[0].algo) for k in net.kernels} == {("a", 0), ("b", 1)}


def test_settings_take_the_flag():
    assert PlanSettings().deterministic is False
    assert PlanSettings(deterministic=1).deterministic is True


def test_table_round_trip_keeps_determinism():
    """A table's ``deterministic`` column: 1, 0 or empty (unknown), written only where some
    choice's determinism is known; a table without it reads as unknown."""
    bench = {1: [AlgoPerf(0, 1.0, 0, deterministic=True), AlgoPerf(1, 0.5, 8, deterministic=False),
                 AlgoPerf(-1, 0.4, 16, 0, "eng3", None)]}
    text = format_table(rows_from_kernel("c", "fwd", bench))
    assert text.splitlines()[0].endswith(",engine,deterministic")
    assert [r.perf for r in parse_table(text)] == bench[1]
    old = format_table(rows_from_kernel("c", "fwd", {1: [AlgoPerf(0, 1.0, 0)]}))
    assert "deterministic" not in old
    assert parse_table(old)[0].deterministic is None
    lines = text.splitlines()
    lines[1] = lines[1][:-1] + "yes"
    with pytest.raises(TableError, match=r"<table>:2: field 'deterministic': must be 1, 0 or "
                                         r"empty \(not known\), got 'yes'"):
        parse_table("\n".join(lines))
