# conv_call: the legacy API's one cudnnConvolution* call, shared by the run path
# (ucudnn._run), the timing of a choice (ucudnn._timing) and the reference of the check of
# graph results (ucudnn._check). Inline, so each compiles it in and none imports another for
# it; this file declares no class, so cimporting it imports no module.

cimport cudnn as dnn
from ucudnn._types cimport UCUDNN_FWD, UCUDNN_BWD_DATA


cdef inline dnn.cudnnStatus_t conv_call(
        int op, dnn.cudnnHandle_t h, int algo, dnn.cudnnConvolutionDescriptor_t conv,
        const void* alpha, const void* beta, dnn.cudnnTensorDescriptor_t xd, const void* x,
        dnn.cudnnFilterDescriptor_t wd, const void* w, dnn.cudnnTensorDescriptor_t yd,
        const void* y, void* ws, size_t ws_size) noexcept nogil:
    """One cuDNN convolution call. x is the input side (x, or dx written by bwd_data), y the
    output side (y written by fwd, or dy), w the filter (dw written by bwd_filter)."""
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
