# Declarations of ucudnn._device: errors (the thread's last-error buffer, the checks of CUDA
# and cuDNN statuses), cuDNN handles (the calling thread's, Note [Thread handles] in
# _device.pyx), and device buffers with the fills the benchmarks use.

from libc.stdint cimport uintptr_t
cimport cudnn as dnn
cimport cudart as rt


cdef class Handle:
    cdef dnn.cudnnHandle_t h
    cdef bint owned             # False: the thread's cached handle, never destroyed here
    cdef readonly uintptr_t stream


cdef class DeviceBuffer:
    cdef void* p
    cdef readonly size_t nbytes


# The calling thread's last error (one buffer for the core and _capi): ucudnn_last_error().
cdef void set_last_error(const char* msg) noexcept nogil
cdef const char* last_error() noexcept nogil

cdef int check_cudnn(dnn.cudnnStatus_t st, what) except -1
cdef int check_cuda(rt.cudaError_t err, what) except -1

cdef Handle _thread_handle()

cdef int fill_random(void* dev, size_t nbytes, int elem_size, unsigned int seed,
                     bint bfloat16=*) except -1
cdef int fill_random_tiled(void* dev, size_t nbytes, int elem_size, unsigned int seed,
                           bint bfloat16=*) except -1
