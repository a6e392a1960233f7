"""ucudnn._core: micro-batched cuDNN convolutions.

Two layers, top-down:

* ``Kernel`` (Python class over a C struct): one convolution operation of one layer. It builds
  the cuDNN descriptors, benchmarks the choices of each family per micro-batch size
  (``benchmark``: legacy algorithms and graph-API engine configs, Note [Choices] in
  ucudnn/vocab.py), takes a plan from the planners in ``ucudnn`` (``set_plan``) and resolves
  it into C arrays, building the graph plans it names.
* ``run_kernel`` (C, ``nogil``): walks the resolved plan and calls cuDNN once per micro-batch.
  No Python, no host synchronisation: chunks are ordered on the caller's stream.

The graph family's backend-API calls are plain C in graph.h; this module decides which
engine configs to try and times them as it times algorithms.

The C API for C++ hosts (``cdef public api``, cython/ucudnn.h) is the separate module
``ucudnn._capi``, which cimports ``Kernel``, ``run_kernel`` and the last-error buffer from here.
Imports run one way: this module imports only :mod:`ucudnn.vocab`.

Note [Micro-batch semantics]
    Forward and backward-data write disjoint slices of their output, so every chunk gets the
    caller's alpha and beta. Backward-filter accumulates into one weight gradient: the first
    chunk uses the caller's beta, every later chunk beta = 1 (the original library passed the
    caller's beta to every chunk, which loses all but the last chunk when beta = 0).

Note [Thread handles]
    Workspace queries and benchmarks need a cuDNN handle on the calling thread's device. The
    handles are kept per thread at C level (a ``__thread`` table indexed by device, created on
    first use and destroyed by a pthread key destructor when the thread exits), not in a
    ``threading.local``: a C++ host's threads (Caffe's solvers) enter Python through
    ``with gil``, which makes a fresh thread state on every call, so Python-level thread-local
    data would not survive from one C API call to the next, and every planning call would
    create a new cuDNN handle. ``thread_handle_stats()`` reports the counts for tests.
"""

from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memcpy, memset, strncpy
from libc.math cimport fabs, ldexp, INFINITY, NAN
from libc.stdio cimport snprintf
from libc.stdint cimport uintptr_t

cimport cudnn as dnn
cimport cudart as rt

import threading
from time import perf_counter

from ucudnn.vocab import (DTYPES, ENGINE_FAMILIES, GRAPH_ALGO, LAYOUTS, MATH_MODES,
                          NUMERICAL_NOTES, OP_CODES, OPS, InputError, PlanError, Status,
                          UcudnnError, engine_text, focus_configs, packed_strides,
                          parse_engine)

cdef extern from *:
    """
    #include <pthread.h>
    #include <stdlib.h>

    static __thread char ucudnn_errbuf[1024];
    static void ucudnn_seterr(const char *msg) {
      snprintf(ucudnn_errbuf, sizeof ucudnn_errbuf, "%s", msg);
    }

    /* Note [Thread handles] in _core.pyx */
    #define UCUDNN_MAX_DEVICES 64
    typedef struct ucudnn_thread_handles {
      cudnnHandle_t h[UCUDNN_MAX_DEVICES];
      long created;                          /* handles created on this thread */
    } ucudnn_thread_handles;
    static __thread ucudnn_thread_handles *ucudnn_tls_handles = NULL;
    static pthread_key_t ucudnn_tls_key;
    static pthread_once_t ucudnn_tls_once = PTHREAD_ONCE_INIT;
    static int ucudnn_tls_key_ok = 0;
    static long ucudnn_handles_created = 0, ucudnn_handles_destroyed = 0;

    static void ucudnn_tls_release(void *p) {   /* thread exit: destroy the thread's handles */
      ucudnn_thread_handles *t = (ucudnn_thread_handles *)p;
      int dev;
      for (dev = 0; dev < UCUDNN_MAX_DEVICES; ++dev) {
        if (t->h[dev] != NULL) {
          if (cudaSetDevice(dev) == cudaSuccess) cudnnDestroy(t->h[dev]);
          t->h[dev] = NULL;
          __atomic_fetch_add(&ucudnn_handles_destroyed, 1, __ATOMIC_RELAXED);
        }
      }
      cudaGetLastError();
      if (ucudnn_tls_handles == t) ucudnn_tls_handles = NULL;
      free(t);
    }
    static void ucudnn_tls_key_init(void) {
      ucudnn_tls_key_ok = pthread_key_create(&ucudnn_tls_key, ucudnn_tls_release) == 0;
    }
    /* The calling thread's table; allocated on first use when create is nonzero. */
    static ucudnn_thread_handles *ucudnn_thread_handles_get(int create) {
      if (ucudnn_tls_handles == NULL && create) {
        ucudnn_thread_handles *t = (ucudnn_thread_handles *)calloc(1, sizeof *t);
        if (t == NULL) return NULL;
        pthread_once(&ucudnn_tls_once, ucudnn_tls_key_init);
        if (ucudnn_tls_key_ok) pthread_setspecific(ucudnn_tls_key, t);
        ucudnn_tls_handles = t;
      }
      return ucudnn_tls_handles;
    }
    static void ucudnn_count_created(void) {
      __atomic_fetch_add(&ucudnn_handles_created, 1, __ATOMIC_RELAXED);
    }
    static long ucudnn_load(const long *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
    """
    char ucudnn_errbuf[1024]
    void ucudnn_seterr(const char* msg) nogil
    enum: UCUDNN_MAX_DEVICES
    ctypedef struct ucudnn_thread_handles:
        dnn.cudnnHandle_t h[64]
        long created
    ucudnn_thread_handles* ucudnn_thread_handles_get(int create) nogil
    void ucudnn_count_created() nogil
    long ucudnn_load(const long* p) nogil
    long ucudnn_handles_created, ucudnn_handles_destroyed

_MAX_SIZE_T = <size_t>-1
cdef enum:
    GRAPH_ALGO_C = -1           # ucudnn.vocab.GRAPH_ALGO: a chunk that runs a graph plan


# --------------------------------------------------------------------------- errors

cdef void set_last_error(const char* msg) noexcept nogil:
    """Record ``msg`` as the calling thread's last error (what ucudnn_last_error returns)."""
    ucudnn_seterr(msg)


cdef const char* last_error() noexcept nogil:
    return ucudnn_errbuf


class CoreError(UcudnnError, RuntimeError):
    """A CUDA or cuDNN call failed. ``status`` (the class's) is the C API's status code;
    ``code`` is the library's own (cudnnStatus_t or cudaError_t)."""
    def __init__(self, message, code=0):
        super().__init__(message)
        self.code = code


class CudnnError(CoreError):
    status = Status.CUDNN


class CudaError(CoreError):
    status = Status.CUDA


cdef int check_cudnn(dnn.cudnnStatus_t st, what) except -1:
    cdef char msg[512]
    if st == dnn.CUDNN_STATUS_SUCCESS:
        return 0
    msg[0] = 0
    dnn.cudnnGetLastErrorString(msg, sizeof(msg))
    detail = msg.decode("utf-8", "replace")
    raise CudnnError(f"{what}: {dnn.cudnnGetErrorString(st).decode()} ({int(st)})"
                     + (f": {detail}" if detail else ""), int(st))


cdef int check_cuda(rt.cudaError_t err, what) except -1:
    if err == rt.cudaSuccess:
        return 0
    rt.cudaGetLastError()   # reset the runtime's last-error state
    raise CudaError(f"{what}: {rt.cudaGetErrorString(err).decode()} ({int(err)})", int(err))


cdef object _run_error(int rc):
    """The exception for a failed run_kernel (its message is the thread's last error)."""
    msg = last_error().decode("utf-8", "replace")
    if rc == UCUDNN_ERR_INVALID:
        return InputError(msg)
    if rc == UCUDNN_ERR_PLAN:
        return PlanError(msg)
    return CudnnError(msg)


# --------------------------------------------------------------------------- device

def device_count():
    """Number of visible CUDA devices; 0 when the driver or a GPU is missing."""
    cdef int n = 0
    if rt.cudaGetDeviceCount(&n) != rt.cudaSuccess:
        rt.cudaGetLastError()
        return 0
    return n


