"""ucudnn._timing: one choice timed the way plans run.

The benchmarks time each choice near the (time, workspace) front again with CUDA events
(``_time_run``), the legacy algorithms after cudnnFind and the graph family's engine configs
after their plans are built: runs enqueued back to back over consecutive slices of the
benchmark's buffers. The rules for which choices are re-timed are Notes [Re-timing near the
front] and [Re-timing after the Finds].
"""

from libc.stdlib cimport calloc, free

cimport cudnn as dnn
cimport cudart as rt
from ucudnn._device cimport check_cuda
from ucudnn._conv cimport conv_call
from ucudnn._types cimport ucg_execute, ucg_execute_slabs

from ucudnn.vocab import InputError


# Note [Re-timing near the front]
#     The planners use, per micro-batch size, only the fastest algorithm within each workspace
#     bound. An algorithm whose Find time is RETIME_MARGIN times that of another one needing no more
#     workspace cannot be that, as long as re-timing changes every algorithm's time by a similar
#     factor: true for runs of a millisecond and more (a plan of them was 13-29 % faster timed back
#     to back, Note [Find times] in _kernel.pyx), not for short runs, where Find exposes each
#     algorithm's own launch latency (its number of kernels). So an algorithm is left with its Find
#     time only when it is far behind the front AND its Find time is at least RETIME_ALWAYS_MS;
#     short runs cost little to re-time. The slow far-behind algorithms took most of the re-timing's
#     time (each runs 1 + time_iters times). A caller that later drops an algorithm (ucudnn's
#     Winograd exclusion) may leave a far-behind one planned with its Find time: the plan is valid,
#     its predicted time pessimistic.
RETIME_MARGIN = 1.5
RETIME_ALWAYS_MS = 1.0

# Note [Re-timing after the Finds]
#     Legacy half-precision calls are bound by the host on the H200 (cuDNN 9.19: 0.05-0.4 ms
#     per call, where fp32 takes 0.04-0.08), and their re-timed benchmark times scatter: right
#     after its own cudnnFind, ResNet-50's res3b_branch2a backward-filter (fp16, NHWC, ALGO_1,
#     128 samples) read 0.37-0.40 ms in three benchmarks in a row, where the same call run as
#     a plan afterwards took 0.21 ms (results/h200/cudnn919/call_f). Re-timing after all of a
#     call's Finds with five warm-ups instead (the default) read 0.20-0.30 ms against the
#     plan's 0.19, but db30's 64-sample backward-data chunks read 0.08-0.15 ms that way and
#     0.05-0.07 in the old order, against 0.047 (call_g/retime_variants.json): at one kernel
#     neither order matches the plan, and fp32's short calls scatter too. Over ResNet-18's
#     legacy half-precision kernels at 64 MiB, the predicted sums came within 1.4 % of
#     measured with this default (call G, with Note [Dividing must beat the noise] in
#     ucudnn/plan/dp.py), against 3.0-5.0 % in the old order (call E). ``benchmark``'s
#     ``time_warmup`` and ``retime_last`` keep both orders for such comparisons.
RETIME_WARMUP = 5


def _far_behind(double t, ws, front):
    """Note [Re-timing near the front]: a choice timed at ``t`` ms needing ``ws`` bytes is
    left with that time when it is not short and some ``(time, ws)`` of ``front`` needing no
    more workspace is RETIME_MARGIN times faster."""
    return t >= RETIME_ALWAYS_MS and any(ows <= ws and ot * RETIME_MARGIN < t
                                         for ot, ows in front)


# Note [Timing over the mini-batch]
#     A plan runs its micro-batches on consecutive slices of the mini-batch, each read once,
#     so each slice's activations come from memory, not from L2. Re-running one slice (the
#     first) as often as the timing asks found it in L2 from the second run on: on the H200
#     (50 MB of L2) a size-8 slice of a 28x28x128 layer is 3 MB, and a plan of 32 such
#     micro-batches was measured 35 % slower than those timings predicted (legacy NHWC at
#     8 MiB, 6.4 % on ResNet-18's sum). Each timed run therefore takes the next slice of the
#     benchmark's buffers, as the plan would, wrapping around when they hold fewer.

