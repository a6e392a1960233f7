# Declarations of ucudnn._core: the kernel struct that the hot path walks, the Kernel class that
# owns it, and the C functions ucudnn._capi (the C API) cimports: run_kernel and the thread's
# last-error buffer. The struct is plain C so that ucudnn_kernel_run needs neither Python nor
# the GIL.

from libc.stdint cimport uintptr_t, int64_t
cimport cudnn as dnn

cdef extern from "ucudnn_types.h":
    ctypedef struct ucudnn_conv_params:
        int op, dtype, math, n, c, h, w, k, r, s
        int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups
        int x_strides[4]
        int y_strides[4]
        const char* name
        int instances
        int layout
    ctypedef struct ucudnn_plan_options:
        int policy, optimizer
        const int* micro_batch_sizes
        int n_micro_batch_sizes
        size_t workspace_limit
        int repeats
        const char* cache_path
        int exclude_winograd
        int engines
    enum:
        UCUDNN_OK, UCUDNN_ERR_INVALID, UCUDNN_ERR_CUDNN, UCUDNN_ERR_CUDA
        UCUDNN_ERR_PLAN, UCUDNN_ERR_PYTHON
    enum:
        UCUDNN_FWD, UCUDNN_BWD_DATA, UCUDNN_BWD_FILTER

cdef extern from "graph.h":
    ctypedef struct ucudnn_engine_config:
        int64_t engine
        int n_knobs
        int64_t knob_type[64]
        int64_t knob_value[64]
        int numerical_notes, behavior_notes
    ctypedef struct ucudnn_graph_geom:
        int op, dtype, compute
        int64_t xdim[4]
        int64_t xstr[4]
        int64_t wdim[4]
        int64_t wstr[4]
        int64_t ydim[4]
        int64_t ystr[4]
        int64_t pad[2]
        int64_t stride[2]
        int64_t dil[2]
        int64_t align
    ctypedef struct ucg_graph:
        pass
    ctypedef struct ucg_plan:
        int64_t ws_bytes
    enum: UCG_MAX_CONFIGS
    void ucg_graph_destroy(ucg_graph* g) nogil
    void ucg_plan_destroy(ucg_plan* p) nogil
    dnn.cudnnStatus_t ucg_graph_build(dnn.cudnnHandle_t h, const ucudnn_graph_geom* geom, int batch,
                                      double beta, ucg_graph* g, char* msg, size_t msglen) nogil
    dnn.cudnnStatus_t ucg_heuristics(const ucg_graph* g, int mode, ucudnn_engine_config* out,
                                     int max, int* count, char* msg, size_t msglen) nogil
    dnn.cudnnStatus_t ucg_plan_build(dnn.cudnnHandle_t h, const ucg_graph* g,
                                     const ucudnn_engine_config* cfg, ucg_plan* p, char* msg,
                                     size_t msglen) nogil
    dnn.cudnnStatus_t ucg_engine_notes(const ucg_graph* g, int64_t engine, int* numerical,
                                       int* behavior, char* msg, size_t msglen) nogil
    dnn.cudnnStatus_t ucg_execute(dnn.cudnnHandle_t h, const ucg_plan* p, const void* x,
                                  const void* w, const void* y, void* ws) nogil

cdef extern from *:
    """
    typedef struct ucudnn_chunk {
      int batch;        /* micro-batch size */
      int offset;       /* first sample of the chunk in the mini-batch */
      int algo;         /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t; -1: a graph choice */
      int math;         /* cudnnMathType_t: index into conv[] */
      int desc;         /* index into xdesc[]/ydesc[] (one pair per distinct size) */
      const ucg_plan *graph[2];  /* a graph choice's plans for beta 0 and beta 1 (Note [Graph
                                    plans and beta] in graph.h); NULL for a legacy one */
    } ucudnn_chunk;

    struct ucudnn_kernel {
      int op, dtype, n, elem_size;
      long long x_nstride, y_nstride;       /* elements between consecutive samples */
      cudnnFilterDescriptor_t wdesc;
      cudnnConvolutionDescriptor_t conv[4];  /* one per cudnnMathType_t */
      int n_descs;
      cudnnTensorDescriptor_t *xdesc;       /* x (fwd, bwd_filter) or dx (bwd_data) */
      cudnnTensorDescriptor_t *ydesc;       /* y (fwd) or dy (bwd_data, bwd_filter) */
      int n_chunks;
      ucudnn_chunk *chunks;
      size_t ws_bytes;                      /* workspace the plan needs */
      long long align;                      /* byte alignment graph choices need of pointers */
      double predicted_ms;
      void *owner;                          /* the Python Kernel object that owns this struct */
      char name[128];
    };
    """
    ctypedef struct ucudnn_chunk:
        int batch, offset, algo, math, desc
        const ucg_plan* graph[2]
    ctypedef struct ucudnn_kernel:
        int op, dtype, n, elem_size
        long long x_nstride, y_nstride
        dnn.cudnnFilterDescriptor_t wdesc
        dnn.cudnnConvolutionDescriptor_t conv[4]
        int n_descs
        dnn.cudnnTensorDescriptor_t* xdesc
        dnn.cudnnTensorDescriptor_t* ydesc
        int n_chunks
        ucudnn_chunk* chunks
        size_t ws_bytes
        long long align
        double predicted_ms
        void* owner
        char name[128]


