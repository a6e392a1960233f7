"""Measuring for a plan: every benchmark a plan of live kernels needs, through the cache.

:func:`measure_for_plan` measures one core ``Kernel`` for the plan its settings ask for (every
candidate size, or the pruned search: Note [Pruned search at run time]); :func:`measure_net`
measures a net's kernels, each offered the workspace its plans may use, first spread over the
GPUs of ``$UCUDNN_BENCH_DEVICES`` (:func:`measure_on_devices`: Note [Benchmarks over several
GPUs in one process]); :func:`open_caches` opens each cache file once for them all (Note [One
open cache per net]). :func:`core_kernel` creates the kernel Caffe runs for a layer, and
:func:`kernel_cost` says what measuring it costs. Planning the kernels measured here is
:mod:`.live`'s.

Note [Pruned search at run time]
    By default (settings ``search``, else ``$UCUDNN_SEARCH``, else pruned) a DP kernel of policy
    ``all`` (no explicit sizes) is not benchmarked at every size 1..N: ``ucudnn.plan.search.
    pruned_sizes`` asks for the sizes whose result could still change the plan at its limit
    (Note [Pruned search]), each through the cache like any benchmark, and the kernel is planned
    over the sizes measured (not strictly); a later re-plan under a smaller limit uses the same
    sizes. The ILP and the shared arena need every limit's optimum (the desirable set), so they
    measure all sizes. ``UCUDNN_SEARCH=exhaustive`` measures every size (on the H200 the
    exhaustive benchmarks of a cold ResNet-18 at batch 256 took 345 s, the pruned search 27.1 s;
    the plans are within 0.45 % of each other on the recorded tables:
    results/h200/cold_planning/). Each round of the search is one benchmark call, and a call
    pays its own set-up (the workspace offered to cudnnFind allocated, Note [Workspace a plan
    may use] in :mod:`ucudnn.plan.settings`, and the buffers for its largest size filled), so
    the kernel keeps them for the whole search (``Kernel.hold_benchmark_buffers``) and frees
    them after it.

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

Note [Benchmarks over several GPUs in one process]
    A net planned through the C API (:func:`ucudnn.measure.live.plan_net`, which Caffe's net
    calls once) measures its kernels on the net's GPU. With ``$UCUDNN_BENCH_DEVICES`` (e.g.
    ``0,1``) :func:`measure_on_devices` first measures them over those GPUs, with the settings
    each kernel will be planned with: one thread per GPU (``_core.set_device``; the core keeps
    cuDNN handles per thread and device and one benchmark lock per device, and its cudnnFind
    calls run without the GIL, so the GPUs measure at once), each taking the costliest kernel
    left (largest first, :func:`kernel_cost`; kernels identical for the cache -- layers of one
    shape and settings -- once, since two threads would both miss it), all through
    :func:`measure_for_plan` into the one benchmark cache. The net's planning then finds
    everything there. The GPUs must be of one model: the cache keys measurements on it. Threads
    rather than the processes of ``ucudnn bench --devices`` (Note [Benchmarks over several GPUs]
    in :mod:`ucudnn.cli.bench`): inside Caffe's embedded interpreter ``sys.executable`` is not a
    Python to start, and the GIL-bound part of a benchmark (the pruned search's bookkeeping) is
    small next to cudnnFind.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from math import prod
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from ..plan.conv import ConvShape
from ..plan.dp import (DIVIDE_MARGIN, WINOGRAD_ALGOS, determinism_problem, deterministic_only,
                       without_choices)
from ..plan.layers import LayerSpec
from ..plan.search import front_configs, pruned_sizes, start_sizes
from ..plan.settings import PlanSettings, plan_workspace
from ..vocab import ENGINE_FAMILIES, SEARCH, WINOGRAD_NOTES, InputError, PlanError
from . import bench, records
from . import cache as cache_db
from .planner_state import planner_state

__all__ = ["SEARCH_ENV", "DEVICES_ENV", "search_mode", "measure_for_plan", "measure_net",
           "open_caches", "core_kernel", "kernel_cost", "Job", "parse_devices",
           "measure_on_devices"]

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


# Note [Graph focus in the pruned search]
#     The pruned search's first round measures its start sizes (start_sizes in
#     ucudnn/plan/search.py) with every engine config the core tries (Note [Graph choices
#     tried]); timing them took 77.5 of the 80.7 s of ResNet-18's cold search with the graph
#     family on the H200 (2219 sizes, results/h200/engines/cold_planning.csv). Every later round
#     measures sizes between those, where the configs that win are the ones that won around
#     them: so from the second round on the core tries, among the configs the heuristics propose
#     at each size, only those on the (time, workspace) front of some size measured so far
#     (``plan.search.front_configs``; ``Kernel.graph_focus``); where the heuristics propose none
#     of them, the configs of their engines; where none of those either, all
#     (``plan.search.focus_configs``). The core stops asking the heuristics' later modes once a
#     mode proposed a config of the focus. Focusing on whole engines (every knob setting of a
#     front engine) instead still took 93.8 s for ResNet-18 on the H200: the heuristics were
#     asked all three modes at every size (27.5 s) and each size still timed most of its
#     configs; focused on the front's configs it took 56.5 s (heuristics 4.4 s;
#     results/h200/engines/cold_planning.csv). The cache then holds fewer graph choices at those
#     sizes than a full measurement would; their plans are valid, and a policy that is not
#     ``all`` never reads them.


def _focused(kern, measure, graph: bool):
    """``measure`` for the pruned search, each round after the first focused on the graph
    engines of the front so far (Note [Graph focus in the pruned search])."""
    if not graph:
        return measure
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
    with contextlib.ExitStack() as stack:
        opened: Dict[Optional[str], object] = {}

        def cache_of(path):
            if path not in opened:
                opened[path] = stack.enter_context(cache_db.BenchCache(path))
            return opened[path]
        yield cache_of


def _opened(cache, path):
    """``cache`` left open, or the cache at ``path`` opened for a ``with`` block."""
    return contextlib.nullcontext(cache) if cache is not None else cache_db.BenchCache(path)


def measure_for_plan(kern, settings: PlanSettings, *, workspace_cap: Optional[int] = None,
                     cache=None) -> dict:
    """Benchmark ``kern`` (through the cache) for the plan its ``settings`` ask for, and set
    the ``bench``, ``settings`` and ``bench_record`` of its planner state
    (:func:`.planner_state.planner_state`); writes the "bench" plan record and returns its
    fields. Measuring in advance with the same settings (Note [Benchmarks over several GPUs in
    one process]) leaves nothing to measure when the kernel is planned. ``cache``: the open
    cache of ``settings.cache_path`` to use and leave open (Note [One open cache per net]); by
    default the call opens its own. With ``settings.deterministic`` the planner state keeps
    the deterministic choices only, and a kernel without any is a :class:`PlanError` naming
    it (Note [Deterministic plans] in ucudnn/plan/dp.py)."""
    where = f"layer {kern.name!r}"
    search = search_mode(settings.search)
    pruned = (search == "pruned" and settings.policy == "all" and settings.sizes is None
              and settings.optimizer == "dp")
    cands = settings.candidate_sizes(kern.n, where)
    measured: List[int] = []
    drop = _excluded(kern) if settings.exclude_winograd else None
    deterministic = settings.deterministic
    seen: Dict[int, list] = {}          # every choice measured, for a deterministic plan's error

    def measure_sizes(want, cache):
        return bench.measure(kern, want, repeats=settings.repeats, cache_path=settings.cache_path,
                       workspace_cap=workspace_cap, progress=measured.append, cache=cache,
                       engines=settings.engines, determinism=deterministic)

    def no_deterministic(bench_):
        problem = determinism_problem(bench_) if deterministic else None
        if problem is None:
            return None
        dims = "x".join(map(str, kern.shape.x_dims(kern.n)))
        return PlanError(f"{where} op {kern.op} (input {dims}, filter "
                         f"{'x'.join(map(str, kern.shape.w_dims()))}): {problem}")

    state = planner_state(kern)
    spent0 = dict(kern.benchmark_seconds)
    t0 = time.perf_counter()
    rounds = None
    if pruned:
        kern.hold_benchmark_buffers(True)        # one set-up of the buffers for all rounds
        try:
            with _opened(cache, settings.cache_path) as cache:
                def usable(got):
                    # every size asked stays a key (the search needs one)
                    if deterministic:
                        seen.update(got)
                        got = deterministic_only(got)
                    if drop is None:
                        return got
                    return {b: [p for p in perfs if not drop(p)] for b, perfs in got.items()}

                keys = [bench.cache_key(kern.shape, kern.op, kern.math, kern.dtype,
                                  workspace_cap=workspace_cap, family=family)
                        for family in ENGINE_FAMILIES[settings.engines]]
                graph = settings.engines != "legacy"
                while True:
                    refused = kern.refused_engines if graph else {}
                    res = _search_cached(cache, keys, kern.n, settings.limit, usable, where,
                                         refused=refused, determinism=deterministic)
                    if res is None:
                        try:
                            res = pruned_sizes(_focused(kern, lambda want: usable(
                                measure_sizes(want, cache)), graph), kern.n,
                                [settings.limit], margin=DIVIDE_MARGIN, name=where)
                        except PlanError:
                            why = no_deterministic(seen)
                            if why is not None:
                                raise why from None
                            raise
                    # an engine refused in a later round was planned from in the earlier
                    # ones: search again (Note [Refused engines] in the cache's schema.py)
                    if not graph or kern.refused_engines.keys() == refused.keys():
                        break
        finally:
            kern.hold_benchmark_buffers(False)
            if settings.engines != "legacy":
                kern.graph_focus = None
        state.bench, cands, rounds = res.bench, res.measured, len(res.rounds)
    else:
        state.bench = measure_sizes(cands, cache)
        if deterministic:
            why = no_deterministic(state.bench)
            if why is not None:
                raise why
            state.bench = deterministic_only(state.bench)
        if drop is not None:
            state.bench = without_choices(state.bench, drop)
    fields = {"bench_s": time.perf_counter() - t0, "sizes": len(cands),
             "sizes_benchmarked": len(set(measured)),
             "sizes_cached": len(cands) - len(set(measured)),
             "search": "pruned" if pruned else "exhaustive", "search_rounds": rounds,
             "benchmark_seconds": {k: round(v - spent0.get(k, 0.0), 6)
                                   for k, v in kern.benchmark_seconds.items()}}
    state.settings, state.bench_record = settings, fields
    if records.records_path():
        records.append_record({"kind": "bench", **records.kernel_fields(kern),
                               **records.settings_fields(kern), "repeats": settings.repeats,
                               "cache_path": settings.cache_path,
                               "exclude_winograd": settings.exclude_winograd,
                               "deterministic": settings.deterministic, **fields})
    return fields


class _Uncached(Exception):
    """The cache-only search asked for a size the cache lacks."""


def _search_cached(cache, keys, n: int, limit: int, usable, where: str, refused=(),
                   determinism: bool = False):
    """Note [Pruned search at run time]: the pruned search from every size the cache holds
    for all of ``keys`` (one per family of choices), reading the cache only; None where it
    would have to measure. A size whose entry holds a config of an engine of ``refused`` (a
    refusal a read-only cache could not store: Note [Refused engines]), or with
    ``determinism`` a choice of unknown determinism (Note [Deterministic plans] in
    ucudnn/plan/dp.py), counts as missing."""
    known = set.intersection(*({b for b in cache.batches(key) if 1 <= b <= n}
                               for key in keys))
    if not known:
        return None

    def cached_only(want):
        parts = [cache.get_many(key, want) for key in keys]
        if any(len(got) < len(set(want)) for got in parts) or (refused and any(
                bench.holds_refused(perfs, refused) for got in parts for perfs in got.values())):
            raise _Uncached()
        if determinism and any(bench.unknown_determinism(got) for got in parts):
            raise _Uncached()
        return usable(bench.merge_families(parts))
    try:
        return pruned_sizes(cached_only, n, [limit], start=set(start_sizes(n)) | known,
                            margin=DIVIDE_MARGIN, name=where)
    except _Uncached:
        return None


def measure_net(kernels, settings: Mapping[str, PlanSettings], layers) -> Dict:
    """Benchmark every kernel of ``kernels`` (``{(layer, op): core Kernel}`` of ``layers``)
    with its layer's ``settings`` (spread over ``$UCUDNN_BENCH_DEVICES`` first when set), each
    offered the workspace its plans may use (Note [Workspace a plan may use]); what
    :func:`measure_for_plan` returns, by ``(layer, op)``."""
    offered = {name: min(need, cache_db.DEFAULT_WORKSPACE_CAP)
               for name, need in plan_workspace(settings, layers).items()}
    devices = os.environ.get(DEVICES_ENV, "").strip()
    if devices:
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


# ---------------------------------------------------------------------------------------------
# kernels spread over several GPUs (Note [Benchmarks over several GPUs in one process])
# ---------------------------------------------------------------------------------------------

def core_kernel(layer, op: str, dtype: str = "float32", math: str = "default"):
    """The core ``Kernel`` that Caffe runs for ``layer``'s ``op`` (one group call, Note
    [Grouped layers] in :mod:`ucudnn.plan.conv`), on the calling thread's current GPU."""
    return bench.core().Kernel(ConvShape.from_layer(layer), op, layer.n, dtype, math,
                               layer.name, layer.groups)


