"""Pruned search over micro-batch sizes (ucudnn.plan.search, Note [Pruned search]).

Replay: the recorded H200 tables of every size 1..N (tests/data/h200_all_sizes/: AlexNet and
ResNet-18 at 256, CIFAR-10 at 1024) stand in for cudnnFind; the callback counts the sizes
asked for."""
import lzma
from functools import lru_cache

import pytest

from repo_paths import ALL_SIZES as DATA
from repo_paths import NETS as NETS_DIR
from ucudnn.plan.dp import DIVIDE_MARGIN, plan_kernel
from ucudnn.plan.search import WINDOW, lower_bounds, plan_pruned, pruned_sizes, start_sizes
from ucudnn.plan.table import AlgoPerf, group_by_kernel, parse_table
from ucudnn.vocab import PlanError

MiB = 1 << 20
N = 256                     # the synthetic tables' batch
BATCH = {"alexnet": 256, "resnet18": 256, "cifar10": 1024}
LIMITS = (8, 64, 512)
OPS = ("fwd", "bwd_data", "bwd_filter")


class Replay:
    """``measure`` from a table; remembers every size asked for (one cudnnFind each)."""

    def __init__(self, bench):
        self.bench, self.asked = bench, []

    def __call__(self, sizes):
        assert not set(sizes) & set(self.asked), "a size was measured twice"
        self.asked += sizes
        return {b: self.bench[b] for b in sizes}


@lru_cache(maxsize=None)
def _table(net):
    with lzma.open(DATA / f"{net}_bench.csv.xz", "rt") as f:
        return group_by_kernel(parse_table(f.read(), source=f"{net}_bench.csv.xz"))


@lru_cache(maxsize=None)
def _replay(net, limit_mib, op):
    """[(layer, exhaustive all, powerOfTwo, pruned plan, sizes measured)] of one net, limit, op."""
    n = BATCH[net]
    out = []
    for (layer, o), bench in _table(net).items():
        if o != op:
            continue
        assert sorted(bench) == list(range(1, n + 1))
        replay = Replay(bench)
        plan, res = plan_pruned(replay, n, limit_mib * MiB, name=layer)
        assert res.calls == len(replay.asked)
        out.append((layer, plan_kernel(bench, n, "all", limit_mib * MiB),
                    plan_kernel(bench, n, "powerOfTwo", limit_mib * MiB), plan, res.calls))
    return out


def _layers(net):
    """The net's layers by name (their groups and identical-layer counts weigh the totals)."""
    if net == "cifar10":
        from ucudnn.caffe.prototxt import load_prototxt
        layers = load_prototxt(NETS_DIR / "cifar10.prototxt").layers
    else:
        from ucudnn.measure import shipped
        layers = shipped.layers(net)
    return {l.name: l for l in layers}


NETS = ("alexnet", "resnet18", "cifar10")
# (net, limit MiB, op) where some kernel's pruned plan is more than 1 % slower than the
# exhaustive one (worst gap as measured with the defaults: dense 16, ratio 1.2 and the
# powers of two, window 10): the bounds of Note [Pruned search] do not hold on these tables
# (cuDNN's time and workspace jump between neighbouring sizes). The nets' totals are within
# 1 % nevertheless (below).
MISSES = {("resnet18", 64, "fwd"): 4.6, ("resnet18", 64, "bwd_data"): 13.0,
          ("cifar10", 64, "bwd_data"): 2.8}


def _cases(with_misses):
    for net in NETS:
        for limit in LIMITS:
            for op in OPS:
                miss = MISSES.get((net, limit, op))
                marks = ([pytest.mark.xfail(strict=True, reason=f"pruned plan up to {miss} % "
                                            "slower than exhaustive all (Note [Pruned search])")]
                         if miss and with_misses else [])
                yield pytest.param(net, limit, op, marks=marks, id=f"{net}-{limit}MiB-{op}")


@pytest.mark.parametrize("net,limit,op", list(_cases(True)))
def test_pruned_within_one_percent_of_all(net, limit, op):
    for layer, full, _, pruned, _ in _replay(net, limit, op):
        assert pruned.time_ms <= 1.01 * full.time_ms, (layer, pruned.describe(), full.describe())


