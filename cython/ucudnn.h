/* ucudnn: micro-batched cuDNN convolutions, C API for frameworks (Caffe).
 *
 *   #include <ucudnn.h>
 *   Py_Initialize();                      // or reuse the host's interpreter
 *   if (ucudnn_import() != 0) { PyErr_Print(); ... }
 *   PyEval_SaveThread();                  // release the GIL: ucudnn takes it when it plans
 *
 * A whole net (what Caffe does, once per set of input shapes):
 *
 *   ucudnn_net_layer layers[L] = {0};     // name, shape, groups, backward_data, ucudnn_param
 *   ucudnn_net *net = NULL;
 *   if (ucudnn_net_plan(layers, L, "net", "optimizer: SHARED", 0, &net) != UCUDNN_OK)
 *     fprintf(stderr, "%s\n", ucudnn_last_error());
 *   // allocate ucudnn_net_workspace_size(net) bytes (and the device's arena of at least
 *   // ucudnn_net_arena_size(net) bytes); if that fails, plan again with unallocatable set
 *   // to the size that failed (the net is then planned within half of it)
 *   const ucudnn_op_plan *p = &layers[i].plan[UCUDNN_FWD];
 *   ucudnn_kernel_run(p->kernel, handle, &alpha, x, w, &beta, y,
 *                     base + p->offset + g * p->stride, p->bytes);    // no GIL
 *   ucudnn_net_destroy(net);
 *
 * One kernel:
 *
 *   ucudnn_kernel *k;
 *   if (ucudnn_kernel_create(&params, &options, &k) != UCUDNN_OK) ...
 *   ucudnn_kernel_run(k, handle, &alpha, x, w, &beta, y, ws, ucudnn_kernel_workspace_size(k));
 *   ucudnn_kernel_destroy(k);
 *
 * Workspaces start 256-byte aligned, as cudaMalloc's blocks do; the net's offsets keep that.
 *
 * The functions are Cython `cdef public api` functions of the extension module ucudnn._capi
 * (on top of ucudnn._core, which it imports), reached through the function table that
 * ucudnn_import() loads: no link-time dependency on the modules; link with libpython. The table
 * is static to the translation unit, so include this header in one .cpp file only. Errors come
 * back as status codes with the message in ucudnn_last_error() (Note [C API conventions] in
 * ucudnn_types.h). `ucudnn config --cflags` and `ucudnn config --libs` print the compile and
 * link flags.
 *
 * Functions (declared in the generated _capi_api.h):
 *   int ucudnn_net_plan(ucudnn_net_layer *layers, int n_layers, const char *net_name,
 *                       const char *net_ucudnn_param, size_t unallocatable, ucudnn_net **out);
 *       Plan a net's convolution layers as one (Note [One network planner] in
 *       ucudnn/plan/network.py): each layer's settings are its ucudnn_param over the net's
 *       (NULL: none; "": every field at its default); benchmarks go through the cache, spread over the GPUs of
 *       $UCUDNN_BENCH_DEVICES when set. Writes layers[i].plan; *out owns the kernels.
 *       unallocatable: 0, or the bytes (workspace + arena) the host could not allocate for
 *       this net's previous plan: the net is planned within half of that.
 *   size_t ucudnn_net_workspace_size(const ucudnn_net *net);  bytes of the net's own workspace
 *   size_t ucudnn_net_arena_size(const ucudnn_net *net);      bytes the shared arena must hold
 *       (arena slots of calls that never run at once overlap: a one-group layer's three ops
 *       run one after another, a grouped layer's backward-filter and backward-data calls all
 *       at once, as Caffe runs them: Note [Shared arena] in ucudnn/plan/network.py)
 *   double ucudnn_net_predicted_ms(const ucudnn_net *net);    all kernels, every group call
 *   void ucudnn_net_destroy(ucudnn_net *net);
 *   int ucudnn_kernel_create(const ucudnn_conv_params *, const ucudnn_plan_options *,
 *                            ucudnn_kernel **out);
 *   int ucudnn_kernel_replan(ucudnn_kernel *kernel, size_t limit);
 *   size_t ucudnn_kernel_workspace_size(const ucudnn_kernel *kernel);
 *   double ucudnn_kernel_predicted_ms(const ucudnn_kernel *kernel);
 *   int ucudnn_kernel_describe(const ucudnn_kernel *kernel, char *buf, size_t size);
 *   int ucudnn_kernel_run(const ucudnn_kernel *kernel, void *cudnn_handle, const void *alpha,
 *                         const void *a, const void *b, const void *beta, void *out,
 *                         void *workspace, size_t workspace_size);
 *   void ucudnn_kernel_destroy(ucudnn_kernel *kernel);
 *   const char *ucudnn_last_error(void);
 */
#ifndef UCUDNN_H_
#define UCUDNN_H_

#include <Python.h>
#include "ucudnn_types.h"
#include "_capi_api.h"

/* Import ucudnn._capi (and with it ucudnn._core) and load the C API. Call with the GIL held.
 * 0 on success; -1 with a Python exception set otherwise. */
static inline int ucudnn_import(void) { return import_ucudnn___capi(); }

#endif  /* UCUDNN_H_ */
