"""Plans for live kernels (the core's ``Kernel`` objects): what the C API's calls do
(through :mod:`.runtime`), and ``ucudnn bench --search``.

:func:`plan_net` plans a host's whole net (``ucudnn_net_plan``): it creates each layer's kernels
in the core, benchmarks them through the cache (:func:`ucudnn.measure.for_plan.measure_net`),
plans them with the one network planner (:func:`ucudnn.plan.network.plan_network`) and resolves
every plan into its kernel's C arrays (``Kernel.set_plan``, which asks cuDNN for each chunk's
workspace). :func:`prepare_kernel` does the same for one kernel under a per-kernel limit
(``ucudnn_kernel_create``), :func:`plan_kernels` for several kernels one by one, and
:func:`replan_kernel` plans a kernel again under a smaller limit.

Every benchmark, every plan a kernel is given and every net planned is appended to
``$UCUDNN_RECORDS`` as a JSON line (:mod:`ucudnn.measure.records`; Note [Plan records] in
:mod:`ucudnn.caffe.records`): what programs read. The log lines (``UCUDNN_LOG=INFO``) say the
same for people, with cuDNN's algorithm names.

Note [Falling back]
    A plan can fail to resolve (cuDNN rejects an algorithm for this exact descriptor, or needs
    more workspace than the cache said). The failing (size, algorithm) is then dropped from the
    kernel's benchmark, or its workspace corrected, and the kernel -- for a net: the whole net
    -- planned again, until every plan resolves; the undivided zero-workspace algorithm is the
    last resort. No kernel is left without a plan.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..plan.conv import ConvShape
from ..plan.dp import plan_kernel, undivided_plan
from ..plan.layers import LayerSpec
from ..plan.network import NetworkPlan, plan_network
from ..plan.settings import PlanSettings
from ..vocab import InputError, PlanError, algo_name, format_size
from . import bench, records
from .cache import DEFAULT_WORKSPACE_CAP
from .for_plan import core_kernel, measure_for_plan, measure_net, open_caches
from .planner_state import planner_state

__all__ = ["LiveNet", "plan_net", "prepare_kernel", "plan_kernels", "replan_kernel",
           "log_from_environment"]

log = logging.getLogger("ucudnn")


def log_from_environment() -> None:
    """``UCUDNN_LOG=INFO`` (or DEBUG, WARNING): the core's messages on stderr, for hosts
    such as Caffe that do not configure Python's logging (``ucudnn reproduce`` sets it).
    Called on importing :mod:`.runtime` (the C API's module) and by :func:`plan_kernels`,
    which runs what the C API runs for scripts and ``ucudnn bench --search``."""
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
    return (planner_state(kern).bench_record or {}).get("search") != "pruned"


# ---------------------------------------------------------------------------------------------
# resolving plans (Note [Falling back])
# ---------------------------------------------------------------------------------------------

def _resolve(kern, plan) -> bool:
    """Give ``kern`` ``plan``; False (and the benchmark of its planner state corrected)
    where it cannot run as planned, so that the caller plans again."""
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
        state = planner_state(kern)
        state.bench = {b: [p for p in perfs if (b, p.algo, p.math, p.engine) != bad]
                       for b, perfs in state.bench.items()}
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
    state = planner_state(kern)
    state.bench = {b: [dataclasses.replace(p, ws_bytes=kern.workspace_for(b, p.algo, p.math,
                                                                          p.engine))
                       if (b, p.algo, p.math, p.engine) in chosen else p for p in perfs]
                   for b, perfs in state.bench.items()}


def _baseline(kern, limit):
    try:
        return undivided_plan(planner_state(kern).bench, kern.n, limit)
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
    state = planner_state(kern)
    s = state.settings
    while True:
        plan = plan_kernel(state.bench, kern.n, s.policy, limit, s.sizes, strict=_strict(kern),
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
        workspace_cap = min(settings.limit, DEFAULT_WORKSPACE_CAP)
    measured = measure_for_plan(kern, settings, workspace_cap=workspace_cap, cache=cache)
    t1 = time.perf_counter()
    plan = _plan_alone(kern, settings.limit)
    plan_s = time.perf_counter() - t1
    planner_state(kern).timing = {"bench_s": measured["bench_s"], "plan_s": plan_s}
    _record_plan(kern, "dp", plan, settings.limit, _baseline(kern, settings.limit),
                 plan_s=plan_s, optimizer="dp", **measured)
    return kern


def replan_kernel(kern, limit: int):
    """Plan ``kern`` again within ``limit`` bytes (its benchmark is kept)."""
    if planner_state(kern).bench is None:
        raise PlanError(f"layer {kern.name!r}: kernel was never benchmarked")
    t0 = time.perf_counter()
    plan = _plan_alone(kern, limit)
    _record_plan(kern, "replan", plan, limit, _baseline(kern, limit),
                 plan_s=time.perf_counter() - t0, optimizer="dp")
    return plan


def plan_kernels(kernels, settings: PlanSettings, *, workspace_cap: Optional[int] = None,
                 done: Optional[Callable] = None) -> List[Tuple[object, str, object]]:
    """``[(layer, op, kernel)]``: each ``(layer, op)`` of ``kernels`` created in the core,
    benchmarked through the cache and given the DP's plan within ``settings.limit`` by
    :func:`prepare_kernel` (``settings.search``: Note [Pruned search at run time] in
    :mod:`ucudnn.measure.for_plan`). ``done(i, layer, op, kernel)`` after each."""
    log_from_environment()
    out = []
    with open_caches() as cache_of:     # Note [One open cache per net]
        for i, (l, op) in enumerate(kernels, start=1):
            kern = core_kernel(l, op, settings.dtype, settings.math)
            prepare_kernel(kern, settings, workspace_cap=workspace_cap,
                           cache=cache_of(settings.cache_path))
            out.append((l, op, kern))
            if done is not None:
                done(i, l, op, kern)
    return out


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


def plan_net(layers: Sequence[LayerSpec], settings: Mapping[str, PlanSettings], *,
             cap: Optional[int] = None, name: str = "net",
             kernels: Optional[Dict[Tuple[str, str], object]] = None) -> LiveNet:
    """Create, benchmark, plan (Note [One network planner] in :mod:`ucudnn.plan.network`) and
    resolve the kernels of ``layers`` on the current GPU; ``cap``: plan within that many bytes
    in all (after a host could not allocate the previous plan's). ``kernels``: the core
    kernels of every ``(layer, op)``, created by the caller (ucudnn.torch: one grouped call);
    default Caffe's (Note [Grouped layers] in :mod:`ucudnn.plan.conv`)."""
    Kernel = bench.core().Kernel
    settings = {l.name: _within_batch(settings[l.name], l.n, l.name) for l in layers}
    memory = bench.device_info()["memory_total"]
    for l in layers:
        budget = settings[l.name].budget
        if budget is not None and budget > memory:
            raise PlanError(f"layer {l.name!r}: field 'ucudnn_param.total_workspace': "
                            f"{budget} B is more than the GPU's {memory} B of memory")
    for l in layers:
        if l.count != 1:
            raise InputError(f"layer {l.name!r}: field 'count': a live net describes each "
                             f"layer once, got {l.count}")
    if kernels is None:
        kernels = {(l.name, op): Kernel(ConvShape.from_layer(l), op, l.n,
                                        settings[l.name].dtype, settings[l.name].math, l.name,
                                        l.groups)
                   for l in layers for op in l.ops}
    measured = measure_net(kernels, settings, layers)
    t0 = time.perf_counter()
    while True:
        plan = plan_network(layers, {k: planner_state(kern).bench
                                     for k, kern in kernels.items()}, settings,
                            strict=lambda layer, op: _strict(kernels[layer, op]), cap=cap)
        if all([_resolve(kernels[k.layer, k.op], k.plan) for k in plan.kernels]):
            break
    plan_s = time.perf_counter() - t0
    for k in plan.kernels:
        kern = kernels[k.layer, k.op]
        planner_state(kern).timing = {"bench_s": measured[k.layer, k.op]["bench_s"],
                                      "plan_s": plan_s}
        log.info("layer %r %s: %s", k.layer, k.op, _describe(kern, k.plan, k.limit))
        _record_plan(kern, k.optimizer, k.plan, k.limit, k.baseline, plan_s=plan_s,
                     optimizer=k.optimizer, slot=k.slot, **measured[k.layer, k.op])
    log.info("net %s: %d kernels, %.3f ms predicted, workspace %s, shared arena %s, planned "
             "in %.3f s", name, len(plan.kernels), plan.time_ms,
             format_size(plan.workspace_bytes),
             format_size(plan.arena_bytes) if plan.arena_bytes is not None else "none", plan_s)
    if records.records_path():
        records.append_record(records.net_record(name, plan, kernels, plan_s, cap))
    return LiveNet(plan, kernels)
