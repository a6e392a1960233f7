"""ucudnn._device: errors, CUDA devices, cuDNN handles and device buffers.

The calling thread's last-error buffer (what ``ucudnn_last_error()`` returns, for the core's
modules and the C API), the checks that turn a failed CUDA or cuDNN status into
:class:`CudnnError` or :class:`CudaError`, the device queries, ``Handle`` (a cuDNN handle on a
stream) and the per-thread handles of Note [Thread handles], one benchmark lock per device,
and ``DeviceBuffer`` with the pseudo-random fills the benchmarks use.

Note [Thread handles]
    Workspace queries and benchmarks need a cuDNN handle on the calling thread's device. The
    handles are kept per thread at C level (a ``__thread`` table indexed by device, created on
    first use and destroyed by a pthread key destructor when the thread exits), not in a
    ``threading.local``: a C++ host's threads (Caffe's solvers) enter Python through
    ``with gil``, which makes a fresh thread state on every call, so Python-level thread-local
    data would not survive from one C API call to the next, and every planning call would
    create a new cuDNN handle. ``thread_handle_stats()`` reports the counts for tests.
"""

from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from libc.stdint cimport uintptr_t

cimport cudnn as dnn
cimport cudart as rt

import threading

from ucudnn.vocab import InputError, Status, UcudnnError

cdef extern from *:
    """
    #include <pthread.h>
    #include <stdlib.h>

    static __thread char ucudnn_errbuf[1024];
    static void ucudnn_seterr(const char *msg) {
      snprintf(ucudnn_errbuf, sizeof ucudnn_errbuf, "%s", msg);
    }

    /* Note [Thread handles] in _device.pyx */
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
