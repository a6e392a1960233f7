/* The graph-API family of convolution choices: cuDNN's backend API, in plain C.
 *
 * A legacy choice is an algorithm enum; a graph choice is an *engine config*: an engine's
 * global index and its knob choices (ucudnn_engine_config). For one convolution at one
 * micro-batch size this file builds the operation graph (ucg_graph_build), lists the engine
 * configs cuDNN's heuristics propose (ucg_heuristics), builds an execution plan for one
 * config (ucg_plan_build, the expensive step: done at planning, never on the run path) and
 * runs it (ucg_execute: a variant pack per call, no allocation beyond the descriptor).
 *
 * Tensors are described in NCHW (NCDHW) dimension order with explicit strides, so one code
 * path serves NCHW (KCRS filters) and NHWC (KRSC filters), and their 3-D forms. Tensor uids: x 1, w 2, y 3, where x is
 * the input side (x or dx), y the output side (y or dy) and w the filter (w or dw), as in
 * ucudnn_kernel_run.
 *
 * Note [Why the backend API, not cudnn-frontend]
 *   cudnn-frontend (the PyPI wheel nvidia-cudnn-frontend ships its C++ headers) wraps these
 *   same backend calls in C++ graph objects: shared_ptr graphs, std::unordered_map variant
 *   packs, exceptions or error_t returns, and nlohmann::json for serialisation. The core is C
 *   (Cython compiled as C) with a nogil run path that the C API hands to Caffe's threads;
 *   taking the frontend would make the core C++, put a header-only dependency whose version
 *   must match the cuDNN it is built against into every build (the air-gapped node's too),
 *   and put a map allocation per call on the run path. What the core needs of the graph API
 *   is small and fixed: three convolution operations, the heuristics' engine configs with
 *   their knobs and notes, plan building by engine config, the workspace query and execute.
 *   That is this file: about 350 lines of plain C over the stable, non-deprecated backend
 *   API of cuDNN 9, an engine config's identity being exactly what cuDNN calls it (engine
 *   global index and knob choices; the frontend's plan names are the same facts).
 *
 * Note [Graph plans and beta]
 *   The graph API fixes alpha and beta when the operation graph is finalised, where the
 *   legacy API takes them per call. A graph choice therefore holds two plans per micro-batch
 *   size: beta 0 and beta 1. Backward-filter needs both (the first chunk takes the caller's
 *   beta, every later chunk beta 1, Note [Micro-batch semantics] in _run.pyx); forward and
 *   backward-data need the one of the caller's beta. alpha is 1: every caller of the core
 *   (Caffe, the tests, the benchmarks) runs convolutions with alpha 1, and the run path
 *   refuses another.
 *
 * Every function returns a cudnnStatus_t and, on failure, writes what failed into msg.
 * Descriptors set as attributes of another are kept alive by the structs that own them until
 * that one is destroyed (the backend API does not say that it copies them).
 */
#ifndef UCUDNN_GRAPH_H_
#define UCUDNN_GRAPH_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cudnn.h>

#define UCG_MAX_KNOBS 64   /* >= CUDNN_KNOB_TYPE_COUNTS */
#define UCG_MAX_CONFIGS 64 /* per heuristics query */

typedef struct ucudnn_engine_config {
  int64_t engine;                     /* CUDNN_ATTR_ENGINE_GLOBAL_INDEX */
  int n_knobs;
  int64_t knob_type[UCG_MAX_KNOBS];   /* cudnnBackendKnobType_t */
  int64_t knob_value[UCG_MAX_KNOBS];
  int numerical_notes;                /* bit i: cudnnBackendNumericalNote_t i */
  int behavior_notes;                 /* bit i: cudnnBackendBehaviorNote_t i */
} ucudnn_engine_config;

/* One convolution op of nbdims tensor dimensions (4: 2-D, 5: 3-D); dims in NCHW (NCDHW)
 * order (x, y: N C [D] H W; w: K C/groups [T] R S), strides in elements for any layout, the
 * spatial parameters per spatial axis (nbdims - 2 of them): zero padding before (pad) and
 * after (post) each axis, equal but in a slab (ucg_slabs below). The batch (dims[0]) is
 * set per graph. */
