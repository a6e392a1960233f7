"""ucudnn._capi: the C API for C/C++ hosts such as Caffe (cython/ucudnn.h).

The ``cdef public api`` functions below reach the host through the function table that
``ucudnn_import()`` (``import_ucudnn___capi()``) loads; see Note [C API conventions] in
cython/ucudnn_types.h. A whole net is planned by :func:`ucudnn.measure.runtime.plan_net` from the
layers and their ucudnn_param (:func:`ucudnn.caffe.params.net_settings`); one kernel by
:func:`ucudnn.measure.runtime.prepare_kernel`. The kernels (``ucudnn._kernel``), the hot path
(``ucudnn._run.run_kernel``) and the thread's last-error buffer (``ucudnn._device``) are the
core's, so imports run one way: ``_capi`` -> ``runtime`` / ``caffe.params`` -> ``_core``
(through ``ucudnn.measure.bench``) -> ``vocab``.

Note [C API errors]
    No Python exception crosses into C. ``_fail`` records an exception's message as the
    thread's last error and returns a status code, never UCUDNN_OK: ucudnn's own errors
    (:class:`ucudnn.vocab.UcudnnError` and its subclasses, including the core's CudnnError and
    CudaError) carry their code in the class attribute ``status``; anything else is an internal
    error, UCUDNN_ERR_PYTHON, with the exception's class name in the message. Input checks
    here raise :class:`ucudnn.vocab.InputError` (UCUDNN_ERR_INVALID) naming the field.
"""

import os

from libc.string cimport strncpy
from cpython.ref cimport Py_INCREF, Py_DECREF

cimport cudnn as dnn
from ucudnn._device cimport set_last_error, last_error
from ucudnn._kernel cimport Kernel
from ucudnn._run cimport run_kernel
from ucudnn._types cimport (ucudnn_kernel, ucudnn_conv_params, ucudnn_plan_options, UCUDNN_OK,
                            UCUDNN_ERR_INVALID, UCUDNN_ERR_PYTHON)

from ucudnn.measure import runtime
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.layers import LayerSpec
from ucudnn.plan.settings import DEFAULTS, PlanSettings
from ucudnn.vocab import (DTYPE_CODES, ENGINE, ENGINES, LAYOUT, MATH_NAMES, OPS, OPTIMIZER,
                          POLICY, InputError, UcudnnError)

cdef extern from "ucudnn_types.h":
    ctypedef struct ucudnn_op_plan:
        ucudnn_kernel* kernel
        int arena
        size_t offset, stride, bytes
    ctypedef struct ucudnn_net_layer:
        const char* name
        int dtype, n, c, h, w, k, r, s
        int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w
        int groups, backward_data
        const char* ucudnn_param
        int layout
        int d, t, pad_d, stride_d, dil_d
        ucudnn_op_plan plan[3]

cdef extern from *:
    """
    struct ucudnn_net {
      size_t workspace_bytes, arena_bytes;  /* the net's own workspace; the shared arena */
      double predicted_ms;                  /* every kernel, every group call */
      void *owner;                          /* the Python NetHandle that owns this struct */
    };
    """
    ctypedef struct ucudnn_net:
        size_t workspace_bytes, arena_bytes
        double predicted_ms
        void* owner


# --------------------------------------------------------------------------- errors

cdef int _fail(BaseException e) noexcept:
    """Record ``e`` as the thread's last error; its status code, never UCUDNN_OK
    (Note [C API errors])."""
    cdef int status = UCUDNN_ERR_PYTHON
    try:
        if isinstance(e, UcudnnError):
            code = int(getattr(e, "status", None))
            if UCUDNN_ERR_INVALID <= code <= UCUDNN_ERR_PYTHON:
                status = code
    except BaseException:
        status = UCUDNN_ERR_PYTHON
    try:
        if isinstance(e, UcudnnError):
            text = str(e) or type(e).__name__
        else:
            detail = str(e)
            text = f"{type(e).__name__}: {detail}" if detail else type(e).__name__
        msg = text.encode("utf-8", "replace")[:1023]
        set_last_error(msg)
    except BaseException:
        set_last_error(b"ucudnn: a call failed and its error message could not be composed")
    return status


def _report(e):
    """``(status, message)`` that the C API returns and records for exception ``e`` (tests)."""
    cdef int status = _fail(e)
    return status, last_error().decode("utf-8", "replace")


# --------------------------------------------------------------------------- kernels

