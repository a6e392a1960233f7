"""Planning for live kernels: what the C API (and so Caffe) calls.

:func:`plan_net` plans a host's whole net (``ucudnn_net_plan``): it creates each layer's kernels
in the core, benchmarks them through the cache (:func:`measure_for_plan`; spread over the GPUs
of ``$UCUDNN_BENCH_DEVICES`` first, :mod:`.spread`), plans them with the one network planner
(:func:`ucudnn.plan.network.plan_network`) and resolves every plan into its kernel's C arrays
(``Kernel.set_plan``, which asks cuDNN for each chunk's workspace). :func:`prepare_kernel`
does the same for one kernel under a per-kernel limit (``ucudnn_kernel_create``) and
:func:`replan_kernel` plans it again under a smaller one.

Every benchmark, every plan a kernel is given and every net planned is appended to
``$UCUDNN_RECORDS`` as a JSON line (:mod:`ucudnn.measure.records`; Note [Plan records] in
:mod:`ucudnn.caffe.records`): what programs read. The log lines (``UCUDNN_LOG=INFO``) say the
same for people, with cuDNN's algorithm names.

Note [Pruned search at run time]
    By default (settings ``search``, else ``$UCUDNN_SEARCH``, else pruned) a DP kernel of policy ``all``
    (no explicit sizes) is not benchmarked at every size 1..N: ``ucudnn.plan.search.
    pruned_sizes`` asks for the sizes whose result could still change the plan at its limit
    (Note [Pruned search]), each through the cache like any benchmark, and the kernel is
    planned over the sizes measured (not strictly); a later re-plan under a smaller limit
    uses the same sizes. The ILP and the shared arena need every limit's optimum (the
    desirable set), so they measure all sizes. ``UCUDNN_SEARCH=exhaustive`` measures every
    size (on the H200 the exhaustive benchmarks of a cold ResNet-18 at batch 256 took 345 s,
    the pruned search 27.1 s; the plans are within 0.45 % of each other on the recorded
    tables: results/h200/cold_planning/). Each round of the search is one benchmark call, and
    a call pays its own set-up (the workspace offered to cudnnFind allocated, Note [Workspace
    a plan may use] in :mod:`ucudnn.plan.settings`, and the buffers for its largest size
    filled), so the kernel keeps them for the whole search (``Kernel.hold_benchmark_buffers``)
    and frees them after it.

    Warm: replaying the cold search's rounds from the cache costs a DP per round. So the
    search first runs from every size the cache holds for the kernel (with its own start
    sizes), reading the cache only (``_search_cached``): after this kernel's own cold search
    that ends in its first round with the same sizes, so the same plan. Should it ask for a
    size the cache lacks (a first run; another layer of the same shape measured other sizes;
    a cold search that stopped checking its bounds once they met, so that from all its sizes
    at once the bounds ask for one more), it is abandoned and the search runs as cold,
    measuring what it asks for: a warm run never benchmarks what its cold run did not.

    An engine that the check of graph results refuses in a later round (Note [Refused
    engines] in ucudnn/measure/cache/schema.py) is already among the earlier rounds'
    measurements, and in the sizes they made the search ask for: the search then runs again,
    from the cache, where the refusal made those sizes' entries absent, so they are measured
    again with the engine refused.

Note [Falling back]
    A plan can fail to resolve (cuDNN rejects an algorithm for this exact descriptor, or needs
    more workspace than the cache said). The failing (size, algorithm) is then dropped from the
    kernel's benchmark, or its workspace corrected, and the kernel -- for a net: the whole net
    -- planned again, until every plan resolves; the undivided zero-workspace algorithm is the
    last resort. No kernel is left without a plan.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..plan.conv import ConvShape
from ..plan.dp import (DIVIDE_MARGIN, WINOGRAD_ALGOS, plan_kernel, undivided_plan,
                       without_choices)
from ..plan.layers import LayerSpec
from ..plan.network import NetworkPlan, plan_network
from ..plan.settings import PlanSettings, plan_workspace
from ..plan.table import AlgoPerf
from ..vocab import (ENGINE_FAMILIES, SEARCH, WINOGRAD_NOTES, InputError, PlanError, algo_name,
                     format_size)
from . import records

log = logging.getLogger("ucudnn")

#: the environment variable that picks the search over micro-batch sizes for policy ``all``
SEARCH_ENV = "UCUDNN_SEARCH"
#: GPUs to spread a net's benchmarks over, e.g. ``0,1`` (unset or empty: the current GPU).
DEVICES_ENV = "UCUDNN_BENCH_DEVICES"


def search_mode(value: Optional[str] = None) -> str:
    """``value``, else ``$UCUDNN_SEARCH``, else ``pruned`` (Note [Pruned search at run
    time]); an unknown name is an :class:`InputError` naming the variable."""
    where = "search" if value is not None else SEARCH_ENV
    v = (value if value is not None else os.environ.get(SEARCH_ENV, "")).strip()
    return SEARCH(v or "pruned", where)


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


# ---------------------------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------------------------

# Note [Graph focus in the pruned search]
#     The pruned search's first round measures its start sizes (start_sizes in
#     ucudnn/plan/search.py) with every engine config the core tries (Note [Graph choices
#     tried]); timing them took 77.5 of the 80.7 s of ResNet-18's cold search with the graph family on the
#     H200 (2219 sizes, results/h200/engines/cold_planning.csv). Every later round measures
#     sizes between those, where the configs that win are the ones that won around them:
#     so from the second round on the core tries, among the configs the heuristics propose
#     at each size, only those on the (time, workspace) front of some size measured so far
#     (``plan.search.front_configs``; ``Kernel.graph_focus``); where the heuristics propose
#     none of them, the configs of their engines; where none of those either, all
#     (``plan.search.focus_configs``). The core stops asking the heuristics' later modes
#     once a mode proposed a config of the focus. Focusing on whole engines (every knob
#     setting of a front engine) instead still took 93.8 s for ResNet-18 on the H200: the
#     heuristics were asked all three modes at every size (27.5 s) and each size still timed
#     most of its configs; focused on the front's configs it took 56.5 s (heuristics 4.4 s;
#     results/h200/engines/cold_planning.csv). The cache then holds fewer graph choices at those sizes than a
#     full measurement would; their plans are valid, and a policy that is not ``all`` never
#     reads them.


def _focused(kern, measure, graph: bool):
    """``measure`` for the pruned search, each round after the first focused on the graph
    engines of the front so far (Note [Graph focus in the pruned search])."""
    if not graph:
        return measure
    from ..plan.search import front_configs
    seen: Dict[int, list] = {}

    def run(want):
        if seen:
            kern.graph_focus = front_configs(seen) or None
        got = measure(want)
        seen.update(got)
        return got
    return run


def _excluded(kern) -> Callable:
    """What ``exclude_winograd`` drops of ``kern``'s choices: the legacy Winograd algorithms
    and the graph engines noted Winograd (Note [Winograd in both families] in
    ucudnn/plan/dp.py)."""
    algos = WINOGRAD_ALGOS[kern.op]

    def drop(p) -> bool:
        if p.engine:
            return bool(kern.engine_notes(p.engine) & WINOGRAD_NOTES)
        return p.algo in algos
    return drop


# Note [One open cache per net]
#     Opening the benchmark cache validates the file (PRAGMA quick_check, which reads all of
#     it, and the schema) and starts a write transaction: about 7 ms for ResNet-18's cache on
#     a CPU, a third of a warm ResNet-18 planned kernel by kernel (0.22 of 0.72 s, the fake
#     core replaying the H200 tables), and more as a shared cache grows. So whoever plans
#     several kernels opens each cache file once (``open_caches``) and hands it to every
#     kernel's benchmark; a single kernel opens its own. An open cache holds no lock between
#     its transactions, so other processes read and write it meanwhile, as during a kernel's
#     search (Note [Pruned search at run time]).
@contextlib.contextmanager
def open_caches():
    """``cache_of(path)``: the cache at ``path`` (None: the default), opened on first use and
    closed on leaving (Note [One open cache per net])."""
    from .cache import BenchCache
    with contextlib.ExitStack() as stack:
        opened: Dict[Optional[str], object] = {}

        def cache_of(path):
            if path not in opened:
                opened[path] = stack.enter_context(BenchCache(path))
            return opened[path]
        yield cache_of


def _opened(cache, path):
    """``cache`` left open, or the cache at ``path`` opened for a ``with`` block."""
    from .cache import BenchCache
    return contextlib.nullcontext(cache) if cache is not None else BenchCache(path)


def measure_for_plan(kern, settings: PlanSettings, *, workspace_cap: Optional[int] = None,
                     cache=None) -> dict:
    """Benchmark ``kern`` (through the cache) for the plan its ``settings`` ask for, and set
    ``kern.bench``, ``kern.settings`` and ``kern.bench_record``; writes the "bench" plan
    record and returns its fields. Measuring in advance with the same settings (Note
    [Benchmarks over several GPUs in one process] in :mod:`.spread`) leaves nothing to measure
    when the kernel is planned. ``cache``: the open cache of ``settings.cache_path`` to use
    and leave open (Note [One open cache per net]); by default the call opens its own."""
    from .bench import cache_key, measure
    where = f"layer {kern.name!r}"
    search = search_mode(settings.search)
    pruned = (search == "pruned" and settings.policy == "all" and settings.sizes is None
              and settings.optimizer == "dp")
    cands = settings.candidate_sizes(kern.n, where)
    measured: List[int] = []
    drop = _excluded(kern) if settings.exclude_winograd else None

    def measure_sizes(want, cache):
        return measure(kern, want, repeats=settings.repeats, cache_path=settings.cache_path,
                       workspace_cap=workspace_cap, progress=measured.append, cache=cache,
                       engines=settings.engines)

    spent0 = dict(kern.benchmark_seconds)
    t0 = time.perf_counter()
    rounds = None
    if pruned:
        from ..plan.search import pruned_sizes
        kern.hold_benchmark_buffers(True)        # one set-up of the buffers for all rounds
        try:
            with _opened(cache, settings.cache_path) as cache:
                def usable(got):
                    # every size asked stays a key (the search needs one)
                    if drop is None:
                        return got
                    return {b: [p for p in perfs if not drop(p)] for b, perfs in got.items()}

                keys = [cache_key(kern.shape, kern.op, kern.math, kern.dtype,
                                  workspace_cap=workspace_cap, family=family)
                        for family in ENGINE_FAMILIES[settings.engines]]
                graph = settings.engines != "legacy"
                while True:
                    refused = kern.refused_engines if graph else {}
                    res = _search_cached(cache, keys, kern.n, settings.limit, usable, where,
                                         refused=refused)
                    if res is None:
                        res = pruned_sizes(_focused(kern, lambda want: usable(
                            measure_sizes(want, cache)), graph), kern.n, [settings.limit],
                            margin=DIVIDE_MARGIN, name=where)
                    # an engine refused in a later round was planned from in the earlier
                    # ones: search again (Note [Refused engines] in the cache's schema.py)
                    if not graph or kern.refused_engines.keys() == refused.keys():
                        break
        finally:
            kern.hold_benchmark_buffers(False)
            if settings.engines != "legacy":
                kern.graph_focus = None
        kern.bench, cands, rounds = res.bench, res.measured, len(res.rounds)
    else:
        kern.bench = measure_sizes(cands, cache)
        if drop is not None:
            kern.bench = without_choices(kern.bench, drop)
    bench = {"bench_s": time.perf_counter() - t0, "sizes": len(cands),
             "sizes_benchmarked": len(set(measured)),
             "sizes_cached": len(cands) - len(set(measured)),
             "search": "pruned" if pruned else "exhaustive", "search_rounds": rounds,
             "benchmark_seconds": {k: round(v - spent0.get(k, 0.0), 6)
                                   for k, v in kern.benchmark_seconds.items()}}
    kern.settings, kern.bench_record = settings, bench
    if records.records_path():
        records.append_record({"kind": "bench", **records.kernel_fields(kern),
                               **records.settings_fields(kern), "repeats": settings.repeats,
                               "cache_path": settings.cache_path,
                               "exclude_winograd": settings.exclude_winograd, **bench})
    return bench


class _Uncached(Exception):
    """The cache-only search asked for a size the cache lacks."""


def _search_cached(cache, keys, n: int, limit: int, usable, where: str, refused=()):
    """Note [Pruned search at run time]: the pruned search from every size the cache holds
    for all of ``keys`` (one per family of choices), reading the cache only; None where it
    would have to measure. A size whose entry holds a config of an engine of ``refused`` (a
    refusal a read-only cache could not store: Note [Refused engines]) counts as missing."""
    from ..plan.search import pruned_sizes, start_sizes
    from .bench import holds_refused, merge_families
    known = set.intersection(*({b for b in cache.batches(key) if 1 <= b <= n}
                               for key in keys))
    if not known:
        return None

    def cached_only(want):
        parts = [cache.get_many(key, want) for key in keys]
        if any(len(got) < len(set(want)) for got in parts) or (refused and any(
                holds_refused(perfs, refused) for got in parts for perfs in got.values())):
            raise _Uncached()
        return usable(merge_families(parts))
    try:
        return pruned_sizes(cached_only, n, [limit], start=set(start_sizes(n)) | known,
                            margin=DIVIDE_MARGIN, name=where)
    except _Uncached:
        return None


def _within_batch(settings: PlanSettings, n: int, name: str) -> PlanSettings:
    """``settings`` without explicit micro-batch sizes above the mini-batch ``n`` (only ``n``
    where none is left): a host reshapes its nets (pycaffe's ``net.reshape()``), and sizes
    written for one batch must not stop another. The command line refuses them instead."""
    if settings.sizes is None or max(settings.sizes) <= n:
        return settings
    kept = tuple(b for b in settings.sizes if b <= n) or (n,)
    log.warning("layer %r: micro_batch_size %s above the mini-batch %d left out", name,
                ",".join(str(b) for b in settings.sizes if b > n), n)
    return settings.replace(sizes=kept)


def _strict(kern) -> bool:
    """Whether ``kern``'s plans need every candidate size measured (not after a pruned
    search, which measured only some)."""
    return (kern.bench_record or {}).get("search") != "pruned"


# ---------------------------------------------------------------------------------------------
# resolving plans (Note [Falling back])
# ---------------------------------------------------------------------------------------------

def _resolve(kern, plan) -> bool:
    """Give ``kern`` ``plan``; False (and ``kern.bench`` corrected) where it cannot run as
    planned, so that the caller plans again."""
    where = f"layer {kern.name!r}"
    try:
        kern.set_plan(plan)
    except Exception as e:  # a CudnnError from the workspace query, typically
        bad = _first_unresolvable(kern, plan)
        if bad is None:
            raise
        what = (f"engine config {bad[3]}" if bad[3] else
                f"algorithm {algo_name(kern.op, bad[1])} ({bad[1]})")
        log.warning("%s %s: dropping micro-batch %d %s: %s", where, kern.op, bad[0], what, e)
        kern.bench = {b: [p for p in perfs if (b, p.algo, p.math, p.engine) != bad]
                      for b, perfs in kern.bench.items()}
        return False
    if kern.workspace_size > plan.ws_bytes:
        # the cache under-stated the workspace: record what cuDNN says
        log.warning("%s %s: cuDNN needs %s for the plan, the benchmark said %s; planning again",
                    where, kern.op, format_size(kern.workspace_size), format_size(plan.ws_bytes))
        _fix_workspace(kern, plan)
        return False
    return True


def _first_unresolvable(kern, plan):
    for c in plan.chunks:
        try:
            kern.workspace_for(c.batch, c.algo, c.math, c.engine)
        except Exception:
            return (c.batch, c.algo, c.math, c.engine)
    return None


def _fix_workspace(kern, plan):
    chosen = {(c.batch, c.algo, c.math, c.engine) for c in plan.chunks}
    kern.bench = {b: [AlgoPerf(p.algo, p.time_ms, kern.workspace_for(b, p.algo, p.math, p.engine),
                               p.math, p.engine)
                      if (b, p.algo, p.math, p.engine) in chosen else p for p in perfs]
                  for b, perfs in kern.bench.items()}


def _baseline(kern, limit):
    try:
        return undivided_plan(kern.bench, kern.n, limit)
    except PlanError:
        return None


def _describe(kern, plan, limit) -> str:
    base = _baseline(kern, limit)
    return (f"{plan.describe(kern.op)}, {plan.time_ms:.3f} ms predicted, workspace "
            f"{format_size(kern.workspace_size)} (undivided "
            f"{f'{base.time_ms:.3f} ms' if base else 'n/a'})")


# ---------------------------------------------------------------------------------------------
# one kernel
# ---------------------------------------------------------------------------------------------

def _plan_alone(kern, limit: int):
    """The DP's plan of ``kern`` within ``limit``, resolved (Note [Falling back])."""
    s = kern.settings
    while True:
        plan = plan_kernel(kern.bench, kern.n, s.policy, limit, s.sizes, strict=_strict(kern),
                           name=f"layer {kern.name!r}")
        if _resolve(kern, plan):
            log.info("layer %r %s: %s", kern.name, kern.op, _describe(kern, plan, limit))
            return plan