typedef struct ucudnn_graph_geom {
  int op;                             /* UCUDNN_FWD, UCUDNN_BWD_DATA, UCUDNN_BWD_FILTER */
  int dtype;                          /* cudnnDataType_t of the tensors */
  int compute;                        /* cudnnDataType_t of the arithmetic */
  int nbdims;                         /* 4 or 5 */
  int64_t xdim[5], xstr[5], wdim[5], wstr[5], ydim[5], ystr[5];
  int64_t pad[3], post[3], stride[3], dil[3];
  int64_t align;                      /* byte alignment every tensor pointer keeps */
} ucudnn_graph_geom;

typedef struct ucg_graph {
  cudnnBackendDescriptor_t opgraph, op, conv, x, w, y;
} ucg_graph;

typedef struct ucg_plan {
  cudnnBackendDescriptor_t plan, cfg, engine;
  cudnnBackendDescriptor_t knobs[UCG_MAX_KNOBS];
  int n_knobs;
  int64_t ws_bytes;
} ucg_plan;

#define UCG_TRY(call, what)                                                          \
  do {                                                                               \
    cudnnStatus_t st_ = (call);                                                      \
    if (st_ != CUDNN_STATUS_SUCCESS) {                                               \
      snprintf(msg, msglen, "%s: %s", (what), cudnnGetErrorString(st_));             \
      return st_;                                                                    \
    }                                                                                \
  } while (0)

static inline void ucg_destroy(cudnnBackendDescriptor_t *d) {
  if (*d != NULL) cudnnBackendDestroyDescriptor(*d);
  *d = NULL;
}

static inline void ucg_graph_destroy(ucg_graph *g) {
  ucg_destroy(&g->opgraph);
  ucg_destroy(&g->op);
  ucg_destroy(&g->conv);
  ucg_destroy(&g->x);
  ucg_destroy(&g->w);
  ucg_destroy(&g->y);
}

static inline void ucg_plan_destroy(ucg_plan *p) {
  int i;
  ucg_destroy(&p->plan);
  ucg_destroy(&p->cfg);
  ucg_destroy(&p->engine);
  for (i = 0; i < p->n_knobs; ++i) ucg_destroy(&p->knobs[i]);
  p->n_knobs = 0;
}

static inline cudnnStatus_t ucg_tensor(cudnnBackendDescriptor_t *t, int64_t uid, int dtype,
                                int64_t nbdims, const int64_t *dim, const int64_t *str,
                                int64_t align, char *msg, size_t msglen) {
  cudnnDataType_t dt = (cudnnDataType_t)dtype;
  UCG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t), "tensor descriptor");
  UCG_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt),
          "tensor data type");
  UCG_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nbdims,
                                   dim), "tensor dimensions");
  UCG_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nbdims, str),
          "tensor strides");
  UCG_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
          "tensor uid");
  UCG_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1,
                                   &align), "tensor alignment");
  UCG_TRY(cudnnBackendFinalize(*t), "tensor finalize");
  return CUDNN_STATUS_SUCCESS;
}