# Note [Backward-filter timed with beta 1]
#     Every chunk of a backward-filter plan after the first accumulates (beta = 1, Note [Micro-batch
#     semantics] in _run.pyx), and so does the first in Caffe, which adds weight gradients into the
#     parameter's diff. So both families time backward-filter with beta = 1. It is not free for
#     short kernels: on the H200, ResNet-50's res5a_branch2c (1x1, 128 samples, fp16) took 0.060 ms
#     at beta 0 and 0.118 ms at beta 1 with graph engine 65, and 0.076 against 0.118 ms with legacy
#     ALGO_1 (results/h200/timing/probe.json). A caller that passes beta = 0 runs its first chunk
#     faster than planned, a short one up to 2x.


cdef inline dnn.cudnnStatus_t _run_slice(const TimedRun* r, int i) noexcept nogil:
    cdef int s = i % r.slices
    cdef char* x = r.x + s * r.x_step
    cdef char* y = r.y + s * r.y_step
    if r.slabs != NULL:
        return ucg_execute_slabs(r.h, r.slabs, x, r.w, y, r.ws)
    if r.plan != NULL:
        return ucg_execute(r.h, r.plan, x, r.w, y, r.ws)
    return conv_call(r.op, r.h, r.algo, r.conv, r.alpha, r.beta, r.xd, x, r.wd, r.w, r.yd, y,
                     r.ws, r.ws_bytes)


cdef object _time_run(TimedRun* r, rt.cudaStream_t stream, rt.cudaEvent_t* ev, int iters,
                      str what, int warmup=1):
    """Time ``r`` with CUDA events: ``warmup`` (>= 1) untimed runs, then ``iters`` runs back
    to back (no host synchronisation between them, as plans run; Note [Find times] in
    _kernel.pyx) on consecutive slices (Note [Timing over the mini-batch]). ``(0, median
    ms)``, or ``(cudnnStatus_t, None)`` when a run fails (the runs already enqueued are drained
    first); a failed CUDA call raises, naming ``what``."""
    cdef dnn.cudnnStatus_t st = dnn.CUDNN_STATUS_SUCCESS
    cdef rt.cudaError_t cerr = rt.cudaSuccess
    cdef int it = 0, stage = 0, w
    cdef float ms = 0.0
    warmup = max(1, warmup)
    with nogil:
        for w in range(warmup):
            st = _run_slice(r, w)
            if st != dnn.CUDNN_STATUS_SUCCESS:
                break
        if st == dnn.CUDNN_STATUS_SUCCESS:
            stage = 1
            cerr = rt.cudaEventRecord(ev[0], stream)
            while cerr == rt.cudaSuccess and it < iters:
                st = _run_slice(r, warmup + it)
                if st != dnn.CUDNN_STATUS_SUCCESS:
                    break
                cerr = rt.cudaEventRecord(ev[it + 1], stream)
                it += 1
            if cerr == rt.cudaSuccess:
                stage = 2
                cerr = rt.cudaEventSynchronize(ev[it])
    check_cuda(cerr, f"{'cudaEventRecord' if stage == 1 else 'cudaEventSynchronize'} "
               f"while timing {what}")
    if st != dnn.CUDNN_STATUS_SUCCESS:
        return int(st), None
    times = []
    for it in range(iters):
        check_cuda(rt.cudaEventElapsedTime(&ms, ev[it], ev[it + 1]), "cudaEventElapsedTime")
        times.append(ms)
    times.sort()
    return 0, float(times[len(times) // 2])


cdef class _Events:
    """``n`` CUDA events, destroyed with the object."""

    def __cinit__(self, int n):
        if n < 1:
            raise InputError(f"_Events: n must be >= 1, got {n}")
        self.ev = <rt.cudaEvent_t*>calloc(n, sizeof(rt.cudaEvent_t))
        if self.ev == NULL:
            raise MemoryError()
        self.n = n
        for i in range(n):
            check_cuda(rt.cudaEventCreate(&self.ev[i]), "cudaEventCreate")

    def __dealloc__(self):
        if self.ev != NULL:
            for i in range(self.n):
                if self.ev[i] != NULL:
                    rt.cudaEventDestroy(self.ev[i])
            free(self.ev)
