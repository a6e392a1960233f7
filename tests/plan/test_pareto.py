"""Pareto pruning ("desirable set") against brute force."""
import random

import pytest

from planner_brute import brute_front, random_bench
from ucudnn.plan.dp import desirable_set, pareto_front, plan_kernel
from ucudnn.plan.settings import candidate_sizes
from ucudnn.plan.table import AlgoPerf
from ucudnn.vocab import PlanError


def _dominates(a, b):
    return a[0] <= b[0] and a[1] <= b[1] and a != b


@pytest.mark.parametrize("seed", range(30))
def test_pareto_front_properties(seed):
    rng = random.Random(seed)
    pts = [(rng.randint(0, 12), rng.randint(0, 12)) for _ in range(rng.randint(0, 40))]
    front = pareto_front(pts, key=lambda p: p)
    assert all(p in pts for p in front)
    for p in front:                                   # no member is dominated
        assert not any(_dominates(q, p) for q in pts)
    for p in pts:                                     # every non-member is dominated or a duplicate
        if p not in front:
            assert any(_dominates(q, p) or q == p for q in front)
    assert len(set(front)) == len(front)              # of exact ties one is kept
    ws = [p[1] for p in front]
    ts = [p[0] for p in front]
    assert ws == sorted(ws) and len(set(ws)) == len(ws)      # ascending workspace
    assert ts == sorted(ts, reverse=True) and len(set(ts)) == len(ts)


def test_pareto_front_default_key_and_first_of_ties():
    a, b, c = AlgoPerf(0, 2.0, 0), AlgoPerf(1, 2.0, 0), AlgoPerf(2, 1.0, 8)
    assert pareto_front([a, b, c, AlgoPerf(3, 3.0, 8)]) == [a, c]
    assert pareto_front([]) == []


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("policy", ["undivided", "powerOfTwo", "all"])
def test_desirable_set_equals_brute_force_front(seed, policy):
    rng = random.Random(seed * 7 + len(policy))
    n = rng.randint(1, 10 if policy != "all" else 7)
    bench = random_bench(rng, n, int_times=True, zero_ws=0.7)
    sizes = candidate_sizes(policy, n)
    expected = brute_front(bench, n, sizes)
    front = desirable_set(bench, n, policy)
    got = [(p.time_ms, p.ws_bytes) for p in front]
    assert got == expected
    for p in front:
        assert sum(p.micro_batches) == n and set(p.micro_batches) <= set(sizes)
    # the front answers every per-layer limit: min over members within the limit = DP
    for limit in sorted({w for _, w in expected} | {w - 1 for _, w in expected} | {10**9}):
        within = [p.time_ms for p in front if p.ws_bytes <= limit]
        if within:
            assert min(within) == plan_kernel(bench, n, policy, limit, margin=1).time_ms
        else:
            with pytest.raises(PlanError):
                plan_kernel(bench, n, policy, limit)


@pytest.mark.parametrize("seed", range(10))
def test_desirable_set_float_times(seed):
    rng = random.Random(500 + seed)
    n = rng.randint(2, 12)
    bench = random_bench(rng, n)
    front = desirable_set(bench, n, "powerOfTwo")
    exp = brute_front(bench, n, candidate_sizes("powerOfTwo", n))
    assert [p.ws_bytes for p in front] == [w for _, w in exp]
    assert [p.time_ms for p in front] == pytest.approx([t for t, _ in exp], rel=1e-12)


def test_desirable_set_limit_and_errors():
    bench = {1: [AlgoPerf(0, 1.0, 0)], 2: [AlgoPerf(0, 2.5, 0), AlgoPerf(1, 1.0, 10)]}
    front = desirable_set(bench, 2, "powerOfTwo")
    assert [(p.time_ms, p.ws_bytes) for p in front] == [(2.0, 0), (1.0, 10)]
    assert [(p.time_ms, p.ws_bytes) for p in desirable_set(bench, 2, "powerOfTwo", limit=9)] \
        == [(2.0, 0)]
    with pytest.raises(PlanError, match="no plan"):
        desirable_set({2: [AlgoPerf(1, 1.0, 10)]}, 2, "undivided", limit=5)
    with pytest.raises(PlanError, match=r"\[4\]"):
        desirable_set(bench, 4, "powerOfTwo")