cdef str _dtype_name(int code, str where):
    """The dtype of cudnnDataType_t ``code``; an error naming ``where``'s field where ucudnn
    does not run it."""
    if code not in DTYPE_CODES:
        raise InputError(f"{where}field 'dtype': unsupported cudnnDataType_t {code} "
                         f"(expected one of {sorted(DTYPE_CODES)})")
    return DTYPE_CODES[code]


cdef str _layout_name(int code, str where):
    """The layout of a UCUDNN_NCHW / UCUDNN_NHWC ``code``; an error naming ``where``'s field
    for any other."""
    if code not in LAYOUT.codes.values():
        raise InputError(f"{where}field 'layout': {code} is not UCUDNN_NCHW (0) or "
                         "UCUDNN_NHWC (1)")
    return LAYOUT(code)


cdef object _depth(int d, int t, int pad_d, int stride_d, int dil_d, str where):
    """The depth of a 3-D kernel or layer as ``(d, t, pad_d, stride_d, dil_d)``, or None for a
    2-D one (d and t 0); an error naming ``where``'s field for depth fields of a 2-D one
    (Note [3-D layers in the C API] in cython/ucudnn_types.h)."""
    if d == 0 and t == 0:
        for name, v, neutral in (("pad_d", pad_d, 0), ("stride_d", stride_d, 1),
                                 ("dil_d", dil_d, 1)):
            if v not in (0, neutral):
                raise InputError(f"{where}field {name!r}: {v} for a 2-D convolution (d and t "
                                 "are 0)")
        return None
    return d, t, pad_d, stride_d, dil_d


cdef str _engines(int code):
    """The ``engines`` setting of a UCUDNN_ENGINES_* code (0: PlanSettings' default)."""
    if code == 0:
        return DEFAULTS.engines
    if not 1 <= code <= len(ENGINES):
        raise InputError(f"'engines': {code} is not one of UCUDNN_ENGINES_DEFAULT (0), "
                         "UCUDNN_ENGINES_LEGACY (1), UCUDNN_ENGINES_GRAPH (2), "
                         "UCUDNN_ENGINES_BOTH (3)")
    return ENGINE(code - 1, "engines")


cdef object _kernel_from_params(const ucudnn_conv_params* p):
    name = p.name.decode("utf-8", "replace") if p.name != NULL else None
    where = f"layer {name!r}: " if name else ""
    if not 0 <= p.op < len(OPS):
        raise InputError(f"{where}field 'op': {p.op} is not 0 (fwd), 1 (bwd_data) or "
                         "2 (bwd_filter)")
    dtype = _dtype_name(p.dtype, where)
    if p.math not in MATH_NAMES:
        raise InputError(f"{where}field 'math': unknown cudnnMathType_t {p.math} "
                         f"(expected one of {sorted(MATH_NAMES)})")
    xs = tuple(p.x_strides[i] for i in range(4))
    ys = tuple(p.y_strides[i] for i in range(4))
    layout = _layout_name(p.layout, where)
    depth = _depth(p.d, p.t, p.pad_d, p.stride_d, p.dil_d, where)
    three = {} if depth is None else dict(zip(("d", "t", "pad_d", "stride_d", "dil_d"), depth))
    if depth is not None and (any(xs) or any(ys)):
        raise InputError(f"{where}field 'x_strides': a 3-D kernel's tensors are packed (all-zero "
                         "strides)")
    try:
        shape = ConvShape(p.c, p.h, p.w, p.k, p.r, p.s, p.pad_h, p.pad_w, p.stride_h, p.stride_w,
                          p.dil_h, p.dil_w, p.groups, None if not any(xs) else xs,
                          None if not any(ys) else ys, layout, **three)
    except (ValueError, TypeError) as e:
        raise InputError(f"{where}{e}") from None
    return Kernel(shape, OPS[p.op], p.n, dtype, MATH_NAMES[p.math], name,
                  p.instances if p.instances > 0 else 1)


