"""ucudnn._bench: a kernel's benchmark (:meth:`Kernel.benchmark`).

Sets up the benchmark's buffers and workspace (Note [Benchmark workspace] in _kernel.pyx),
then per micro-batch size runs the legacy family's Finds and re-timing (ucudnn._legacy) and
times the graph family's built configs (``_graph_c``) before their check (ucudnn._check), and
merges the records of both (``_choices``, ``_merge_runs``).
"""

from libc.stdint cimport uintptr_t

cimport cudnn as dnn
cimport cudart as rt
from ucudnn._check cimport _mark_refused
from ucudnn._device cimport DeviceBuffer, Handle, _thread_handle, check_cuda, check_cudnn, \
    fill_random_tiled
from ucudnn._graph cimport GraphPlan
from ucudnn._kernel cimport Kernel
from ucudnn._legacy cimport _find_c, _retime
from ucudnn._timing cimport TimedRun, _Events, _time_run

from time import perf_counter

from ucudnn._device import CudaError
from ucudnn._timing import _far_behind
from ucudnn.vocab import GRAPH_ALGO, MATH_MODES


cdef object _benchmark(Kernel kern, sizes, int repeats, workspace_cap, progress,
                       int time_iters, families, int time_warmup, bint retime_last):
    """:meth:`Kernel.benchmark` at the checked ``sizes``, ``families`` and ``repeats``, under
    the device's lock."""
    cdef int bmax = max(sizes)
    cdef Handle handle = _thread_handle()
    cdef size_t free_b = 0, total_b = 0
    cdef DeviceBuffer buf
    spent = kern.benchmark_seconds
    cap = 8 << 30 if workspace_cap is None else int(workspace_cap)
    # Note [Benchmark workspace] in _kernel.pyx: what the choices at these sizes can use of the cap
    legacy, graph = "legacy" in families, "graph" in families
    # slab choices at the smallest size only: Note [Slab choices tried] (ucudnn/plan/slabs.py)
    built = {b: kern._graph_build(b, cap, b == sizes[0]) for b in sizes} if graph else {}
    t1 = perf_counter()
    need = max((c.plan.ws_bytes for configs in built.values() for c in configs
                if c.plan is not None and c.plan.ws_bytes <= cap), default=0)
    if legacy:
        need = max(need, kern._legacy_need(sizes, cap))
    need = min(cap, max(1 << 20, need))
    held = kern._held
    if held is not None and held[0] >= bmax and held[1] == cap and held[5].nbytes >= need:
        samples, _, xbuf, ybuf, wbuf, ws = held
        ws_size = ws.nbytes
    else:
        kern._held = None                   # freed before anything new is allocated
        kern._warm = False
        samples = kern.n if kern._holding else bmax
        xbuf = DeviceBuffer(kern.extent_bytes(0, samples))
        ybuf = DeviceBuffer(kern.extent_bytes(1, samples))
        wbuf = DeviceBuffer(kern.filter_bytes)
        for i, buf in enumerate((xbuf, ybuf, wbuf)):
            fill_random_tiled(buf.p, buf.nbytes, kern.k.elem_size, 17 + i,
                              kern.k.dtype == 9)
        check_cuda(rt.cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo")
        ws_size = max(0, min(need, int(free_b) - (512 << 20)))
        ws = None
        while ws is None:
            try:
                ws = DeviceBuffer(ws_size)
            except CudaError:
                if ws_size < (1 << 20):
                    raise
                ws_size //= 2
        if kern._holding:
            kern._held = (samples, cap, xbuf, ybuf, wbuf, ws)
    # what cudnnFind was really offered: the benchmark cache keys on it (an algorithm
    # missing here may only have lacked workspace); every need up to the cap fits
    # the cap (Note [Benchmark workspace] in _kernel.pyx)
    kern.last_benchmark_workspace = cap if ws_size >= need else int(ws_size)
    kern.last_benchmark_held = int(ws_size)
    cdef dnn.cudnnTensorDescriptor_t xd = NULL, yd = NULL
    result = {}
    spent["setup"] += perf_counter() - t1
    try:
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&xd), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&yd), "cudnnCreateTensorDescriptor")
        # Note [Re-timing after the Finds] in _timing.pyx
        later = legacy and time_iters > 0 and retime_last
        found, configs = {}, {}
        for i, b in enumerate(sizes):
            kern._set_tensor(xd, 0, b)
            kern._set_tensor(yd, 1, b)
            if legacy:
                if i == 0 and not kern._warm:
                    # one warm-up Find per call (per hold: later rounds find the GPU warm)
                    t1 = perf_counter()
                    _find_c(kern, handle, <uintptr_t>xd, <uintptr_t>yd, xbuf, ybuf, wbuf, ws)
                    kern._warm = kern._holding
                    spent["warmup_find"] += perf_counter() - t1
                t1 = perf_counter()
                runs = [_find_c(kern, handle, <uintptr_t>xd, <uintptr_t>yd, xbuf, ybuf, wbuf,
                                     ws) for _ in range(repeats)]
                found[b] = _merge_runs(runs, kern.math == "fma")
                spent["find"] += perf_counter() - t1
                if time_iters > 0 and not later:
                    _retime(kern, handle, <uintptr_t>xd, <uintptr_t>yd, xbuf, ybuf, wbuf, ws,
                                 found, b, time_iters, time_warmup, samples, spent)
            if graph:
                configs[b] = kern._graph_c(handle, b, built.pop(b), xbuf, ybuf, wbuf, ws,
                                           time_iters if time_iters > 0 else 5, samples // b,
                                           <uintptr_t>xd, <uintptr_t>yd)
            if not later:
                result[b] = _choices(found.get(b, []), configs.get(b, []), legacy and graph)
                if progress is not None:
                    progress(b)
        for b in (sizes if later else ()):
            kern._set_tensor(xd, 0, b)
            kern._set_tensor(yd, 1, b)
            _retime(kern, handle, <uintptr_t>xd, <uintptr_t>yd, xbuf, ybuf, wbuf, ws, found,
                         b, time_iters, time_warmup, samples, spent)
            result[b] = _choices(found[b], configs.get(b, []), graph)
            if progress is not None:
                progress(b)
    finally:
        if xd != NULL:
            dnn.cudnnDestroyTensorDescriptor(xd)
        if yd != NULL:
            dnn.cudnnDestroyTensorDescriptor(yd)
    _mark_refused(kern, result)
    return result


