"""ucudnn._check: graph results checked against a legacy algorithm's (Note [Graph results
checked]).

The tolerance per dtype and math, the comparison on host copies, float32 copies of a
half-precision kernel's inputs for the reference, and the check of a benchmark's graph
records at one size. Each function over a kernel takes it as its first argument; the Kernel's
methods of the same names call them.
"""

from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from libc.math cimport fabs, ldexp, INFINITY, NAN
from libc.stdint cimport uintptr_t

cimport cudnn as dnn
cimport cudart as rt
from ucudnn._conv cimport conv_call, set_conv_desc, set_filter_desc, set_tensor_desc
from ucudnn._device cimport DeviceBuffer, Handle, check_cuda, check_cudnn
from ucudnn._graph cimport GraphPlan
from ucudnn._kernel cimport Kernel
from ucudnn._roles cimport OP_ROLES, TENSOR_W, TENSOR_X, TENSOR_Y, ucudnn_op_roles
from ucudnn._types cimport ucg_execute, ucg_execute_slabs

from math import prod

from ucudnn._device import CudaError
from ucudnn.vocab import (DTYPES, GRAPH_ALGO, InputError, packed_strides_nd, parse_engine,
                          split_slabs)


# Note [Graph results checked]
#     cuDNN's numerical notes do not name every engine whose results are off. On the H200
#     (cuDNN 9.14), engine 17 of AlexNet conv2's backward-filter (5x5, 48 -> 128 channels, a
#     group's strided view), which carries no note, is 1.3e-3 off a float64 reference at one
#     sample and 1.6e-2 at 128 under FMA math, where every other config proposed is within
#     7e-6 (scripts/graph_accuracy.py; results/h200/engines). So every engine config that a
#     plan could choose at a size (one that no config already accepted there beats on both time
#     and workspace) runs once more on the first slice, and its output is compared with a
#     legacy algorithm's on the same inputs (algorithm 0, then 1, with FMA math and no
#     workspace; for float16 and bfloat16 in float32 on float32 copies of the inputs, since
#     cuDNN's half-precision backward-filter algorithms round partial sums: against their
#     own, the check refused every graph config of ResNet-18's backward-filter at batch 256
#     on the H200): the first CHECK_ELEMENTS values of one sample of y or dx, or of the filter
#     for dw, relative to the largest reference value there, within ``check_tolerance`` of the
#     kernel's dtype and math: 1e-4 for float32 under FMA (the configs accepted were within
#     7e-6), 5e-3 with TF32 allowed (the reference has none), and for float16 and bfloat16
#     twice the GPU tests' 8 units in the last place. The
#     output is first filled with NaN (beta 0) or zeros (backward-filter's beta-1 plan), so an
#     engine that leaves it unwritten fails too. A config outside the tolerance gets status
#     STATUS_INACCURATE and is never planned (its time stays in the record, for reports), and
#     so does every config of its engine at every size of the kernel, in this benchmark call
#     and the later ones: such an error grows with the reduction, so one small micro-batch
#     can pass while a plan of many accumulates it. Engine 17 above is within 1e-4 on one
#     sample, but a plan of 128 one-sample chunks sums to 1.3e-3.
#     Where no legacy algorithm runs the kernel, or one sample is not a packed block, the
#     configs stay unchecked (graph_stats "unchecked"). Configs that an accepted one beats
#     cannot be chosen, so they are not run again: the check costs one run and one copy of at
#     most CHECK_ELEMENTS values per config on the (time, workspace) front.
#     So a refusal also reaches back: at a size where a config of an engine refused later was
#     accepted, the configs it beat were never checked. ``last_unchecked_sizes`` names the
#     sizes of the last call where that happened, and ``refused_engines`` the engines with
#     why; the benchmark cache keeps the refusals of a kernel and treats an entry holding a
#     config of a refused engine as absent, so ``ucudnn.measure.bench`` measures such sizes
#     again, and a new Kernel starts from the refusals stored (``refuse_engines``): Note
#     [Refused engines] in ucudnn/measure/cache/schema.py.
CHECK_ELEMENTS = 1 << 18
#: a record's status for an engine config whose results Note [Graph results checked] refused
STATUS_INACCURATE = -2