def prepare_kernel(kern, settings: PlanSettings, *, workspace_cap: Optional[int] = None,
                   cache=None):
    """Benchmark ``kern`` and give it the DP's plan within ``settings.limit``; the optimizers
    that plan a net's kernels together need :func:`plan_net`. ``workspace_cap``: the
    workspace its benchmark offers (default: the limit, Note [Workspace a plan may use]).
    ``cache``: as for :func:`measure_for_plan`."""
    if settings.optimizer != "dp":
        raise InputError(f"layer {kern.name!r}: field 'optimizer': {settings.optimizer} plans "
                         "a net's kernels together (ucudnn_net_plan); one kernel takes dp")
    settings = _within_batch(settings, kern.n, kern.name)
    if workspace_cap is None:
        from .cache import DEFAULT_WORKSPACE_CAP
        workspace_cap = min(settings.limit, DEFAULT_WORKSPACE_CAP)
    bench = measure_for_plan(kern, settings, workspace_cap=workspace_cap, cache=cache)
    t1 = time.perf_counter()
    plan = _plan_alone(kern, settings.limit)
    plan_s = time.perf_counter() - t1
    kern.timing = {"bench_s": bench["bench_s"], "plan_s": plan_s}
    _record_plan(kern, "dp", plan, settings.limit, _baseline(kern, settings.limit),
                 plan_s=plan_s, optimizer="dp", **bench)
    return kern