@pytest.mark.parametrize("net,limit,op", list(_cases(False)))
def test_pruned_never_worse_than_power_of_two_and_measures_few_sizes(net, limit, op):
    rows = _replay(net, limit, op)
    for layer, full, p2, pruned, calls in rows:
        # the powers of two are measured first, so their plan is always available
        assert pruned.time_ms <= p2.time_ms + 1e-12, layer
        assert pruned.time_ms >= full.time_ms - 1e-12, layer      # measured sizes only
        assert calls <= BATCH[net]
    mean_calls = sum(r[4] for r in rows) / len(rows)
    print(f"{net} {limit} MiB {op}: {mean_calls:.1f} of {BATCH[net]} sizes measured on "
          f"average, {sum(r[3].time_ms <= 1.01 * r[1].time_ms for r in rows)}/{len(rows)} "
          "kernels within 1 % of all")
    assert mean_calls <= 0.3 * BATCH[net]


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("net", NETS)
def test_net_plan_within_one_percent_of_all(net, limit):
    """The pruned search's criterion: the net's predicted convolution time (every kernel
    times its group calls and identical layers, as the planner sums it) from the pruned search
    is within 1 % of the exhaustive `all` plan's (measured with the defaults: 0.00-0.25 %)."""
    layers = _layers(net)
    full = pruned = 0.0
    for layer, op_full, _, op_pruned, _ in [r for op in OPS for r in _replay(net, limit, op)]:
        w = layers[layer].groups * layers[layer].count
        full += w * op_full.time_ms
        pruned += w * op_pruned.time_ms
    print(f"{net} {limit} MiB: pruned {pruned:.3f} ms, all {full:.3f} ms "
          f"(+{100 * (pruned / full - 1):.2f} %)")
    assert full <= pruned <= 1.01 * full


def _size_weighted_cost(net, margin):
    """The sizes the pruned search for ``margin`` measures over every kernel of ``net`` and the
    three limits, weighted by size, as a fraction of all sizes 1..N; and the plans, by the DP
    with its margin (DIVIDE_MARGIN), by (layer, op, limit)."""
    asked = total = 0
    plans = {}
    n = BATCH[net]
    for limit in LIMITS:
        for (layer, op), bench in _table(net).items():
            replay = Replay(bench)
            res = pruned_sizes(replay, n, [limit * MiB], margin=margin, name=layer)
            plans[layer, op, limit] = plan_kernel(res.bench, n, "all", limit * MiB,
                                                  strict=False).describe()
            asked += sum(replay.asked)
            total += n * (n + 1) // 2
    return asked / total, plans


@pytest.mark.parametrize("net", NETS)
def test_margin_measures_less_and_keeps_every_plan(net):
    """Note [Pruned search], with a margin: the search for the DP's margin gives every kernel
    the plan that the search without it gives (both planned by the DP with the margin), for
    about two thirds of the measuring (measured: AlexNet 8.1 against 12.4 %, ResNet-18 9.2
    against 13.8 %, CIFAR-10 2.4 against 3.6 %)."""
    with_margin, plans = _size_weighted_cost(net, DIVIDE_MARGIN)
    without, plans_without = _size_weighted_cost(net, 1.0)
    assert plans == plans_without
    assert with_margin <= 0.75 * without, (with_margin, without)


def test_margin_settles_an_undivided_kernel_in_the_first_round():
    # a fixed cost per call and one algorithm: undivided is the best plan, and no plan can be
    # 10 % faster, which the start sizes already show; without the margin the bounds are not
    # tight (gap > 0) and the search goes on, its local search measuring N's neighbours
    bench = _table_from(lambda b: [AlgoPerf(0, 0.05 + 0.01 * b, 0)], N)
    replay = Replay(bench)
    plan, res = plan_pruned(replay, N, 0)
    assert plan.describe() == plan_kernel(bench, N, "all", 0).describe() == f"{N}x1:algo0"
    assert res.undivided == {0} and len(res.rounds) == 1
    assert res.measured == start_sizes(N)
    res_without = pruned_sizes(Replay(bench), N, [0])
    assert res_without.undivided == set()
    assert set(range(N - WINDOW, N)) <= set(res_without.measured)


@pytest.mark.parametrize("net", NETS)
def test_pruned_search_costs_a_tenth_of_all(net):
    """A cudnnFind at size b costs about in proportion to b (results/h200/cold_planning/):
    the sizes measured, weighted by size, against all sizes 1..N of every kernel, for the
    three limits planned one by one (measured: AlexNet 8.1 %, ResNet-18 9.2 %, CIFAR-10
    2.4 %)."""
    asked = total = 0
    for limit in LIMITS:
        for op in OPS:
            for (layer, o), bench in _table(net).items():
                if o != op:
                    continue
                n = BATCH[net]
                replay = Replay(bench)
                plan_pruned(replay, n, limit * MiB, name=layer)
                asked += sum(replay.asked)
                total += n * (n + 1) // 2
    print(f"{net}: {100 * asked / total:.1f} % of exhaustive `all`, weighted by size")
    assert asked <= 0.10 * total


def test_most_kernels_within_one_percent():
    """What the pruned search achieves across the nets and the three limits, kernel by
    kernel (measured with the defaults: 159 of 162 kernel-limit pairs within 1 %)."""
    within = total = 0
    for net in NETS:
        for limit in LIMITS:
            for op in OPS:
                for _, full, _, pruned, _ in _replay(net, limit, op):
                    total += 1
                    within += pruned.time_ms <= 1.01 * full.time_ms
    assert within >= 0.95 * total, (within, total)


# --- synthetic tables -------------------------------------------------------------------

def _table_from(fn, n):
    return {b: fn(b) for b in range(1, n + 1)}