def check_tolerance(dtype, math):
    """Note [Graph results checked]: the largest relative error accepted for ``dtype`` and
    ``math``."""
    if dtype == "float32":
        return 1e-4 if math == "fma" else 5e-3
    return {"float64": 1e-10, "float16": 16 * 2.0 ** -11, "bfloat16": 16 * 2.0 ** -8}[dtype]


def relative_error(bytes got, bytes ref, dtype, ref_dtype=None):
    """The comparison of Note [Graph results checked] on host copies of two tensors, ``got``
    of ``dtype`` and ``ref`` of ``ref_dtype`` (default the same): max |got - ref| / max |ref|,
    infinite where ``got`` holds a NaN."""
    ref_dtype = ref_dtype or dtype
    if dtype not in DTYPES or ref_dtype not in DTYPES:
        raise InputError(f"relative_error: unknown dtype {dtype!r} or {ref_dtype!r}")
    (code, size), (rcode, rsize) = DTYPES[dtype], DTYPES[ref_dtype]
    n = len(got) // size
    if len(got) % size or len(ref) != n * rsize:
        raise InputError(f"relative_error: a {dtype} and a {ref_dtype} tensor of one number of "
                         "elements expected")
    return _relative_error(got, code, ref, rcode, n)


cdef inline double _host_value(const char* p, size_t i, int dtype) noexcept nogil:
    """Element ``i`` of a host copy of a tensor of cudnnDataType_t ``dtype``, as a double."""
    cdef unsigned short h
    cdef unsigned int bits
    cdef float f
    cdef int e, m
    if dtype == 0:
        return (<const float*>p)[i]
    if dtype == 1:
        return (<const double*>p)[i]
    h = (<const unsigned short*>p)[i]
    if dtype == 9:                          # bfloat16: the high half of a float
        bits = (<unsigned int>h) << 16
        memcpy(&f, &bits, 4)
        return f
    e, m = (h >> 10) & 0x1f, h & 0x3ff      # float16
    if e == 31:
        return (-INFINITY if h & 0x8000 else INFINITY) if m == 0 else NAN
    f = <float>(ldexp(m, -24) if e == 0 else ldexp(m + 1024, e - 25))
    return -f if h & 0x8000 else f


cdef double _relative_error(const char* got, int got_dtype, const char* ref, int ref_dtype,
                            size_t n) noexcept nogil:
    """max |got - ref| / max |ref| over ``n`` elements (each of its cudnnDataType_t);
    infinite where ``got`` holds a NaN."""
    cdef double scale = 1e-30, worst = 0.0, r, d
    cdef size_t i
    for i in range(n):
        r = _host_value(ref, i, ref_dtype)
        d = fabs(_host_value(got, i, got_dtype) - r)
        if d != d:
            return INFINITY
        if fabs(r) > scale:
            scale = fabs(r)
        if d > worst:
            worst = d
    return worst / scale