def replan_kernel(kern, limit: int):
    """Plan ``kern`` again within ``limit`` bytes (its benchmark is kept)."""
    if kern.bench is None:
        raise PlanError(f"layer {kern.name!r}: kernel was never benchmarked")
    t0 = time.perf_counter()
    plan = _plan_alone(kern, limit)
    _record_plan(kern, "replan", plan, limit, _baseline(kern, limit),
                 plan_s=time.perf_counter() - t0, optimizer="dp")
    return plan


def _record_plan(kern, stage, plan, limit, baseline, **extra):
    if records.records_path():
        records.append_record(records.plan_record(kern, stage, plan, limit, baseline, **extra))


# ---------------------------------------------------------------------------------------------
# a net
# ---------------------------------------------------------------------------------------------

@dataclass
class LiveNet:
    """A planned net: the plan (with every kernel's slot) and the live kernel of every
    ``(layer, op)``."""
    plan: NetworkPlan
    kernels: Dict[Tuple[str, str], object]

    @property
    def workspace_bytes(self) -> int:
        return self.plan.workspace_bytes

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes or 0


def _measure_net(kernels, settings: Mapping[str, PlanSettings], layers) -> Dict:
    """Benchmark every kernel (spread over ``$UCUDNN_BENCH_DEVICES`` first when set), each
    offered the workspace its plans may use (Note [Workspace a plan may use])."""
    from .cache import DEFAULT_WORKSPACE_CAP
    offered = {name: min(need, DEFAULT_WORKSPACE_CAP)
               for name, need in plan_workspace(settings, layers).items()}
    devices = os.environ.get(DEVICES_ENV, "").strip()
    if devices:
        from .spread import Job, measure_on_devices, parse_devices
        gpus = parse_devices(devices, f"${DEVICES_ENV}")
        jobs = [Job(l, op, settings[l.name], offered[l.name]) for l in layers for op in l.ops]
        summary = measure_on_devices(jobs, gpus, where=f"${DEVICES_ENV}")
        log.info("%d kernels measured over GPUs %s in %.1f s", len(jobs), devices,
                 summary["seconds"])
    with open_caches() as cache_of:
        return {key: measure_for_plan(kern, settings[key[0]],
                                      workspace_cap=offered[key[0]],
                                      cache=cache_of(settings[key[0]].cache_path))
                for key, kern in kernels.items()}