cdef class Handle:
    cdef dnn.cudnnHandle_t h
    cdef bint owned             # False: the thread's cached handle, never destroyed here
    cdef readonly uintptr_t stream


cdef class DeviceBuffer:
    cdef void* p
    cdef readonly size_t nbytes


cdef class Kernel:
    cdef ucudnn_kernel k
    cdef int x_strides[4]
    cdef int y_strides[4]
    cdef readonly object shape, op, n, dtype, math, name, layout
    cdef ucudnn_graph_geom geom         # the graph family's description of this kernel
    cdef object _graph_plans            # (batch, engine, beta) -> GraphPlan, for set_plan
    cdef object _engine_notes           # engine index -> numerical notes (engine_notes)
    cdef readonly int device
    cdef public int instances   # runs of this kernel per pass, each on its own workspace
    cdef public object graph_focus      # None, or the engine configs (texts) to try: Note
                                        # [Graph focus in the pruned search] (for_plan.py)
    cdef public int max_graph_configs   # engine configs tried per size (0: all; Note [Graph
                                        # choices tried])
    cdef public object plan, bench, settings, bench_record, timing
    cdef readonly object last_benchmark_workspace   # bytes offered to cudnnFind last time
    cdef readonly object last_benchmark_held    # bytes of workspace it held to offer them
    cdef readonly object benchmark_seconds   # where benchmark calls spent their time (sums)
    cdef readonly object graph_stats    # engine configs tried, built, runtime-compiled, failed
    cdef readonly object last_graph_error   # why the graph family had no choice, or None
    cdef object _refused_engines        # engine index -> why it was refused at some size:
                                        # Note [Graph results checked]
    cdef object _accepted_at            # batch -> engines whose configs the check accepted
    cdef readonly object last_unchecked_sizes   # sizes of the last benchmark call whose
                                        # front an engine refused later in it had shadowed
    cdef bint _holding          # hold_benchmark_buffers(True): keep them between calls
    cdef object _held           # (samples, cap, x, y, w, workspace) kept, or None
    cdef bint _warm             # a Find already ran on the held buffers

    cdef int _set_geometry(self) except -1
    cdef int _set_tensor(self, dnn.cudnnTensorDescriptor_t d, int which, int b) except -1
    cdef void _free_plan(self) noexcept
    cdef list _find_c(self, Handle handle, uintptr_t xd, uintptr_t yd, DeviceBuffer x,
                      DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws)
    cdef list _time_c(self, Handle handle, uintptr_t xd, uintptr_t yd, DeviceBuffer x,
                      DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, list records, int iters,
                      int warmup, int b, int slices)
    cdef _retime(self, Handle handle, uintptr_t xd, uintptr_t yd, DeviceBuffer x,
                 DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, dict found, int b,
                 int iters, int warmup, int samples, dict spent)


# The calling thread's last error (one buffer for _core and _capi): ucudnn_last_error().
cdef void set_last_error(const char* msg) noexcept nogil
cdef const char* last_error() noexcept nogil

cdef int run_kernel(const ucudnn_kernel* k, dnn.cudnnHandle_t h, const void* alpha,
                    const void* a, const void* b, const void* beta, void* out,
                    void* ws, size_t ws_size) noexcept nogil