cdef class _FloatCopies:
    """float32 copies, packed in the kernel's layout, of what a half-precision kernel reads at
    ``b`` samples (one for forward and backward-data, whose outputs are compared on one
    sample; all for backward-filter), with float32 descriptors and an FMA convolution: the
    reference of Note [Graph results checked]. ``base`` is NULL where there is no memory for
    them (in the benchmark's workspace, else a buffer of their own)."""
    cdef char* base
    cdef char* x
    cdef char* y
    cdef char* w
    cdef dnn.cudnnTensorDescriptor_t xd, yd, hx, hy, hw, fw
    cdef dnn.cudnnFilterDescriptor_t wd
    cdef dnn.cudnnConvolutionDescriptor_t conv
    cdef object own

    def __cinit__(self):
        self.base = NULL
        self.xd = self.yd = self.hx = self.hy = self.hw = self.fw = NULL
        self.wd = NULL
        self.conv = NULL
        self.own = None

    def __init__(self, Kernel kern, Handle handle, int b, DeviceBuffer x, DeviceBuffer y,
                 DeviceBuffer w, DeviceBuffer ws):
        s = kern.shape
        cdef const ucudnn_op_roles* roles = &OP_ROLES[kern.k.op]    # Note [Operand roles]
        cdef int n = b if roles.accumulates else 1
        cdef int cg = s.c // s.groups
        cdef float one = 1.0, zero = 0.0
        cdef dnn.cudnnTensorFormat_t fmt = (dnn.CUDNN_TENSOR_NCHW if kern.layout == "NCHW"
                                            else dnn.CUDNN_TENSOR_NHWC)
        # element counts as C integers: pointer arithmetic with a Python int would make
        # Cython read the device pointer as a C string
        cdef size_t nx, ny, nw, total
        lay = kern.layout
        fx = packed_strides_nd(s.c, s.spatial, lay)
        fy = packed_strides_nd(s.k, s.out_spatial, lay)
        up = lambda e: (e + 63) // 64 * 64         # 256-byte aligned regions
        nx = up(prod(s.x_dims(n)))
        ny = up(prod(s.y_dims(n)))
        nw = up(prod(s.w_dims()))
        total = 4 * (nx + ny + nw)
        if ws.nbytes >= total:
            self.base = <char*>ws.p
        else:
            try:
                self.own = DeviceBuffer(total)
            except CudaError:
                return
            self.base = <char*>(<DeviceBuffer>self.own).p
        self.x, self.y, self.w = self.base, self.base + 4 * nx, self.base + 4 * (nx + ny)
        cdef dnn.cudnnDataType_t dt = <dnn.cudnnDataType_t>kern.k.dtype
        cdef dnn.cudnnDataType_t f32 = dnn.CUDNN_DATA_FLOAT
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.xd), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.yd), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.hx), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.hy), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.hw), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateTensorDescriptor(&self.fw), "cudnnCreateTensorDescriptor")
        check_cudnn(dnn.cudnnCreateFilterDescriptor(&self.wd), "cudnnCreateFilterDescriptor")
        check_cudnn(dnn.cudnnCreateConvolutionDescriptor(&self.conv),
                    "cudnnCreateConvolutionDescriptor")
        xs = [kern.x_strides[i] for i in range(kern.nbdims)]
        ys = [kern.y_strides[i] for i in range(kern.nbdims)]
        _nd_tensor(self.hx, dt, s.x_dims(n), xs, "reference: x")
        _nd_tensor(self.xd, f32, s.x_dims(n), fx, "reference: x")
        _nd_tensor(self.hy, dt, s.y_dims(n), ys, "reference: y")
        _nd_tensor(self.yd, f32, s.y_dims(n), fy, "reference: y")
        _nd_tensor(self.hw, dt, s.w_dims(), s.filter_strides(), "reference: w")
        _nd_tensor(self.fw, f32, s.w_dims(), s.filter_strides(), "reference: w")
        cdef int wdim[5]
        cdef int pad[3]
        cdef int stride[3]
        cdef int dil[3]
        for i, v in enumerate(s.w_dims()):
            wdim[i] = v
        for i in range(kern.nbdims - 2):
            pad[i], stride[i], dil[i] = s.pad[i], s.stride[i], s.dilation[i]
        check_cudnn(set_filter_desc(self.wd, f32, fmt, kern.nbdims, wdim),
                    "reference: filter")
        check_cudnn(set_conv_desc(self.conv, kern.nbdims - 2, pad, stride, dil, f32),
                    "reference: convolution")
        check_cudnn(dnn.cudnnSetConvolutionMathType(self.conv, dnn.CUDNN_FMA_MATH),
                    "reference: math")
        check_cudnn(dnn.cudnnSetConvolutionGroupCount(self.conv, s.groups), "reference: groups")
        # the inputs of the op, converted (the output is written by the reference run)
        if roles.out != TENSOR_X:
            check_cudnn(dnn.cudnnTransformTensor(handle.h, &one, self.hx, x.p, &zero, self.xd,
                                                 self.x), "reference: x to float")
        if roles.out != TENSOR_Y:
            check_cudnn(dnn.cudnnTransformTensor(handle.h, &one, self.hy, y.p, &zero, self.yd,
                                                 self.y), "reference: dy to float")
        if roles.out != TENSOR_W:
            check_cudnn(dnn.cudnnTransformTensor(handle.h, &one, self.hw, w.p, &zero, self.fw,
                                                 self.w), "reference: w to float")

    def __dealloc__(self):
        if self.xd != NULL: dnn.cudnnDestroyTensorDescriptor(self.xd)
        if self.yd != NULL: dnn.cudnnDestroyTensorDescriptor(self.yd)
        if self.hx != NULL: dnn.cudnnDestroyTensorDescriptor(self.hx)
        if self.hy != NULL: dnn.cudnnDestroyTensorDescriptor(self.hy)
        if self.hw != NULL: dnn.cudnnDestroyTensorDescriptor(self.hw)
        if self.fw != NULL: dnn.cudnnDestroyTensorDescriptor(self.fw)
        if self.wd != NULL: dnn.cudnnDestroyFilterDescriptor(self.wd)
        if self.conv != NULL: dnn.cudnnDestroyConvolutionDescriptor(self.conv)


