"""Planning for live kernels: what the C API (and so Caffe) calls.

``prepare_kernel`` benchmarks a core ``Kernel`` through the cache and gives it a plan (DP) or
its desirable set (ILP); ``plan_network_kernels`` divides one budget among ILP kernels;
``replan_kernel`` plans again under a smaller limit. Every plan is resolved into the kernel's C
arrays by ``Kernel.set_plan``, which asks cuDNN for each chunk's workspace.

Every benchmark, every plan a kernel is given and every ILP solve is appended to
``$UCUDNN_RECORDS`` as a JSON line (:mod:`ucudnn.measure.records`; Note [Plan records] in
:mod:`ucudnn.caffe.records`): what programs read. The log lines (``UCUDNN_LOG=INFO``) say the
same for people, with cuDNN's algorithm names.

Note [Pruned search at run time]
    By default (``UCUDNN_SEARCH=pruned``) a DP kernel of policy ``all`` (no explicit sizes) is
    not benchmarked at every size 1..N: ``ucudnn.plan.search.pruned_sizes`` asks for the sizes
    whose result could still change the plan at its limit (Note [Pruned search]), each
    through the cache like any benchmark, and the kernel is planned over the sizes measured
    (``strict=False``); a later re-plan under a smaller limit uses the same sizes. The ILP
    and the shared arena need every limit's optimum (the desirable set), so they measure
    all sizes as before. ``UCUDNN_SEARCH=exhaustive`` measures every size (on the H200 the
    exhaustive benchmarks of a cold ResNet-18 at batch 256 took 345 s, the pruned search
    27.1 s; the plans are within 0.45 % of each other on the recorded tables:
    results/h200/cold_planning/). Each round of the search is one benchmark
    call, and a call pays its own set-up (the workspace offered to cudnnFind, up to 8 GiB,
    allocated, and the buffers for its largest size filled), so the kernel keeps them for the
    whole search (``Kernel.hold_benchmark_buffers``) and frees them after it.

    Warm: replaying the cold search's rounds from the cache costs a DP per round (2 s for
    ResNet-18). So the search first runs from every size the cache holds for the kernel
    (with its own start sizes), reading the cache only (``_search_cached``): after this
    kernel's own cold search that ends in its first round with the same sizes, so the same
    plan. Should it ask for a size the cache lacks (a first run; a cold search that stopped
    checking its bounds once they met and then measured next to its plan, so that from all
    its sizes at once the bounds ask for one more: 1 of ResNet-18's 32 kernels; or another
    layer of the same shape measured other sizes), it is abandoned and the search runs as
    cold, measuring what it asks for: a warm run never benchmarks what its cold run did not.

Note [Falling back]
    A plan can fail to resolve (cuDNN rejects an algorithm for this exact descriptor, or needs
    more workspace than the cache said). The failing (size, algorithm) is then dropped from the
    kernel's benchmark and the kernel planned again, until a plan resolves; the undivided
    zero-workspace algorithm is the last resort. The kernel is never left without a plan.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence

from ..plan.dp import (WINOGRAD_ALGOS, PlanError, candidate_sizes, desirable_set, plan_kernel,
                 undivided_plan, without_algorithms)
from ..plan.ilp import solve_workspace_division
from ..vocab import (OPTIMIZER_CODES, SEARCHES, InputError, algo_name, format_size,
                     normalise_policy)
from . import records
from .bench import FIND_REPEATS

log = logging.getLogger("ucudnn")

#: the environment variable that picks the search over micro-batch sizes for policy ``all``
SEARCH_ENV = "UCUDNN_SEARCH"


def search_mode(value: Optional[str] = None) -> str:
    """``value``, else ``$UCUDNN_SEARCH``, else ``pruned`` (Note [Pruned search at run
    time]); an unknown name is an :class:`InputError` naming the variable."""
    where = "search" if value is not None else SEARCH_ENV
    v = (value if value is not None else os.environ.get(SEARCH_ENV, "")).strip().lower()
    v = v or "pruned"
    if v not in SEARCHES:
        raise InputError(f"{where}: unknown search {v!r} (expected {', '.join(SEARCHES)})")
    return v


def _log_from_environment() -> None:
    """``UCUDNN_LOG=INFO`` (or DEBUG, WARNING): the core's messages on stderr, for hosts
    such as Caffe that do not configure Python's logging (``ucudnn reproduce`` sets it)."""
    level = os.environ.get("UCUDNN_LOG", "").strip().upper()
    if not level or any(getattr(h, "_ucudnn_env", False) for h in log.handlers):
        return
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise InputError(f"UCUDNN_LOG: unknown level {level!r} (DEBUG, INFO, WARNING, ERROR)")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ucudnn %(levelname)s: %(message)s"))
    handler._ucudnn_env = True
    log.addHandler(handler)
    log.setLevel(level)