cdef object _graph_c(Kernel kern, Handle handle, int b, list built, DeviceBuffer x,
                     DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, int iters, int slices,
                     uintptr_t xd_, uintptr_t yd_):
    """Records of the graph family at micro-batch ``b`` from its configs ``built``
    (:meth:`_graph_build`), timed as ``_time_c`` times algorithms, then checked (Note
    [Graph results checked] in _check.pyx; ``xd_``, ``yd_``: the tensor descriptors of ``b``
    samples)."""
    cdef GraphPlan gp
    cdef TimedRun r
    cdef _Events events = _Events(iters + 1)
    spent, stats = kern.benchmark_seconds, kern.graph_stats
    mt = MATH_MODES[kern.math]
    r.h, r.op = handle.h, kern.k.op
    r.x, r.y, r.w, r.ws, r.ws_bytes = <char*>x.p, <char*>y.p, w.p, ws.p, ws.nbytes
    r.x_step = <size_t>(b * kern.k.x_nstride * kern.k.elem_size)
    r.y_step = <size_t>(b * kern.k.y_nstride * kern.k.elem_size)
    r.slices = max(1, slices)
    out, timed = [], []
    deterministic = {c.engine: c.deterministic for c in built}
    t0 = perf_counter()
    for c in built:
        engine, plan, status = c.engine, c.plan, c.status
        stats["configs"] += 1
        if c.compiled:
            stats["runtime_compiled"] += 1
        if plan is None:
            stats["failed"] += 1
            out.append((GRAPH_ALGO, status, 0.0, 0, mt, engine))
            continue
        stats["built"] += 1
        if plan.ws_bytes > ws.nbytes:
            continue                    # not offered: as cudnnFind leaves it out
        gp = plan
        r.plan = &gp.p
        r.slabs = &gp.s if gp.pieces > 1 else NULL
        st, ms = _time_run(&r, <rt.cudaStream_t>handle.stream, events.ev, 1,
                           f"{kern.name}: engine config {engine}")
        if st != 0:
            stats["failed"] += 1
            out.append((GRAPH_ALGO, st, 0.0, plan.ws_bytes, mt, engine))
            continue
        timed.append((plan, ms))
    # one timed run each first; the median of iters for those near the front (Note
    # [Re-timing near the front] in _timing.pyx, as cudnnFind's times are for the algorithms)
    front = [(t, plan.ws_bytes) for plan, t in timed]
    for plan, t in timed:
        if _far_behind(t, plan.ws_bytes, front):
            out.append((GRAPH_ALGO, 0, t, plan.ws_bytes, mt, plan.engine))
            continue
        gp = plan
        r.plan = &gp.p
        r.slabs = &gp.s if gp.pieces > 1 else NULL
        st, ms = _time_run(&r, <rt.cudaStream_t>handle.stream, events.ev, iters,
                           f"{kern.name}: engine config {plan.engine}")
        if st != 0:
            stats["failed"] += 1
            out.append((GRAPH_ALGO, st, 0.0, plan.ws_bytes, mt, plan.engine))
            continue
        out.append((GRAPH_ALGO, 0, ms, plan.ws_bytes, mt, plan.engine))
    t1 = perf_counter()
    spent["graph_time"] += t1 - t0
    kern._check_graph(handle, b, x, y, w, ws, xd_, yd_, out,
                      {plan.engine: plan for plan, _ in timed})
    spent["graph_check"] += perf_counter() - t1
    return [rec + (deterministic[rec[5]],) for rec in out]


def _choices(legacy, graph, bint both):
    """One size's records, ``(algo, status, time_ms, ws_bytes, math, engine,
    deterministic)``: cudnnFind's (each given the empty engine of an algorithm, Note
    [Choices] in ucudnn/vocab.py) then the graph family's, fastest first where both ran."""
    out = [r[:5] + ("", r[5]) for r in legacy] + list(graph)
    if both:
        out.sort(key=lambda r: (r[1] != 0, r[2]))
    return out


def _merge_runs(runs, bint strict_fma):
    """Median time per (algo, math) over repeated Finds; the worst status and largest
    workspace; deterministic where every Find said so."""
    merged = {}
    for run in runs:
        for algo, status, t, mem, mt, det in run:
            if strict_fma:
                mt = 3          # run it as asked: CUDNN_FMA_MATH, never TF32
            e = merged.setdefault((algo, mt), [[], 0, 0, True])
            e[0].append(t)
            e[1] = status if status != 0 else e[1]
            e[2] = max(e[2], mem)
            e[3] = e[3] and bool(det)
    out = []
    for (algo, mt), (times, status, mem, det) in merged.items():
        times.sort()
        k = len(times)
        med = times[k // 2] if k % 2 else 0.5 * (times[k // 2 - 1] + times[k // 2])
        if len(times) < len(runs) and status == 0:
            status = -1         # not reported by every Find: treat as unreliable
        out.append((algo, status, float(med), int(mem), mt, det))
    out.sort(key=lambda r: (r[1] != 0, r[2]))
    return out