cdef object _check_region(Kernel kern, bint whole=False):
    """Note [Graph results checked]: ``(tensor, elements)`` of the output compared (its
    tensor TENSOR_X, TENSOR_W or TENSOR_Y: Note [Operand roles] in _roles.pxd), or None where
    one sample of it is not a packed block at the buffer's start; ``whole``: all of one
    sample (Note [Slab plans] in _graph.pyx: a slab choice writes its rows in pieces)."""
    s = kern.shape
    cdef int role = OP_ROLES[kern.k.op].out
    if role == TENSOR_W:
        return role, min(CHECK_ELEMENTS, kern.filter_bytes // kern.k.elem_size)
    if role == TENSOR_Y:
        c, sp = s.k, s.out_spatial
        st = tuple(kern.y_strides[i] for i in range(1, kern.nbdims))
    else:
        c, sp = s.c, s.spatial
        st = tuple(kern.x_strides[i] for i in range(1, kern.nbdims))
    if st not in (packed_strides_nd(c, sp, "NCHW")[1:], packed_strides_nd(c, sp, "NHWC")[1:]):
        return None
    return role, c * prod(sp) if whole else min(CHECK_ELEMENTS, c * prod(sp))


cdef int _nd_tensor(dnn.cudnnTensorDescriptor_t d, dnn.cudnnDataType_t dt, dims, strides,
                    what) except -1:
    """Set ``d`` to a tensor of ``dims`` and ``strides`` (4 or 5 of each)."""
    cdef int cd[5]
    cdef int cs[5]
    for i in range(len(dims)):
        cd[i], cs[i] = dims[i], strides[i]
    check_cudnn(set_tensor_desc(d, dt, len(dims), cd, cs), what)
    return 0


cdef object _reference(Kernel kern, Handle handle, int b, uintptr_t xd_, uintptr_t yd_,
                       DeviceBuffer x, DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, role,
                       size_t count):
    """Note [Graph results checked]: the first ``count`` values of a legacy algorithm's
    output at ``b`` samples (algorithm 0, else 1; FMA math, no workspace) as
    ``(bytes, cudnnDataType_t)``, or None where neither runs. float32 and float64 run on
    the benchmark's buffers; float16 and bfloat16 on float32 copies of them (one sample,
    or all ``b`` for backward-filter), since cuDNN's half-precision backward-filter
    algorithms round partial sums (the GPU tests' note on bfloat16's algorithm 0)."""
    cdef float one_f = 1.0, zero_f = 0.0
    cdef double one_d = 1.0, zero_d = 0.0
    cdef const void* one = <const void*>&one_d if kern.k.dtype == 1 else <const void*>&one_f
    cdef const void* zero = <const void*>&zero_d if kern.k.dtype == 1 else <const void*>&zero_f
    cdef dnn.cudnnStatus_t st = dnn.CUDNN_STATUS_NOT_SUPPORTED
    cdef int algo
    cdef char* host
    cdef char* out
    cdef dnn.cudnnTensorDescriptor_t xd = <dnn.cudnnTensorDescriptor_t>xd_
    cdef dnn.cudnnTensorDescriptor_t yd = <dnn.cudnnTensorDescriptor_t>yd_
    cdef dnn.cudnnFilterDescriptor_t wd = kern.k.wdesc
    cdef dnn.cudnnConvolutionDescriptor_t conv = kern.k.conv[3]
    cdef char* px = <char*>x.p
    cdef char* py = <char*>y.p
    cdef char* pw = <char*>w.p
    cdef int ref_dtype = kern.k.dtype
    cdef _FloatCopies copies = None
    if kern.k.dtype in (2, 9):
        copies = _FloatCopies(kern, handle, b, x, y, w, ws)
        if copies.base == NULL:
            return None
        xd, yd, wd, conv = copies.xd, copies.yd, copies.wd, copies.conv
        px, py, pw = copies.x, copies.y, copies.w
        ref_dtype = 0
    for algo in range(2):
        with nogil:
            st = conv_call(kern.k.op, handle.h, algo, conv, one, zero, xd, px, wd, pw,
                           yd, py, NULL, 0)
        if st == dnn.CUDNN_STATUS_SUCCESS:
            break
    if st != dnn.CUDNN_STATUS_SUCCESS:
        return None
    out = py if role == TENSOR_Y else (px if role == TENSOR_X else pw)
    nbytes = count * (4 if ref_dtype == 0 else kern.k.elem_size)
    ref = bytes(nbytes)
    host = ref
    check_cuda(rt.cudaStreamSynchronize(<rt.cudaStream_t>handle.stream),
               f"{kern.name}: reference run")
    check_cuda(rt.cudaMemcpy(host, out, nbytes, rt.cudaMemcpyDeviceToHost),
               f"{kern.name}: reference copy")
    return ref, ref_dtype


cdef object _graph_error(Kernel kern, Handle handle, GraphPlan gp, DeviceBuffer x,
                         DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, uintptr_t out_,
                         size_t count, bytes ref, int ref_dtype):
    """Note [Graph results checked]: one run of ``gp`` on the first slice, its relative
    error over the first ``count`` values against ``ref`` (of ``ref_dtype``)."""
    cdef size_t nbytes = count * kern.k.elem_size
    cdef const char* r = ref
    cdef char* host = <char*>malloc(nbytes)
    cdef void* out = <void*>out_
    cdef dnn.cudnnStatus_t st
    cdef double err
    if host == NULL:
        raise MemoryError()
    try:
        check_cuda(rt.cudaStreamSynchronize(<rt.cudaStream_t>handle.stream), kern.name)
        # NaN for every dtype (all bits set), or zeros under the beta-1 plan of an op that
        # accumulates (Note [Operand roles] in _roles.pxd)
        check_cuda(rt.cudaMemset(out, 0 if OP_ROLES[kern.k.op].accumulates else 0xFF,
                                 nbytes), f"{kern.name}: check fill")
        check_cuda(rt.cudaDeviceSynchronize(), f"{kern.name}: check fill")
        with nogil:
            if gp.pieces > 1:
                st = ucg_execute_slabs(handle.h, &gp.s, x.p, w.p, y.p, ws.p)
            else:
                st = ucg_execute(handle.h, &gp.p, x.p, w.p, y.p, ws.p)
        if st != dnn.CUDNN_STATUS_SUCCESS:
            return INFINITY
        check_cuda(rt.cudaStreamSynchronize(<rt.cudaStream_t>handle.stream),
                   f"{kern.name}: engine config {gp.engine}")
        check_cuda(rt.cudaMemcpy(host, out, nbytes, rt.cudaMemcpyDeviceToHost),
                   f"{kern.name}: check copy")
        with nogil:
            err = _relative_error(host, kern.k.dtype, r, ref_dtype, count)
        return err
    finally:
        free(host)


cdef object _check_graph(Kernel kern, Handle handle, int b, DeviceBuffer x, DeviceBuffer y,
                         DeviceBuffer w, DeviceBuffer ws, uintptr_t xd_, uintptr_t yd_,
                         list out, dict plans):
    """Note [Graph results checked], on the records ``out`` of size ``b`` (in place)."""
    stats = kern.graph_stats
    accepted_engines = kern._accepted_at[b] = set()     # this call's, at this size
    cand = sorted((i for i, rec in enumerate(out) if rec[1] == 0),
                  key=lambda i: (out[i][2], out[i][3]))
    if not cand:
        return
    region = kern._check_region(any(split_slabs(out[i][5])[1] > 1 for i in cand))
    cdef uintptr_t dev = 0
    got = None
    if region is not None:
        role, count = region
        dev = <uintptr_t>(y.p if role == TENSOR_Y else (x.p if role == TENSOR_X else w.p))
        got = kern._reference(handle, b, xd_, yd_, x, y, w, ws, role, count)
    if got is None:
        stats["unchecked"] += len(cand)
        for i in cand:          # never planned unchecked: Note [Slab plans] in _graph.pyx
            if split_slabs(out[i][5])[1] > 1:
                out[i] = out[i][:1] + (STATUS_INACCURATE,) + out[i][2:]
        return
    ref, ref_dtype = got
    tol = check_tolerance(kern.dtype, kern.math)
    accepted = []           # workspaces of the configs accepted, fastest first
    refused = kern._refused_engines
    for i in cand:
        _, _, t, wsb, mt, engine = out[i]
        if parse_engine(engine)[0] in refused:
            out[i] = (GRAPH_ALGO, STATUS_INACCURATE, t, wsb, mt, engine)
            continue
        if any(a <= wsb for a in accepted):
            continue        # beaten on time and workspace: no plan chooses it
        err = kern._graph_error(handle, plans[engine], x, y, w, ws, dev, count, ref,
                                ref_dtype)
        stats["checked"] += 1
        if err <= tol:
            accepted.append(wsb)
            accepted_engines.add(parse_engine(engine)[0])
            continue
        stats["inaccurate"] += 1
        out[i] = (GRAPH_ALGO, STATUS_INACCURATE, t, wsb, mt, engine)
        kern.last_graph_error = (f"{kern.name}: engine config {engine} at batch {b}: "
                                 f"relative error {err:.3g} against a legacy algorithm, "
                                 f"more than {tol:.3g} (Note [Graph results checked])")
        if split_slabs(engine)[1] == 1:     # a wrong slab choice is that choice's fault,
            refused[parse_engine(engine)[0]] = kern.last_graph_error   # not its engine's


cdef object _mark_refused(Kernel kern, dict result):
    """Records of engines refused at a later size of the benchmark call, or before it, get
    STATUS_INACCURATE; ``last_unchecked_sizes`` names the sizes their refusal shadowed (Note
    [Graph results checked])."""
    refused = kern._refused_engines
    if refused:                     # refused at a later size: Note [Graph results checked]
        for b, records in result.items():
            result[b] = [r[:1] + (STATUS_INACCURATE,) + r[2:]
                         if r[5] and r[1] == 0 and parse_engine(r[5])[0] in refused
                         else r for r in records]
    kern.last_unchecked_sizes = sorted(
        b for b in result if any(e in refused for e in kern._accepted_at.get(b, ())))
