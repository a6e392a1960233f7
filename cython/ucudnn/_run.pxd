# Declarations of ucudnn._run: the hot path over a resolved plan (run_kernel, which the C API's
# ucudnn_kernel_run calls without the GIL) and the exception of a failed run.

cimport cudnn as dnn
from ucudnn._types cimport ucudnn_kernel


cdef int run_kernel(const ucudnn_kernel* k, dnn.cudnnHandle_t h, const void* alpha,
                    const void* a, const void* b, const void* beta, void* out,
                    void* ws, size_t ws_size) noexcept nogil
cdef object _run_error(int rc)