def kernel_cost(layer, op: str, sizes: Sequence[int]) -> float:
    """A kernel's benchmark cost, up to a constant: cudnnFind's time at size b grows about in
    proportion to b (results/h200/cold_planning/) and to the convolution's work per sample
    (multiply-adds of the one group call that is benchmarked)."""
    per_sample = (layer.c // layer.groups) * (layer.k // layer.groups) \
        * prod(layer.kernel) * prod(layer.out_spatial)
    return float(per_sample) * sum(sizes)


@dataclass(frozen=True)
class Job:
    """One kernel to measure: ``layer``'s ``op`` with the settings it will be planned with and
    the workspace its benchmark offers (None: the core's default; Note [Workspace a plan may
    use] in :mod:`ucudnn.plan.settings`)."""
    layer: LayerSpec
    op: str
    settings: PlanSettings = field(default_factory=PlanSettings)
    workspace_cap: Optional[int] = None

    def identity(self) -> tuple:
        """What the benchmark cache sees of the job (the layer's name aside)."""
        return (ConvShape.from_layer(self.layer), self.op, self.layer.n, self.settings,
                self.workspace_cap)

    def cost(self) -> float:
        return kernel_cost(self.layer, self.op,
                           self.settings.candidate_sizes(self.layer.n, self.layer.name))


def parse_devices(text: str, where: str) -> List[int]:
    """GPU indices from ``0,1``; :class:`InputError` naming ``where`` otherwise."""
    out: List[int] = []
    for part in str(text).split(","):
        try:
            v = int(part.strip())
        except ValueError:
            v = -1
        if v < 0 or v in out:
            raise InputError(f"{where}: expected distinct GPU indices such as 0,1, got {text!r}")
        out.append(v)
    return out


def measure_on_devices(jobs: Sequence[Job], devices: Sequence[int], *,
                       where: str = "devices",
                       progress: Optional[Callable[[str], None]] = None) -> dict:
    """Measure ``jobs`` over ``devices`` (Note [Benchmarks over several GPUs in one process]),
    identical kernels once; returns ``{"devices": {device: {"gpu", "kernels",
    "sizes_benchmarked", "seconds"}}, "seconds", "distinct"}``. Raises :class:`InputError`
    naming ``where`` for a device that does not exist or GPUs of different models; a failure
    on a device is raised after every thread ended (what was measured is in the cache)."""
    if not devices:
        raise InputError(f"{where}: no GPU given")
    count = bench.core().device_count()
    missing = [d for d in devices if d >= count]
    if missing:
        raise InputError(f"{where}: no GPU {missing[0]} ({count} visible)")
    gpus: Dict[int, str] = {}
    errors: List[tuple] = []

    def run_each(target):
        threads = [threading.Thread(target=target, args=(d,), name=f"ucudnn-bench-gpu{d}")
                   for d in devices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def identify(device):
        try:
            bench.set_device(device)
            gpus[device] = bench.device_info()["gpu"]
        except BaseException as e:    # noqa: BLE001 - reported after the join
            errors.append((device, e))

    run_each(identify)
    if errors:
        device, e = errors[0]
        raise InputError(f"{where}: GPU {device}: {e}") from e
    if len(set(gpus.values())) > 1:
        raise InputError(f"{where}: the GPUs differ ("
                         + ", ".join(f"{d}: {gpus[d]}" for d in devices)
                         + "); the benchmark cache keys measurements on the GPU model")
    # identical kernels (layers of one shape and settings) are measured once: two threads
    # would both miss the cache and measure the same sizes
    distinct: Dict[tuple, Job] = {}
    for job in jobs:
        distinct.setdefault(job.identity(), job)
    queue = sorted(distinct.values(), key=lambda j: (-j.cost(), j.layer.name, j.op))
    lock = threading.Lock()
    done = {d: {"gpu": gpus[d], "kernels": 0, "sizes_benchmarked": 0, "seconds": 0.0}
            for d in devices}
    t0 = time.perf_counter()

    def work(device):
        try:
            bench.set_device(device)
            while True:
                with lock:
                    if not queue or errors:
                        return
                    job = queue.pop(0)
                t = time.perf_counter()
                kern = core_kernel(job.layer, job.op, job.settings.dtype, job.settings.math)
                m = measure_for_plan(kern, job.settings, workspace_cap=job.workspace_cap)
                with lock:
                    d = done[device]
                    d["kernels"] += 1
                    d["sizes_benchmarked"] += m["sizes_benchmarked"]
                    d["seconds"] += time.perf_counter() - t
                if progress is not None:
                    progress(f"GPU {device}: {job.layer.name} {job.op}: "
                             f"{m['sizes_benchmarked']} of {m['sizes']} sizes measured")
        except BaseException as e:    # noqa: BLE001 - reported after the join
            with lock:
                errors.append((device, e))

    run_each(work)
    if errors:
        device, e = errors[0]
        raise type(e)(f"{where}: GPU {device}: {e}") if isinstance(e, InputError) else e
    return {"devices": done, "seconds": time.perf_counter() - t0, "distinct": len(distinct)}