def plan_net(layers: Sequence[LayerSpec], settings: Mapping[str, PlanSettings], *,
             cap: Optional[int] = None, name: str = "net") -> LiveNet:
    """Create, benchmark, plan (Note [One network planner] in :mod:`ucudnn.plan.network`) and
    resolve the kernels of ``layers`` on the current GPU; ``cap``: plan within that many bytes
    in all (after a host could not allocate the previous plan's)."""
    from .bench import core, device_info
    Kernel = core().Kernel
    settings = {l.name: _within_batch(settings[l.name], l.n, l.name) for l in layers}
    memory = device_info()["memory_total"]
    for l in layers:
        budget = settings[l.name].budget
        if budget is not None and budget > memory:
            raise PlanError(f"layer {l.name!r}: field 'ucudnn_param.total_workspace': "
                            f"{budget} B is more than the GPU's {memory} B of memory")
    for l in layers:
        if l.count != 1:
            raise InputError(f"layer {l.name!r}: field 'count': a live net describes each "
                             f"layer once, got {l.count}")
    kernels = {(l.name, op): Kernel(ConvShape.from_layer(l), op, l.n, settings[l.name].dtype,
                                    settings[l.name].math, l.name, l.groups)
               for l in layers for op in l.ops}
    bench = _measure_net(kernels, settings, layers)
    t0 = time.perf_counter()
    while True:
        plan = plan_network(layers, {k: kern.bench for k, kern in kernels.items()}, settings,
                            strict=lambda layer, op: _strict(kernels[layer, op]), cap=cap)
        if all([_resolve(kernels[k.layer, k.op], k.plan) for k in plan.kernels]):
            break
    plan_s = time.perf_counter() - t0
    for k in plan.kernels:
        kern = kernels[k.layer, k.op]
        kern.timing = {"bench_s": bench[k.layer, k.op]["bench_s"], "plan_s": plan_s}
        log.info("layer %r %s: %s", k.layer, k.op, _describe(kern, k.plan, k.limit))
        _record_plan(kern, k.optimizer, k.plan, k.limit, k.baseline, plan_s=plan_s,
                     optimizer=k.optimizer, slot=k.slot, **bench[k.layer, k.op])
    log.info("net %s: %d kernels, %.3f ms predicted, workspace %s, shared arena %s, planned "
             "in %.3f s", name, len(plan.kernels), plan.time_ms,
             format_size(plan.workspace_bytes),
             format_size(plan.arena_bytes) if plan.arena_bytes is not None else "none", plan_s)
    if records.records_path():
        records.append_record(records.net_record(name, plan, kernels, plan_s, cap))
    return LiveNet(plan, kernels)
