# The core's C types, shared by its modules and the C API: the structs of ucudnn_types.h
# (cython/ucudnn_types.h), the graph family's of graph.h, and the kernel struct that the hot
# path (ucudnn._run.run_kernel) walks. The struct is plain C so that ucudnn_kernel_run needs
# neither Python nor the GIL. Declarations only: no module of this name is built.

from libc.stdint cimport int64_t
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
        int d, t, pad_d, stride_d, dil_d
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
        int op, dtype, compute, nbdims
        int64_t xdim[5]
        int64_t xstr[5]
        int64_t wdim[5]
        int64_t wstr[5]
        int64_t ydim[5]
        int64_t ystr[5]
        int64_t pad[3]
        int64_t post[3]
        int64_t stride[3]
        int64_t dil[3]
        int64_t align
    ctypedef struct ucg_graph:
        pass
    ctypedef struct ucg_plan:
        int64_t ws_bytes
    ctypedef struct ucg_slabs:
        int n
        const ucg_plan* plan[16]
        int64_t x_off[16]
        int64_t y_off[16]
    enum: UCG_MAX_CONFIGS
    enum: UCG_MAX_SLABS
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
    dnn.cudnnStatus_t ucg_execute_slabs(dnn.cudnnHandle_t h, const ucg_slabs* s, const void* x,
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
      const ucg_slabs *slabs[2]; /* a slab choice's pieces for beta 0 and 1 (graph.h), whose
                                    first plans graph[] also holds; NULL for any other */
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
        const ucg_slabs* slabs[2]
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

cdef enum:
    GRAPH_ALGO_C = -1           # ucudnn.vocab.GRAPH_ALGO: a chunk that runs a graph plan