_log_from_environment()


@dataclass
class _Measured:
    """What :func:`measure_for_plan` measured for a kernel (the bench is on the kernel)."""
    policy: str
    optimizer: str
    sizes: List[int]       # the candidate sizes looked at
    bench_record: dict     # the "bench" plan record's fields (search, rounds, timings)


def measure_for_plan(kern, *, policy=1, optimizer=0, limit: int = 8 << 20,
                     sizes: Optional[Sequence[int]] = None, repeats: int = FIND_REPEATS,
                     cache_path: Optional[str] = None, workspace_cap: Optional[int] = None,
                     exclude_winograd: bool = False, search: Optional[str] = None) -> _Measured:
    """Benchmark ``kern`` (through the cache) for the plan :func:`prepare_kernel` makes with the
    same arguments, and set ``kern.bench``; writes the "bench" plan record. Measuring in
    advance with the same arguments (Note [Benchmarks over several GPUs in one process] in
    :mod:`.spread`) leaves :func:`prepare_kernel` nothing to measure."""
    where = f"layer {kern.name!r}"
    policy = normalise_policy(policy, f"{where}: field 'policy'")
    if isinstance(optimizer, int):
        if optimizer not in OPTIMIZER_CODES:
            raise PlanError(f"{where}: field 'optimizer': unknown value {optimizer} "
                            "(0 DP, 1 ILP, 2 SHARED)")
        optimizer = OPTIMIZER_CODES[optimizer]
    if limit < 0:
        raise PlanError(f"{where}: field 'workspace_limit': must not be negative, got {limit}")
    search = search_mode(search)
    pruned = search == "pruned" and policy == "all" and sizes is None and optimizer == "dp"
    cands = candidate_sizes(policy, kern.n, sizes)
    from .bench import measure
    measured: List[int] = []
    excluded = WINOGRAD_ALGOS[kern.op] if exclude_winograd else frozenset()

    def measure_sizes(want, cache=None):
        return measure(kern, want, repeats=repeats, cache_path=cache_path,
                       workspace_cap=workspace_cap, progress=measured.append, cache=cache)

    spent0 = dict(kern.benchmark_seconds)
    t0 = time.perf_counter()
    rounds = None
    if pruned:
        from ..plan.search import pruned_sizes
        from .bench import cache_key
        from .cache import BenchCache
        # one set-up of the buffers and one opening of the cache for all rounds
        kern.hold_benchmark_buffers(True)
        try:
            with BenchCache(cache_path) as cache:
                def usable(got):
                    # every size asked stays a key (the search needs one), without excluded
                    # algorithms
                    return {b: [p for p in perfs if p.algo not in excluded]
                            for b, perfs in got.items()}

                key = cache_key(kern.shape, kern.op, kern.math, kern.dtype,
                                workspace_cap=workspace_cap)
                res = _search_cached(cache, key, kern.n, limit, usable, where)
                if res is None:
                    res = pruned_sizes(lambda want: usable(measure_sizes(want, cache)),
                                       kern.n, [limit], name=where)
        finally:
            kern.hold_benchmark_buffers(False)
        kern.bench, cands, rounds = res.bench, res.measured, len(res.rounds)
    else:
        kern.bench = measure_sizes(cands)
        if exclude_winograd:
            kern.bench = without_algorithms(kern.bench, excluded)
    bench = {"bench_s": time.perf_counter() - t0, "sizes": len(cands),
             "sizes_benchmarked": len(set(measured)),
             "sizes_cached": len(cands) - len(set(measured)),
             "search": "pruned" if pruned else "exhaustive", "search_rounds": rounds,
             "benchmark_seconds": {k: round(v - spent0.get(k, 0.0), 6)
                                   for k, v in kern.benchmark_seconds.items()}}
    kern.settings = {"policy": policy, "sizes": sizes, "limit": limit, "optimizer": optimizer,
                     "search": bench["search"],
                     # pruned: plan over the sizes measured (the others were ruled out)
                     "strict": not pruned}
    if records.records_path():
        records.append_record({"kind": "bench", **records.kernel_fields(kern),
                               **records.settings_fields(kern), "repeats": repeats,
                               "cache_path": cache_path, "exclude_winograd": exclude_winograd,
                               **bench})
    return _Measured(policy, optimizer, list(cands), bench)


