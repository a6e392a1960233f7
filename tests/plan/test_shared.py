"""The shared-arena optimizer (Note [Shared arena] in ucudnn/plan/network.py) against brute
force, the ILP and unlimited workspace."""
import itertools
import random

import pytest

from planner_brute import caffe_passes, random_network as _random_network
from repo_paths import SHIPPED
from ucudnn.plan.dp import desirable_set
from ucudnn.plan.layers import read_layers
from ucudnn.plan.network import ALIGN, plan_network
from ucudnn.plan.settings import PlanSettings
from ucudnn.plan.table import group_by_kernel, read_table
from ucudnn.vocab import PlanError

MiB = 1 << 20


def _pass_ops(l, pass_):
    return [op for op in pass_ if op in l.ops]


def _concurrent(layers):
    """The most group calls any pass runs at once."""
    return max(len(_pass_ops(l, p)) * l.groups for l in layers for p in caffe_passes(l.groups))


def _brute(layers, benches, budget):
    """(time, arena): every layer's passes chosen by trying every combination of plans within
    the pass's budget, the budget less 256 B per call the pass runs at once."""
    total, arena = 0.0, 0
    for l in layers:
        for pass_ in caffe_passes(l.groups):
            ops = _pass_ops(l, pass_)
            within = max(0, budget - ALIGN * len(ops) * l.groups)
            fronts = [desirable_set(benches[l.name, op], l.n, "powerOfTwo") for op in ops]
            best = min(((sum(l.groups * p.time_ms for p in combo),
                         sum(l.groups * p.ws_bytes for p in combo))
                        for combo in itertools.product(*fronts)
                        if sum(l.groups * p.ws_bytes for p in combo) <= within),
                       default=None)
            assert best is not None, "budget below the smallest plan"
            total += l.count * best[0]
            arena = max(arena, best[1])
    return total, arena


@pytest.mark.parametrize("seed", range(10))
def test_shared_equals_brute_force_and_is_no_slower_than_the_ilp(seed):
    """Exact against brute force at budgets where the passes' division matters; never slower
    than the ILP at the same budget less the arena's alignment (256 B per concurrent call:
    the ILP's choices for one pass then fit the pass's budget, Note [Shared arena]); never
    faster than unlimited workspace."""
    rng = random.Random(300 + seed)
    layers, benches = _random_network(rng, rng.randint(1, 4))
    slack = ALIGN * _concurrent(layers)
    # the fastest any plan is, whatever its workspace (the DP at an unlimited limit keeps an
    # undivided plan that a divided one beats by less than Note [Dividing must beat the
    # noise] asks)
    fastest = _brute(layers, benches, 1 << 40)[0]
    for extra in (0, 10, 40, 100, 300):
        budget = slack + extra
        shared = plan_network(layers, benches, PlanSettings(optimizer="shared", budget=budget))
        assert shared.budget == budget
        t, arena = _brute(layers, benches, budget)
        assert shared.time_ms == pytest.approx(t, abs=1e-9)
        assert shared.arena_bytes <= budget
        assert shared.held_bytes == shared.arena_bytes and shared.workspace_bytes == 0
        # the arena is the largest pass: each pass's kernels fit it at once
        for l in layers:
            for pass_ in caffe_passes(l.groups):
                used = sum(k.groups * k.plan.ws_bytes for k in shared.kernels
                           if k.layer == l.name and k.op in pass_ and k.instance == 0)
                assert used <= shared.arena_bytes
        ilp = plan_network(layers, benches, PlanSettings(optimizer="ilp", budget=extra))
        assert shared.time_ms <= ilp.time_ms + 1e-9
        assert [(k.layer, k.op, k.instance) for k in shared.kernels] == \
            [(k.layer, k.op, k.instance) for k in ilp.kernels]
        assert shared.time_ms >= fastest - 1e-9


@pytest.mark.parametrize("seed", range(4))
def test_unset_budget_is_limit_times_calls_for_both(seed):
    """Note [Workspace budget]: without a budget the ILP and the arena get limit x calls, the
    memory the DP gives the same kernels."""
    layers, benches = _random_network(random.Random(40 + seed), 3)
    for limit in (600, 5000):
        ilp = plan_network(layers, benches, PlanSettings(limit=limit, optimizer="ilp"))
        shared = plan_network(layers, benches, PlanSettings(limit=limit, optimizer="shared"))
        assert shared.budget == ilp.budget == limit * ilp.n_calls
        assert shared.held_bytes <= shared.budget


def _least_workspace_per_pass(layers, benches):
    need = {}
    for l in layers:
        for pass_ in caffe_passes(l.groups):
            ops = _pass_ops(l, pass_)
            need[l.name, pass_] = (sum(
                l.groups * desirable_set(benches[l.name, op], l.n, "powerOfTwo")[0].ws_bytes
                for op in ops), len(ops) * l.groups)
    return need


def test_budget_below_a_pass_names_the_layer():
    for seed in range(100):         # a network whose least plans need some workspace
        layers, benches = _random_network(random.Random(seed), 2, zero_ws=0.0)
        need = _least_workspace_per_pass(layers, benches)
        if max(n for n, _ in need.values()):
            break
    (name, _), (most, calls) = max(need.items(),
                                   key=lambda kv: kv[1][0] + ALIGN * kv[1][1])
    assert most > 0
    with pytest.raises(PlanError, match=f"layer '{name}'.*run at once"):
        plan_network(layers, benches, PlanSettings(budget=most + ALIGN * calls - 1,
                                                   optimizer="shared"))
    assert plan_network(layers, benches, PlanSettings(budget=1 << 30, optimizer="shared")
                        ).arena_bytes <= 1 << 30


@pytest.mark.parametrize("net", ["alexnet", "resnet18"])
def test_shared_on_the_h200_tables(net):
    """On the shipped H200 data, at 8 MiB x calls, one shared arena plans far faster
    convolutions than the ILP at the same memory, close to unlimited workspace, while holding
    a small fraction of unlimited's memory."""
    layers = read_layers(SHIPPED / f"{net}_layers.csv")
    benches = group_by_kernel(read_table(SHIPPED / f"{net}_bench.csv"))
    ilp = plan_network(layers, benches, PlanSettings(limit=8 * MiB, optimizer="ilp"))
    shared = plan_network(layers, benches, PlanSettings(limit=8 * MiB, optimizer="shared"))
    unlimited = plan_network(layers, benches, PlanSettings(limit=1 << 40))
    assert shared.held_bytes <= 8 * MiB * ilp.n_calls
    assert shared.time_ms < ilp.time_ms
    assert shared.time_ms <= 1.25 * unlimited.time_ms
    assert shared.held_bytes < unlimited.ws_bytes / 5
