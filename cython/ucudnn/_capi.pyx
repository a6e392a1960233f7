"""ucudnn._capi: the C API for C/C++ hosts such as Caffe (cython/ucudnn.h).

The ``cdef public api`` functions below reach the host through the function table that
``ucudnn_import()`` (``import_ucudnn___capi()``) loads; see Note [C API conventions] in
cython/ucudnn_types.h. Planning runs in :mod:`ucudnn.measure.runtime`; the kernels, the hot path
(``run_kernel``) and the thread's last-error buffer are ``ucudnn._core``'s, so imports run one
way: ``_capi`` -> ``runtime`` -> ``_core`` (through ``ucudnn.measure.bench``) -> ``vocab``;
``ucudnn_prefetch_net`` reads the net through :mod:`ucudnn.caffe.prefetch`.

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
from ucudnn._core cimport (Kernel, run_kernel, set_last_error, last_error, ucudnn_kernel,
                           ucudnn_conv_params, ucudnn_plan_options, UCUDNN_OK,
                           UCUDNN_ERR_INVALID, UCUDNN_ERR_PYTHON)

from ucudnn.measure import runtime
from ucudnn.measure.bench import FIND_REPEATS
from ucudnn.plan.conv import ConvShape
from ucudnn.vocab import DTYPES, MATH_MODES, OPS, InputError, UcudnnError

_DTYPE_NAMES = {code: name for name, (code, _size) in DTYPES.items()}
_MATH_NAMES = {code: name for name, code in MATH_MODES.items()}


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

cdef object _kernel_from_params(const ucudnn_conv_params* p):
    name = p.name.decode("utf-8", "replace") if p.name != NULL else None
    where = f"layer {name!r}: " if name else ""
    if not 0 <= p.op < len(OPS):
        raise InputError(f"{where}field 'op': {p.op} is not 0 (fwd), 1 (bwd_data) or "
                         "2 (bwd_filter)")
    if p.dtype not in _DTYPE_NAMES:
        raise InputError(f"{where}field 'dtype': unsupported cudnnDataType_t {p.dtype} "
                         f"(expected one of {sorted(_DTYPE_NAMES)})")
    if p.math not in _MATH_NAMES:
        raise InputError(f"{where}field 'math': unknown cudnnMathType_t {p.math} "
                         f"(expected one of {sorted(_MATH_NAMES)})")
    xs = tuple(p.x_strides[i] for i in range(4))
    ys = tuple(p.y_strides[i] for i in range(4))
    try:
        shape = ConvShape(p.c, p.h, p.w, p.k, p.r, p.s, p.pad_h, p.pad_w, p.stride_h, p.stride_w,
                          p.dil_h, p.dil_w, p.groups, None if not any(xs) else xs,
                          None if not any(ys) else ys)
    except (ValueError, TypeError) as e:
        raise InputError(f"{where}{e}") from None
    return Kernel(shape, OPS[p.op], p.n, _DTYPE_NAMES[p.dtype], _MATH_NAMES[p.math], name,
                  p.instances if p.instances > 0 else 1)


cdef public api int ucudnn_kernel_create(const ucudnn_conv_params* params,
                                         const ucudnn_plan_options* options,
                                         ucudnn_kernel** out) noexcept nogil:
    """Benchmark (through the cache) and plan one kernel. Takes the GIL."""
    with gil:
        try:
            if params == NULL or options == NULL or out == NULL:
                raise InputError("ucudnn_kernel_create: NULL argument")
            out[0] = NULL
            kern = _kernel_from_params(params)
            sizes = None
            if options.micro_batch_sizes != NULL and options.n_micro_batch_sizes > 0:
                sizes = [options.micro_batch_sizes[i] for i in range(options.n_micro_batch_sizes)]
            cache_path = None
            if options.cache_path != NULL:
                cache_path = os.fsdecode(<bytes>options.cache_path)
            runtime.prepare_kernel(
                kern, policy=options.policy, optimizer=options.optimizer,
                limit=int(options.workspace_limit), sizes=sizes,
                repeats=options.repeats if options.repeats > 0 else FIND_REPEATS,
                cache_path=cache_path, exclude_winograd=bool(options.exclude_winograd))
            Py_INCREF(kern)
            out[0] = &(<Kernel>kern).k
            return UCUDNN_OK
        except BaseException as e:
            return _fail(e)


cdef int _plan_network(ucudnn_kernel** kernels, const int* counts, int n,
                       size_t budget) except -1:
    cdef int i
    if n < 0 or (n > 0 and kernels == NULL):
        raise InputError(f"ucudnn_plan_network: bad kernel array ({n} kernels)")
    objs = []
    for i in range(n):
        if kernels[i] == NULL:
            raise InputError(f"ucudnn_plan_network: kernels[{i}] is NULL")
        objs.append(<object>kernels[i].owner)
    cnt = []
    for i in range(n):
        if counts == NULL:
            cnt.append((<Kernel>objs[i]).instances)
        elif counts[i] < 1:
            raise InputError(f"ucudnn_plan_network: counts[{i}] (layer {objs[i].name!r}) "
                             f"must be >= 1, got {counts[i]}")
        else:
            cnt.append(counts[i])
    runtime.plan_network_kernels(objs, int(budget), cnt)
    return 0


cdef public api int ucudnn_plan_network(ucudnn_kernel** kernels, const int* counts, int n,
                                        size_t budget) noexcept nogil:
    """Divide ``budget`` bytes among ``kernels`` (created with UCUDNN_ILP) by the ILP.
    ``counts[i]``: instances of kernel i, each with its own workspace; NULL: each kernel's
    ``instances`` (ucudnn_conv_params)."""
    with gil:
        try:
            _plan_network(kernels, counts, n, budget)
            return UCUDNN_OK
        except BaseException as e:
            return _fail(e)


cdef public api int ucudnn_prefetch_net(const char* net_prototxt, int dtype) noexcept nogil:
    """Measure, over the GPUs of ``$UCUDNN_BENCH_DEVICES``, every kernel that the convolution
    layers of the net in ``net_prototxt`` (prototxt text: the layers still to set up, the blobs
    they read as net inputs) will plan in ``dtype`` (cudnnDataType_t); they then read the
    cache (Note [Benchmarks over several GPUs in one process] in ucudnn/measure/spread.py).
    Does nothing when the variable is unset or empty. Takes the GIL."""
    with gil:
        try:
            if net_prototxt == NULL:
                raise InputError("ucudnn_prefetch_net: NULL argument")
            if dtype not in _DTYPE_NAMES:
                raise InputError(f"ucudnn_prefetch_net: unsupported cudnnDataType_t {dtype} "
                                 f"(expected one of {sorted(_DTYPE_NAMES)})")
            from ucudnn.caffe.prefetch import prefetch_net
            prefetch_net((<bytes>net_prototxt).decode("utf-8"), _DTYPE_NAMES[dtype])
            return UCUDNN_OK
        except BaseException as e:
            return _fail(e)


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