def prepare_kernel(kern, *, policy=1, optimizer=0, limit: int = 8 << 20,
                   sizes: Optional[Sequence[int]] = None, repeats: int = FIND_REPEATS,
                   cache_path: Optional[str] = None, workspace_cap: Optional[int] = None,
                   exclude_winograd: bool = False, search: Optional[str] = None):
    """Benchmark ``kern`` and plan it (DP within ``limit``) or prepare it for the ILP.

    ``exclude_winograd``: plan without the Winograd algorithms (the cache keeps them).
    ``search``: ``exhaustive`` or ``pruned`` (default ``$UCUDNN_SEARCH``; Note [Pruned search
    at run time])."""
    where = f"layer {kern.name!r}"
    m = measure_for_plan(kern, policy=policy, optimizer=optimizer, limit=limit, sizes=sizes,
                         repeats=repeats, cache_path=cache_path, workspace_cap=workspace_cap,
                         exclude_winograd=exclude_winograd, search=search)
    t1 = time.perf_counter()
    bench = m.bench_record
    if m.optimizer == "dp":
        plan = _apply(kern, limit)
    else:
        kern.desirable = desirable_set(kern.bench, kern.n, m.policy, sizes, name=where)
        # until the network is planned, run the smallest-workspace plan
        plan = _apply(kern, kern.desirable[0].ws_bytes)
    kern.timing = {"bench_s": bench["bench_s"], "plan_s": time.perf_counter() - t1}
    log.info("%s %s: %d micro-batch sizes benchmarked (or read from the cache) in %.3f s, "
             "planned in %.3f s", where, kern.op, len(m.sizes), kern.timing["bench_s"],
             kern.timing["plan_s"])
    _record_plan(kern, "dp" if m.optimizer == "dp" else "ilp_initial", plan,
                 limit if m.optimizer == "dp" else kern.desirable[0].ws_bytes,
                 plan_s=kern.timing["plan_s"], **bench,
                 desirable=len(kern.desirable) if kern.desirable is not None else None)
    return kern


class _Uncached(Exception):
    """The cache-only search asked for a size the cache lacks."""


def _search_cached(cache, key, n: int, limit: int, usable, where: str):
    """Note [Pruned search at run time]: the pruned search from every size the cache holds
    for ``key``, reading the cache only; None where it would have to measure."""
    from ..plan.search import pruned_sizes, start_sizes
    known = {b for b in cache.batches(key) if 1 <= b <= n}
    if not known:
        return None

    def cached_only(want):
        got = cache.get_many(key, want)
        if len(got) < len(set(want)):
            raise _Uncached()
        return usable(got)
    try:
        return pruned_sizes(cached_only, n, [limit], start=set(start_sizes(n)) | known,
                            name=where)
    except _Uncached:
        return None


def _record_plan(kern, stage, plan, limit, **extra):
    """The ``kernel`` record of ``plan`` (Note [Plan records]), with the undivided baseline
    within the same limit."""
    if records.records_path():
        records.append_record(records.plan_record(kern, stage, plan, limit,
                                                  _baseline(kern, limit), **extra))


def _apply(kern, limit: int, first=None):
    """Plan ``kern`` within ``limit`` and resolve it; see Note [Falling back]."""
    s = kern.settings
    where = f"layer {kern.name!r}"
    while True:
        plan = first or plan_kernel(kern.bench, kern.n, s["policy"], limit, s["sizes"],
                                    strict=s.get("strict", True), name=where)
        first = None
        try:
            kern.set_plan(plan)
        except Exception as e:  # a CudnnError from the workspace query, typically
            bad = _first_unresolvable(kern, plan)
            if bad is None:
                raise
            log.warning("%s %s: dropping micro-batch %d algorithm %s (%d): %s", where, kern.op,
                        bad[0], algo_name(kern.op, bad[1]), bad[1], e)
            _drop(kern, *bad)
            continue
        if kern.workspace_size > limit:
            # the cache under-stated the workspace: record what cuDNN says and plan again
            _fix_workspace(kern, plan)
            continue
        baseline = _baseline(kern, limit)
        log.info("%s %s: %s, %.3f ms predicted, workspace %s (undivided %s)", where, kern.op,
                 plan.describe(kern.op), plan.time_ms,
                 format_size(kern.workspace_size),
                 f"{baseline.time_ms:.3f} ms" if baseline else "n/a")
        return plan


