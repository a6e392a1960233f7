# cuDNN 9 declarations: the legacy convolution API (descriptors, Find...AlgorithmEx, the three
# convolutions, workspace queries, math type). Enum values are checked against the header at
# build time by tests/test_cudnn_header.py (they are also what the benchmark tables store).

from cudart cimport cudaStream_t

cdef extern from "cudnn.h" nogil:
    ctypedef struct cudnnContext:
        pass
    ctypedef cudnnContext* cudnnHandle_t
    ctypedef struct cudnnTensorStruct:
        pass
    ctypedef cudnnTensorStruct* cudnnTensorDescriptor_t
    ctypedef struct cudnnFilterStruct:
        pass
    ctypedef cudnnFilterStruct* cudnnFilterDescriptor_t
    ctypedef struct cudnnConvolutionStruct:
        pass
    ctypedef cudnnConvolutionStruct* cudnnConvolutionDescriptor_t

    ctypedef enum cudnnStatus_t:
        CUDNN_STATUS_SUCCESS
        CUDNN_STATUS_NOT_SUPPORTED
        CUDNN_STATUS_BAD_PARAM
        CUDNN_STATUS_ALLOC_FAILED

    ctypedef enum cudnnDataType_t:
        CUDNN_DATA_FLOAT
        CUDNN_DATA_DOUBLE
        CUDNN_DATA_HALF
        CUDNN_DATA_BFLOAT16

    ctypedef enum cudnnMathType_t:
        CUDNN_DEFAULT_MATH
        CUDNN_TENSOR_OP_MATH
        CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
        CUDNN_FMA_MATH

    ctypedef enum cudnnTensorFormat_t:
        CUDNN_TENSOR_NCHW
        CUDNN_TENSOR_NHWC

    ctypedef enum cudnnConvolutionMode_t:
        CUDNN_CONVOLUTION
        CUDNN_CROSS_CORRELATION

    ctypedef enum cudnnDeterminism_t:
        CUDNN_NON_DETERMINISTIC
        CUDNN_DETERMINISTIC

    ctypedef enum cudnnConvolutionFwdAlgo_t:
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT
    ctypedef enum cudnnConvolutionBwdDataAlgo_t:
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_0
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
    ctypedef enum cudnnConvolutionBwdFilterAlgo_t:
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT

    ctypedef struct cudnnConvolutionFwdAlgoPerf_t:
        cudnnConvolutionFwdAlgo_t algo
        cudnnStatus_t status
        float time
        size_t memory
        cudnnDeterminism_t determinism
        cudnnMathType_t mathType
    ctypedef struct cudnnConvolutionBwdDataAlgoPerf_t:
        cudnnConvolutionBwdDataAlgo_t algo
        cudnnStatus_t status
        float time
        size_t memory
        cudnnDeterminism_t determinism
        cudnnMathType_t mathType
    ctypedef struct cudnnConvolutionBwdFilterAlgoPerf_t:
        cudnnConvolutionBwdFilterAlgo_t algo
        cudnnStatus_t status
        float time
        size_t memory
        cudnnDeterminism_t determinism
        cudnnMathType_t mathType

    size_t cudnnGetVersion()
    size_t cudnnGetCudartVersion()
    const char* cudnnGetErrorString(cudnnStatus_t status)
    void cudnnGetLastErrorString(char* message, size_t max_size)

    cudnnStatus_t cudnnCreate(cudnnHandle_t* handle)
    cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
    cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream)
    cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream)

    cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc)
    cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc)
    cudnnStatus_t cudnnSetTensor4dDescriptorEx(
        cudnnTensorDescriptor_t desc, cudnnDataType_t dtype, int n, int c, int h, int w,
        int nStride, int cStride, int hStride, int wStride)

    cudnnStatus_t cudnnSetTensorNdDescriptor(
        cudnnTensorDescriptor_t desc, cudnnDataType_t dtype, int nbDims, const int* dimA,
        const int* strideA)

    cudnnStatus_t cudnnTransformTensor(
        cudnnHandle_t handle, const void* alpha, cudnnTensorDescriptor_t xDesc, const void* x,
        const void* beta, cudnnTensorDescriptor_t yDesc, void* y)

    cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc)
    cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc)
    cudnnStatus_t cudnnSetFilter4dDescriptor(
        cudnnFilterDescriptor_t desc, cudnnDataType_t dtype, cudnnTensorFormat_t fmt,
        int k, int c, int h, int w)

    cudnnStatus_t cudnnSetFilterNdDescriptor(
        cudnnFilterDescriptor_t desc, cudnnDataType_t dtype, cudnnTensorFormat_t fmt,
        int nbDims, const int* filterDimA)

    cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc)
    cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc)
    cudnnStatus_t cudnnSetConvolution2dDescriptor(
        cudnnConvolutionDescriptor_t desc, int pad_h, int pad_w, int u, int v,
        int dilation_h, int dilation_w, cudnnConvolutionMode_t mode, cudnnDataType_t computeType)
    cudnnStatus_t cudnnSetConvolutionNdDescriptor(
        cudnnConvolutionDescriptor_t desc, int arrayLength, const int* padA,
        const int* filterStrideA, const int* dilationA, cudnnConvolutionMode_t mode,
        cudnnDataType_t computeType)
    cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t m)
    cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t desc, int groups)
    cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(
        cudnnConvolutionDescriptor_t desc, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
        int* n, int* c, int* h, int* w)

    cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t h, int* count)
    cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t h, int* count)
    cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t h, int* count)

    cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
        cudnnHandle_t h, cudnnTensorDescriptor_t xDesc, const void* x,
        cudnnFilterDescriptor_t wDesc, const void* w, cudnnConvolutionDescriptor_t conv,
        cudnnTensorDescriptor_t yDesc, void* y, int requested, int* returned,
        cudnnConvolutionFwdAlgoPerf_t* perf, void* ws, size_t ws_bytes)
    cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
        cudnnHandle_t h, cudnnFilterDescriptor_t wDesc, const void* w,
        cudnnTensorDescriptor_t dyDesc, const void* dy, cudnnConvolutionDescriptor_t conv,
        cudnnTensorDescriptor_t dxDesc, void* dx, int requested, int* returned,
        cudnnConvolutionBwdDataAlgoPerf_t* perf, void* ws, size_t ws_bytes)
    cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
        cudnnHandle_t h, cudnnTensorDescriptor_t xDesc, const void* x,
        cudnnTensorDescriptor_t dyDesc, const void* dy, cudnnConvolutionDescriptor_t conv,
        cudnnFilterDescriptor_t dwDesc, void* dw, int requested, int* returned,
        cudnnConvolutionBwdFilterAlgoPerf_t* perf, void* ws, size_t ws_bytes)

    cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
        cudnnHandle_t h, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
        cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y,
        cudnnConvolutionFwdAlgo_t algo, size_t* size)
    cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
        cudnnHandle_t h, cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
        cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dx,
        cudnnConvolutionBwdDataAlgo_t algo, size_t* size)
    cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
        cudnnHandle_t h, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
        cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t dw,
        cudnnConvolutionBwdFilterAlgo_t algo, size_t* size)

    cudnnStatus_t cudnnConvolutionForward(
        cudnnHandle_t h, const void* alpha, cudnnTensorDescriptor_t xDesc, const void* x,
        cudnnFilterDescriptor_t wDesc, const void* w, cudnnConvolutionDescriptor_t conv,
        cudnnConvolutionFwdAlgo_t algo, void* ws, size_t ws_bytes, const void* beta,
        cudnnTensorDescriptor_t yDesc, void* y)
    cudnnStatus_t cudnnConvolutionBackwardData(
        cudnnHandle_t h, const void* alpha, cudnnFilterDescriptor_t wDesc, const void* w,
        cudnnTensorDescriptor_t dyDesc, const void* dy, cudnnConvolutionDescriptor_t conv,
        cudnnConvolutionBwdDataAlgo_t algo, void* ws, size_t ws_bytes, const void* beta,
        cudnnTensorDescriptor_t dxDesc, void* dx)
    cudnnStatus_t cudnnConvolutionBackwardFilter(
        cudnnHandle_t h, const void* alpha, cudnnTensorDescriptor_t xDesc, const void* x,
        cudnnTensorDescriptor_t dyDesc, const void* dy, cudnnConvolutionDescriptor_t conv,
        cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t ws_bytes, const void* beta,
        cudnnFilterDescriptor_t dwDesc, void* dw)
