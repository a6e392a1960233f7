# conv_call: the legacy API's one cudnnConvolution* call, shared by the run path
# (ucudnn._run), the timing of a choice (ucudnn._timing) and the reference of the check of
# graph results (ucudnn._check). Inline, so each compiles it in and none imports another for
# it; this file declares no class, so cimporting it imports no module. Beside it, the setters
# of a kernel's descriptors (Note [Descriptors of 2-D and 3-D kernels] below).

cimport cudnn as dnn
from ucudnn._types cimport UCUDNN_FWD, UCUDNN_BWD_DATA


cdef inline dnn.cudnnStatus_t conv_call(
        int op, dnn.cudnnHandle_t h, int algo, dnn.cudnnConvolutionDescriptor_t conv,
        const void* alpha, const void* beta, dnn.cudnnTensorDescriptor_t xd, const void* x,
        dnn.cudnnFilterDescriptor_t wd, const void* w, dnn.cudnnTensorDescriptor_t yd,
        const void* y, void* ws, size_t ws_size) noexcept nogil:
    """One cuDNN convolution call. x is the input side (x, or dx written by bwd_data), y the
    output side (y written by fwd, or dy), w the filter (dw written by bwd_filter). The one
    dispatch on the op of the convolution call (Note [Operand roles] in _roles.pxd)."""
    if op == UCUDNN_FWD:
        return dnn.cudnnConvolutionForward(h, alpha, xd, x, wd, w, conv,
                                           <dnn.cudnnConvolutionFwdAlgo_t>algo, ws, ws_size,
                                           beta, yd, <void*>y)
    if op == UCUDNN_BWD_DATA:
        return dnn.cudnnConvolutionBackwardData(h, alpha, wd, w, yd, y, conv,
                                                <dnn.cudnnConvolutionBwdDataAlgo_t>algo, ws,
                                                ws_size, beta, xd, <void*>x)
    return dnn.cudnnConvolutionBackwardFilter(h, alpha, xd, x, yd, y, conv,
                                              <dnn.cudnnConvolutionBwdFilterAlgo_t>algo, ws,
                                              ws_size, beta, wd, <void*>w)


# Note [Descriptors of 2-D and 3-D kernels]
# A 2-D kernel's descriptors are set with cuDNN's 4-d calls (cudnnSetTensor4dDescriptorEx,
# cudnnSetFilter4dDescriptor, cudnnSetConvolution2dDescriptor), a 3-D kernel's with the N-d
# calls. cuDNN documents the N-d calls with four dimensions as making the same descriptors; the
# 2-D kernels keep the 4-d calls all the same, so that a 2-D plan runs exactly the calls its
# benchmarks and the GPU tests have run. The kernel (ucudnn._kernel) and the reference of the
# graph check (ucudnn._check) both set their descriptors through these three functions.

cdef inline dnn.cudnnStatus_t set_tensor_desc(
        dnn.cudnnTensorDescriptor_t d, dnn.cudnnDataType_t dt, int nbdims, const int* dims,
        const int* strides) noexcept nogil:
    """A tensor of ``nbdims`` (4 or 5) dimensions, NC[D]HW order, with explicit strides."""
    if nbdims == 4:
        return dnn.cudnnSetTensor4dDescriptorEx(d, dt, dims[0], dims[1], dims[2], dims[3],
                                                strides[0], strides[1], strides[2], strides[3])
    return dnn.cudnnSetTensorNdDescriptor(d, dt, nbdims, dims, strides)


cdef inline dnn.cudnnStatus_t set_filter_desc(
        dnn.cudnnFilterDescriptor_t d, dnn.cudnnDataType_t dt, dnn.cudnnTensorFormat_t fmt,
        int nbdims, const int* dims) noexcept nogil:
    """A filter of ``nbdims`` (4 or 5) dimensions, K C [T] R S order, in format ``fmt``."""
    if nbdims == 4:
        return dnn.cudnnSetFilter4dDescriptor(d, dt, fmt, dims[0], dims[1], dims[2], dims[3])
    return dnn.cudnnSetFilterNdDescriptor(d, dt, fmt, nbdims, dims)


cdef inline dnn.cudnnStatus_t set_conv_desc(
        dnn.cudnnConvolutionDescriptor_t d, int spatial, const int* pad, const int* stride,
        const int* dil, dnn.cudnnDataType_t compute) noexcept nogil:
    """A cross-correlation over ``spatial`` (2 or 3) axes."""
    if spatial == 2:
        return dnn.cudnnSetConvolution2dDescriptor(d, pad[0], pad[1], stride[0], stride[1],
                                                   dil[0], dil[1], dnn.CUDNN_CROSS_CORRELATION,
                                                   compute)
    return dnn.cudnnSetConvolutionNdDescriptor(d, spatial, pad, stride, dil,
                                               dnn.CUDNN_CROSS_CORRELATION, compute)
