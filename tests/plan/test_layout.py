"""Where every kernel's workspace lies (ucudnn.plan.network.layout, Note [One network planner],
Note [Shared arena]) against a brute-force twin: every group call's byte range, checked pair
by pair."""
import itertools
import random

import pytest

from planner_brute import caffe_passes, random_network
from ucudnn.plan.network import ALIGN, align, plan_network
from ucudnn.plan.settings import PlanSettings

OPTIMIZERS = ("dp", "ilp", "shared")


def _ranges(plan):
    """[(arena?, start, end, kernel name, group, (layer, instance, pass))]: the byte range of
    every group call of every kernel."""
    out = []
    for k in plan.kernels:
        pass_ = next(i for i, p in enumerate(caffe_passes(k.groups)) if k.op in p)
        for g in range(k.groups):
            start = k.slot.offset + g * k.slot.stride
            out.append((k.slot.arena, start, start + k.slot.bytes, k.name, g,
                        (k.layer, k.instance, pass_)))
    return out


def _overlap(a, b):
    return a[1] < b[2] and b[1] < a[2]


def _check_layout(plan):
    ranges = _ranges(plan)
    for k in plan.kernels:
        assert k.slot is not None, k.name
        assert k.slot.offset % ALIGN == 0 and k.slot.stride % ALIGN == 0, k
        assert k.slot.bytes == k.plan.ws_bytes and k.slot.stride == align(k.plan.ws_bytes)
        assert k.slot.arena == (k.optimizer == "shared")
    owned = [r for r in ranges if not r[0]]
    arena = [r for r in ranges if r[0]]
    # owned slots: one after another, none shared with any other call of the net
    for a, b in itertools.combinations(owned, 2):
        assert not _overlap(a, b), (a, b)
    assert all(r[2] <= plan.workspace_bytes for r in owned)
    assert plan.workspace_bytes == sum(align(k.plan.ws_bytes) * k.groups for k in plan.kernels
                                       if k.optimizer != "shared")
    # the arena: calls that run at once (one layer instance's pass) never overlap
    for a, b in itertools.combinations(arena, 2):
        if a[5] == b[5]:
            assert not _overlap(a, b), (a, b)
    if not arena:
        assert plan.arena_bytes is None
        return
    assert all(r[2] <= plan.arena_bytes for r in arena)
    # the arena is the largest pass, slots rounded up
    passes = {}
    for k in plan.kernels:
        if k.optimizer == "shared":
            key = (k.layer, k.instance,
                   next(i for i, p in enumerate(caffe_passes(k.groups)) if k.op in p))
            passes[key] = passes.get(key, 0) + align(k.plan.ws_bytes) * k.groups
    assert plan.arena_bytes == max(passes.values())


def _settings(rng, layers, optimizers):
    return {l.name: PlanSettings(optimizer=rng.choice(optimizers),
                                 limit=rng.choice([8, 30, 600]),
                                 policy=rng.choice(["powerOfTwo", "all"]))
            for l in layers}


@pytest.mark.parametrize("optimizers", [("dp",), ("ilp",), ("shared",), OPTIMIZERS])
@pytest.mark.parametrize("seed", range(10))
def test_layout_of_random_nets(seed, optimizers):
    rng = random.Random(700 + seed + 31 * len(optimizers))
    layers, benches = random_network(rng, rng.randint(1, 4))
    settings = _settings(rng, layers, optimizers)
    if "shared" in optimizers:      # budgets the arena can divide after its alignment
        settings = {n: s.replace(limit=s.limit + 1000) if s.optimizer == "shared" else s
                    for n, s in settings.items()}
    # (some random tables lack sizes of policy all: planned over those measured)
    plan = plan_network(layers, benches, settings, strict=False)
    assert {k.optimizer for k in plan.kernels} <= set(optimizers)
    _check_layout(plan)
    assert plan.held_bytes == plan.workspace_bytes + (plan.arena_bytes or 0)


