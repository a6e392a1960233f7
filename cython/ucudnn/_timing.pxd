# Declarations of ucudnn._timing: one choice (a legacy algorithm or a graph plan) timed with
# CUDA events at one micro-batch size, as the benchmarks re-time them.

cimport cudnn as dnn
cimport cudart as rt
from ucudnn._types cimport ucg_plan, ucg_slabs


cdef struct TimedRun:
    # one choice at one micro-batch size: a slab choice's pieces (slabs not NULL), a graph
    # plan (plan not NULL) or a legacy algorithm
    dnn.cudnnHandle_t h
    const ucg_slabs* slabs
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


cdef object _time_run(TimedRun* r, rt.cudaStream_t stream, rt.cudaEvent_t* ev, int iters,
                      str what, int warmup=*)


cdef class _Events:
    cdef rt.cudaEvent_t* ev
    cdef int n