cdef public api int ucudnn_kernel_create(const ucudnn_conv_params* params,
                                         const ucudnn_plan_options* options,
                                         ucudnn_kernel** out) noexcept nogil:
    """Benchmark (through the cache) and plan one kernel within its workspace limit (DP).
    Takes the GIL."""
    with gil:
        try:
            if params == NULL or options == NULL or out == NULL:
                raise InputError("ucudnn_kernel_create: NULL argument")
            out[0] = NULL
            try:        # checked before _kernel_from_params creates the kernel's descriptors
                engines = _engines(options.engines)
            except InputError as e:
                name = params.name.decode("utf-8", "replace") if params.name != NULL else None
                raise InputError(f"layer {name!r}: field {e}") from None
            kern = _kernel_from_params(params)
            where = f"layer {kern.name!r}: "
            sizes = None
            if options.micro_batch_sizes != NULL and options.n_micro_batch_sizes > 0:
                sizes = tuple(options.micro_batch_sizes[i]
                              for i in range(options.n_micro_batch_sizes))
            try:
                settings = PlanSettings(
                    policy=POLICY(options.policy, "policy"),
                    optimizer=OPTIMIZER(options.optimizer, "optimizer"),
                    limit=int(options.workspace_limit), sizes=sizes,
                    math=kern.math, dtype=kern.dtype,
                    repeats=options.repeats if options.repeats > 0 else DEFAULTS.repeats,
                    cache_path=(os.fsdecode(<bytes>options.cache_path)
                                if options.cache_path != NULL else None),
                    exclude_winograd=bool(options.exclude_winograd),
                    engines=engines)
            except InputError as e:
                raise InputError(f"{where}field {e}") from None
            runtime.prepare_kernel(kern, settings)
            Py_INCREF(kern)
            out[0] = &(<Kernel>kern).k
            return UCUDNN_OK
        except BaseException as e:
            return _fail(e)


# --------------------------------------------------------------------------- nets

cdef class NetHandle:
    """A planned net as the C API hands it out: the sizes in C (read without the GIL) and
    the live net (:class:`ucudnn.measure.runtime.LiveNet`) that owns the kernels."""
    cdef ucudnn_net n
    cdef object live

    def __cinit__(self):
        self.n.owner = <void*>self


cdef object _layer_from_c(const ucudnn_net_layer* l, int i):
    if l.name == NULL or not l.name[0]:
        raise InputError(f"ucudnn_net_plan: layers[{i}] has no name")
    name = l.name.decode("utf-8", "replace")
    where = f"layer {name!r}: "
    dtype = _dtype_name(l.dtype, where)
    layout = _layout_name(l.layout, where)
    pad, stride, dil = (l.pad_h, l.pad_w), (l.stride_h, l.stride_w), (l.dil_h, l.dil_w)
    three = {}
    if _depth(l.d, l.t, l.pad_d, l.stride_d, l.dil_d, where) is not None:
        pad, stride, dil = (l.pad_d,) + pad, (l.stride_d,) + stride, (l.dil_d,) + dil
        three = dict(d=l.d, t=l.t)
    spec = LayerSpec(name, l.n, l.c, l.h, l.w, l.k, l.r, l.s, pad=pad, stride=stride,
                     dilation=dil, groups=l.groups, bwd_data=bool(l.backward_data),
                     layout=layout, **three)
    text = l.ucudnn_param.decode("utf-8", "replace") if l.ucudnn_param != NULL else None
    return spec, dtype, text


