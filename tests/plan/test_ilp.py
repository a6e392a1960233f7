"""Network-wide workspace division (ILP) against brute force and the per-layer DP."""
import itertools
import random

import pytest

from planner_brute import random_network as _random_network
from repo_paths import SHARED, SHIPPED, needs_shared
from ucudnn.plan.dp import Chunk, Plan, desirable_set
from ucudnn.plan.ilp import IlpError, solve_workspace_division
from ucudnn.plan.layers import read_layers
from ucudnn.plan.network import plan_network
from ucudnn.plan.settings import PlanSettings
from ucudnn.plan.table import group_by_kernel, read_table

MiB = 1 << 20


def _plan(t, ws, n=4):
    return Plan(n, (Chunk(n, 0, 0, float(t), int(ws)),))


def _random_fronts(rng, kernels):
    fronts = {}
    for k in range(kernels):
        pts = {(rng.randint(1, 50), rng.randint(0, 40)) for _ in range(rng.randint(1, 5))}
        fronts[f"k{k}"] = [_plan(t, w) for t, w in sorted(pts, key=lambda p: p[1])]
    return fronts


def _brute(fronts, budget):
    best = None
    for combo in itertools.product(*fronts.values()):
        if sum(p.ws_bytes for p in combo) <= budget:
            t = sum(p.time_ms for p in combo)
            best = t if best is None else min(best, t)
    return best


METHODS = pytest.mark.parametrize("method", ["cbc", "enumerate"])


@METHODS
@pytest.mark.parametrize("seed", range(12))
def test_ilp_equals_brute_force(seed, method):
    rng = random.Random(seed)
    fronts = _random_fronts(rng, rng.randint(1, 5))
    lo = sum(min(p.ws_bytes for p in f) for f in fronts.values())
    hi = sum(max(p.ws_bytes for p in f) for f in fronts.values())
    for budget in sorted({lo, (lo + hi) // 2, lo + rng.randint(0, max(0, hi - lo)), hi}):
        res = solve_workspace_division(fronts, budget, method=method)
        assert set(res.choices) == set(fronts)
        for k, p in res.choices.items():
            assert p in fronts[k]
        assert res.total_ws_bytes <= budget
        assert res.total_time_ms == pytest.approx(_brute(fronts, budget), abs=1e-9)
        assert res.status == "Optimal"


@METHODS
@pytest.mark.parametrize("seed", range(8))
def test_weighted_ilp_equals_brute_force(seed, method):
    """A kernel that runs in w instances (Caffe's groups) pays w times its time and workspace."""
    rng = random.Random(100 + seed)
    fronts = _random_fronts(rng, rng.randint(1, 4))
    weights = {k: rng.randint(1, 3) for k in fronts}
    keys = list(fronts)
    lo = sum(weights[k] * min(p.ws_bytes for p in fronts[k]) for k in keys)
    hi = sum(weights[k] * max(p.ws_bytes for p in fronts[k]) for k in keys)
    for budget in sorted({lo, (lo + hi) // 2, hi}):
        best = min(sum(weights[k] * p.time_ms for k, p in zip(keys, combo))
                   for combo in itertools.product(*fronts.values())
                   if sum(weights[k] * p.ws_bytes for k, p in zip(keys, combo)) <= budget)
        res = solve_workspace_division(fronts, budget, weights=weights, method=method)
        assert res.total_ws_bytes <= budget
        assert res.total_time_ms == pytest.approx(best, abs=1e-9)
    if lo:
        with pytest.raises(IlpError, match="below the smallest"):
            solve_workspace_division(fronts, lo - 1, weights=weights)
    with pytest.raises(IlpError, match="weight must be a positive integer"):
        solve_workspace_division(fronts, hi, weights={keys[0]: 0})


def test_auto_enumerates_small_problems_and_calls_cbc_for_large_ones(monkeypatch):
    from ucudnn.plan import ilp
    fronts = {"a": [_plan(5, 10), _plan(3, 20)], "b": [_plan(4, 7), _plan(1, 30)]}
    res = solve_workspace_division(fronts, 40)
    assert res.n_variables == 0 and res.total_time_ms == 6.0            # enumerated: 5 + 1
    monkeypatch.setattr(ilp, "ENUMERATE_MAX", 3)
    res = solve_workspace_division(fronts, 40)
    assert res.n_variables == 4 and res.total_time_ms == 6.0            # CBC's variables
    with pytest.raises(IlpError, match="method"):
        solve_workspace_division(fronts, 40, method="greedy")


def test_budget_below_the_smallest_plan():
    fronts = {"a": [_plan(5, 10), _plan(3, 20)], "b": [_plan(4, 7)]}
    with pytest.raises(IlpError, match=r"below the smallest total workspace.*\(17 B\)"):
        solve_workspace_division(fronts, 16)
    with pytest.raises(IlpError, match="must not be negative"):
        solve_workspace_division(fronts, -1)
    with pytest.raises(IlpError, match="empty desirable set"):
        solve_workspace_division({"a": []}, 100)
    res = solve_workspace_division(fronts, 17)
    assert res.total_time_ms == 9.0 and res.total_ws_bytes == 17


@pytest.mark.parametrize("seed", range(4))
def test_ilp_not_slower_than_dp_at_the_same_total_memory(seed):
    rng = random.Random(100 + seed)
    layers, benches = _random_network(rng, 3)
    for limit in (0, 8, 20, 60):
        dp = plan_network(layers, benches, PlanSettings(policy="powerOfTwo", limit=limit))
        ilp = plan_network(layers, benches, PlanSettings(policy="powerOfTwo", limit=limit,
                                                         optimizer="ilp"))
        assert ilp.budget == limit * dp.n_calls
        assert ilp.ws_bytes <= ilp.budget
        assert ilp.time_ms <= dp.time_ms + 1e-9
        assert len(ilp.kernels) == len(dp.kernels)


@needs_shared
@pytest.mark.parametrize("net", ["alexnet", "resnet18"])
def test_ilp_not_slower_than_dp_on_the_h200_tables(net):
    layers = read_layers(SHIPPED / f"{net}_layers.csv")
    benches = group_by_kernel(read_table(SHARED / f"{net}_default.csv"))
    for limit in (8 * MiB, 64 * MiB):
        dp = plan_network(layers, benches, PlanSettings(limit=limit))
        ilp = plan_network(layers, benches, PlanSettings(limit=limit, optimizer="ilp"))
        assert ilp.ws_bytes <= ilp.budget == limit * dp.n_calls
        assert ilp.time_ms <= dp.time_ms * (1 + 1e-9)
        assert ilp.baseline_time_ms == pytest.approx(dp.baseline_time_ms)
    # one kernel's front really trades time for memory
    front = desirable_set(benches["conv2" if net == "alexnet" else "l1_3x3", "fwd"], 256)
    assert len(front) > 2
