"""ucudnn._run: the hot path over a resolved plan.

``run_kernel`` (C, ``nogil``) walks the plan that ``Kernel.set_plan`` resolved into C arrays
and calls cuDNN once per micro-batch: no Python, no host synchronisation, chunks ordered on
the caller's stream. The C API's ``ucudnn_kernel_run`` and ``Kernel.run`` call it;
``time_run`` times it for benchmarks.

Note [Micro-batch semantics]
    Forward and backward-data write disjoint slices of their output, so every chunk gets the
    caller's alpha and beta, and so does every piece of a slab choice (disjoint rows). Backward-filter accumulates into one weight gradient: the first
    chunk uses the caller's beta, every later chunk beta = 1 (the original library passed the
    caller's beta to every chunk, which loses all but the last chunk when beta = 0).
"""

from libc.stdlib cimport calloc, free
from libc.stdio cimport snprintf
from libc.stdint cimport uintptr_t

cimport cudnn as dnn
cimport cudart as rt
from ucudnn._conv cimport conv_call
from ucudnn._device cimport Handle, check_cuda, last_error, set_last_error
from ucudnn._kernel cimport Kernel
from ucudnn._roles cimport (OP_ROLES, OPERAND_A, OPERAND_B, OPERAND_OUT, TENSOR_W, TENSOR_X,
                            TENSOR_Y, ucudnn_op_roles)
from ucudnn._types cimport (GRAPH_ALGO_C, UCUDNN_ERR_CUDNN, UCUDNN_ERR_INVALID, UCUDNN_ERR_PLAN,
                            UCUDNN_OK, ucg_execute, ucg_execute_slabs, ucg_plan, ucudnn_chunk,
                            ucudnn_kernel)

from ucudnn._device import CudnnError
from ucudnn.vocab import InputError, PlanError


cdef object _run_error(int rc):
    """The exception for a failed run_kernel (its message is the thread's last error)."""
    msg = last_error().decode("utf-8", "replace")
    if rc == UCUDNN_ERR_INVALID:
        return InputError(msg)
    if rc == UCUDNN_ERR_PLAN:
        return PlanError(msg)
    return CudnnError(msg)


