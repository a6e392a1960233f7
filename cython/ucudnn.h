/* ucudnn: micro-batched cuDNN convolutions, C API for frameworks (Caffe).
 *
 *   #include <ucudnn.h>
 *   Py_Initialize();                      // or reuse the host's interpreter
 *   if (ucudnn_import() != 0) { PyErr_Print(); ... }
 *   PyEval_SaveThread();                  // release the GIL: ucudnn takes it when it plans
 *
 *   ucudnn_kernel *k;
 *   if (ucudnn_kernel_create(&params, &options, &k) != UCUDNN_OK)
 *     fprintf(stderr, "%s\n", ucudnn_last_error());
 *   size_t ws = ucudnn_kernel_workspace_size(k);
 *   ucudnn_kernel_run(k, cudnn_handle, &alpha, x, w, &beta, y, workspace, ws);  // no GIL
 *   ucudnn_kernel_destroy(k);
 *
 * The workspace should start 256-byte aligned, as cudaMalloc's blocks do; cuDNN's workspace
 * sizes can be odd, so round each size up before carving one allocation into several
 * workspaces (caffe_patch/0002 does).
 *
 * The functions are Cython `cdef public api` functions of the extension module ucudnn._capi
 * (on top of ucudnn._core, which it imports), reached through the function table that
 * ucudnn_import() loads: no link-time dependency on the modules; link with libpython. The table
 * is static to the translation unit, so include this header in one .cpp file only. Errors come
 * back as status codes with the message in ucudnn_last_error() (Note [C API conventions] in
 * ucudnn_types.h). `ucudnn config --cflags` and `ucudnn config --libs` print the compile and
 * link flags.
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
