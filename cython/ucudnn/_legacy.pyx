"""ucudnn._legacy: a kernel's calls of the legacy convolution API.

cudnnFind...AlgorithmEx over the benchmark's buffers (``_find_c``), the re-timing of what it
found near the (time, workspace) front (``_time_c``, ``_retime``: Note [Find times] in
_kernel.pyx, Note [Re-timing near the front] in _timing.pyx), and cudnnGet...WorkspaceSize
(``_legacy_workspace``, ``_legacy_need``). Each takes the kernel as its first argument; the
Kernel's methods of the same names call them.
"""

from libc.stdint cimport uintptr_t

cimport cudnn as dnn
cimport cudart as rt
from ucudnn._device cimport DeviceBuffer, Handle, _thread_handle, check_cudnn
from ucudnn._kernel cimport Kernel
from ucudnn._timing cimport TimedRun, _Events, _time_run
from ucudnn._roles cimport OP_ROLES
from ucudnn._types cimport UCUDNN_BWD_DATA, UCUDNN_FWD

from time import perf_counter

from ucudnn._device import CudnnError
from ucudnn._timing import _far_behind
from ucudnn.vocab import MATH_MODES, InputError


cdef _retime(Kernel kern, Handle handle, uintptr_t xd, uintptr_t yd, DeviceBuffer x,
             DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, dict found, int b,
             int iters, int warmup, int samples, dict spent):
    """Re-time ``found[b]`` (cudnnFind's records at ``b``) in place: :func:`_time_c`."""
    t1 = perf_counter()
    found[b] = _time_c(kern, handle, xd, yd, x, y, w, ws, found[b], iters, warmup, b,
                            samples // b)
    spent["retime"] += perf_counter() - t1

cdef list _find_c(Kernel kern, Handle handle, uintptr_t xd_, uintptr_t yd_, DeviceBuffer x,
                  DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws):
    """cudnnFind's records at the tensors ``xd_``, ``yd_``: ``(algo, status, time_ms,
    ws_bytes, math, deterministic)``, the last its perf record's ``determinism`` (Note
    [Deterministic plans] in ucudnn/plan/dp.py)."""
    cdef dnn.cudnnTensorDescriptor_t xd = <dnn.cudnnTensorDescriptor_t>xd_
    cdef dnn.cudnnTensorDescriptor_t yd = <dnn.cudnnTensorDescriptor_t>yd_
    cdef dnn.cudnnConvolutionFwdAlgoPerf_t fp[32]
    cdef dnn.cudnnConvolutionBwdDataAlgoPerf_t dp[32]
    cdef dnn.cudnnConvolutionBwdFilterAlgoPerf_t wp[32]
    cdef int got = 0, i
    cdef dnn.cudnnStatus_t st
    cdef int mi = MATH_MODES[kern.math]
    cdef dnn.cudnnConvolutionDescriptor_t conv = kern.k.conv[mi]
    cdef dnn.cudnnHandle_t h = handle.h
    cdef dnn.cudnnFilterDescriptor_t wd = kern.k.wdesc
    out = []
    # one dispatch on the op: each Find has its own signature (Note [Operand roles])
    if kern.k.op == UCUDNN_FWD:
        with nogil:
            st = dnn.cudnnFindConvolutionForwardAlgorithmEx(
                h, xd, x.p, wd, w.p, conv, yd, y.p, 32, &got, fp, ws.p, ws.nbytes)
        check_cudnn(st, f"{kern.name}: cudnnFindConvolutionForwardAlgorithmEx")
        for i in range(got):
            out.append((int(fp[i].algo), int(fp[i].status), fp[i].time, fp[i].memory,
                        int(fp[i].mathType), fp[i].determinism == dnn.CUDNN_DETERMINISTIC))
    elif kern.k.op == UCUDNN_BWD_DATA:
        with nogil:
            st = dnn.cudnnFindConvolutionBackwardDataAlgorithmEx(
                h, wd, w.p, yd, y.p, conv, xd, x.p, 32, &got, dp, ws.p, ws.nbytes)
        check_cudnn(st, f"{kern.name}: cudnnFindConvolutionBackwardDataAlgorithmEx")
        for i in range(got):
            out.append((int(dp[i].algo), int(dp[i].status), dp[i].time, dp[i].memory,
                        int(dp[i].mathType), dp[i].determinism == dnn.CUDNN_DETERMINISTIC))
    else:
        with nogil:
            st = dnn.cudnnFindConvolutionBackwardFilterAlgorithmEx(
                h, xd, x.p, yd, y.p, conv, wd, w.p, 32, &got, wp, ws.p, ws.nbytes)
        check_cudnn(st, f"{kern.name}: cudnnFindConvolutionBackwardFilterAlgorithmEx")
        for i in range(got):
            out.append((int(wp[i].algo), int(wp[i].status), wp[i].time, wp[i].memory,
                        int(wp[i].mathType), wp[i].determinism == dnn.CUDNN_DETERMINISTIC))
    return out

cdef list _time_c(Kernel kern, Handle handle, uintptr_t xd_, uintptr_t yd_, DeviceBuffer x,
                  DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, list records, int iters,
                  int warmup, int b, int slices):
    """Re-time each successful record near the (time, workspace) front with CUDA events
    (``_time_run``; Note [Find times] in _kernel.pyx, Note [Re-timing near the front] in
    _timing.pyx) at micro-batch ``b``, over the ``slices`` slices of ``b`` samples the buffers
    hold.

    Each algorithm runs with the workspace it asks for (what a plan of it gives it; 8 GiB
    instead timed the same, results/h200/timing/probe.json), and backward-filter with beta
    1 (Note [Backward-filter timed with beta 1] in _timing.pyx). An algorithm
    that fails at any of its runs (the warm-up or a timed one) keeps cuDNN's status in its
    record, so the planners skip it; a failed CUDA event call raises."""
    cdef float one_f = 1.0, zero_f = 0.0
    cdef double one_d = 1.0, zero_d = 0.0
    cdef TimedRun r
    cdef _Events events = _Events(iters + 1)
    r.h, r.plan, r.slabs, r.op = handle.h, NULL, NULL, kern.k.op
    r.alpha = <const void*>&one_d if kern.k.dtype == 1 else <const void*>&one_f
    if OP_ROLES[kern.k.op].accumulates:
        r.beta = r.alpha            # Note [Backward-filter timed with beta 1] (_timing.pyx)
    else:
        r.beta = <const void*>&zero_d if kern.k.dtype == 1 else <const void*>&zero_f
    r.xd, r.yd, r.wd = <dnn.cudnnTensorDescriptor_t>xd_, <dnn.cudnnTensorDescriptor_t>yd_, \
        kern.k.wdesc
    r.x, r.y, r.w, r.ws, r.ws_bytes = <char*>x.p, <char*>y.p, w.p, ws.p, ws.nbytes
    r.x_step = <size_t>(b * kern.k.x_nstride * kern.k.elem_size)
    r.y_step = <size_t>(b * kern.k.y_nstride * kern.k.elem_size)
    r.slices = max(1, slices)
    out = []
    ok = [(rec[2], rec[3]) for rec in records
          if rec[1] == 0 and rec[3] <= ws.nbytes and 0 <= rec[4] < 4]
    for rec in records:
        algo, status, t, mem, mt, det = rec
        if status != 0 or mem > ws.nbytes or not 0 <= mt < 4:
            out.append(rec)
            continue
        if _far_behind(t, mem, ok):
            out.append(rec)     # far behind: Note [Re-timing near the front] (_timing.pyx)
            continue
        r.algo, r.conv, r.ws_bytes = algo, kern.k.conv[mt], mem
        st, ms = _time_run(&r, <rt.cudaStream_t>handle.stream, events.ev, iters,
                           f"{kern.name}: algorithm {algo} (math {mt})", warmup)
        out.append((algo, st, t, mem, mt, det) if st != 0 else (algo, status, ms, mem, mt, det))
    out.sort(key=lambda rec: (rec[1] != 0, rec[2]))
    return out

cdef object _legacy_need(Kernel kern, sizes, cap):
    """The largest workspace that a legacy algorithm asks for at ``sizes`` with any math
    type, of those at most ``cap`` (Note [Benchmark workspace] in _kernel.pyx); algorithms
    cuDNN cannot run there ask for nothing."""
    need = 0
    for b in sizes:
        for algo in range(OP_ROLES[kern.k.op].n_algos):
            for math in range(4):
                try:
                    size = kern.workspace_for(b, algo, math)
                except CudnnError:
                    continue
                if need < size <= cap:
                    need = size
    return need

cdef object _legacy_workspace(Kernel kern, int batch, int algo, int math):
    """cuDNN's workspace need for algorithm ``algo`` with ``math`` at micro-batch ``batch``
    (:meth:`Kernel.workspace_for` of a legacy choice). Raises if cuDNN cannot run it."""
    cdef Handle handle = _thread_handle()
    cdef dnn.cudnnTensorDescriptor_t xd = NULL, yd = NULL
    cdef size_t size = 0
    cdef dnn.cudnnStatus_t st
    if not 0 <= math < 4:
        raise InputError(f"{kern.name}: field 'math': cudnnMathType_t {math} out of range")
    if not 1 <= batch <= kern.n:
        raise InputError(f"{kern.name}: field 'batch': micro-batch {batch} not in 1..{kern.n}")
    try:
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&xd), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&yd), "cudnnCreateTensorDescriptor")
        kern._set_tensor(xd, 0, batch)
        kern._set_tensor(yd, 1, batch)
        # one dispatch on the op: each query has its own signature (Note [Operand roles])
        if kern.k.op == UCUDNN_FWD:
            st = dnn.cudnnGetConvolutionForwardWorkspaceSize(
                handle.h, xd, kern.k.wdesc, kern.k.conv[math], yd,
                <dnn.cudnnConvolutionFwdAlgo_t>algo, &size)
        elif kern.k.op == UCUDNN_BWD_DATA:
            st = dnn.cudnnGetConvolutionBackwardDataWorkspaceSize(
                handle.h, kern.k.wdesc, yd, kern.k.conv[math], xd,
                <dnn.cudnnConvolutionBwdDataAlgo_t>algo, &size)
        else:
            st = dnn.cudnnGetConvolutionBackwardFilterWorkspaceSize(
                handle.h, xd, yd, kern.k.conv[math], kern.k.wdesc,
                <dnn.cudnnConvolutionBwdFilterAlgo_t>algo, &size)
        check_cudnn(st, f"{kern.name}: workspace size of algorithm {algo} at batch {batch}")
    finally:
        if xd != NULL:
            dnn.cudnnDestroyTensorDescriptor(xd)
        if yd != NULL:
            dnn.cudnnDestroyTensorDescriptor(yd)
    return int(size)