cdef int _plan_net(ucudnn_net_layer* layers, int n_layers, const char* net_name,
                   const char* net_param, size_t unallocatable, ucudnn_net** out) except -1:
    from ucudnn.caffe.params import net_settings
    cdef int i, op
    cdef Kernel kern
    if out == NULL or n_layers < 1 or layers == NULL:
        raise InputError(f"ucudnn_net_plan: bad arguments ({n_layers} layers)")
    out[0] = NULL
    net = net_name.decode("utf-8", "replace") if net_name != NULL else "net"
    specs, texts, dtypes = [], {}, {}
    for i in range(n_layers):
        spec, dtype, text = _layer_from_c(&layers[i], i)
        if spec.name in texts:
            raise InputError(f"net {net!r}: layer {spec.name!r} is given twice")
        specs.append(spec)
        texts[spec.name] = text
        dtypes[spec.name] = dtype
    settings = net_settings(net_param.decode("utf-8", "replace") if net_param != NULL else None,
                            texts, dtypes=dtypes, net=net)
    live = runtime.plan_net(specs, settings, name=net,
                            cap=None if unallocatable == 0 else int(unallocatable) // 2)
    slots = {(k.layer, k.op): k.slot for k in live.plan.kernels}
    handle = NetHandle()
    handle.live = live
    handle.n.workspace_bytes = live.workspace_bytes
    handle.n.arena_bytes = live.arena_bytes
    handle.n.predicted_ms = live.plan.time_ms
    for i in range(n_layers):
        for op in range(3):
            key = (specs[i].name, OPS[op])
            layers[i].plan[op].kernel = NULL
            layers[i].plan[op].arena = 0
            layers[i].plan[op].offset = layers[i].plan[op].stride = 0
            layers[i].plan[op].bytes = 0
            if key not in live.kernels:
                continue
            kern = live.kernels[key]
            slot = slots[key]
            layers[i].plan[op].kernel = &kern.k
            layers[i].plan[op].arena = 1 if slot.arena else 0
            layers[i].plan[op].offset = slot.offset
            layers[i].plan[op].stride = slot.stride
            layers[i].plan[op].bytes = slot.bytes
    Py_INCREF(handle)
    out[0] = &handle.n
    return 0


cdef public api int ucudnn_net_plan(ucudnn_net_layer* layers, int n_layers,
                                    const char* net_name, const char* net_ucudnn_param,
                                    size_t unallocatable, ucudnn_net** out) noexcept nogil:
    """Plan a net's convolution layers as one (cython/ucudnn.h); writes every layer's
    ``plan``. Takes the GIL."""
    with gil:
        try:
            _plan_net(layers, n_layers, net_name, net_ucudnn_param, unallocatable, out)
            return UCUDNN_OK
        except BaseException as e:
            return _fail(e)


cdef public api size_t ucudnn_net_workspace_size(const ucudnn_net* net) noexcept nogil:
    return net.workspace_bytes if net != NULL else 0


cdef public api size_t ucudnn_net_arena_size(const ucudnn_net* net) noexcept nogil:
    return net.arena_bytes if net != NULL else 0


cdef public api double ucudnn_net_predicted_ms(const ucudnn_net* net) noexcept nogil:
    return net.predicted_ms if net != NULL else 0.0


cdef public api void ucudnn_net_destroy(ucudnn_net* net) noexcept nogil:
    """Release the net and its kernels (their workspace pointers are then unused)."""
    if net == NULL:
        return
    with gil:
        Py_DECREF(<object>net.owner)


cdef public api int ucudnn_kernel_replan(ucudnn_kernel* kernel, size_t limit) noexcept nogil:
    """Plan again within ``limit`` bytes (e.g. after a failed workspace allocation)."""
    with gil:
        try:
            if kernel == NULL:
                raise InputError("ucudnn_kernel_replan: NULL kernel")
            runtime.replan_kernel(<object>kernel.owner, int(limit))
            return UCUDNN_OK
        except BaseException as e:
            return _fail(e)


cdef public api size_t ucudnn_kernel_workspace_size(const ucudnn_kernel* kernel) noexcept nogil:
    return kernel.ws_bytes if kernel != NULL else 0


cdef public api double ucudnn_kernel_predicted_ms(const ucudnn_kernel* kernel) noexcept nogil:
    return kernel.predicted_ms if kernel != NULL else 0.0


cdef public api int ucudnn_kernel_describe(const ucudnn_kernel* kernel, char* buf,
                                           size_t size) noexcept nogil:
    """Write the plan (``Plan.describe()``: ``128x2:algo1, ...``) into ``buf``; the text is
    truncated to fit."""
    with gil:
        try:
            if kernel == NULL or (buf == NULL and size > 0):
                raise InputError("ucudnn_kernel_describe: NULL argument")
            plan = (<Kernel>kernel.owner).plan
            text = (plan.describe() if plan is not None else "(no plan)").encode()
            if size:
                strncpy(buf, text, size - 1)
                buf[size - 1] = 0
            return UCUDNN_OK
        except BaseException as e:
            return _fail(e)


cdef public api int ucudnn_kernel_run(const ucudnn_kernel* kernel, void* cudnn_handle,
                                      const void* alpha, const void* a, const void* b,
                                      const void* beta, void* out, void* workspace,
                                      size_t workspace_size) noexcept nogil:
    """Enqueue the planned micro-batches on ``cudnn_handle``'s stream. Needs no GIL; a failure
    is recorded in the same last-error buffer as the planning calls'."""
    if kernel == NULL or cudnn_handle == NULL:
        set_last_error(b"ucudnn_kernel_run: NULL kernel or cuDNN handle")
        return UCUDNN_ERR_INVALID
    return run_kernel(kernel, <dnn.cudnnHandle_t>cudnn_handle, alpha, a, b, beta, out,
                      workspace, workspace_size)


cdef public api void ucudnn_kernel_destroy(ucudnn_kernel* kernel) noexcept nogil:
    if kernel == NULL:
        return
    with gil:
        Py_DECREF(<object>kernel.owner)


cdef public api const char* ucudnn_last_error() noexcept nogil:
    """The message of the last failed call on this thread (planning or run)."""
    return last_error()
