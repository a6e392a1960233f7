/* ucudnn C API types. Include "ucudnn.h" rather than this file.
 *
 * Note [C API conventions]
 *   Every function returns an int status: UCUDNN_OK (0) or an error code; the message of the
 *   last error on the calling thread is returned by ucudnn_last_error(). No Python exception
 *   crosses into C/C++. Planning functions take the GIL themselves; ucudnn_kernel_run never
 *   touches Python and may be called from any thread without the GIL. Structs are
 *   zero-initialised by the caller ({0}); a field that is 0 takes its default.
 */
#ifndef UCUDNN_TYPES_H_
#define UCUDNN_TYPES_H_

#include <stddef.h>

/* Version of the structs below. 1: 2-D convolutions only; 2: ucudnn_conv_params and
 * ucudnn_net_layer also carry a depth (d, t, pad_d, stride_d, dil_d) for 3-D convolutions
 * (Note [3-D layers in the C API]). A host that fills the depth fields checks
 * UCUDNN_API_VERSION >= 2 at compile time; a zero-initialised struct is 2-D in every version. */
#define UCUDNN_API_VERSION 2

#ifdef __cplusplus
extern "C" {
#endif

enum { UCUDNN_OK = 0, UCUDNN_ERR_INVALID = 1, UCUDNN_ERR_CUDNN = 2, UCUDNN_ERR_CUDA = 3,
       UCUDNN_ERR_PLAN = 4, UCUDNN_ERR_PYTHON = 5 };

/* Operation of a kernel; also the index of ucudnn_net_layer.plan[]. The buffers of
 * ucudnn_kernel_run(kernel, handle, alpha, a, b, beta, out, ...) by op (ucudnn.vocab.OPERANDS):
 *   UCUDNN_FWD         a = x, b = w,  out = y
 *   UCUDNN_BWD_DATA    a = w, b = dy, out = dx
 *   UCUDNN_BWD_FILTER  a = x, b = dy, out = dw (accumulated with beta, Note [Micro-batch
 *                                               semantics] in cython/ucudnn/_run.pyx) */
enum { UCUDNN_FWD = 0, UCUDNN_BWD_DATA = 1, UCUDNN_BWD_FILTER = 2 };

/* Micro-batch policy (caffe.proto's UcudnnParameter.Policy uses the same values). */
enum { UCUDNN_UNDIVIDED = 0, UCUDNN_POWER_OF_TWO = 1, UCUDNN_ALL = 2 };

/* Optimizer (UcudnnParameter.Optimizer): each kernel within its workspace limit (DP), the
 * net's kernels dividing one budget (ILP), or one arena of that budget that every layer reuses
 * (SHARED; Note [Shared arena] in ucudnn/plan/network.py). */
enum { UCUDNN_DP = 0, UCUDNN_ILP = 1, UCUDNN_SHARED = 2 };

/* Layouts of a kernel's tensors (ucudnn_conv_params.layout). */
enum { UCUDNN_NCHW = 0, UCUDNN_NHWC = 1 };

/* Families of choices a kernel is measured and planned with (ucudnn_plan_options.engines):
 * cuDNN's legacy algorithms, the graph API's engine configs, or both (Note [Choices] in
 * ucudnn/vocab.py). 0 is the default of PlanSettings.engines. */
enum { UCUDNN_ENGINES_DEFAULT = 0, UCUDNN_ENGINES_LEGACY = 1, UCUDNN_ENGINES_GRAPH = 2,
       UCUDNN_ENGINES_BOTH = 3 };

/* One convolution kernel. Shapes are those of the input x (N x C x H x W, or N x C x D x H x W)
 * and the filter (K x C/groups x R x S, or K x C/groups x T x R x S); strides are in elements,
 * in NCHW order whatever the layout; all-zero strides mean packed in the layout (the only
 * choice of a 3-D kernel).
 *
 * Note [3-D layers in the C API]
 *   A kernel or layer is 3-D where d or t is nonzero: d is the input's depth, t the filter's,
 *   pad_d, stride_d and dil_d its depth geometry (each at least 0, 1 and 1), and the other
 *   fields keep their meaning for height and width. Where d and t are 0 it is 2-D, and
 *   pad_d, stride_d and dil_d must be 0 too (or 0, 1 and 1): the fields a 2-D host leaves zero. */
typedef struct ucudnn_conv_params {
  int op;                         /* UCUDNN_FWD, UCUDNN_BWD_DATA, UCUDNN_BWD_FILTER */
  int dtype;                      /* cudnnDataType_t: 0 float, 1 double, 2 half, 9 bfloat16 */
  int math;                       /* cudnnMathType_t: 0 default (TF32 allowed), 3 FMA (strict) */
  int n, c, h, w;
  int k, r, s;
  int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w;
  int groups;                     /* cuDNN group count (1 in Caffe, which calls per group) */
  int x_strides[4];               /* input (x / dx) strides, or zeros */
  int y_strides[4];               /* output (y / dy) strides, or zeros */
  const char *name;               /* layer name for messages and the plan log; may be NULL */
  int instances;                  /* how many times one pass runs this kernel, each on its own
                                     workspace; <= 0 means 1 (plan records state it) */
  int layout;                     /* UCUDNN_NCHW (0) or UCUDNN_NHWC: the tensors' layout; NHWC
                                     filters are KRSC (Note [NHWC kernels] in
                                     ucudnn/plan/conv.py); NDHWC for a 3-D kernel */
  int d, t, pad_d, stride_d, dil_d;  /* 3-D: depth of x and of the filter, and the depth's
                                     pad, stride and dilation; 0 for 2-D (version 2, Note
                                     [3-D layers in the C API]) */
} ucudnn_conv_params;

/* Settings of one kernel (ucudnn_kernel_create). Unset fields (0) take the defaults of
 * ucudnn.plan.settings.PlanSettings, as ucudnn_param's do. */
typedef struct ucudnn_plan_options {
  int policy;                     /* UCUDNN_UNDIVIDED / POWER_OF_TWO / ALL */
  int optimizer;                  /* UCUDNN_DP only: a net's budget needs ucudnn_net_plan */
  const int *micro_batch_sizes;   /* explicit candidate sizes (overrides policy), or NULL */
  int n_micro_batch_sizes;
  size_t workspace_limit;         /* bytes, per kernel call */
  int repeats;                    /* cudnnFind repetitions per size (median); <= 0: default */
  const char *cache_path;         /* benchmark cache (SQLite); NULL: $UCUDNN_CACHE or default */
  int exclude_winograd;           /* nonzero: never plan the Winograd algorithms */
  int engines;                    /* UCUDNN_ENGINES_*: the families of choices */
} ucudnn_plan_options;

/* Opaque: a planned kernel. */
typedef struct ucudnn_kernel ucudnn_kernel;

/* ---- whole nets (ucudnn_net_plan) ------------------------------------------------------- */

/* Where one op of a layer runs, written by ucudnn_net_plan. Group g of the layer (the host
 * runs one call per group) is given the workspace base + offset + g * stride of size bytes,
 * where base is the net's own workspace or the device's shared arena (arena). */
typedef struct ucudnn_op_plan {
  ucudnn_kernel *kernel;          /* NULL: the op does not run (no backward-data) */
  int arena;                      /* nonzero: base is the device's shared arena
                                     (ucudnn_net_arena_size), else the net's own workspace
                                     (ucudnn_net_workspace_size) */
  size_t offset;
  size_t stride;
  size_t bytes;
} ucudnn_op_plan;

/* One convolution layer of a net, as the host runs it. */
typedef struct ucudnn_net_layer {
  /* in */
  const char *name;               /* unique within the net */
  int dtype;                      /* cudnnDataType_t */
  int n, c, h, w;                 /* input; c the layer's total channels */
  int k, r, s;                    /* total output channels; filter height and width */
  int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w;
  int groups;                     /* the host runs each op once per group, on a strided view
                                     of C/groups -> K/groups channels (Note [Grouped layers]
                                     in ucudnn/plan/conv.py) */
  int backward_data;              /* nonzero: some bottom needs a gradient */
  const char *ucudnn_param;       /* the layer's own UcudnnParameter in protobuf text format
                                     ("policy: ALL workspace_limit: 67108864"); NULL: the
                                     layer has none (the net's applies); "": one with every
                                     field at its default */
  int layout;                     /* UCUDNN_NCHW (0) or UCUDNN_NHWC: the layout the host
                                     runs the layer's tensors in (filters KRSC for NHWC;
                                     Note [NHWC kernels] in ucudnn/plan/conv.py) */
  int d, t, pad_d, stride_d, dil_d;  /* 3-D: depth of the input and of the filter, and the
                                     depth's pad, stride and dilation; 0 for 2-D (version 2,
                                     Note [3-D layers in the C API]) */
  /* out */
  ucudnn_op_plan plan[3];         /* by op: UCUDNN_FWD, UCUDNN_BWD_DATA, UCUDNN_BWD_FILTER */
} ucudnn_net_layer;

/* Opaque: a planned net; owns its layers' kernels. */
typedef struct ucudnn_net ucudnn_net;

#ifdef __cplusplus
}
#endif
#endif  /* UCUDNN_TYPES_H_ */