def _baseline(kern, limit):
    try:
        return undivided_plan(kern.bench, kern.n, limit)
    except PlanError:
        return None


def _first_unresolvable(kern, plan):
    for c in plan.chunks:
        try:
            kern.workspace_for(c.batch, c.algo, c.math)
        except Exception:
            return (c.batch, c.algo, c.math)
    return None


def _drop(kern, batch, algo, math):
    kern.bench = {b: [p for p in perfs if (b, p.algo, p.math) != (batch, algo, math)]
                  for b, perfs in kern.bench.items()}


def _fix_workspace(kern, plan):
    from ..plan.table import AlgoPerf
    new = {}
    for b, perfs in kern.bench.items():
        fixed = []
        for p in perfs:
            if any(c.batch == b and c.algo == p.algo and c.math == p.math for c in plan.chunks):
                p = AlgoPerf(p.algo, p.time_ms, kern.workspace_for(b, p.algo, p.math), p.math)
            fixed.append(p)
        new[b] = fixed
    kern.bench = new


def replan_kernel(kern, limit: int):
    """Plan ``kern`` again within ``limit`` bytes (its benchmark is kept)."""
    if kern.bench is None:
        raise PlanError(f"layer {kern.name!r}: kernel was never benchmarked")
    t0 = time.perf_counter()
    plan = _apply(kern, limit)
    _record_plan(kern, "replan", plan, limit, plan_s=time.perf_counter() - t0)
    return plan


def plan_network_kernels(kernels: List, budget: int, counts: Optional[Sequence[int]] = None):
    """Divide ``budget`` bytes among ``kernels`` (prepared with the ILP optimizer).

    ``counts[i]``: how many instances run kernel i's plan, each on its own workspace (Caffe:
    the layer's group count; default: each kernel's ``instances``); the budget covers all of
    them."""
    fronts = {}
    for i, k in enumerate(kernels):
        if k.desirable is None:
            raise PlanError(f"layer {k.name!r}: kernel was not prepared for the ILP optimizer")
        fronts[i] = k.desirable
    if counts is not None and len(counts) != len(kernels):
        raise PlanError(f"counts: {len(counts)} given for {len(kernels)} kernels")
    if counts is None:
        counts = [getattr(k, "instances", 1) or 1 for k in kernels]
    weights = {i: int(c) for i, c in enumerate(counts)}
    result = solve_workspace_division(fronts, budget, weights=weights)
    instances = sum(result.weights.values())
    per_kernel = budget // max(1, instances)
    for i, k in enumerate(kernels):
        _apply(k, result.choices[i].ws_bytes, first=result.choices[i])
    base = [_baseline(k, per_kernel) for k in kernels]
    bt = (sum(result.weights.get(i, 1) * b.time_ms for i, b in enumerate(base)) if all(base)
          else None)
    if bt is not None:
        log.info("ILP: %d kernels (%d instances), budget %s, %.3f ms predicted (undivided at "
                 "%s per instance: %.3f ms, expected speedup %.2fx), solved in %.3f s",
                 len(kernels), instances, format_size(budget), result.total_time_ms,
                 format_size(per_kernel), bt,
                 bt / result.total_time_ms if result.total_time_ms else float("nan"),
                 result.solve_seconds)
    else:
        log.info("ILP: %d kernels (%d instances), budget %s, %.3f ms predicted, solved in "
                 "%.3f s", len(kernels), instances, format_size(budget),
                 result.total_time_ms, result.solve_seconds)
    if records.records_path():
        records.append_record(records.ilp_record(kernels, result, budget, bt, per_kernel))
        for i, k in enumerate(kernels):
            records.append_record(records.plan_record(
                k, "ilp", result.choices[i], result.choices[i].ws_bytes, base[i],
                instances=result.weights.get(i, 1), budget_bytes=int(budget)))
    return result