cdef int run_kernel(const ucudnn_kernel* k, dnn.cudnnHandle_t h, const void* alpha,
                    const void* a, const void* b, const void* beta, void* out,
                    void* ws, size_t ws_size) noexcept nogil:
    """See Note [Micro-batch semantics]. Enqueues only; returns a UCUDNN_* status."""
    cdef char msg[512]
    cdef float one_f = 1.0
    cdef double one_d = 1.0
    cdef const void* one = <const void*>&one_d if k.dtype == 1 else <const void*>&one_f
    cdef const ucudnn_op_roles* roles = &OP_ROLES[k.op]     # Note [Operand roles] (_roles.pxd)
    cdef const char* operand[3]
    operand[OPERAND_A], operand[OPERAND_B], operand[OPERAND_OUT] = \
        <const char*>a, <const char*>b, <const char*>out
    cdef const char* px0 = operand[roles.operand[TENSOR_X]]
    cdef const char* pw = operand[roles.operand[TENSOR_W]]
    cdef const char* py0 = operand[roles.operand[TENSOR_Y]]
    cdef const char* px
    cdef const char* py
    cdef long long xo, yo
    cdef int i, which
    cdef bint adds              # this chunk adds into the output (Note [Micro-batch semantics])
    cdef const ucudnn_chunk* c
    cdef const ucg_plan* gplan
    cdef double alpha_v = (<const double*>alpha)[0] if k.dtype == 1 else (<const float*>alpha)[0]
    cdef double beta_v = (<const double*>beta)[0] if k.dtype == 1 else (<const float*>beta)[0]
    cdef dnn.cudnnStatus_t st = dnn.CUDNN_STATUS_SUCCESS
    if k.n_chunks == 0:
        snprintf(msg, sizeof(msg), "layer %s: kernel has no plan", k.name)
        set_last_error(msg)
        return UCUDNN_ERR_PLAN
    if ws_size < k.ws_bytes or (k.ws_bytes > 0 and ws == NULL):
        snprintf(msg, sizeof(msg), "layer %s: workspace of %zu bytes given, the plan needs %zu",
                 k.name, ws_size, k.ws_bytes)
        set_last_error(msg)
        return UCUDNN_ERR_INVALID
    for i in range(k.n_chunks):
        c = &k.chunks[i]
        xo = c.offset * k.x_nstride * k.elem_size
        yo = c.offset * k.y_nstride * k.elem_size
        px, py = px0 + xo, py0 + yo     # the filter is whole in every chunk
        adds = roles.accumulates and i > 0
        if c.algo == GRAPH_ALGO_C:      # Note [Graph plans and beta] in graph.h
            which = 1 if adds or beta_v == 1.0 else 0
            if alpha_v != 1.0 or (which == 0 and beta_v != 0.0):
                snprintf(msg, sizeof(msg), "layer %s: graph engine configs run with alpha 1 "
                         "and beta 0 or 1, got alpha %g beta %g", k.name, alpha_v, beta_v)
                set_last_error(msg)
                return UCUDNN_ERR_INVALID
            gplan = c.graph[which]
            if gplan == NULL:
                snprintf(msg, sizeof(msg), "layer %s: chunk %d (batch %d): its engine config "
                         "has no plan for beta %d", k.name, i, c.batch, which)
                set_last_error(msg)
                return UCUDNN_ERR_INVALID
            if (<uintptr_t>px) % k.align or (<uintptr_t>pw) % k.align or (<uintptr_t>py) % k.align:
                snprintf(msg, sizeof(msg), "layer %s: chunk %d: a buffer is not aligned to the "
                         "%lld bytes its graph plan was built for", k.name, i, k.align)
                set_last_error(msg)
                return UCUDNN_ERR_INVALID
            if c.slabs[which] != NULL:  # Note [Slab plans] in _graph.pyx
                st = ucg_execute_slabs(h, c.slabs[which], px, pw, py, ws)
            else:
                st = ucg_execute(h, gplan, px, pw, py, ws)
            if st != dnn.CUDNN_STATUS_SUCCESS:
                snprintf(msg, sizeof(msg), "layer %s: chunk %d (batch %d, engine config): %s",
                         k.name, i, c.batch, dnn.cudnnGetErrorString(st))
                set_last_error(msg)
                return UCUDNN_ERR_CUDNN
            continue
        st = conv_call(k.op, h, c.algo, k.conv[c.math], alpha, one if adds else beta,
                       k.xdesc[c.desc], px, k.wdesc, pw, k.ydesc[c.desc], py, ws, ws_size)
        if st != dnn.CUDNN_STATUS_SUCCESS:
            snprintf(msg, sizeof(msg), "layer %s: chunk %d (batch %d, algo %d): %s",
                     k.name, i, c.batch, c.algo, dnn.cudnnGetErrorString(st))
            set_last_error(msg)
            return UCUDNN_ERR_CUDNN
    return UCUDNN_OK


# Note [Plans timed back to back]
#     A framework enqueues one call after another without waiting, and so do the benchmark's
#     re-timing (Note [Find times] in _kernel.pyx) and a plan's own chunks: what a call costs there
#     is the time from one call's end event to the next's, which is the GPU's time where the GPU is
#     the bottleneck and the host's where the host is. Timing each run between its own pair of
#     events instead leaves out the host's time before each run's first kernel, which for a
#     host-bound call (legacy half precision) is not idle time in a framework: on the H200 (cuDNN
#     9.19) a legacy fp16 backward-filter (ResNet-50 res3b_branch2a, NHWC) measured 0.195 ms between
#     its own events while the host spent 0.206 ms per run, and 0.22 ms back to back
#     (results/h200/cudnn919/call_{d,e}/host_probe.json); in fp32 all three agree (0.080 ms). So
#     ``time_run`` times back to back, one event between consecutive runs, as the predicted chunk
#     times it is compared with were timed.