/* The operation graph of geom at `batch` samples with output scale beta (alpha 1). */
static inline cudnnStatus_t ucg_graph_build(cudnnHandle_t h, const ucudnn_graph_geom *geom, int batch,
                                     double beta, ucg_graph *g, char *msg, size_t msglen) {
  static const cudnnBackendAttributeName_t A[3][6] = {
      /* alpha, beta, conv, x side, w, y side */
      {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY}};
  static const cudnnBackendDescriptorType_t OPS[3] = {
      CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
  int64_t xdim[5], ydim[5], nb = geom->nbdims, spatial = geom->nbdims - 2;
  cudnnDataType_t comp = (cudnnDataType_t)geom->compute;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int op = geom->op;
  memset(g, 0, sizeof *g);
  if (op < 0 || op > 2) {
    snprintf(msg, msglen, "unknown operation %d", op);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (nb < 4 || nb > 5) {
    snprintf(msg, msglen, "%d tensor dimensions, 4 or 5 expected", (int)nb);
    return CUDNN_STATUS_BAD_PARAM;
  }
  memcpy(xdim, geom->xdim, sizeof xdim);
  memcpy(ydim, geom->ydim, sizeof ydim);
  xdim[0] = ydim[0] = batch;
  UCG_TRY(ucg_tensor(&g->x, 1, geom->dtype, nb, xdim, geom->xstr, geom->align, msg, msglen), "x");
  UCG_TRY(ucg_tensor(&g->w, 2, geom->dtype, nb, geom->wdim, geom->wstr, geom->align, msg, msglen),
          "w");
  UCG_TRY(ucg_tensor(&g->y, 3, geom->dtype, nb, ydim, geom->ystr, geom->align, msg, msglen), "y");

  UCG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &g->conv),
          "convolution descriptor");
  UCG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE,
                                   1, &comp), "convolution compute type");
  UCG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                                   CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode), "convolution mode");
  UCG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64,
                                   1, &spatial), "convolution spatial dims");
  UCG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64,
                                   spatial, geom->pad), "convolution pre-paddings");
  UCG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64,
                                   spatial, geom->post), "convolution post-paddings");
  UCG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
                                   CUDNN_TYPE_INT64, spatial, geom->stride), "convolution strides");
  UCG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64,
                                   spatial, geom->dil), "convolution dilations");
  UCG_TRY(cudnnBackendFinalize(g->conv), "convolution finalize");

  UCG_TRY(cudnnBackendCreateDescriptor(OPS[op], &g->op), "operation descriptor");
  if (geom->compute == CUDNN_DATA_DOUBLE) {
    double a = 1.0, b = beta;
    UCG_TRY(cudnnBackendSetAttribute(g->op, A[op][0], CUDNN_TYPE_DOUBLE, 1, &a), "alpha");
    UCG_TRY(cudnnBackendSetAttribute(g->op, A[op][1], CUDNN_TYPE_DOUBLE, 1, &b), "beta");
  } else {
    float a = 1.0f, b = (float)beta;
    UCG_TRY(cudnnBackendSetAttribute(g->op, A[op][0], CUDNN_TYPE_FLOAT, 1, &a), "alpha");
    UCG_TRY(cudnnBackendSetAttribute(g->op, A[op][1], CUDNN_TYPE_FLOAT, 1, &b), "beta");
  }
  UCG_TRY(cudnnBackendSetAttribute(g->op, A[op][2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->conv),
          "operation convolution");
  UCG_TRY(cudnnBackendSetAttribute(g->op, A[op][3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->x),
          "operation x");
  UCG_TRY(cudnnBackendSetAttribute(g->op, A[op][4], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->w),
          "operation w");
  UCG_TRY(cudnnBackendSetAttribute(g->op, A[op][5], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->y),
          "operation y");
  UCG_TRY(cudnnBackendFinalize(g->op), "operation finalize");

  UCG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g->opgraph),
          "operation graph descriptor");
  UCG_TRY(cudnnBackendSetAttribute(g->opgraph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->op), "graph ops");
  UCG_TRY(cudnnBackendSetAttribute(g->opgraph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE,
                                   1, &h), "graph handle");
  UCG_TRY(cudnnBackendFinalize(g->opgraph), "graph finalize");
  return CUDNN_STATUS_SUCCESS;
}

/* Numerical and behaviour notes of a finalised engine, as bit masks. */
static inline void ucg_notes(cudnnBackendDescriptor_t engine, int *numerical, int *behavior) {
  cudnnBackendNumericalNote_t nn[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  cudnnBackendBehaviorNote_t bn[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  int64_t n = 0, i;
  *numerical = *behavior = 0;
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, nn) == CUDNN_STATUS_SUCCESS)
    for (i = 0; i < n; ++i) *numerical |= 1 << (int)nn[i];
  n = 0;
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, bn) == CUDNN_STATUS_SUCCESS)
    for (i = 0; i < n; ++i) *behavior |= 1 << (int)bn[i];
}

