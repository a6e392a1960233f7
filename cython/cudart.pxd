# The few CUDA runtime calls the core needs: memory, events, device properties, versions.

cdef extern from "cuda_runtime_api.h" nogil:
    ctypedef enum cudaError_t:
        cudaSuccess
    ctypedef void* cudaStream_t
    ctypedef void* cudaEvent_t
    ctypedef enum cudaMemcpyKind:
        cudaMemcpyHostToDevice
        cudaMemcpyDeviceToHost
        cudaMemcpyDeviceToDevice

    cdef struct cudaDeviceProp:
        char name[256]
        size_t totalGlobalMem
        int major
        int minor
        int multiProcessorCount

    const char* cudaGetErrorString(cudaError_t err)
    cudaError_t cudaGetLastError()
    cudaError_t cudaGetDeviceCount(int* count)
    cudaError_t cudaGetDevice(int* device)
    cudaError_t cudaSetDevice(int device)
    cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device)
    cudaError_t cudaDriverGetVersion(int* version)
    cudaError_t cudaRuntimeGetVersion(int* version)
    cudaError_t cudaMemGetInfo(size_t* free, size_t* total)
    cudaError_t cudaMalloc(void** ptr, size_t size)
    cudaError_t cudaFree(void* ptr)
    cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind)
    cudaError_t cudaMemset(void* ptr, int value, size_t count)
    cudaError_t cudaDeviceSynchronize()
    cudaError_t cudaStreamSynchronize(cudaStream_t stream)
    cudaError_t cudaEventCreate(cudaEvent_t* event)
    cudaError_t cudaEventDestroy(cudaEvent_t event)
    cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
    cudaError_t cudaEventSynchronize(cudaEvent_t event)
    cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end)
