/* ucudnn C API types. Include "ucudnn.h" rather than this file.
 *
 * Note [C API conventions]
 *   Every function returns an int status: UCUDNN_OK (0) or an error code; the message of the
 *   last error on the calling thread is returned by ucudnn_last_error(). No Python exception
 *   crosses into C/C++. Planning functions take the GIL themselves; ucudnn_kernel_run never
 *   touches Python and may be called from any thread without the GIL.
 */
#ifndef UCUDNN_TYPES_H_
#define UCUDNN_TYPES_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { UCUDNN_OK = 0, UCUDNN_ERR_INVALID = 1, UCUDNN_ERR_CUDNN = 2, UCUDNN_ERR_CUDA = 3,
       UCUDNN_ERR_PLAN = 4, UCUDNN_ERR_PYTHON = 5 };

/* Operation of a kernel. */
enum { UCUDNN_FWD = 0, UCUDNN_BWD_DATA = 1, UCUDNN_BWD_FILTER = 2 };

/* Micro-batch policy (caffe.proto's UcudnnParameter.Policy uses the same values). */
enum { UCUDNN_UNDIVIDED = 0, UCUDNN_POWER_OF_TWO = 1, UCUDNN_ALL = 2 };

/* Optimizer: per-kernel DP under workspace_limit, network-wide ILP (ucudnn_plan_network), or
 * SHARED: one arena every layer reuses, divided per layer among the kernels that run at the
 * same time (ucudnn_plan_network per phase; prepared like ILP kernels). */
enum { UCUDNN_DP = 0, UCUDNN_ILP = 1, UCUDNN_SHARED = 2 };

/* One convolution kernel. Shapes are those of the input x (N x C x H x W) and the filter
 * (K x C/groups x R x S); strides are in elements, NCHW; all-zero strides mean packed. */
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
                                     workspace (Caffe: the layer's group count); <= 0 means 1.
                                     The ILP weighs the kernel by it; plan records state it. */
} ucudnn_conv_params;

typedef struct ucudnn_plan_options {
  int policy;                     /* UCUDNN_UNDIVIDED / POWER_OF_TWO / ALL */
  int optimizer;                  /* UCUDNN_DP, UCUDNN_ILP or UCUDNN_SHARED */
  const int *micro_batch_sizes;   /* explicit candidate sizes (overrides policy), or NULL */
  int n_micro_batch_sizes;
  size_t workspace_limit;         /* bytes, per kernel (DP) */
  int repeats;                    /* Find...Ex repetitions per size (median); <= 0: default 3 */
  const char *cache_path;         /* benchmark cache (SQLite); NULL: $UCUDNN_CACHE or default */
  int exclude_winograd;           /* nonzero: never plan the Winograd algorithms (see
                                     ucudnn.plan.dp.WINOGRAD_ALGOS: up to 2e-2 off in fp32) */
} ucudnn_plan_options;

/* Opaque: a planned kernel. */
typedef struct ucudnn_kernel ucudnn_kernel;

#ifdef __cplusplus
}
#endif
#endif  /* UCUDNN_TYPES_H_ */