/* Read one engine config descriptor (from heuristics) into out. */
static inline cudnnStatus_t ucg_read_config(cudnnBackendDescriptor_t cfg, ucudnn_engine_config *out,
                                     char *msg, size_t msglen) {
  cudnnBackendDescriptor_t engine = NULL, knobs[UCG_MAX_KNOBS];
  int64_t n = 0, i;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  memset(out, 0, sizeof *out);
  memset(knobs, 0, sizeof knobs);
  st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                  1, &n, &engine);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                  &out->engine);
  if (st == CUDNN_STATUS_SUCCESS) ucg_notes(engine, &out->numerical_notes, &out->behavior_notes);
  for (i = 0; st == CUDNN_STATUS_SUCCESS && i < UCG_MAX_KNOBS; ++i)
    st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i]);
  n = 0;
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, UCG_MAX_KNOBS, &n, knobs);
  for (i = 0; st == CUDNN_STATUS_SUCCESS && i < n; ++i) {
    cudnnBackendKnobType_t type;
    int64_t got = 0;
    st = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
                                  1, &got, &type);
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64,
                                    1, &got, &out->knob_value[i]);
    out->knob_type[i] = (int64_t)type;
  }
  if (st == CUDNN_STATUS_SUCCESS) out->n_knobs = (int)n;
  ucg_destroy(&engine);
  for (i = 0; i < UCG_MAX_KNOBS; ++i) ucg_destroy(&knobs[i]);
  if (st != CUDNN_STATUS_SUCCESS)
    snprintf(msg, msglen, "reading an engine config: %s", cudnnGetErrorString(st));
  return st;
}

/* The engine configs heuristics mode `mode` (cudnnBackendHeurMode_t) proposes for the graph,
 * in its order; at most `max`. */
static inline cudnnStatus_t ucg_heuristics(const ucg_graph *g, int mode, ucudnn_engine_config *out,
                                    int max, int *count, char *msg, size_t msglen) {
  cudnnBackendDescriptor_t heur = NULL, cfgs[UCG_MAX_CONFIGS];
  cudnnBackendHeurMode_t m = (cudnnBackendHeurMode_t)mode;
  cudnnStatus_t st;
  int64_t n = 0, i;
  int got = 0;
  *count = 0;
  memset(cfgs, 0, sizeof cfgs);
  if (max > UCG_MAX_CONFIGS) max = UCG_MAX_CONFIGS;
  st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->opgraph);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &m);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(heur);
  for (i = 0; st == CUDNN_STATUS_SUCCESS && i < max; ++i)
    st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, max, &n, cfgs);
  if (st != CUDNN_STATUS_SUCCESS)
    snprintf(msg, msglen, "heuristics mode %d: %s", mode, cudnnGetErrorString(st));
  for (i = 0; st == CUDNN_STATUS_SUCCESS && i < n && i < max; ++i) {
    /* an unreadable config is skipped, not fatal: the others remain choices */
    if (ucg_read_config(cfgs[i], &out[got], msg, msglen) == CUDNN_STATUS_SUCCESS) ++got;
  }
  ucg_destroy(&heur);
  for (i = 0; i < UCG_MAX_CONFIGS; ++i) ucg_destroy(&cfgs[i]);
  *count = got;
  return st;
}

/* The numerical and behaviour notes of engine ``engine`` (global index) on graph g, without
 * building a plan: what a caller needs to filter choices it read back from a cache. */
static inline cudnnStatus_t ucg_engine_notes(const ucg_graph *g, int64_t engine, int *numerical,
                                      int *behavior, char *msg, size_t msglen) {
  cudnnBackendDescriptor_t e = NULL;
  cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e);
  *numerical = *behavior = 0;
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->opgraph);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &engine);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(e);
  if (st == CUDNN_STATUS_SUCCESS) ucg_notes(e, numerical, behavior);
  else snprintf(msg, msglen, "engine %lld: %s", (long long)engine, cudnnGetErrorString(st));
  ucg_destroy(&e);
  return st;
}