def device_info():
    """GPU, driver, runtime and cuDNN versions of the current device."""
    cdef int dev = 0, drv = 0, rtv = 0
    cdef rt.cudaDeviceProp prop
    cdef size_t free_b = 0, total_b = 0
    check_cuda(rt.cudaGetDevice(&dev), "cudaGetDevice")
    check_cuda(rt.cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties")
    check_cuda(rt.cudaDriverGetVersion(&drv), "cudaDriverGetVersion")
    check_cuda(rt.cudaRuntimeGetVersion(&rtv), "cudaRuntimeGetVersion")
    check_cuda(rt.cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo")
    return {
        "device": dev,
        "gpu": prop.name.decode(),
        "compute_capability": f"{prop.major}.{prop.minor}",
        "multiprocessors": prop.multiProcessorCount,
        "memory_total": int(prop.totalGlobalMem),
        "memory_free": int(free_b),
        "driver_cuda_version": int(drv),
        "cuda_runtime_version": int(rtv),
        "cudnn_version": int(dnn.cudnnGetVersion()),
        "cudnn_cudart_version": int(dnn.cudnnGetCudartVersion()),
    }


def set_device(int device):
    """Make ``device`` the calling thread's current CUDA device (a thread that benchmarks on
    another GPU than its caller's; Note [Benchmarks over several GPUs in one process] in
    ucudnn/measure/for_plan.py)."""
    check_cuda(rt.cudaSetDevice(device), "cudaSetDevice")


def cudnn_version():
    """cuDNN's version as loaded (e.g. 91400); needs no GPU."""
    return int(dnn.cudnnGetVersion())


cdef class Handle:
    """A cuDNN handle bound to the current device and a stream (0: the legacy default).

    ``Handle(stream)`` creates (and on collection destroys) its own handle. The core's
    per-thread handles (Note [Thread handles]) are wrapped without being owned."""

    def __cinit__(self):
        self.h = NULL
        self.owned = False
        self.stream = 0

    def __init__(self, uintptr_t stream=0):
        if self.h != NULL:
            raise InputError("Handle: already initialised")
        check_cudnn(dnn.cudnnCreate(&self.h), "cudnnCreate")
        self.owned = True
        self.set_stream(stream)

    def set_stream(self, uintptr_t stream):
        if self.h == NULL:
            raise InputError("Handle: not initialised")
        check_cudnn(dnn.cudnnSetStream(self.h, <rt.cudaStream_t>stream), "cudnnSetStream")
        self.stream = stream

    @property
    def ptr(self):
        return <uintptr_t>self.h

    def __dealloc__(self):
        if self.owned and self.h != NULL:
            dnn.cudnnDestroy(self.h)


cdef Handle _thread_handle():
    """The calling thread's cuDNN handle on the current device (Note [Thread handles]), on the
    legacy default stream; the returned object does not own it."""
    cdef int dev = 0
    cdef dnn.cudnnHandle_t h = NULL
    cdef ucudnn_thread_handles* t
    check_cuda(rt.cudaGetDevice(&dev), "cudaGetDevice")
    if not 0 <= dev < UCUDNN_MAX_DEVICES:
        raise CudaError(f"device {dev}: ucudnn keeps per-thread cuDNN handles for devices "
                        f"0..{UCUDNN_MAX_DEVICES - 1} only")
    t = ucudnn_thread_handles_get(1)
    if t == NULL:
        raise MemoryError()
    if t.h[dev] == NULL:
        check_cudnn(dnn.cudnnCreate(&h), "cudnnCreate")
        t.h[dev] = h
        t.created += 1
        ucudnn_count_created()
    cdef Handle handle = Handle.__new__(Handle)
    handle.h = t.h[dev]
    handle.owned = False
    handle.stream = 0
    return handle


def thread_handle_stats():
    """The per-thread cuDNN handles of Note [Thread handles], for tests: ``on_thread`` (live
    handles of the calling thread, one per device used), ``created_on_thread`` (ever created by
    it), ``created`` and ``destroyed`` (all threads, since the module was loaded)."""
    cdef ucudnn_thread_handles* t = ucudnn_thread_handles_get(0)
    cdef int d, live = 0
    if t != NULL:
        for d in range(UCUDNN_MAX_DEVICES):
            if t.h[d] != NULL:
                live += 1
    return {"on_thread": live, "created_on_thread": int(t.created) if t != NULL else 0,
            "created": int(ucudnn_load(&ucudnn_handles_created)),
            "destroyed": int(ucudnn_load(&ucudnn_handles_destroyed))}


# One benchmark at a time per device (benchmarks time the whole GPU), created lazily.
_device_locks = {}
_device_locks_guard = threading.Lock()


def _device_lock(int device):
    with _device_locks_guard:
        lock = _device_locks.get(device)
        if lock is None:
            lock = _device_locks[device] = threading.RLock()
    return lock


# --------------------------------------------------------------------------- device buffers

cdef class DeviceBuffer:
    """cudaMalloc'd memory freed on collection; ``ptr`` is the device address."""

    def __cinit__(self, size_t nbytes):
        self.p = NULL
        self.nbytes = nbytes
        if nbytes:
            check_cuda(rt.cudaMalloc(&self.p, nbytes), f"cudaMalloc({nbytes} bytes)")

    @property
    def ptr(self):
        return <uintptr_t>self.p

    def fill_random(self, int elem_size, unsigned int seed=1, bint bfloat16=False):
        """Fill with pseudo-random values in [-1, 1) of the given element size (host LCG);
        2-byte elements are float16, or bfloat16 with ``bfloat16``."""
        fill_random(self.p, self.nbytes, elem_size, seed, bfloat16)

    def __dealloc__(self):
        if self.p != NULL:
            rt.cudaFree(self.p)


cdef inline unsigned short _half_bits(float v, bint bfloat16) noexcept nogil:
    """``v`` (|v| < 1) as float16 or bfloat16 bits, rounded toward zero; float16 flushes
    what is below its normal range (|v| < 2^-14) to zero."""
    cdef unsigned int f, e
    memcpy(&f, &v, 4)
    if bfloat16:
        return <unsigned short>(f >> 16)
    e = (f >> 23) & 0xFF
    if e < 127 - 14:
        return <unsigned short>((f >> 16) & 0x8000)
    return <unsigned short>(((f >> 16) & 0x8000) | ((e - 112) << 10) | ((f >> 13) & 0x3FF))


cdef void _random_values(void* host, size_t count, int elem_size, unsigned int seed,
                         bint bfloat16) noexcept nogil:
    """``count`` pseudo-random values in [-1, 1) of ``elem_size`` bytes (2: float16, or
    bfloat16 with ``bfloat16``) at ``host``, from a host LCG seeded with ``seed``."""
    cdef unsigned int state = seed * 2654435761u + 12345u
    cdef size_t i
    cdef float v
    for i in range(count):
        state = state * 1664525u + 1013904223u
        v = <float>(state >> 8) / 8388608.0 - 1.0
        if elem_size == 4:
            (<float*>host)[i] = v
        elif elem_size == 8:
            (<double*>host)[i] = v
        elif elem_size == 2:
            (<unsigned short*>host)[i] = _half_bits(v, bfloat16)
        else:
            (<unsigned char*>host)[i] = 0


def random_values(size_t count, int elem_size, unsigned int seed=1, bint bfloat16=False):
    """The bytes :meth:`DeviceBuffer.fill_random` writes, made on the host (for tests)."""
    cdef bytearray out = bytearray(count * elem_size)
    cdef char* p = out
    if elem_size not in (2, 4, 8):
        raise InputError(f"random_values: elem_size must be 2, 4 or 8, got {elem_size}")
    _random_values(p, count, elem_size, seed, bfloat16)
    return bytes(out)


cdef int fill_random(void* dev, size_t nbytes, int elem_size, unsigned int seed,
                     bint bfloat16=False) except -1:
    cdef size_t count = nbytes // elem_size
    cdef void* host = malloc(nbytes) if nbytes else NULL
    if nbytes and host == NULL:
        raise MemoryError()
    try:
        with nogil:
            _random_values(host, count, elem_size, seed, bfloat16)
        check_cuda(rt.cudaMemcpy(dev, host, count * elem_size, rt.cudaMemcpyHostToDevice),
                   "cudaMemcpy")
    finally:
        free(host)
    return 0


cdef size_t FILL_BLOCK = 4 << 20

# Note [Re-timing near the front]
#     The planners use, per micro-batch size, only the fastest algorithm within each
#     workspace bound. An algorithm whose Find time is RETIME_MARGIN times that of another
#     one needing no more workspace cannot be that, as long as re-timing changes every
#     algorithm's time by a similar factor: true for runs of a millisecond and more (a plan
#     of them was 13-29 % faster timed back to back, Note [Find times]), not for short runs,
#     where Find exposes each algorithm's own launch latency (its number of kernels). So an
#     algorithm is left with its Find time only when it is far behind the front AND its Find
#     time is at least RETIME_ALWAYS_MS; short runs cost little to re-time. The slow
#     far-behind algorithms took most of the re-timing's time (each runs 1 + time_iters
#     times). A caller that later drops an algorithm (ucudnn's Winograd exclusion) may leave
#     a far-behind one planned with its Find time: the plan is valid, its predicted time
#     pessimistic.
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


cdef int fill_random_tiled(void* dev, size_t nbytes, int elem_size, unsigned int seed,
                           bint bfloat16=False) except -1:
    """Fill like :func:`fill_random`, but only the first ``FILL_BLOCK`` bytes on the host; the
    rest repeats that block by device-to-device copies (doubling). For benchmark buffers,
    whose values only have to be ordinary numbers: filling a mini-batch's activations (up to
    gigabytes) on the host cost seconds per kernel (results/h200/cold_planning/)."""
    cdef size_t block = min(nbytes, FILL_BLOCK), done, n
    cdef char* d = <char*>dev
    block -= block % elem_size
    if block == 0:
        return 0
    fill_random(dev, block, elem_size, seed, bfloat16)
    done = block
    while done < nbytes:
        n = min(done, nbytes - done)
        check_cuda(rt.cudaMemcpy(d + done, d, n, rt.cudaMemcpyDeviceToDevice), "cudaMemcpy")
        done += n
    return 0


# --------------------------------------------------------------------------- timing a choice

# Note [Timing over the mini-batch]
#     A plan runs its micro-batches on consecutive slices of the mini-batch, each read once,
#     so each slice's activations come from memory, not from L2. Re-running one slice (the
#     first) as often as the timing asks found it in L2 from the second run on: on the H200
#     (50 MB of L2) a size-8 slice of a 28x28x128 layer is 3 MB, and a plan of 32 such
#     micro-batches was measured 35 % slower than those timings predicted (legacy NHWC at
#     8 MiB, 6.4 % on ResNet-18's sum). Each timed run therefore takes the next slice of the
#     benchmark's buffers, as the plan would, wrapping around when they hold fewer.

# Note [Backward-filter timed with beta 1]
#     Every chunk of a backward-filter plan after the first accumulates (beta = 1, Note
#     [Micro-batch semantics]), and so does the first in Caffe, which adds weight gradients
#     into the parameter's diff. So both families time backward-filter with beta = 1. It is
#     not free for short kernels: on the H200, ResNet-50's res5a_branch2c (1x1, 128 samples,
#     fp16) took 0.060 ms at beta 0 and 0.118 ms at beta 1 with graph engine 65, and 0.076
#     against 0.118 ms with legacy ALGO_1 (results/h200/timing/probe.json). A caller that
#     passes beta = 0 runs its first chunk faster than planned, a short one up to 2x.

cdef struct TimedRun:
    # one choice at one micro-batch size: a graph plan (plan not NULL) or a legacy algorithm
    dnn.cudnnHandle_t h
    const ucg_plan* plan
    int op, algo
    dnn.cudnnConvolutionDescriptor_t conv
    const void* alpha
    const void* beta
    dnn.cudnnTensorDescriptor_t xd, yd
    dnn.cudnnFilterDescriptor_t wd
    char* x
    char* y
    void* w
    void* ws
    size_t ws_bytes
    size_t x_step, y_step       # bytes from one micro-batch's slice to the next
    int slices                  # slices the buffers hold (>= 1)


cdef inline dnn.cudnnStatus_t _run_slice(const TimedRun* r, int i) noexcept nogil:
    cdef int s = i % r.slices
    cdef char* x = r.x + s * r.x_step
    cdef char* y = r.y + s * r.y_step
    if r.plan != NULL:
        return ucg_execute(r.h, r.plan, x, r.w, y, r.ws)
    return conv_call(r.op, r.h, r.algo, r.conv, r.alpha, r.beta, r.xd, x, r.wd, r.w, r.yd, y,
                     r.ws, r.ws_bytes)


cdef object _time_run(TimedRun* r, rt.cudaStream_t stream, rt.cudaEvent_t* ev, int iters,
                      str what, int warmup=1):
    """Time ``r`` with CUDA events: ``warmup`` (>= 1) untimed runs, then ``iters`` runs back
    to back (no host synchronisation between them, as plans run; Note [Find times]) on
    consecutive slices (Note [Timing over the mini-batch]). ``(0, median ms)``, or
    ``(cudnnStatus_t, None)`` when a run fails (the runs already enqueued are drained first);
    a failed CUDA call raises, naming ``what``."""
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
    cdef rt.cudaEvent_t* ev
    cdef int n

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


# --------------------------------------------------------------------------- graph family

# Note [Graph choices tried]
#     For each micro-batch size the engine configs of cuDNN's heuristics modes A, B and
#     FALLBACK, in that order, without repeats; a config whose numerics differ from what the
#     kernel's dtype and math ask for is left out, as PyTorch's Conv_v8 does: for float32,
#     engines that convert the inputs down (DOWN_CONVERT_INPUTS) always, and tensor-core
#     (TF32) engines under math "fma"; for float16 and bfloat16, engines that reduce in
#     reduced precision (the kernel promises float accumulation). ``max_graph_configs`` > 0
#     (default GRAPH_CONFIGS_DEFAULT) keeps the first that many (a pruned search: heuristics
#     rank their proposals; a later mode is not queried once the earlier ones gave that
#     many). ``graph_focus`` keeps only the configs it names, else those of their engines,
#     where the heuristics propose any (Note [Graph focus in the pruned search] in
#     ucudnn/measure/for_plan.py). Each one left is built into a plan (cudnnBackendFinalize of
#     the execution plan, where runtime-compiled engines compile) and timed with CUDA events:
#     a warm-up and one timed run each, then the median of back-to-back runs for those near
#     the (time, workspace) front, the rule Note [Re-timing near the front] applies to
#     cudnnFind's times.
HEUR_MODES = (("A", 3), ("B", 1), ("FALLBACK", 2))
#: engine configs tried per size unless a caller says otherwise; 0 tries every one the
#: heuristics propose. Measured on the H200 with cuDNN 9.19 (results/h200/cudnn919, call M):
#: ResNet-18's cold planning (graph, pruned, 64 MiB) in 32.5 s with 8 against 55.9 s with 16,
#: its plans predicted 0.5 % slower (27.62 against 27.47 ms), and its powerOfTwo graph NHWC
#: plans measured the same (15.92 against 15.94 ms)
GRAPH_CONFIGS_DEFAULT = 8
NOTE_TENSOR_CORE, NOTE_DOWN_CONVERT, NOTE_REDUCED_PRECISION = (
    1 << NUMERICAL_NOTES.index(n)
    for n in ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION"))
BEHAVIOR_RUNTIME_COMPILATION = 1 << 0


# Note [Graph results checked]
#     cuDNN's numerical notes do not name every engine whose results are off. On the H200
#     (cuDNN 9.14), engine 17 of AlexNet conv2's backward-filter (5x5, 48 -> 128 channels, a
#     group's strided view), which carries no note, is 1.3e-3 off a float64 reference at one
#     sample and 1.6e-2 at 128 under FMA math, where every other config proposed is within
#     7e-6 (scripts/graph_accuracy.py; results/h200/engines). So every engine config that a
#     plan could choose at a size (one that no config already accepted there beats on both time
#     and workspace) runs once more on the first slice, and its output is compared with a
#     legacy algorithm's on the same inputs (algorithm 0, then 1, with FMA math and no
#     workspace; for float16 and bfloat16 in float32 on float32 copies of the inputs, since
#     cuDNN's half-precision backward-filter algorithms round partial sums: against their
#     own, the check refused every graph config of ResNet-18's backward-filter at batch 256
#     on the H200): the first CHECK_ELEMENTS values of one sample of y or dx, or of the filter
#     for dw, relative to the largest reference value there, within ``check_tolerance`` of the
#     kernel's dtype and math: 1e-4 for float32 under FMA (the configs accepted were within
#     7e-6), 5e-3 with TF32 allowed (the reference has none), and for float16 and bfloat16
#     twice the GPU tests' 8 units in the last place. The
#     output is first filled with NaN (beta 0) or zeros (backward-filter's beta-1 plan), so an
#     engine that leaves it unwritten fails too. A config outside the tolerance gets status
#     STATUS_INACCURATE and is never planned (its time stays in the record, for reports), and
#     so does every config of its engine at every size of the kernel, in this benchmark call
#     and the later ones: such an error grows with the reduction, so one small micro-batch
#     can pass while a plan of many accumulates it. Engine 17 above is within 1e-4 on one
#     sample, but a plan of 128 one-sample chunks sums to 1.3e-3.
#     Where no legacy algorithm runs the kernel, or one sample is not a packed block, the
#     configs stay unchecked (graph_stats "unchecked"). Configs that an accepted one beats
#     cannot be chosen, so they are not run again: the check costs one run and one copy of at
#     most CHECK_ELEMENTS values per config on the (time, workspace) front.
#     So a refusal also reaches back: at a size where a config of an engine refused later was
#     accepted, the configs it beat were never checked. ``last_unchecked_sizes`` names the
#     sizes of the last call where that happened, and ``refused_engines`` the engines with
#     why; the benchmark cache keeps the refusals of a kernel and treats an entry holding a
#     config of a refused engine as absent, so ``ucudnn.measure.bench`` measures such sizes
#     again, and a new Kernel starts from the refusals stored (``refuse_engines``): Note
#     [Refused engines] in ucudnn/measure/cache/schema.py.
CHECK_ELEMENTS = 1 << 18
#: a record's status for an engine config whose results Note [Graph results checked] refused
STATUS_INACCURATE = -2


def check_tolerance(dtype, math):
    """Note [Graph results checked]: the largest relative error accepted for ``dtype`` and
    ``math``."""
    if dtype == "float32":
        return 1e-4 if math == "fma" else 5e-3
    return {"float64": 1e-10, "float16": 16 * 2.0 ** -11, "bfloat16": 16 * 2.0 ** -8}[dtype]


def relative_error(bytes got, bytes ref, dtype, ref_dtype=None):
    """The comparison of Note [Graph results checked] on host copies of two tensors, ``got``
    of ``dtype`` and ``ref`` of ``ref_dtype`` (default the same): max |got - ref| / max |ref|,
    infinite where ``got`` holds a NaN."""
    ref_dtype = ref_dtype or dtype
    if dtype not in DTYPES or ref_dtype not in DTYPES:
        raise InputError(f"relative_error: unknown dtype {dtype!r} or {ref_dtype!r}")
    (code, size), (rcode, rsize) = DTYPES[dtype], DTYPES[ref_dtype]
    n = len(got) // size
    if len(got) % size or len(ref) != n * rsize:
        raise InputError(f"relative_error: a {dtype} and a {ref_dtype} tensor of one number of "
                         "elements expected")
    return _relative_error(got, code, ref, rcode, n)


cdef inline double _host_value(const char* p, size_t i, int dtype) noexcept nogil:
    """Element ``i`` of a host copy of a tensor of cudnnDataType_t ``dtype``, as a double."""
    cdef unsigned short h
    cdef unsigned int bits
    cdef float f
    cdef int e, m
    if dtype == 0:
        return (<const float*>p)[i]
    if dtype == 1:
        return (<const double*>p)[i]
    h = (<const unsigned short*>p)[i]
    if dtype == 9:                          # bfloat16: the high half of a float
        bits = (<unsigned int>h) << 16
        memcpy(&f, &bits, 4)
        return f
    e, m = (h >> 10) & 0x1f, h & 0x3ff      # float16
    if e == 31:
        return (-INFINITY if h & 0x8000 else INFINITY) if m == 0 else NAN
    f = <float>(ldexp(m, -24) if e == 0 else ldexp(m + 1024, e - 25))
    return -f if h & 0x8000 else f


cdef double _relative_error(const char* got, int got_dtype, const char* ref, int ref_dtype,
                            size_t n) noexcept nogil:
    """max |got - ref| / max |ref| over ``n`` elements (each of its cudnnDataType_t);
    infinite where ``got`` holds a NaN."""
    cdef double scale = 1e-30, worst = 0.0, r, d
    cdef size_t i
    for i in range(n):
        r = _host_value(ref, i, ref_dtype)
        d = fabs(_host_value(got, i, got_dtype) - r)
        if d != d:
            return INFINITY
        if fabs(r) > scale:
            scale = fabs(r)
        if d > worst:
            worst = d
    return worst / scale


cdef class GraphPlan:
    """One built graph plan: the operation graph of a kernel at one micro-batch size and beta,
    and the execution plan of one engine config on it (graph.h). Owns both."""
    cdef ucg_graph g
    cdef ucg_plan p
    cdef bint have_graph, have_plan
    cdef readonly object engine, batch, beta, build_seconds

    def __cinit__(self):
        memset(&self.g, 0, sizeof(self.g))
        memset(&self.p, 0, sizeof(self.p))

    @property
    def ws_bytes(self):
        return int(self.p.ws_bytes) if self.have_plan else 0

    def __dealloc__(self):
        if self.have_plan:
            ucg_plan_destroy(&self.p)
        if self.have_graph:
            ucg_graph_destroy(&self.g)


cdef dnn.cudnnStatus_t _build_graph(Handle handle, const ucudnn_graph_geom* geom, GraphPlan gp,
                                    int batch, double beta, char* msg, size_t msglen):
    """Build ``gp``'s operation graph of ``geom`` at ``batch`` samples and output scale
    ``beta`` (``gp`` owns it, built or not); cuDNN's status, what failed in ``msg``."""
    cdef dnn.cudnnStatus_t st
    msg[0] = 0
    with nogil:
        st = ucg_graph_build(handle.h, geom, batch, beta, &gp.g, msg, msglen)
    gp.have_graph = True
    return st


cdef object _config_text(const ucudnn_engine_config* c):
    return engine_text(c.engine, [(c.knob_type[i], c.knob_value[i]) for i in range(c.n_knobs)])


cdef int _config_from_text(object text, ucudnn_engine_config* c) except -1:
    engine, knobs = parse_engine(text)
    if len(knobs) > 64:
        raise InputError(f"field 'engine': {text!r} has more than 64 knobs")
    memset(c, 0, sizeof(ucudnn_engine_config))
    c.engine = engine
    c.n_knobs = len(knobs)
    for i, (t, v) in enumerate(knobs):
        c.knob_type[i], c.knob_value[i] = t, v
    return 0


# --------------------------------------------------------------------------- kernel

cdef int _as_int4(object v, int* out, what) except -1:
    if v is None:
        out[0] = out[1] = out[2] = out[3] = 0
        return 0
    v = tuple(int(x) for x in v)
    if len(v) != 4 or any(x < 1 for x in v):
        raise InputError(f"field {what!r}: four positive strides expected, got {v!r}")
    for i in range(4):
        out[i] = v[i]
    return 0


cdef class _FloatCopies:
    """float32 copies, packed in the kernel's layout, of what a half-precision kernel reads at
    ``b`` samples (one for forward and backward-data, whose outputs are compared on one
    sample; all for backward-filter), with float32 descriptors and an FMA convolution: the
    reference of Note [Graph results checked]. ``base`` is NULL where there is no memory for
    them (in the benchmark's workspace, else a buffer of their own)."""
    cdef char* base
    cdef char* x
    cdef char* y
    cdef char* w
    cdef dnn.cudnnTensorDescriptor_t xd, yd, hx, hy, hw, fw
    cdef dnn.cudnnFilterDescriptor_t wd
    cdef dnn.cudnnConvolutionDescriptor_t conv
    cdef object own

    def __cinit__(self):
        self.base = NULL
        self.xd = self.yd = self.hx = self.hy = self.hw = self.fw = NULL
        self.wd = NULL
        self.conv = NULL
        self.own = None

    def __init__(self, Kernel kern, Handle handle, int b, DeviceBuffer x, DeviceBuffer y,
                 DeviceBuffer w, DeviceBuffer ws):
        s = kern.shape
        cdef int n = b if kern.k.op == UCUDNN_BWD_FILTER else 1
        cdef int cg = s.c // s.groups
        cdef float one = 1.0, zero = 0.0
        cdef dnn.cudnnTensorFormat_t fmt = (dnn.CUDNN_TENSOR_NCHW if kern.layout == "NCHW"
                                            else dnn.CUDNN_TENSOR_NHWC)
        # element counts as C integers: pointer arithmetic with a Python int would make
        # Cython read the device pointer as a C string
        cdef size_t nx, ny, nw, total
        lay = kern.layout
        fx = packed_strides(s.c, s.h, s.w, lay)
        fy = packed_strides(s.k, s.out_h, s.out_w, lay)
        ws_ = s.filter_strides()
        up = lambda e: (e + 63) // 64 * 64         # 256-byte aligned regions
        nx = up(n * s.c * s.h * s.w)
        ny = up(n * s.k * s.out_h * s.out_w)
        nw = up(s.k * cg * s.r * s.s)
        total = 4 * (nx + ny + nw)
        if ws.nbytes >= total:
            self.base = <char*>ws.p
        else:
            try:
                self.own = DeviceBuffer(total)
            except CudaError:
                return
            self.base = <char*>(<DeviceBuffer>self.own).p
        self.x, self.y, self.w = self.base, self.base + 4 * nx, self.base + 4 * (nx + ny)
        cdef dnn.cudnnDataType_t dt = <dnn.cudnnDataType_t>kern.k.dtype
        cdef dnn.cudnnDataType_t f32 = dnn.CUDNN_DATA_FLOAT
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.xd), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.yd), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.hx), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.hy), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.hw), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.fw), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateFilterDescriptor(&self.wd), "cudnnCreateFilterDescriptor")
        check_cudnn(dnn.cudnnCreateConvolutionDescriptor(&self.conv),
                    "cudnnCreateConvolutionDescriptor")
        xs, ys = kern.x_strides, kern.y_strides
        check_cudnn(dnn.cudnnSetTensor4dDescriptorEx(self.hx, dt, n, s.c, s.h, s.w, xs[0], xs[1],
                                                     xs[2], xs[3]), "reference: x")
        check_cudnn(dnn.cudnnSetTensor4dDescriptorEx(self.xd, f32, n, s.c, s.h, s.w, fx[0],
                                                     fx[1], fx[2], fx[3]), "reference: x")
        check_cudnn(dnn.cudnnSetTensor4dDescriptorEx(self.hy, dt, n, s.k, s.out_h, s.out_w,
                                                     ys[0], ys[1], ys[2], ys[3]), "reference: y")
        check_cudnn(dnn.cudnnSetTensor4dDescriptorEx(self.yd, f32, n, s.k, s.out_h, s.out_w,
                                                     fy[0], fy[1], fy[2], fy[3]), "reference: y")
        check_cudnn(dnn.cudnnSetTensor4dDescriptorEx(self.hw, dt, s.k, cg, s.r, s.s, ws_[0],
                                                     ws_[1], ws_[2], ws_[3]), "reference: w")
        check_cudnn(dnn.cudnnSetTensor4dDescriptorEx(self.fw, f32, s.k, cg, s.r, s.s, ws_[0],
                                                     ws_[1], ws_[2], ws_[3]), "reference: w")
        check_cudnn(dnn.cudnnSetFilter4dDescriptor(self.wd, f32, fmt, s.k, cg, s.r, s.s),
                    "reference: filter")
        check_cudnn(dnn.cudnnSetConvolution2dDescriptor(
            self.conv, s.pad_h, s.pad_w, s.stride_h, s.stride_w, s.dil_h, s.dil_w,
            dnn.CUDNN_CROSS_CORRELATION, f32), "reference: convolution")
        check_cudnn(dnn.cudnnSetConvolutionMathType(self.conv, dnn.CUDNN_FMA_MATH),
                    "reference: math")
        check_cudnn(dnn.cudnnSetConvolutionGroupCount(self.conv, s.groups), "reference: groups")
        # the inputs of the op, converted (the output is written by the reference run)
        if kern.k.op != UCUDNN_BWD_DATA:
            check_cudnn(dnn.cudnnTransformTensor(handle.h, &one, self.hx, x.p, &zero, self.xd,
                                                 self.x), "reference: x to float")
        if kern.k.op != UCUDNN_FWD:
            check_cudnn(dnn.cudnnTransformTensor(handle.h, &one, self.hy, y.p, &zero, self.yd,
                                                 self.y), "reference: dy to float")
        if kern.k.op != UCUDNN_BWD_FILTER:
            check_cudnn(dnn.cudnnTransformTensor(handle.h, &one, self.hw, w.p, &zero, self.fw,
                                                 self.w), "reference: w to float")

    def __dealloc__(self):
        if self.xd != NULL: dnn.cudnnDestroyTensorDescriptor(self.xd)
        if self.yd != NULL: dnn.cudnnDestroyTensorDescriptor(self.yd)
        if self.hx != NULL: dnn.cudnnDestroyTensorDescriptor(self.hx)
        if self.hy != NULL: dnn.cudnnDestroyTensorDescriptor(self.hy)
        if self.hw != NULL: dnn.cudnnDestroyTensorDescriptor(self.hw)
        if self.fw != NULL: dnn.cudnnDestroyTensorDescriptor(self.fw)
        if self.wd != NULL: dnn.cudnnDestroyFilterDescriptor(self.wd)
        if self.conv != NULL: dnn.cudnnDestroyConvolutionDescriptor(self.conv)