def test_layout_of_a_hand_made_net():
    """Two layers of two groups, the first with two identical copies: the owned offsets in
    net order (per layer instance forward, backward-filter, backward-data); shared: a layer's
    backward-data after its backward-filter, the forward at the arena's start."""
    from ucudnn.plan.layers import LayerSpec
    from ucudnn.plan.table import AlgoPerf
    layers = [LayerSpec("a", 4, 4, 8, 8, 4, 3, 3, 1, groups=2, count=2),
              LayerSpec("b", 4, 4, 8, 8, 4, 3, 3, 1, groups=2)]
    ws = {"fwd": 300, "bwd_filter": 100, "bwd_data": 700}
    # a cost per call: the undivided plan is the fastest
    benches = {(l.name, op): {b: [AlgoPerf(0, 0.5 + 1.0 * b, ws[op] * b // 4)]
                              for b in (1, 2, 4)} for l in layers for op in l.ops}
    owned = plan_network(layers, benches, PlanSettings(limit=1 << 20))
    slots = {k.name: (k.slot.offset, k.slot.stride) for k in owned.kernels}
    # one kernel: two group slots of align(ws) each
    assert slots["a/fwd"] == (0, 512)
    assert slots["a/bwd_filter"] == (1024, 256)
    assert slots["a/bwd_data"] == (1536, 768)
    assert slots["a/fwd#1"] == (3072, 512)             # the identical copy follows
    assert slots["b/fwd"] == (2 * 3072, 512)
    assert owned.workspace_bytes == 3 * 3072
    _check_layout(owned)
    shared = plan_network(layers, benches, PlanSettings(optimizer="shared", budget=1 << 20))
    slots = {k.name: (k.slot.offset, k.slot.stride) for k in shared.kernels}
    assert slots["a/fwd"] == slots["a/fwd#1"] == slots["b/fwd"] == (0, 512)
    assert slots["a/bwd_filter"] == (0, 256)
    assert slots["a/bwd_data"] == (2 * 256, 768)       # after both bwd_filter group calls
    assert shared.arena_bytes == 2 * 256 + 2 * 768 and shared.workspace_bytes == 0
    _check_layout(shared)


def test_one_group_layer_gives_each_call_the_whole_arena():
    """A one-group layer runs its calls one after another (Note [Shared arena]): every slot
    starts at the arena's start, and each call may take the whole budget, where a grouped
    layer's backward calls divide it."""
    from ucudnn.plan.layers import LayerSpec
    from ucudnn.plan.table import AlgoPerf
    one = [LayerSpec("c", 4, 4, 8, 8, 4, 3, 3, 1)]
    two = [LayerSpec("c", 4, 4, 8, 8, 4, 3, 3, 1, groups=2)]

    def benches(layers):
        # per op: a slow algorithm without workspace, and a fast one needing 1000 B per call
        return {(l.name, op): {b: [AlgoPerf(0, 10.0 * b, 0), AlgoPerf(1, 1.0 * b, 1000)]
                               for b in (1, 2, 4)} for l in layers for op in l.ops}
    settings = PlanSettings(optimizer="shared", budget=1280, policy="undivided")
    plan = plan_network(one, benches(one), settings)
    slots = {k.name: (k.slot.offset, k.slot.bytes) for k in plan.kernels}
    assert slots == {"c/fwd": (0, 1000), "c/bwd_filter": (0, 1000), "c/bwd_data": (0, 1000)}
    assert plan.arena_bytes == 1024
    _check_layout(plan)
    # two groups: each pass runs two calls (the backward's four), which leave 1280 - 2 x 256
    # B or less to divide: the fast algorithm fits in no pass
    grouped = plan_network(two, benches(two), settings)
    assert {k.op: k.plan.ws_bytes for k in grouped.kernels} == \
        {"fwd": 0, "bwd_filter": 0, "bwd_data": 0}
    _check_layout(grouped)


@pytest.mark.parametrize("seed", range(6))
def test_shared_pass_budget_leaves_room_for_the_alignment(seed):
    """The arena's pass budget is the budget less 256 B per concurrent call (kernels in the
    pass x groups): the aligned arena stays within the budget."""
    rng = random.Random(50 + seed)
    layers, benches = random_network(rng, 3)
    for budget in (600, 1200, 5000):
        try:
            plan = plan_network(layers, benches, PlanSettings(optimizer="shared", budget=budget))
        except Exception as e:      # noqa: BLE001 - the alignment alone may not fit
            assert "run at once" in str(e)
            continue
        assert plan.arena_bytes <= budget
        for l in layers:
            for pass_ in caffe_passes(l.groups):
                ks = [k for k in plan.kernels if k.layer == l.name and k.op in pass_
                      and k.instance == 0]
                calls = sum(k.groups for k in ks)
                assert sum(k.ws_bytes for k in ks) <= max(0, budget - ALIGN * calls)