/* Build the execution plan of config cfg on graph g; p->ws_bytes is its workspace. */
static inline cudnnStatus_t ucg_plan_build(cudnnHandle_t h, const ucg_graph *g,
                                    const ucudnn_engine_config *cfg, ucg_plan *p, char *msg,
                                    size_t msglen) {
  int i;
  int64_t n = 0;
  memset(p, 0, sizeof *p);
  if (cfg->n_knobs < 0 || cfg->n_knobs > UCG_MAX_KNOBS) {
    snprintf(msg, msglen, "engine config with %d knobs", cfg->n_knobs);
    return CUDNN_STATUS_BAD_PARAM;
  }
  UCG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &p->engine), "engine");
  UCG_TRY(cudnnBackendSetAttribute(p->engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->opgraph), "engine graph");
  UCG_TRY(cudnnBackendSetAttribute(p->engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                   &cfg->engine), "engine index");
  UCG_TRY(cudnnBackendFinalize(p->engine), "engine finalize");
  for (i = 0; i < cfg->n_knobs; ++i) {
    cudnnBackendKnobType_t type = (cudnnBackendKnobType_t)cfg->knob_type[i];
    UCG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &p->knobs[i]),
            "knob choice");
    p->n_knobs = i + 1;
    UCG_TRY(cudnnBackendSetAttribute(p->knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                     CUDNN_TYPE_KNOB_TYPE, 1, &type), "knob type");
    UCG_TRY(cudnnBackendSetAttribute(p->knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                     CUDNN_TYPE_INT64, 1, &cfg->knob_value[i]), "knob value");
    UCG_TRY(cudnnBackendFinalize(p->knobs[i]), "knob finalize");
  }
  UCG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &p->cfg), "engine config");
  UCG_TRY(cudnnBackendSetAttribute(p->cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   1, &p->engine), "engine config engine");
  if (cfg->n_knobs > 0)
    UCG_TRY(cudnnBackendSetAttribute(p->cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, cfg->n_knobs, p->knobs),
            "engine config knobs");
  UCG_TRY(cudnnBackendFinalize(p->cfg), "engine config finalize");
  UCG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p->plan), "plan");
  UCG_TRY(cudnnBackendSetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                   &h), "plan handle");
  UCG_TRY(cudnnBackendSetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->cfg), "plan config");
  UCG_TRY(cudnnBackendFinalize(p->plan), "plan finalize");
  UCG_TRY(cudnnBackendGetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                   CUDNN_TYPE_INT64, 1, &n, &p->ws_bytes), "plan workspace size");
  return CUDNN_STATUS_SUCCESS;
}

/* Run a built plan: x, w, y by uid (see the top of this file), workspace ws. Enqueues only. */
static inline cudnnStatus_t ucg_execute(cudnnHandle_t h, const ucg_plan *p, const void *x,
                                 const void *w, const void *y, void *ws) {
  cudnnBackendDescriptor_t vp = NULL;
  int64_t uids[3] = {1, 2, 3};
  void *ptrs[3];
  cudnnStatus_t st;
  ptrs[0] = (void *)x;
  ptrs[1] = (void *)w;
  ptrs[2] = (void *)y;
  st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3,
                                  ptrs);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(vp);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(h, p->plan, vp);
  if (vp != NULL) cudnnBackendDestroyDescriptor(vp);
  return st;
}

/* A slab choice (Note [Slabs below one sample] in ucudnn/plan/slabs.py): one engine config
 * run over n pieces of the outermost spatial axis, piece i by its own plan (its rows and
 * pre/post padding) on the tensors x_off[i] and y_off[i] bytes past the caller's, in order.
 * For an op that accumulates (backward-filter) every piece after the first has beta 1. */
#define UCG_MAX_SLABS 16
typedef struct ucg_slabs {
  int n;
  const ucg_plan *plan[UCG_MAX_SLABS];
  int64_t x_off[UCG_MAX_SLABS], y_off[UCG_MAX_SLABS];
} ucg_slabs;

static inline cudnnStatus_t ucg_execute_slabs(cudnnHandle_t h, const ucg_slabs *s, const void *x,
                                       const void *w, const void *y, void *ws) {
  int i;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  for (i = 0; i < s->n && st == CUDNN_STATUS_SUCCESS; ++i)
    st = ucg_execute(h, s->plan[i], (const char *)x + s->x_off[i], w,
                     (const char *)y + s->y_off[i], ws);
  return st;
}

#endif /* UCUDNN_GRAPH_H_ */
