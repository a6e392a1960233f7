"""Pruned search over micro-batch sizes: the `all` plan from a fraction of the benchmarks.

Policy ``all`` benchmarks every micro-batch size 1..N (256 cudnnFind calls per kernel at
N = 256) although the plan uses two or three of them. :func:`plan_pruned` measures a size only
where its result could still change the plan; ``measure`` is a callback, so this module stays
pure (on a GPU it is ``Kernel.benchmark`` through the cache, in tests a replay of a recorded
table that counts the sizes asked for).

Note [Pruned search]
    Measured sizes M start as every size up to ``DENSE`` (16), a geometric grid of ``RATIO``
    (1.2), the powers of two and N (``start_sizes``). For an unmeasured size
    b let lo < b < hi be its nearest measured neighbours. Two assumptions about one algorithm a
    (an (algo, math) pair) bound its time at b from below:

    (T) time is non-decreasing in b: t_a(b) >= t_a(lo)  (more samples, more work);
    (P) time per sample is non-increasing in b: t_a(b) >= t_a(hi) * b / hi  (batching helps);

    and one bounds which algorithms may fit the limit L at b:

    (W) workspace is non-decreasing in b: ws_a(lo) > L means a does not fit at b either;
        an algorithm measured at neither lo nor hi is taken not to run at b.

    So lb(b) = (1 - slack) * min over a that may fit of max(t_a(lo), t_a(hi) * b / hi), a lower
    bound of best_L(b), the fastest time at b within L. The DP over every size 1..N, with
    best_L(b) where measured and lb(b) elsewhere, gives a lower bound T_lb of the exhaustive
    optimum T_all; the DP over measured sizes alone gives a plan of time T_ub >= T_all. If
    T_ub <= (1 + tol) * T_lb, the measured plan is within tol of T_all and the search stops.
    Otherwise the lower-bound plan uses unmeasured sizes (else T_lb = T_ub): exactly the sizes
    where "a better plan may hide"; they are measured and the bounds recomputed. Each round
    measures at least one new size, so it ends, at worst with every size measured. Several
    limits share one set of measurements: a round measures, for every limit not yet within tol,
    the unmeasured sizes of its lower-bound plan.

    When the bounds are met, a local search measures the unmeasured sizes within ``window``
    (10) of each size of each limit's measured plan, and repeats the whole until nothing is
    left to measure. The start (``start_sizes``) is every size up to 16, a geometric grid of
    ratio 1.2 and the powers of two, so the result is never slower than the powerOfTwo plan.

    Why the small sizes are all measured: a cudnnFind at size b costs about in proportion to
    b (the per-size profile on the H200, results/h200/cold_planning/), so sizes 1..16 cost
    136 / 32,896 = 0.4 % of measuring all 256 sizes, and they are where the bounds fail most
    (narrow sweet spots such as l1_3x3 fwd at 11-15, and the per-sample bound (P) is
    weakest where a few samples underfill the GPU).

    Where it can be wrong: the bounds are physical tendencies, not laws. (P) fails at wave
    quantisation (a size just above a multiple of the GPU's tile waves costs almost a whole
    extra wave, so t(hi)/hi can be below t(b)/b), (T) where cuDNN switches an algorithm's inner
    kernel with the size (a larger b may pick a faster implementation), (W) for algorithms
    whose workspace shrinks, and every timing carries noise (events5 medians, a few per cent
    on sub-0.1 ms kernels). ``slack`` widens the bounds for noise. A violated bound can only
    make lb too high, so the search stops early and misses a plan; it never returns a plan
    that was not measured, and its predicted time is a measured one. The replay test
    (tests/plan/test_search.py) checks the result against the exhaustive plan on the recorded H200
    tables of AlexNet and ResNet-18 (batch 256) and CIFAR-10 (batch 1024) at 8, 64 and
    512 MiB.

    Measured there (tests/data/h200_all_sizes, the replay test): on cuDNN 9.14 all three
    assumptions fail often. Some algorithms are 1.5-2x slower at exactly 16, 32, 64, 128 than
    at the sizes around them (so the powers of two are the worst place to start from), time
    and workspace both drop between neighbouring sizes where cuDNN switches inner kernels
    (l3_3x3 fwd algo 1: 34.8 MiB at 64, 29.8 MiB at 72), and narrow sweet spots (l1_3x3 fwd:
    sizes 11-15) hide between measured sizes. What matters for a net is the sum over its
    kernels (each weighted by its group calls and identical layers): with the defaults
    (dense 16, ratio 1.2 and the powers of two, window 10) the pruned plans of AlexNet,
    ResNet-18 and CIFAR-10 at 8, 64 and 512 MiB are within 0.45 % of the exhaustive ones
    (0.00-0.45 %), measuring sizes that cost 12.4 % (AlexNet), 13.8 % (ResNet-18) and 3.6 %
    (CIFAR-10 at 1024) of measuring all of them (weighted by size). Single kernels still
    miss: 3 of 162 kernel-limit pairs are more than 1 % slower (worst 13.0 %), small kernels
    whose loss the net's total hardly sees. Why the geometric grid: CIFAR-10's best sizes
    at 8 MiB (332, 99, 96) lie far from any power of two, and a start from the powers of two
    alone ends 3.97 % off there.

    With a margin (``margin`` > 1: the per-kernel DP keeps the undivided plan unless a divided
    one is predicted ``margin`` times faster, Note [Dividing must beat the noise] in
    :mod:`ucudnn.plan.dp`) a limit is also settled when best_L(N), measured, is below
    margin * T_lb: every plan takes at least T_lb, so none can be ``margin`` times faster than
    the undivided one, and the DP over all sizes would keep it. Such a limit needs no more
    rounds, and the local search leaves out the neighbours of N, the largest sizes and the
    dearest to measure. It still looks around the sizes of a divided measured plan: a bound
    that fails can make T_lb too high, and there the local search finds what the certificate
    missed (CIFAR-10's conv2 backward-filter at 8 MiB). The price: a sweet spot next to N that
    the bounds cannot see is missed, where the search without the margin finds it. On the
    recorded H200 tables the search with the DP's margin measures sizes that cost 8.1 %
    (AlexNet), 9.2 % (ResNet-18) and 2.4 % (CIFAR-10) of all sizes, against 12.4, 13.8 and
    3.6 % without it, and all 162 kernel-limit plans are the same. On the H200 (cuDNN 9.19,
    ResNet-18's graph family at 64 MiB, where few kernels end undivided this way) it measured
    2099 sizes against 2209, in the same time (results/h200/cudnn919/, call J).

    The network ILP needs the desirable set (Note [Desirable set] in :mod:`ucudnn.plan.dp`),
    i.e. the optimum at every limit at once. T_lb(L) and T_ub(L) are step functions of L that
    change only at measured workspace sizes, so the same test at each distinct measured
    workspace (up to the largest limit wanted) would certify the whole front; this module
    certifies the limits it is given (``limits``), which is what the DP needs. For the ILP, a
    caller can pass the limits it may divide (e.g. budget fractions) and plan the desirable set
    from the measured sizes (``desirable_set(..., sizes=result.measured, strict=False)``).
    Replayed on the H200 tables with the limits 0 and every power of two from 4 MiB up to the
    budget (7-13 limits), the ILP and shared-arena plans of AlexNet and ResNet-18 at 8 and
    64 MiB x kernels came within 0.00-0.48 % of the exhaustive ones, AlexNet's ILP at 8 MiB
    within 1.07 %, for 23-24 % of the size-weighted cost of `all` (every fourth power of two:
    18-19 %, but the shared arena of AlexNet at 8 MiB 2.2 % off). The runtime does not do
    this yet (Note [Pruned search at run time]).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .dp import DIVIDE_MARGIN, Plan, best_algorithms, min_partition, plan_kernel
from .settings import candidate_sizes
from ..vocab import PlanError, parse_engine
from .table import AlgoPerf

__all__ = ["start_sizes", "lower_bounds", "pruned_sizes", "plan_pruned", "PrunedResult",
           "DENSE", "WINDOW", "RATIO"]

Measure = Callable[[List[int]], Mapping[int, Sequence[AlgoPerf]]]
INF = float("inf")
PER_SAMPLE_SLACK = 0.0
WINDOW = 10
DENSE = 16
RATIO = 1.2


def start_sizes(n: int, ratio: float = RATIO, dense: int = DENSE) -> List[int]:
    """The first sizes measured: every size up to ``dense``, a geometric grid of ``ratio``
    below ``n``, the powers of two (so the pruned plan is never slower than the powerOfTwo
    plan) and ``n``."""
    if not isinstance(n, int) or n < 1:
        raise PlanError(f"batch: mini-batch size must be a positive integer, got {n!r}")
    out, x = set(range(1, min(dense, n) + 1)), 1.0
    while x < n:
        out.add(int(round(x)))
        x = max(x * ratio, x + 1)
    return sorted(out | set(candidate_sizes("powerOfTwo", n)))        # with n


def _per_algo(perfs: Sequence[AlgoPerf]) -> Dict[Tuple[int, int, str], AlgoPerf]:
    out: Dict[Tuple[int, int, str], AlgoPerf] = {}
    for p in perfs:
        k = (p.algo, p.math, p.engine)
        if k not in out or p.time_ms < out[k].time_ms:
            out[k] = p
    return out


def lower_bounds(bench: Mapping[int, Sequence[AlgoPerf]], n: int, limit: int,
                 slack: float = 0.0, per_sample_slack: float = PER_SAMPLE_SLACK) -> List[float]:
    """``v[b]`` for b in 0..n: best_L(b) where ``bench`` has b, else the bound lb(b) of Note
    [Pruned search] (``inf``: no algorithm may fit); ``v[0]`` is unused. A size with no
    measured size below it gets only the bound (P), one with none above only (T).
    ``per_sample_slack`` weakens (P) alone (its failures are the common ones)."""
    measured = sorted(b for b in bench if 1 <= b <= n)
    algos = {b: _per_algo(bench[b]) for b in measured}
    best = best_algorithms({b: bench[b] for b in measured}, limit)
    v = [INF] * (n + 1)
    for b in measured:
        v[b] = best[b].time_ms if b in best else INF
    for i in range(len(measured) + 1):
        lo = measured[i - 1] if i > 0 else None
        hi = measured[i] if i < len(measured) else None
        start = (lo or 0) + 1
        stop = hi if hi is not None else n + 1
        if start >= stop:
            continue
        lo_a = algos[lo] if lo is not None else {}
        hi_a = algos[hi] if hi is not None else {}
        cands = []          # (t_lo or 0, t_hi / hi or 0) of algorithms that may fit
        for k in set(lo_a) | set(hi_a):
            pl, ph = lo_a.get(k), hi_a.get(k)
            if pl is not None and pl.ws_bytes > limit:
                continue                                    # (W)
            cands.append((pl.time_ms if pl is not None else 0.0,
                          (1.0 - per_sample_slack) * ph.time_ms / hi if ph is not None
                          else 0.0))
        for b in range(start, stop):
            if cands:
                v[b] = (1.0 - slack) * min(max(tl, th * b) for tl, th in cands)
    return v


def _dp(v: Sequence[float], n: int, sizes: Optional[Sequence[int]] = None
        ) -> Tuple[float, List[int]]:
    """min over partitions of n into ``sizes`` (default 1..n) of the sum of v; the parts."""
    return min_partition({b: v[b] for b in (sizes if sizes is not None else range(1, n + 1))
                          if v[b] < INF}, n)


@dataclass
class PrunedResult:
    """What :func:`pruned_sizes` measured and why it stopped."""
    n: int
    bench: Dict[int, List[AlgoPerf]]
    rounds: List[List[int]] = field(default_factory=list)   # sizes measured per round
    bounds: Dict[int, Tuple[float, float]] = field(default_factory=dict)  # limit: (T_lb, T_ub)
    undivided: set = field(default_factory=set)     # limits settled by the margin

    @property
    def measured(self) -> List[int]:
        return sorted(self.bench)

    @property
    def calls(self) -> int:
        """Sizes measured (cudnnFind calls, one per size)."""
        return len(self.bench)

    def gap(self, limit: int) -> float:
        """T_ub / T_lb - 1 at ``limit``: how far the plan may be from the exhaustive one
        (if the bounds of Note [Pruned search] hold)."""
        lb, ub = self.bounds[limit]
        return ub / lb - 1.0 if lb > 0 else (0.0 if ub == lb else INF)


def _measure(measure: Measure, sizes: Iterable[int], bench: Dict[int, List[AlgoPerf]],
             name: str) -> List[int]:
    want = sorted(set(sizes) - set(bench))
    if not want:
        return []
    got = measure(want)
    for b in want:
        if b not in got:
            raise PlanError(f"{name}: the benchmark returned nothing for micro-batch size {b}")
        bench[b] = list(got[b])
    return want


def front_configs(bench: Mapping[int, Sequence[AlgoPerf]]) -> frozenset:
    """The engine configs (their text) of the graph choices on the (time, workspace) front of
    some size of ``bench``: faster than every choice that needs no more workspace (Note
    [Graph focus in the pruned search] in ucudnn/measure/for_plan.py)."""
    out = set()
    for perfs in bench.values():
        least = None
        for p in sorted(perfs, key=lambda p: (p.time_ms, p.ws_bytes)):
            if least is None or p.ws_bytes < least:
                least = p.ws_bytes
                if p.engine:
                    out.add(p.engine)
    return frozenset(out)


def _undivided_stands(bench: Mapping[int, Sequence[AlgoPerf]], n: int, limit: int, lb: float,
                      margin: float) -> bool:
    """Note [Pruned search], with a margin: no plan can be ``margin`` times faster than the
    fastest undivided choice within ``limit`` (measured at ``n``) when every plan takes at
    least ``lb``."""
    whole = best_algorithms({n: bench[n]}, limit).get(n) if n in bench else None
    return whole is not None and whole.time_ms < margin * lb


def pruned_sizes(measure: Measure, n: int, limits: Iterable[int], *, tol: float = 0.0,
                 slack: float = 0.0, start: Optional[Iterable[int]] = None,
                 window: int = WINDOW, max_rounds: int = 10_000, margin: float = 1.0,
                 name: str = "kernel") -> PrunedResult:
    """Measure sizes of 1..n until, at every limit in ``limits``, the plan over measured sizes
    is within ``tol`` of the lower bound, or the undivided plan is certain to stand under
    ``margin`` (Note [Pruned search]; 1, the default, where the measurements serve the ILP or
    the shared arena, which have no margin).

    ``measure(sizes) -> {b: [AlgoPerf]}`` benchmarks the listed sizes (each asked once);
    ``slack``: relative widening of the bounds for timing noise; ``start``: the first sizes
    (default :func:`start_sizes`; 1 and ``n`` are always added); ``window``: once the bounds
    are met, the unmeasured sizes within ``window`` of each size of a limit's measured plan are
    measured, until a round finds none (local search; 0: none).
    """
    limits = sorted(set(int(l) for l in limits))
    if not limits:
        raise PlanError(f"{name}: no workspace limit given")
    if any(l < 0 for l in limits):
        raise PlanError(f"{name}: workspace_limit must not be negative, got {limits[0]}")
    if not (tol >= 0 and 0 <= slack < 1):
        raise PlanError(f"{name}: tol must be >= 0 and slack in [0, 1), got {tol}, {slack}")
    first = set(start_sizes(n) if start is None else start) | {1, n}
    first = {b for b in first if 1 <= b <= n}
    res = PrunedResult(n, {})
    res.rounds.append(_measure(measure, first, res.bench, name))
    open_limits = list(limits)
    for _ in range(max_rounds):
        want = set()
        still = []
        for limit in open_limits:
            # at measured sizes the bounds are the measured best times, whatever the slack
            v = lower_bounds(res.bench, n, limit, slack)
            ub, _ = _dp(v, n, res.measured)
            lb, parts = _dp(v, n)
            res.bounds[limit] = (lb, ub)
            if lb == INF:
                # no algorithm may fit anywhere: nothing left to find
                continue
            if _undivided_stands(res.bench, n, limit, lb, margin):
                res.undivided.add(limit)
                continue
            if ub <= (1.0 + tol) * lb:
                continue
            new = [b for b in parts if b not in res.bench]
            if not new:
                # slack pushed T_lb below the measured plan: nothing unmeasured to look at
                continue
            still.append(limit)
            want.update(new)
        open_limits = still
        if not want:
            # local search: the neighbours of the sizes of every limit's measured plan
            for limit in limits:
                _, parts = min_partition({b: p.time_ms for b, p in
                                          best_algorithms(res.bench, limit).items()}, n)
                for b in set(parts) - ({n} if limit in res.undivided else set()):
                    want.update(x for x in range(b - window, b + window + 1)
                                if 1 <= x <= n and x not in res.bench)
            if not want:
                break
        res.rounds.append(_measure(measure, want, res.bench, name))
    return res


def plan_pruned(measure: Measure, n: int, limit: int, *, limits: Iterable[int] = (),
                tol: float = 0.0, slack: float = 0.0, start: Optional[Iterable[int]] = None,
                window: int = WINDOW, margin: float = DIVIDE_MARGIN,
                name: str = "kernel") -> Tuple[Plan, PrunedResult]:
    """The `all` plan for ``n`` within ``limit`` from a pruned search (:func:`pruned_sizes`
    over ``limit`` and any further ``limits`` to certify with the same measurements), planned
    by the DP with ``margin`` (Note [Dividing must beat the noise]), which the search uses
    too; the plan uses measured sizes only, so its predicted time is a measured one."""
    res = pruned_sizes(measure, n, [limit, *limits], tol=tol, slack=slack, start=start,
                       window=window, margin=margin, name=name)
    plan = plan_kernel(res.bench, n, "all", limit, strict=False, name=name, margin=margin)
    return plan, res