cdef class Kernel:
    """One convolution operation of one layer at mini-batch size ``n``.

    ``shape`` is a :class:`ucudnn.plan.conv.ConvShape`; ``op`` is ``fwd``, ``bwd_data`` or
    ``bwd_filter``. Tensors have the shape's layout and strides (Note [NHWC kernels] in
    ucudnn/plan/conv.py); the filter is KCRS for NCHW, KRSC for NHWC.
    ``instances``: how many times one pass runs this kernel, each on its own workspace (Caffe:
    the layer's group count); the ILP weighs the kernel by it and plan records state it.
    Bad arguments raise :class:`ucudnn.vocab.InputError` naming the field.
    """

    def __cinit__(self):
        memset(&self.k, 0, sizeof(self.k))
        self.k.owner = <void*>self

    def __init__(self, shape, op, int n, dtype="float32", math="default", name=None,
                 int instances=1):
        where = f"layer {name!r}: " if name else ""
        if self.k.wdesc != NULL:
            raise InputError(f"{where}Kernel is already initialised")
        if op not in OP_CODES:
            raise InputError(f"{where}field 'op': unknown operation {op!r} "
                             f"(expected one of {', '.join(OPS)})")
        if dtype not in DTYPES:
            raise InputError(f"{where}field 'dtype': unsupported {dtype!r} "
                             f"(expected one of {', '.join(DTYPES)})")
        if math not in MATH_MODES:
            raise InputError(f"{where}field 'math': unknown math mode {math!r} "
                             f"(expected one of {', '.join(MATH_MODES)})")
        if n < 1:
            raise InputError(f"{where}field 'n': mini-batch size must be >= 1, got {n}")
        if instances < 1:
            raise InputError(f"{where}field 'instances': must be >= 1, got {instances}")
        self.shape, self.op, self.n, self.dtype, self.math = shape, op, n, dtype, math
        self.layout = getattr(shape, "layout", "NCHW")
        if self.layout not in LAYOUTS:
            raise InputError(f"{where}field 'layout': unknown layout {self.layout!r} "
                             f"(expected one of {', '.join(LAYOUTS)})")
        self._graph_plans = {}
        self._engine_notes = {}
        self._refused_engines = {}
        self._accepted_at = {}
        self.last_unchecked_sizes = []
        self.last_graph_error = None
        self.max_graph_configs = GRAPH_CONFIGS_DEFAULT
        self.graph_focus = None
        self.name = name or f"{op}"
        self.instances = instances
        self.plan = self.bench = self.settings = self.bench_record = self.timing = None
        self.benchmark_seconds = {"setup": 0.0, "warmup_find": 0.0, "find": 0.0,
                                  "retime": 0.0, "graph_heuristics": 0.0, "graph_build": 0.0,
                                  "graph_time": 0.0, "graph_check": 0.0}
        self.graph_stats = {"configs": 0, "built": 0, "runtime_compiled": 0, "failed": 0,
                            "checked": 0, "inaccurate": 0, "unchecked": 0}
        check_cuda(rt.cudaGetDevice(&self.device), "cudaGetDevice")
        self.k.op = OP_CODES[op]
        self.k.dtype, self.k.elem_size = DTYPES[dtype]
        self.k.n = n
        cdef bytes bname = self.name.encode("utf-8", "replace")[:127]
        strncpy(self.k.name, bname, 127)
        try:
            _as_int4(shape.packed_x_strides(), self.x_strides, "x_strides")
            _as_int4(shape.packed_y_strides(), self.y_strides, "y_strides")
        except InputError as e:
            raise InputError(f"{where}{e}") from None
        self.k.x_nstride = self.x_strides[0]
        self.k.y_nstride = self.y_strides[0]
        self._set_geometry()

        cdef dnn.cudnnDataType_t dt = <dnn.cudnnDataType_t>self.k.dtype
        # accumulate half/bfloat16 in float, as Caffe and PyTorch do
        cdef dnn.cudnnDataType_t compute = dnn.CUDNN_DATA_FLOAT if self.k.dtype in (2, 9) else dt
        check_cudnn(dnn.cudnnCreateFilterDescriptor(&self.k.wdesc), "cudnnCreateFilterDescriptor")
        check_cudnn(dnn.cudnnSetFilter4dDescriptor(
            self.k.wdesc, dt,
            dnn.CUDNN_TENSOR_NCHW if self.layout == "NCHW" else dnn.CUDNN_TENSOR_NHWC,
            shape.k, shape.c // shape.groups,
            shape.r, shape.s), f"{self.name}: filter descriptor")
        for m in range(4):
            check_cudnn(dnn.cudnnCreateConvolutionDescriptor(&self.k.conv[m]),
                        "cudnnCreateConvolutionDescriptor")
            check_cudnn(dnn.cudnnSetConvolution2dDescriptor(
                self.k.conv[m], shape.pad_h, shape.pad_w, shape.stride_h, shape.stride_w,
                shape.dil_h, shape.dil_w, dnn.CUDNN_CROSS_CORRELATION, compute),
                f"{self.name}: convolution descriptor")
            check_cudnn(dnn.cudnnSetConvolutionMathType(self.k.conv[m], <dnn.cudnnMathType_t>m),
                        "cudnnSetConvolutionMathType")
            check_cudnn(dnn.cudnnSetConvolutionGroupCount(self.k.conv[m], shape.groups),
                        "cudnnSetConvolutionGroupCount")

    cdef int _set_geometry(self) except -1:
        """The graph family's description of this kernel (graph.h's ucudnn_graph_geom)."""
        s = self.shape
        g = &self.geom
        g.op, g.dtype = self.k.op, self.k.dtype
        g.compute = 0 if self.k.dtype in (2, 9) else self.k.dtype   # half/bf16 accumulate in float
        xd, yd = (self.n, s.c, s.h, s.w), (self.n, s.k, s.out_h, s.out_w)
        wd, ws = (s.k, s.c // s.groups, s.r, s.s), s.filter_strides()
        for i in range(4):
            g.xdim[i], g.xstr[i] = xd[i], self.x_strides[i]
            g.ydim[i], g.ystr[i] = yd[i], self.y_strides[i]
            g.wdim[i], g.wstr[i] = wd[i], ws[i]
        g.pad[0], g.pad[1] = s.pad_h, s.pad_w
        g.stride[0], g.stride[1] = s.stride_h, s.stride_w
        g.dil[0], g.dil[1] = s.dil_h, s.dil_w
        # every chunk starts a whole number of samples into a 256-byte aligned buffer; a
        # grouped layer's view starts a whole number of groups into it (Note [Grouped layers]
        # in ucudnn/plan/conv.py): its channels, and its filter
        e = self.k.elem_size
        sample_bytes = [self.x_strides[0] * e, self.y_strides[0] * e]
        if s.x_strides is not None or s.y_strides is not None:     # a view into larger blobs
            sample_bytes += [s.c * self.x_strides[1] * e, s.k * self.y_strides[1] * e,
                             self.filter_bytes]
        align = 16
        while align > self.k.elem_size and any(b % align for b in sample_bytes):
            align //= 2
        g.align = align
        self.k.align = align
        return 0

    cdef int _set_tensor(self, dnn.cudnnTensorDescriptor_t d, int which, int b) except -1:
        """which 0: the input side (x / dx); 1: the output side (y / dy); b samples."""
        s = self.shape
        if which == 0:
            check_cudnn(dnn.cudnnSetTensor4dDescriptorEx(
                d, <dnn.cudnnDataType_t>self.k.dtype, b, s.c, s.h, s.w, self.x_strides[0],
                self.x_strides[1], self.x_strides[2], self.x_strides[3]),
                f"{self.name}: input tensor descriptor (batch {b})")
        else:
            check_cudnn(dnn.cudnnSetTensor4dDescriptorEx(
                d, <dnn.cudnnDataType_t>self.k.dtype, b, s.k, s.out_h, s.out_w,
                self.y_strides[0], self.y_strides[1], self.y_strides[2], self.y_strides[3]),
                f"{self.name}: output tensor descriptor (batch {b})")
        return 0

    def extent_bytes(self, int which, int b):
        """Bytes a tensor of ``b`` samples spans (input side 0, output side 1)."""
        st = [self.x_strides[i] if which == 0 else self.y_strides[i] for i in range(4)]
        s = self.shape
        dims = (b, s.c, s.h, s.w) if which == 0 else (b, s.k, s.out_h, s.out_w)
        return (1 + sum((d - 1) * st[i] for i, d in enumerate(dims))) * self.k.elem_size

    @property
    def filter_bytes(self):
        s = self.shape
        return s.k * (s.c // s.groups) * s.r * s.s * self.k.elem_size

    # ------------------------------------------------------------------ benchmark

    def benchmark(self, sizes, int repeats=1, workspace_cap=None, progress=None,
                  int time_iters=5, families=("legacy",), int time_warmup=RETIME_WARMUP,
                  bint retime_last=True):
        """Time every choice of ``families`` for each micro-batch size: the legacy algorithms
        with cudnnFind...AlgorithmEx, the graph family's engine configs as Note [Graph choices
        tried] says.

        Returns ``{b: [(algo, status, time_ms, ws_bytes, math, engine), ...]}`` (Note [Choices]
        in ucudnn/vocab.py: ``engine`` is "" for an algorithm, ``algo`` -1 for an engine
        config) with the median time of ``repeats`` Finds (one warm-up Find per call, or per
        hold_benchmark_buffers) and every choice's status; callers filter. With
        ``time_iters`` > 0 each successful algorithm near the (time, workspace) front is then
        timed again with CUDA events (median of ``time_iters`` runs enqueued back to back
        after ``time_warmup`` untimed ones), the way plans are executed: see Note [Find
        times] and Note [Re-timing near the front]; with ``retime_last`` after every size's
        Find (Note [Re-timing after the Finds]), else right after each. The benchmark
        workspace is ``workspace_cap`` (default 8 GiB) capped by free memory, or less: Note
        [Benchmark workspace]. ``benchmark_seconds`` accumulates where the calls spent their
        time.

        Note [Benchmark workspace]
            The workspace offered to the benchmark is held while it runs, so it sets the
            process's peak memory during planning: an offer of the shared arena's budget
            (several GiB) would peak above everything the planned net holds. So the offer is
            the largest workspace that a choice of ``families`` asks for at the sizes
            benchmarked, of those at most ``workspace_cap``: for an algorithm,
            cudnnGet...WorkspaceSize with every math type; for an engine config, its plan's,
            all of them built first (:meth:`_graph_build`; each size's plans live until that
            size is timed). Every choice the whole cap would run is then tried, so the cache
            records the cap as offered.

        Note [Find times]
            On the H200, plans predicted from cudnnFind...Ex times alone were measured 13-29 %
            faster than predicted at 64 and 512 MiB: Find times each algorithm in isolation,
            where launch latency is exposed, while a framework enqueues kernels back to back.
            Re-timing the candidates back to back makes the planner's prediction the time
            the plan is measured at.
        """
        sizes = sorted({int(b) for b in sizes})
        if not sizes or sizes[0] < 1 or max(sizes) > self.n:
            raise InputError(f"{self.name}: field 'sizes': micro-batch sizes must lie in "
                             f"1..{self.n}, got {sizes}")
        if repeats < 1:
            raise InputError(f"{self.name}: field 'repeats': must be >= 1, got {repeats}")
        families = tuple(families)
        if not families or any(f not in ("legacy", "graph") for f in families):
            raise InputError(f"{self.name}: field 'families': expected a non-empty subset of "
                             f"('legacy', 'graph'), got {families!r}")
        cdef int dev = 0
        check_cuda(rt.cudaGetDevice(&dev), "cudaGetDevice")
        with _device_lock(dev):
            return self._benchmark(sizes, repeats, workspace_cap, progress, time_iters,
                                   families, time_warmup, retime_last)

    def hold_benchmark_buffers(self, bint hold):
        """``True``: keep the benchmark's buffers (inputs and outputs for the whole mini-batch,
        filled once, and the workspace offered to cudnnFind) from one ``benchmark`` call to
        the next, so that a search measuring in rounds (Note [Pruned search at run time])
        allocates and fills them once; ``False`` frees them. Each call otherwise sets them up
        anew for its own largest size."""
        self._holding = hold
        if not hold:
            self._held = None
            self._warm = False

    def _benchmark(self, sizes, int repeats, workspace_cap, progress, int time_iters, families,
                   int time_warmup, bint retime_last):
        cdef int bmax = max(sizes)
        cdef Handle handle = _thread_handle()
        cdef size_t free_b = 0, total_b = 0
        cdef DeviceBuffer buf
        spent = self.benchmark_seconds
        cap = 8 << 30 if workspace_cap is None else int(workspace_cap)
        # Note [Benchmark workspace]: what the choices at these sizes can use of the cap
        legacy, graph = "legacy" in families, "graph" in families
        built = {b: self._graph_build(b) for b in sizes} if graph else {}
        t1 = perf_counter()
        need = max((plan.ws_bytes for configs in built.values() for _, plan, _, _ in configs
                    if plan is not None and plan.ws_bytes <= cap), default=0)
        if legacy:
            need = max(need, self._legacy_need(sizes, cap))
        need = min(cap, max(1 << 20, need))
        held = self._held
        if held is not None and held[0] >= bmax and held[1] == cap and held[5].nbytes >= need:
            samples, _, xbuf, ybuf, wbuf, ws = held
            ws_size = ws.nbytes
        else:
            self._held = None                   # freed before anything new is allocated
            self._warm = False
            samples = self.n if self._holding else bmax
            xbuf = DeviceBuffer(self.extent_bytes(0, samples))
            ybuf = DeviceBuffer(self.extent_bytes(1, samples))
            wbuf = DeviceBuffer(self.filter_bytes)
            for i, buf in enumerate((xbuf, ybuf, wbuf)):
                fill_random_tiled(buf.p, buf.nbytes, self.k.elem_size, 17 + i,
                                  self.k.dtype == 9)
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
            if self._holding:
                self._held = (samples, cap, xbuf, ybuf, wbuf, ws)
        # what cudnnFind was really offered: the benchmark cache keys on it (an algorithm
        # missing here may only have lacked workspace); every need up to the cap fits
        # the cap (Note [Benchmark workspace])
        self.last_benchmark_workspace = cap if ws_size >= need else int(ws_size)
        self.last_benchmark_held = int(ws_size)
        cdef dnn.cudnnTensorDescriptor_t xd = NULL, yd = NULL
        result = {}
        spent["setup"] += perf_counter() - t1
        try:
            check_cudnn(dnn.cudnnCreateTensorDescriptor(&xd), "cudnnCreateTensorDescriptor")
            check_cudnn(dnn.cudnnCreateTensorDescriptor(&yd), "cudnnCreateTensorDescriptor")
            # Note [Re-timing after the Finds]
            later = legacy and time_iters > 0 and retime_last
            found, configs = {}, {}
            for i, b in enumerate(sizes):
                self._set_tensor(xd, 0, b)
                self._set_tensor(yd, 1, b)
                if legacy:
                    if i == 0 and not self._warm:
                        # one warm-up Find per call (per hold: later rounds find the GPU warm)
                        t1 = perf_counter()
                        self._find_c(handle, <uintptr_t>xd, <uintptr_t>yd, xbuf, ybuf, wbuf, ws)
                        self._warm = self._holding
                        spent["warmup_find"] += perf_counter() - t1
                    t1 = perf_counter()
                    runs = [self._find_c(handle, <uintptr_t>xd, <uintptr_t>yd, xbuf, ybuf, wbuf,
                                         ws) for _ in range(repeats)]
                    found[b] = _merge_runs(runs, self.math == "fma")
                    spent["find"] += perf_counter() - t1
                    if time_iters > 0 and not later:
                        self._retime(handle, <uintptr_t>xd, <uintptr_t>yd, xbuf, ybuf, wbuf, ws,
                                     found, b, time_iters, time_warmup, samples, spent)
                if graph:
                    configs[b] = self._graph_c(handle, b, built.pop(b), xbuf, ybuf, wbuf, ws,
                                               time_iters if time_iters > 0 else 5, samples // b,
                                               <uintptr_t>xd, <uintptr_t>yd)
                if not later:
                    result[b] = _choices(found.get(b, []), configs.get(b, []), legacy and graph)
                    if progress is not None:
                        progress(b)
            for b in (sizes if later else ()):
                self._set_tensor(xd, 0, b)
                self._set_tensor(yd, 1, b)
                self._retime(handle, <uintptr_t>xd, <uintptr_t>yd, xbuf, ybuf, wbuf, ws, found,
                             b, time_iters, time_warmup, samples, spent)
                result[b] = _choices(found[b], configs.get(b, []), graph)
                if progress is not None:
                    progress(b)
        finally:
            if xd != NULL:
                dnn.cudnnDestroyTensorDescriptor(xd)
            if yd != NULL:
                dnn.cudnnDestroyTensorDescriptor(yd)
        refused = self._refused_engines
        if refused:                     # refused at a later size: Note [Graph results checked]
            for b, records in result.items():
                result[b] = [r[:1] + (STATUS_INACCURATE,) + r[2:]
                             if r[5] and r[1] == 0 and parse_engine(r[5])[0] in refused
                             else r for r in records]
        self.last_unchecked_sizes = sorted(
            b for b in result if any(e in refused for e in self._accepted_at.get(b, ())))
        return result

    @property
    def refused_engines(self):
        """``{engine index: why}`` of the engines Note [Graph results checked] refused for
        this kernel, by its own benchmarks or :meth:`refuse_engines`."""
        return dict(self._refused_engines)

    def refuse_engines(self, reasons):
        """Refuse the engines of ``{engine index: why}`` (refused before, e.g. by another
        process: the benchmark cache keeps them) as if this kernel's own check had: their
        configs get STATUS_INACCURATE from the next benchmark on."""
        for engine, why in dict(reasons).items():
            self._refused_engines.setdefault(int(engine), str(why))

    cdef _retime(self, Handle handle, uintptr_t xd, uintptr_t yd, DeviceBuffer x,
                 DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, dict found, int b,
                 int iters, int warmup, int samples, dict spent):
        """Re-time ``found[b]`` (cudnnFind's records at ``b``) in place: :meth:`_time_c`."""
        t1 = perf_counter()
        found[b] = self._time_c(handle, xd, yd, x, y, w, ws, found[b], iters, warmup, b,
                                samples // b)
        spent["retime"] += perf_counter() - t1

    cdef list _find_c(self, Handle handle, uintptr_t xd_, uintptr_t yd_, DeviceBuffer x,
                      DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws):
        cdef dnn.cudnnTensorDescriptor_t xd = <dnn.cudnnTensorDescriptor_t>xd_
        cdef dnn.cudnnTensorDescriptor_t yd = <dnn.cudnnTensorDescriptor_t>yd_
        cdef dnn.cudnnConvolutionFwdAlgoPerf_t fp[32]
        cdef dnn.cudnnConvolutionBwdDataAlgoPerf_t dp[32]
        cdef dnn.cudnnConvolutionBwdFilterAlgoPerf_t wp[32]
        cdef int got = 0, i
        cdef dnn.cudnnStatus_t st
        cdef int mi = MATH_MODES[self.math]
        cdef dnn.cudnnConvolutionDescriptor_t conv = self.k.conv[mi]
        cdef dnn.cudnnHandle_t h = handle.h
        cdef dnn.cudnnFilterDescriptor_t wd = self.k.wdesc
        out = []
        if self.k.op == UCUDNN_FWD:
            with nogil:
                st = dnn.cudnnFindConvolutionForwardAlgorithmEx(
                    h, xd, x.p, wd, w.p, conv, yd, y.p, 32, &got, fp, ws.p, ws.nbytes)
            check_cudnn(st, f"{self.name}: cudnnFindConvolutionForwardAlgorithmEx")
            for i in range(got):
                out.append((int(fp[i].algo), int(fp[i].status), fp[i].time, fp[i].memory,
                            int(fp[i].mathType)))
        elif self.k.op == UCUDNN_BWD_DATA:
            with nogil:
                st = dnn.cudnnFindConvolutionBackwardDataAlgorithmEx(
                    h, wd, w.p, yd, y.p, conv, xd, x.p, 32, &got, dp, ws.p, ws.nbytes)
            check_cudnn(st, f"{self.name}: cudnnFindConvolutionBackwardDataAlgorithmEx")
            for i in range(got):
                out.append((int(dp[i].algo), int(dp[i].status), dp[i].time, dp[i].memory,
                            int(dp[i].mathType)))
        else:
            with nogil:
                st = dnn.cudnnFindConvolutionBackwardFilterAlgorithmEx(
                    h, xd, x.p, yd, y.p, conv, wd, w.p, 32, &got, wp, ws.p, ws.nbytes)
            check_cudnn(st, f"{self.name}: cudnnFindConvolutionBackwardFilterAlgorithmEx")
            for i in range(got):
                out.append((int(wp[i].algo), int(wp[i].status), wp[i].time, wp[i].memory,
                            int(wp[i].mathType)))
        return out

    cdef list _time_c(self, Handle handle, uintptr_t xd_, uintptr_t yd_, DeviceBuffer x,
                      DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, list records, int iters,
                      int warmup, int b, int slices):
        """Re-time each successful record near the (time, workspace) front with CUDA events
        (``_time_run``; Note [Find times], Note [Re-timing near the front]) at micro-batch
        ``b``, over the ``slices`` slices of ``b`` samples the buffers hold.

        Each algorithm runs with the workspace it asks for (what a plan of it gives it; 8 GiB
        instead timed the same, results/h200/timing/probe.json), and backward-filter with beta
        1 (Note [Backward-filter timed with beta 1]). An algorithm
        that fails at any of its runs (the warm-up or a timed one) keeps cuDNN's status in its
        record, so the planners skip it; a failed CUDA event call raises."""
        cdef float one_f = 1.0, zero_f = 0.0
        cdef double one_d = 1.0, zero_d = 0.0
        cdef TimedRun r
        cdef _Events events = _Events(iters + 1)
        r.h, r.plan, r.op = handle.h, NULL, self.k.op
        r.alpha = <const void*>&one_d if self.k.dtype == 1 else <const void*>&one_f
        if self.k.op == UCUDNN_BWD_FILTER:
            r.beta = r.alpha            # Note [Backward-filter timed with beta 1]
        else:
            r.beta = <const void*>&zero_d if self.k.dtype == 1 else <const void*>&zero_f
        r.xd, r.yd, r.wd = <dnn.cudnnTensorDescriptor_t>xd_, <dnn.cudnnTensorDescriptor_t>yd_, \
            self.k.wdesc
        r.x, r.y, r.w, r.ws, r.ws_bytes = <char*>x.p, <char*>y.p, w.p, ws.p, ws.nbytes
        r.x_step = <size_t>(b * self.k.x_nstride * self.k.elem_size)
        r.y_step = <size_t>(b * self.k.y_nstride * self.k.elem_size)
        r.slices = max(1, slices)
        out = []
        ok = [(rec[2], rec[3]) for rec in records
              if rec[1] == 0 and rec[3] <= ws.nbytes and 0 <= rec[4] < 4]
        for rec in records:
            algo, status, t, mem, mt = rec
            if status != 0 or mem > ws.nbytes or not 0 <= mt < 4:
                out.append(rec)
                continue
            if _far_behind(t, mem, ok):
                out.append(rec)     # far behind the front: Note [Re-timing near the front]
                continue
            r.algo, r.conv, r.ws_bytes = algo, self.k.conv[mt], mem
            st, ms = _time_run(&r, <rt.cudaStream_t>handle.stream, events.ev, iters,
                               f"{self.name}: algorithm {algo} (math {mt})", warmup)
            out.append((algo, st, t, mem, mt) if st != 0 else (algo, status, ms, mem, mt))
        out.sort(key=lambda rec: (rec[1] != 0, rec[2]))
        return out

    def _graph_plan(self, engine, int batch, double beta):
        """``(GraphPlan, 0, "")`` for engine config ``engine`` at ``batch`` samples and output
        scale ``beta``, or ``(None, cudnnStatus_t, what failed)``."""
        cdef GraphPlan gp = GraphPlan()
        cdef ucudnn_engine_config cfg
        cdef char msg[512]
        cdef dnn.cudnnStatus_t st
        cdef Handle handle = _thread_handle()
        _config_from_text(engine, &cfg)
        gp.engine, gp.batch, gp.beta = engine, batch, beta
        t0 = perf_counter()
        st = _build_graph(handle, &self.geom, gp, batch, beta, msg, sizeof(msg))
        if st == dnn.CUDNN_STATUS_SUCCESS:
            with nogil:
                st = ucg_plan_build(handle.h, &gp.g, &cfg, &gp.p, msg, sizeof(msg))
            gp.have_plan = True
        gp.build_seconds = perf_counter() - t0
        if st != dnn.CUDNN_STATUS_SUCCESS:
            return None, int(st), msg.decode("utf-8", "replace")
        return gp, 0, ""

    def engine_notes(self, engine):
        """The numerical notes of engine config ``engine``'s engine on this kernel, a bit mask
        (bit i: cudnnBackendNumericalNote_t i; vocab.NUMERICAL_NOTES names them); notes
        belong to the engine, not to its knobs or the batch. For choices read back from the
        benchmark cache, which keeps an engine config's text only (Note [Choices] in
        ucudnn/vocab.py)."""
        cdef GraphPlan gp
        cdef int numerical = 0, behavior = 0
        cdef int64_t index
        cdef char msg[512]
        cdef dnn.cudnnStatus_t st
        index = parse_engine(engine)[0]
        if index in self._engine_notes:
            return self._engine_notes[index]
        gp = GraphPlan()
        st = _build_graph(_thread_handle(), &self.geom, gp, self.n, 0.0, msg, sizeof(msg))
        if st == dnn.CUDNN_STATUS_SUCCESS:
            with nogil:
                st = ucg_engine_notes(&gp.g, index, &numerical, &behavior, msg, sizeof(msg))
        check_cudnn(st, f"{self.name}: notes of {engine}: {msg.decode('utf-8', 'replace')}")
        self._engine_notes[index] = numerical
        return numerical

    def _graph_configs(self, int batch, double beta):
        """The engine configs to try at ``batch`` (Note [Graph choices tried]), as text, with
        their behaviour notes: ``[(engine, behavior_notes)]``."""
        cdef GraphPlan gp = GraphPlan()
        cdef ucudnn_engine_config* cfgs = <ucudnn_engine_config*>calloc(
            UCG_MAX_CONFIGS, sizeof(ucudnn_engine_config))
        cdef char msg[512]
        cdef int got = 0, i, mode
        cdef dnn.cudnnStatus_t st
        cdef Handle handle = _thread_handle()
        if cfgs == NULL:
            raise MemoryError()
        seen = {}
        try:
            st = _build_graph(handle, &self.geom, gp, batch, beta, msg, sizeof(msg))
            if st != dnn.CUDNN_STATUS_SUCCESS:
                self.last_graph_error = (f"{self.name}: operation graph at batch {batch}: "
                                         f"{msg.decode('utf-8', 'replace')}")
                return []
            drop = 0
            if self.k.dtype == 0:
                drop = NOTE_DOWN_CONVERT | (NOTE_TENSOR_CORE if self.math == "fma" else 0)
            elif self.k.dtype in (2, 9):
                drop = NOTE_REDUCED_PRECISION
            focus = self.graph_focus
            for _, mode in HEUR_MODES:
                if focus is None and 0 < self.max_graph_configs <= len(seen):
                    break           # the later modes' configs would be cut off below
                if focus and any(e in focus for e in seen):
                    break           # Note [Graph focus in the pruned search] (for_plan.py)
                with nogil:
                    st = ucg_heuristics(&gp.g, mode, cfgs, UCG_MAX_CONFIGS, &got, msg, sizeof(msg))
                for i in range(got):
                    if cfgs[i].numerical_notes & drop:
                        continue
                    seen.setdefault(_config_text(&cfgs[i]), cfgs[i].behavior_notes)
            if focus:           # Note [Graph focus in the pruned search] (for_plan.py)
                seen = {e: seen[e] for e in focus_configs(list(seen), focus)}
            if self.max_graph_configs > 0:
                seen = dict(list(seen.items())[:self.max_graph_configs])
            if not seen:
                self.last_graph_error = f"{self.name}: no engine config at batch {batch}"
            return list(seen.items())
        finally:
            free(cfgs)

    def _graph_build(self, int b):
        """The graph family's configs at micro-batch ``b`` (Note [Graph choices tried]), each
        built into its plan: ``[(engine, GraphPlan or None, cudnnStatus_t, runtime
        compiled)]``. Backward-filter's plans have beta 1 (Note [Backward-filter timed with
        beta 1]), and its beta-0 plan must build too (Note [Graph plans and beta] in
        graph.h). Built before the benchmark allocates its workspace, which their needs size
        (Note [Benchmark workspace])."""
        cdef double beta = 1.0 if self.k.op == UCUDNN_BWD_FILTER else 0.0
        spent = self.benchmark_seconds
        t0 = perf_counter()
        configs = self._graph_configs(b, beta)
        spent["graph_heuristics"] += perf_counter() - t0
        out = []
        for engine, behavior in configs:
            plan, status, _ = self._graph_plan(engine, b, beta)
            if plan is not None:
                spent["graph_build"] += plan.build_seconds
            if plan is not None and beta != 0.0:
                other, status, _ = self._graph_plan(engine, b, 0.0)
                spent["graph_build"] += other.build_seconds if other is not None else 0.0
            out.append((engine, plan if status == 0 else None, status,
                        bool(behavior & BEHAVIOR_RUNTIME_COMPILATION)))
        return out

    def _graph_c(self, Handle handle, int b, list built, DeviceBuffer x, DeviceBuffer y,
                 DeviceBuffer w, DeviceBuffer ws, int iters, int slices, uintptr_t xd_,
                 uintptr_t yd_):
        """Records of the graph family at micro-batch ``b`` from its configs ``built``
        (:meth:`_graph_build`), timed as ``_time_c`` times algorithms, then checked (Note
        [Graph results checked]; ``xd_``, ``yd_``: the tensor descriptors of ``b``
        samples)."""
        cdef GraphPlan gp
        cdef TimedRun r
        cdef _Events events = _Events(iters + 1)
        spent, stats = self.benchmark_seconds, self.graph_stats
        mt = MATH_MODES[self.math]
        r.h, r.op = handle.h, self.k.op
        r.x, r.y, r.w, r.ws, r.ws_bytes = <char*>x.p, <char*>y.p, w.p, ws.p, ws.nbytes
        r.x_step = <size_t>(b * self.k.x_nstride * self.k.elem_size)
        r.y_step = <size_t>(b * self.k.y_nstride * self.k.elem_size)
        r.slices = max(1, slices)
        out, timed = [], []
        t0 = perf_counter()
        for engine, plan, status, compiled in built:
            stats["configs"] += 1
            if compiled:
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
            st, ms = _time_run(&r, <rt.cudaStream_t>handle.stream, events.ev, 1,
                               f"{self.name}: engine config {engine}")
            if st != 0:
                stats["failed"] += 1
                out.append((GRAPH_ALGO, st, 0.0, plan.ws_bytes, mt, engine))
                continue
            timed.append((plan, ms))
        # one timed run each first; the median of iters for those near the front (Note
        # [Re-timing near the front], as cudnnFind's times are for the algorithms)
        front = [(t, plan.ws_bytes) for plan, t in timed]
        for plan, t in timed:
            if _far_behind(t, plan.ws_bytes, front):
                out.append((GRAPH_ALGO, 0, t, plan.ws_bytes, mt, plan.engine))
                continue
            gp = plan
            r.plan = &gp.p
            st, ms = _time_run(&r, <rt.cudaStream_t>handle.stream, events.ev, iters,
                               f"{self.name}: engine config {plan.engine}")
            if st != 0:
                stats["failed"] += 1
                out.append((GRAPH_ALGO, st, 0.0, plan.ws_bytes, mt, plan.engine))
                continue
            out.append((GRAPH_ALGO, 0, ms, plan.ws_bytes, mt, plan.engine))
        t1 = perf_counter()
        spent["graph_time"] += t1 - t0
        self._check_graph(handle, b, x, y, w, ws, xd_, yd_, out,
                          {plan.engine: plan for plan, _ in timed})
        spent["graph_check"] += perf_counter() - t1
        return out

    def _check_region(self):
        """Note [Graph results checked]: ``(pointer role, elements)`` of the output compared,
        or None where one sample of it is not a packed block at the buffer's start."""
        s = self.shape
        if self.k.op == UCUDNN_BWD_FILTER:
            return "w", min(CHECK_ELEMENTS, self.filter_bytes // self.k.elem_size)
        if self.k.op == UCUDNN_FWD:
            c, h, w, st, role = s.k, s.out_h, s.out_w, self.y_strides, "y"
        else:
            c, h, w, st, role = s.c, s.h, s.w, self.x_strides, "x"
        if (st[1], st[2], st[3]) not in ((h * w, w, 1), (1, w * c, c)):
            return None
        return role, min(CHECK_ELEMENTS, c * h * w)

    def _reference(self, Handle handle, int b, uintptr_t xd_, uintptr_t yd_, DeviceBuffer x,
                   DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, role, size_t count):
        """Note [Graph results checked]: the first ``count`` values of a legacy algorithm's
        output at ``b`` samples (algorithm 0, else 1; FMA math, no workspace) as
        ``(bytes, cudnnDataType_t)``, or None where neither runs. float32 and float64 run on
        the benchmark's buffers; float16 and bfloat16 on float32 copies of them (one sample,
        or all ``b`` for backward-filter), since cuDNN's half-precision backward-filter
        algorithms round partial sums (the GPU tests' note on bfloat16's algorithm 0)."""
        cdef float one_f = 1.0, zero_f = 0.0
        cdef double one_d = 1.0, zero_d = 0.0
        cdef const void* one = <const void*>&one_d if self.k.dtype == 1 else <const void*>&one_f
        cdef const void* zero = <const void*>&zero_d if self.k.dtype == 1 else <const void*>&zero_f
        cdef dnn.cudnnStatus_t st = dnn.CUDNN_STATUS_NOT_SUPPORTED
        cdef int algo
        cdef char* host
        cdef char* out
        cdef dnn.cudnnTensorDescriptor_t xd = <dnn.cudnnTensorDescriptor_t>xd_
        cdef dnn.cudnnTensorDescriptor_t yd = <dnn.cudnnTensorDescriptor_t>yd_
        cdef dnn.cudnnFilterDescriptor_t wd = self.k.wdesc
        cdef dnn.cudnnConvolutionDescriptor_t conv = self.k.conv[3]
        cdef char* px = <char*>x.p
        cdef char* py = <char*>y.p
        cdef char* pw = <char*>w.p
        cdef int ref_dtype = self.k.dtype
        cdef _FloatCopies copies = None
        if self.k.dtype in (2, 9):
            copies = _FloatCopies(self, handle, b, x, y, w, ws)
            if copies.base == NULL:
                return None
            xd, yd, wd, conv = copies.xd, copies.yd, copies.wd, copies.conv
            px, py, pw = copies.x, copies.y, copies.w
            ref_dtype = 0
        for algo in range(2):
            with nogil:
                st = conv_call(self.k.op, handle.h, algo, conv, one, zero, xd, px, wd, pw,
                               yd, py, NULL, 0)
            if st == dnn.CUDNN_STATUS_SUCCESS:
                break
        if st != dnn.CUDNN_STATUS_SUCCESS:
            return None
        out = py if role == "y" else (px if role == "x" else pw)
        nbytes = count * (4 if ref_dtype == 0 else self.k.elem_size)
        ref = bytes(nbytes)
        host = ref
        check_cuda(rt.cudaStreamSynchronize(<rt.cudaStream_t>handle.stream),
                   f"{self.name}: reference run")
        check_cuda(rt.cudaMemcpy(host, out, nbytes, rt.cudaMemcpyDeviceToHost),
                   f"{self.name}: reference copy")
        return ref, ref_dtype

    def _graph_error(self, Handle handle, GraphPlan gp, DeviceBuffer x, DeviceBuffer y,
                     DeviceBuffer w, DeviceBuffer ws, uintptr_t out_, size_t count, bytes ref,
                     int ref_dtype):
        """Note [Graph results checked]: one run of ``gp`` on the first slice, its relative
        error over the first ``count`` values against ``ref`` (of ``ref_dtype``)."""
        cdef size_t nbytes = count * self.k.elem_size
        cdef const char* r = ref
        cdef char* host = <char*>malloc(nbytes)
        cdef void* out = <void*>out_
        cdef dnn.cudnnStatus_t st
        cdef double err
        if host == NULL:
            raise MemoryError()
        try:
            check_cuda(rt.cudaStreamSynchronize(<rt.cudaStream_t>handle.stream), self.name)
            # NaN for every dtype (all bits set), or zeros under the beta-1 plan
            check_cuda(rt.cudaMemset(out, 0 if self.k.op == UCUDNN_BWD_FILTER else 0xFF,
                                     nbytes), f"{self.name}: check fill")
            check_cuda(rt.cudaDeviceSynchronize(), f"{self.name}: check fill")
            with nogil:
                st = ucg_execute(handle.h, &gp.p, x.p, w.p, y.p, ws.p)
            if st != dnn.CUDNN_STATUS_SUCCESS:
                return INFINITY
            check_cuda(rt.cudaStreamSynchronize(<rt.cudaStream_t>handle.stream),
                       f"{self.name}: engine config {gp.engine}")
            check_cuda(rt.cudaMemcpy(host, out, nbytes, rt.cudaMemcpyDeviceToHost),
                       f"{self.name}: check copy")
            with nogil:
                err = _relative_error(host, self.k.dtype, r, ref_dtype, count)
            return err
        finally:
            free(host)

    def _check_graph(self, Handle handle, int b, DeviceBuffer x, DeviceBuffer y,
                     DeviceBuffer w, DeviceBuffer ws, uintptr_t xd_, uintptr_t yd_, list out,
                     dict plans):
        """Note [Graph results checked], on the records ``out`` of size ``b`` (in place)."""
        stats = self.graph_stats
        accepted_engines = self._accepted_at[b] = set()     # this call's, at this size
        cand = sorted((i for i, rec in enumerate(out) if rec[1] == 0),
                      key=lambda i: (out[i][2], out[i][3]))
        if not cand:
            return
        region = self._check_region()
        cdef uintptr_t dev = 0
        got = None
        if region is not None:
            role, count = region
            dev = <uintptr_t>(y.p if role == "y" else (x.p if role == "x" else w.p))
            got = self._reference(handle, b, xd_, yd_, x, y, w, ws, role, count)
        if got is None:
            stats["unchecked"] += len(cand)
            return
        ref, ref_dtype = got
        tol = check_tolerance(self.dtype, self.math)
        accepted = []           # workspaces of the configs accepted, fastest first
        refused = self._refused_engines
        for i in cand:
            _, _, t, wsb, mt, engine = out[i]
            if parse_engine(engine)[0] in refused:
                out[i] = (GRAPH_ALGO, STATUS_INACCURATE, t, wsb, mt, engine)
                continue
            if any(a <= wsb for a in accepted):
                continue        # beaten on time and workspace: no plan chooses it
            err = self._graph_error(handle, plans[engine], x, y, w, ws, dev, count, ref,
                                    ref_dtype)
            stats["checked"] += 1
            if err <= tol:
                accepted.append(wsb)
                accepted_engines.add(parse_engine(engine)[0])
                continue
            stats["inaccurate"] += 1
            out[i] = (GRAPH_ALGO, STATUS_INACCURATE, t, wsb, mt, engine)
            self.last_graph_error = (f"{self.name}: engine config {engine} at batch {b}: "
                                     f"relative error {err:.3g} against a legacy algorithm, "
                                     f"more than {tol:.3g} (Note [Graph results checked])")
            refused[parse_engine(engine)[0]] = self.last_graph_error

    # ------------------------------------------------------------------ plan

    def _legacy_need(self, sizes, cap):
        """The largest workspace that a legacy algorithm asks for at ``sizes`` with any math
        type, of those at most ``cap`` (Note [Benchmark workspace]); algorithms cuDNN cannot
        run there ask for nothing."""
        counts = {UCUDNN_FWD: dnn.CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                  UCUDNN_BWD_DATA: dnn.CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                  UCUDNN_BWD_FILTER: dnn.CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT}
        need = 0
        for b in sizes:
            for algo in range(int(counts[self.k.op])):
                for math in range(4):
                    try:
                        size = self.workspace_for(b, algo, math)
                    except CudnnError:
                        continue
                    if need < size <= cap:
                        need = size
        return need

    def workspace_for(self, int batch, int algo, int math, engine=""):
        """cuDNN's workspace need for a choice at micro-batch ``batch``: algorithm ``algo``
        with ``math``, or engine config ``engine`` (both of its plans, Note [Graph plans and
        beta] in graph.h). Raises if cuDNN cannot run it."""
        if engine:
            return self._graph_workspace(batch, engine, self._graph_plans)
        cdef Handle handle = _thread_handle()
        cdef dnn.cudnnTensorDescriptor_t xd = NULL, yd = NULL
        cdef size_t size = 0
        cdef dnn.cudnnStatus_t st
        if not 0 <= math < 4:
            raise InputError(f"{self.name}: field 'math': cudnnMathType_t {math} out of range")
        if not 1 <= batch <= self.n:
            raise InputError(f"{self.name}: field 'batch': micro-batch {batch} not in 1..{self.n}")
        try:
            check_cudnn(dnn.cudnnCreateTensorDescriptor(&xd), "cudnnCreateTensorDescriptor")
            check_cudnn(dnn.cudnnCreateTensorDescriptor(&yd), "cudnnCreateTensorDescriptor")
            self._set_tensor(xd, 0, batch)
            self._set_tensor(yd, 1, batch)
            if self.k.op == UCUDNN_FWD:
                st = dnn.cudnnGetConvolutionForwardWorkspaceSize(
                    handle.h, xd, self.k.wdesc, self.k.conv[math], yd,
                    <dnn.cudnnConvolutionFwdAlgo_t>algo, &size)
            elif self.k.op == UCUDNN_BWD_DATA:
                st = dnn.cudnnGetConvolutionBackwardDataWorkspaceSize(
                    handle.h, self.k.wdesc, yd, self.k.conv[math], xd,
                    <dnn.cudnnConvolutionBwdDataAlgo_t>algo, &size)
            else:
                st = dnn.cudnnGetConvolutionBackwardFilterWorkspaceSize(
                    handle.h, xd, yd, self.k.conv[math], self.k.wdesc,
                    <dnn.cudnnConvolutionBwdFilterAlgo_t>algo, &size)
            check_cudnn(st, f"{self.name}: workspace size of algorithm {algo} at batch {batch}")
        finally:
            if xd != NULL:
                dnn.cudnnDestroyTensorDescriptor(xd)
            if yd != NULL:
                dnn.cudnnDestroyTensorDescriptor(yd)
        return int(size)

    def _graph_plans_for(self, int batch, engine, dict built):
        """``(beta-0 plan, beta-1 plan)`` of ``engine`` at ``batch`` (Note [Graph plans and
        beta] in graph.h), from ``built`` or built into it; PlanError naming the layer, size
        and config when a plan the op needs does not build. A beta-1 plan that does not build
        is None for forward and backward-data (they run it only for a caller's beta 1)."""
        key = (batch, engine)
        got = built.get(key)
        if got is None:
            plans = []
            for beta in (0.0, 1.0):
                plan, status, why = self._graph_plan(engine, batch, beta)
                if plan is None and (beta == 0.0 or self.k.op == UCUDNN_BWD_FILTER):
                    raise PlanError(f"{self.name}: engine config {engine} at batch {batch} "
                                    f"(beta {beta:g}): {why}")
                plans.append(plan)
            got = built[key] = tuple(plans)
        return got

    def _graph_workspace(self, int batch, engine, dict built):
        """Workspace of ``engine`` at ``batch``: the larger of its plans (_graph_plans_for)."""
        return max(p.ws_bytes for p in self._graph_plans_for(batch, engine, built) if p)

    def set_plan(self, plan):
        """Resolve a :class:`ucudnn.plan.dp.Plan` into C arrays: chunks, per-size descriptors,
        and the graph plans its engine configs need (built here, at planning: the run path
        only executes them).

        The workspace the plan needs is asked of cuDNN for each chunk (not taken from the
        benchmark record), so a stale cache entry cannot under-size it.
        """
        chunks = list(plan.chunks)
        if sum(c.batch for c in chunks) != self.n:
            raise PlanError(f"{self.name}: plan covers {sum(c.batch for c in chunks)} samples, "
                            f"mini-batch is {self.n}")
        graph_plans = {}        # the plans of this plan's engine configs, built once each
        ws_need = max(self._graph_workspace(c.batch, c.engine, graph_plans) if c.engine
                      else self.workspace_for(c.batch, c.algo, c.math) for c in chunks)
        cdef GraphPlan gp
        cdef double predicted = plan.time_ms
        sizes = sorted({c.batch for c in chunks}, reverse=True)
        cdef ucudnn_chunk* arr = <ucudnn_chunk*>calloc(len(chunks), sizeof(ucudnn_chunk))
        cdef dnn.cudnnTensorDescriptor_t* xds = <dnn.cudnnTensorDescriptor_t*>calloc(
            len(sizes), sizeof(dnn.cudnnTensorDescriptor_t))
        cdef dnn.cudnnTensorDescriptor_t* yds = <dnn.cudnnTensorDescriptor_t*>calloc(
            len(sizes), sizeof(dnn.cudnnTensorDescriptor_t))
        if arr == NULL or xds == NULL or yds == NULL:
            free(arr); free(xds); free(yds)
            raise MemoryError()
        cdef int i
        try:
            for i, b in enumerate(sizes):
                check_cudnn(dnn.cudnnCreateTensorDescriptor(&xds[i]), "cudnnCreateTensorDescriptor")
                check_cudnn(dnn.cudnnCreateTensorDescriptor(&yds[i]), "cudnnCreateTensorDescriptor")
                self._set_tensor(xds[i], 0, b)
                self._set_tensor(yds[i], 1, b)
            offset = 0
            for i, c in enumerate(chunks):
                arr[i].batch, arr[i].offset, arr[i].algo = c.batch, offset, c.algo
                arr[i].math, arr[i].desc = c.math, sizes.index(c.batch)
                if c.engine:
                    arr[i].algo = GRAPH_ALGO
                    for j, p in enumerate(graph_plans[(c.batch, c.engine)]):
                        if p is not None:
                            gp = p
                            arr[i].graph[j] = &gp.p
                offset += c.batch
        except BaseException:
            for i in range(len(sizes)):
                if xds[i] != NULL: dnn.cudnnDestroyTensorDescriptor(xds[i])
                if yds[i] != NULL: dnn.cudnnDestroyTensorDescriptor(yds[i])
            free(arr); free(xds); free(yds)
            raise
        self._free_plan()
        self._graph_plans = graph_plans     # owns the plans arr points into
        self.k.chunks, self.k.n_chunks = arr, len(chunks)
        self.k.xdesc, self.k.ydesc, self.k.n_descs = xds, yds, len(sizes)
        self.k.ws_bytes = ws_need
        self.k.predicted_ms = predicted
        self.plan = plan

    cdef void _free_plan(self) noexcept:
        cdef int i
        for i in range(self.k.n_descs):
            dnn.cudnnDestroyTensorDescriptor(self.k.xdesc[i])
            dnn.cudnnDestroyTensorDescriptor(self.k.ydesc[i])
        free(self.k.xdesc); free(self.k.ydesc); free(self.k.chunks)
        self.k.xdesc = self.k.ydesc = NULL
        self.k.chunks = NULL
        self.k.n_descs = self.k.n_chunks = 0
        self.k.ws_bytes = 0

    @property
    def workspace_size(self):
        """Bytes of workspace the current plan needs (0 without a plan)."""
        return int(self.k.ws_bytes)

    @property
    def address(self):
        """Address of the C struct, as the C API's ``ucudnn_kernel*``."""
        return <uintptr_t>&self.k

    # ------------------------------------------------------------------ run

    def run(self, Handle handle not None, uintptr_t a, uintptr_t b, uintptr_t out, uintptr_t workspace=0,
            workspace_size=None, double alpha=1.0, double beta=0.0):
        """Run the plan: fwd (a=x, b=w, out=y), bwd_data (a=w, b=dy, out=dx),
        bwd_filter (a=x, b=dy, out=dw). Device addresses as integers; asynchronous."""
        cdef size_t wss = self.k.ws_bytes if workspace_size is None else workspace_size
        cdef float af = alpha, bf = beta
        cdef const void* pa = <const void*>&alpha if self.k.dtype == 1 else <const void*>&af
        cdef const void* pb = <const void*>&beta if self.k.dtype == 1 else <const void*>&bf
        cdef int rc
        with nogil:
            rc = run_kernel(&self.k, handle.h, pa, <const void*>a, <const void*>b, pb,
                            <void*>out, <void*>workspace, wss)
        if rc != UCUDNN_OK:
            raise _run_error(rc)

    def __dealloc__(self):
        cdef int m
        self._free_plan()
        if self.k.wdesc != NULL:
            dnn.cudnnDestroyFilterDescriptor(self.k.wdesc)
        for m in range(4):
            if self.k.conv[m] != NULL:
                dnn.cudnnDestroyConvolutionDescriptor(self.k.conv[m])


def _choices(legacy, graph, bint both):
    """One size's records: cudnnFind's (each given the empty engine of an algorithm, Note
    [Choices] in ucudnn/vocab.py) then the graph family's, fastest first where both ran."""
    out = [r + ("",) for r in legacy] + list(graph)
    if both:
        out.sort(key=lambda r: (r[1] != 0, r[2]))
    return out


def _merge_runs(runs, bint strict_fma):
    """Median time per (algo, math) over repeated Finds; the worst status and largest workspace."""
    merged = {}
    for run in runs:
        for algo, status, t, mem, mt in run:
            if strict_fma:
                mt = 3          # run it as asked: CUDNN_FMA_MATH, never TF32
            e = merged.setdefault((algo, mt), [[], 0, 0])
            e[0].append(t)
            e[1] = status if status != 0 else e[1]
            e[2] = max(e[2], mem)
    out = []
    for (algo, mt), (times, status, mem) in merged.items():
        times.sort()
        k = len(times)
        med = times[k // 2] if k % 2 else 0.5 * (times[k // 2 - 1] + times[k // 2])
        if len(times) < len(runs) and status == 0:
            status = -1         # not reported by every Find: treat as unreliable
        out.append((algo, status, float(med), int(mem), mt))
    out.sort(key=lambda r: (r[1] != 0, r[2]))
    return out


# --------------------------------------------------------------------------- hot path

cdef inline dnn.cudnnStatus_t conv_call(
        int op, dnn.cudnnHandle_t h, int algo, dnn.cudnnConvolutionDescriptor_t conv,
        const void* alpha, const void* beta, dnn.cudnnTensorDescriptor_t xd, const void* x,
        dnn.cudnnFilterDescriptor_t wd, const void* w, dnn.cudnnTensorDescriptor_t yd,
        const void* y, void* ws, size_t ws_size) noexcept nogil:
    """One cuDNN convolution call. x is the input side (x, or dx written by bwd_data), y the
    output side (y written by fwd, or dy), w the filter (dw written by bwd_filter)."""
    if op == UCUDNN_FWD:
        return dnn.cudnnConvolutionForward(h, alpha, xd, x, wd, w, conv,
                                           <dnn.cudnnConvolutionFwdAlgo_t>algo, ws, ws_size,
                                           beta, yd, <void*>y)
    if op == UCUDNN_BWD_DATA:
        return dnn.cudnnConvolutionBackwardData(h, alpha, wd, w, yd, y, conv,
                                                <dnn.cudnnConvolutionBwdDataAlgo_t>algo, ws,
                                                ws_size, beta, xd, <void*>x)
    return dnn.cudnnConvolutionBackwardFilter(h, alpha, xd, x, yd, y, conv,
                                              <dnn.cudnnConvolutionBwdFilterAlgo_t>algo, ws,
                                              ws_size, beta, wd, <void*>w)


cdef int run_kernel(const ucudnn_kernel* k, dnn.cudnnHandle_t h, const void* alpha,
                    const void* a, const void* b, const void* beta, void* out,
                    void* ws, size_t ws_size) noexcept nogil:
    """See Note [Micro-batch semantics]. Enqueues only; returns a UCUDNN_* status."""
    cdef char msg[512]
    cdef float one_f = 1.0
    cdef double one_d = 1.0
    cdef const void* one = <const void*>&one_d if k.dtype == 1 else <const void*>&one_f
    cdef const char* pa = <const char*>a
    cdef const char* pb = <const char*>b
    cdef char* po = <char*>out
    cdef long long xo, yo
    cdef int i, which
    cdef const ucudnn_chunk* c
    cdef const ucg_plan* gplan
    cdef const char* gx
    cdef const char* gw
    cdef const char* gy
    cdef double alpha_v = (<const double*>alpha)[0] if k.dtype == 1 else (<const float*>alpha)[0]
    cdef double beta_v = (<const double*>beta)[0] if k.dtype == 1 else (<const float*>beta)[0]
    cdef dnn.cudnnStatus_t st = dnn.CUDNN_STATUS_SUCCESS
    if k.n_chunks == 0:
        snprintf(msg, sizeof(msg), "layer %s: kernel has no plan", k.name)
        ucudnn_seterr(msg)
        return UCUDNN_ERR_PLAN
    if ws_size < k.ws_bytes or (k.ws_bytes > 0 and ws == NULL):
        snprintf(msg, sizeof(msg), "layer %s: workspace of %zu bytes given, the plan needs %zu",
                 k.name, ws_size, k.ws_bytes)
        ucudnn_seterr(msg)
        return UCUDNN_ERR_INVALID
    for i in range(k.n_chunks):
        c = &k.chunks[i]
        xo = c.offset * k.x_nstride * k.elem_size
        yo = c.offset * k.y_nstride * k.elem_size
        if c.algo == GRAPH_ALGO_C:      # Note [Graph plans and beta] in graph.h
            if k.op == UCUDNN_FWD:
                gx, gw, gy = pa + xo, pb, po + yo
            elif k.op == UCUDNN_BWD_DATA:
                gx, gw, gy = po + xo, pa, pb + yo
            else:
                gx, gw, gy = pa + xo, po, pb + yo
            which = 1 if (k.op == UCUDNN_BWD_FILTER and i > 0) or beta_v == 1.0 else 0
            if alpha_v != 1.0 or (which == 0 and beta_v != 0.0):
                snprintf(msg, sizeof(msg), "layer %s: graph engine configs run with alpha 1 "
                         "and beta 0 or 1, got alpha %g beta %g", k.name, alpha_v, beta_v)
                ucudnn_seterr(msg)
                return UCUDNN_ERR_INVALID
            gplan = c.graph[which]
            if gplan == NULL:
                snprintf(msg, sizeof(msg), "layer %s: chunk %d (batch %d): its engine config "
                         "has no plan for beta %d", k.name, i, c.batch, which)
                ucudnn_seterr(msg)
                return UCUDNN_ERR_INVALID
            if (<uintptr_t>gx) % k.align or (<uintptr_t>gw) % k.align or (<uintptr_t>gy) % k.align:
                snprintf(msg, sizeof(msg), "layer %s: chunk %d: a buffer is not aligned to the "
                         "%lld bytes its graph plan was built for", k.name, i, k.align)
                ucudnn_seterr(msg)
                return UCUDNN_ERR_INVALID
            st = ucg_execute(h, gplan, gx, gw, gy, ws)
            if st != dnn.CUDNN_STATUS_SUCCESS:
                snprintf(msg, sizeof(msg), "layer %s: chunk %d (batch %d, engine config): %s",
                         k.name, i, c.batch, dnn.cudnnGetErrorString(st))
                ucudnn_seterr(msg)
                return UCUDNN_ERR_CUDNN
            continue
        if k.op == UCUDNN_FWD:          # x (a) -> y (out)
            st = conv_call(k.op, h, c.algo, k.conv[c.math], alpha, beta,
                           k.xdesc[c.desc], pa + xo, k.wdesc, b, k.ydesc[c.desc], po + yo, ws, ws_size)
        elif k.op == UCUDNN_BWD_DATA:   # w (a), dy (b) -> dx (out)
            st = conv_call(k.op, h, c.algo, k.conv[c.math], alpha, beta,
                           k.xdesc[c.desc], po + xo, k.wdesc, a, k.ydesc[c.desc], pb + yo, ws, ws_size)
        else:                           # x (a), dy (b) -> dw (out), accumulated over chunks
            st = conv_call(k.op, h, c.algo, k.conv[c.math], alpha, beta if i == 0 else one,
                           k.xdesc[c.desc], pa + xo, k.wdesc, out, k.ydesc[c.desc], pb + yo, ws, ws_size)
        if st != dnn.CUDNN_STATUS_SUCCESS:
            snprintf(msg, sizeof(msg), "layer %s: chunk %d (batch %d, algo %d): %s",
                     k.name, i, c.batch, c.algo, dnn.cudnnGetErrorString(st))
            ucudnn_seterr(msg)
            return UCUDNN_ERR_CUDNN
    return UCUDNN_OK


# --------------------------------------------------------------------------- timing

# Note [Plans timed back to back]
#     A framework enqueues one call after another without waiting, and so do the benchmark's
#     re-timing (Note [Find times]) and a plan's own chunks: what a call costs there is the
#     time from one call's end event to the next's, which is the GPU's time where the GPU is
#     the bottleneck and the host's where the host is. Timing each run between its own pair
#     of events instead leaves out the host's time before each run's first kernel, which
#     for a host-bound call (legacy half precision) is not idle time in a framework: on the
#     H200 (cuDNN 9.19) a legacy fp16 backward-filter (ResNet-50 res3b_branch2a, NHWC)
#     measured 0.195 ms between its own events while the host spent 0.206 ms per run, and
#     0.22 ms back to back (results/h200/cudnn919/call_{d,e}/host_probe.json); in fp32 all
#     three agree (0.080 ms). So ``time_run`` times back to back, one event between
#     consecutive runs, as the predicted chunk times it is compared with were timed.

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