def _smooth(b):
    # a slow zero-workspace algorithm and a fast one whose workspace grows with b
    return [AlgoPerf(0, 0.01 + 0.010 * b, 0), AlgoPerf(1, 0.02 + 0.002 * b, 1000 * b)]


@pytest.mark.parametrize("limit", [0, 50_000, 100_000, 200_000, 10**9])
def test_smooth_table_is_exact_with_few_sizes(limit):
    bench = _table_from(_smooth, N)
    replay = Replay(bench)
    plan, res = plan_pruned(replay, N, limit, window=0)
    assert plan.time_ms == pytest.approx(plan_kernel(bench, N, "all", limit).time_ms)
    # where one algorithm is best everywhere the start sizes certify the plan; otherwise
    # affine times tie many plans, so with tol 0 the search needs up to 177 sizes here
    assert res.calls <= (len(start_sizes(N)) if limit in (0, 10**9) else 180)
    assert res.gap(limit) <= 1e-9


def test_sweet_spot_between_powers_of_two_is_found():
    # the fast algorithm fits up to b = 100 only: the plan 100+100+56 beats 64x4, and the
    # bounds make the search measure sizes between 64 and 128 to find it
    bench = _table_from(_smooth, N)
    limit = 100_000
    replay = Replay(bench)
    plan, res = plan_pruned(replay, N, limit, window=0)
    full = plan_kernel(bench, N, "all", limit)
    assert plan.time_ms == pytest.approx(full.time_ms)
    assert plan.time_ms < plan_kernel(bench, N, "powerOfTwo", limit).time_ms
    assert 100 in res.measured and len(res.rounds) > 1


def test_violated_bound_is_missed_without_local_search():
    # Note [Pruned search], where it can be wrong: a size much faster than its neighbours
    # allow (cuDNN switching kernels) is invisible to the bounds; the local search finds it
    # only when it is near a size the plan uses
    def perfs(b):
        t = 0.1 + 0.01 * b
        return [AlgoPerf(0, t * (0.5 if b == 126 else 1.0), 0)]
    bench = _table_from(perfs, 128)
    for window, found in ((0, False), (4, True)):
        plan, res = plan_pruned(Replay(bench), 128, 0, window=window, margin=1.0)
        assert (126 in res.measured) == found
    # with the DP's margin the bounds settle the undivided plan (the sweet spot is 42 %
    # faster, but invisible to them) and the local search leaves out N's neighbours: the
    # price of measuring them on every undivided kernel (Note [Pruned search])
    plan, res = plan_pruned(Replay(bench), 128, 0, window=4)
    assert res.undivided == {0} and 126 not in res.measured and plan.describe() == "128x1:algo0"


def test_lower_bounds():
    bench = {1: [AlgoPerf(0, 1.0, 0), AlgoPerf(1, 0.5, 10)],
             4: [AlgoPerf(0, 2.0, 0), AlgoPerf(1, 1.2, 40)]}
    v = lower_bounds(bench, 4, limit=100)
    assert v[1] == 0.5 and v[4] == 1.2
    # (T) from b=1: 0.5; (P) from b=4: 1.2 * b / 4
    assert v[2] == pytest.approx(max(0.5, 0.6)) and v[3] == pytest.approx(0.9)
    # algorithm 1 does not fit at b=1 under limit 5: (W) leaves algorithm 0 only
    v = lower_bounds(bench, 4, limit=5)
    assert v[4] == 2.0 and v[2] == pytest.approx(1.0) and v[3] == pytest.approx(1.5)
    assert lower_bounds({1: [AlgoPerf(0, 1.0, 10)], 2: [AlgoPerf(0, 1.5, 10)]}, 3, 5)[3] \
        == float("inf")


def test_shared_measurements_for_several_limits():
    bench = _table_from(_smooth, 64)
    replay = Replay(bench)
    res = pruned_sizes(replay, 64, [0, 30_000, 10**9], window=0)
    for limit in (0, 30_000, 10**9):
        assert res.gap(limit) <= 1e-9
        assert (plan_kernel(res.bench, 64, "all", limit, strict=False).time_ms
                == pytest.approx(plan_kernel(bench, 64, "all", limit).time_ms))


def test_errors():
    bench = _table_from(_smooth, 8)
    with pytest.raises(PlanError, match="no workspace limit"):
        pruned_sizes(Replay(bench), 8, [])
    with pytest.raises(PlanError, match="must not be negative"):
        pruned_sizes(Replay(bench), 8, [-1])
    with pytest.raises(PlanError, match="returned nothing for micro-batch size"):
        pruned_sizes(lambda sizes: {}, 8, [0])
    with pytest.raises(PlanError, match="positive integer"):
        start_sizes(0)
    assert start_sizes(256) == list(range(1, 17)) + [18, 21, 26, 31, 32, 37, 45, 53, 64, 77,
                                                     92, 111, 128, 133, 160, 192, 230, 256]
    assert start_sizes(256, ratio=2.0, dense=0) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert start_sizes(12) == list(range(1, 13))
    assert start_sizes(12, ratio=2.0, dense=2) == [1, 2, 4, 8, 12]