def time_run(Kernel kern not None, Handle handle not None, uintptr_t a, uintptr_t b,
             uintptr_t out, uintptr_t workspace, size_t workspace_size, int iters=20,
             int warmup=3, double alpha=1.0, double beta=0.0, bint back_to_back=True):
    """Time ``iters`` runs of the kernel's plan on ``handle``'s stream with CUDA events.

    Returns the per-iteration times in milliseconds, after ``warmup`` untimed runs. With
    ``back_to_back`` (the default, Note [Plans timed back to back]) one event is recorded
    before the first timed run and one after each, and a run's time is the span between
    consecutive events; otherwise each run has its own pair of events around it (the GPU's
    time for the run alone, leaving out the host's before its first kernel). Every run's
    status and every event call is checked; the first failure stops the loop and is raised.
    For benchmarks; not on any hot path.
    """
    if iters < 1:
        raise InputError(f"field 'iters': must be >= 1, got {iters}")
    if warmup < 0:
        raise InputError(f"field 'warmup': must be >= 0, got {warmup}")
    cdef float af = alpha, bf = beta
    cdef const void* pa = <const void*>&alpha if kern.k.dtype == 1 else <const void*>&af
    cdef const void* pb = <const void*>&beta if kern.k.dtype == 1 else <const void*>&bf
    cdef rt.cudaEvent_t* ev = <rt.cudaEvent_t*>calloc(2 * iters, sizeof(rt.cudaEvent_t))
    cdef rt.cudaStream_t stream = <rt.cudaStream_t>handle.stream
    cdef rt.cudaError_t cerr = rt.cudaSuccess
    cdef int i, rc = UCUDNN_OK
    cdef int stage = 1          # the CUDA call that failed: 1 cudaEventRecord, 2 ...Synchronize
    cdef int last               # the event recorded last
    cdef float ms
    # run i (0-based, timed) lies between events start(i) and end(i)
    cdef int step = 1 if back_to_back else 2
    if ev == NULL:
        raise MemoryError()
    try:
        for i in range(2 * iters):
            check_cuda(rt.cudaEventCreate(&ev[i]), "cudaEventCreate")
        last = iters if back_to_back else 2 * iters - 1
        with nogil:
            for i in range(warmup + iters):
                if i >= warmup and (not back_to_back or i == warmup):
                    cerr = rt.cudaEventRecord(ev[step * (i - warmup)], stream)
                    if cerr != rt.cudaSuccess:
                        break
                rc = run_kernel(&kern.k, handle.h, pa, <const void*>a, <const void*>b, pb,
                                <void*>out, <void*>workspace, workspace_size)
                if rc != UCUDNN_OK:
                    break
                if i >= warmup:
                    cerr = rt.cudaEventRecord(ev[step * (i - warmup) + 1], stream)
                    if cerr != rt.cudaSuccess:
                        break
            if rc == UCUDNN_OK and cerr == rt.cudaSuccess:
                stage = 2
                cerr = rt.cudaEventSynchronize(ev[last])
        if rc != UCUDNN_OK:
            raise _run_error(rc)
        check_cuda(cerr, f"{kern.name}: "
                   f"{'cudaEventRecord' if stage == 1 else 'cudaEventSynchronize'} in time_run")
        times = []
        for i in range(iters):
            check_cuda(rt.cudaEventElapsedTime(&ms, ev[step * i], ev[step * i + 1]),
                       "cudaEventElapsedTime")
            times.append(ms)
        return times
    finally:
        for i in range(2 * iters):
            if ev[i] != NULL:
                rt.cudaEventDestroy(ev[i])
        free(ev)
