"""How a converted module calls the core: through the operators of :mod:`.ops`, or, in plain
eager mode, through the same implementations under a ``torch.autograd.Function`` of its own
(:func:`conv_fwd`, :func:`conv_transpose`).

Note [Eager calls]
    An operator of :mod:`.ops` reaches its Python implementation through the dispatcher's
    Python layers: its autograd kernel (the ``torch.autograd.Function`` that
    ``torch.library.register_autograd`` makes, which fills the schema's defaults and
    redispatches below autograd), and under autocast its ``AutocastCUDA`` kernel, a Python
    function that casts and calls the operator again. A training step makes three calls per
    convolution, so a model whose GPU waits for the host pays for each layer. On one H100
    (results/h100/torch/overhead/), a tiny convolution's forward and backward took 1533 us
    through the ``library`` operators and 1143 us through this module in fp32 (1417 and 1059
    in bf16), PyTorch's own 490 us.

    So a converted module called in plain eager mode runs the operators' implementations
    (``ops.IMPLS``) under one ``torch.autograd.Function`` per operator: the same casts under
    autocast (Note [Autocast] in :mod:`.ops`), the same saved tensors and the same gradients,
    each planned and micro-batched through the core as the operators' are. A backward with
    ``create_graph`` calls the differentiable operators, so a double backward is theirs. A
    call that autograd does not record (``no_grad``, inference mode, no input that needs a
    gradient) runs the implementation alone, as the Function's forward would.

    Every other call goes through the operators, which is what the tools that look inside a
    model see: ``torch.compile``, ``torch.export`` and ``torch.jit.trace`` (one opaque
    operator in the graph), fake and meta tensors, tensor subclasses, functorch transforms,
    and torch function or dispatch modes. ``$UCUDNN_TORCH_EAGER=0`` sends eager calls through
    the operators too.

Note [Native calls]
    Python on the hot path still costs: a convolution's forward and backward through the
    Functions above took ~600 us of host time against PyTorch's ~200 us (H100, a tiny
    convolution), most of it in the backward that autograd's device thread runs in Python.
    Where the extension ``ucudnn.torch._native`` (``native.cpp``, built with the core where
    PyTorch is importable at build time) loads, an eager call goes to it instead: the same
    calls, layouts, checks and gradients in C++, as two C++ ``torch::autograd::Function`` classes. A
    call whose key it has seen runs the planned core kernel through the C API on PyTorch's
    cuDNN handle and current stream, with the workspace from PyTorch's caching allocator, and
    no Python. The first call of a key runs here (:func:`.runtime.native_call`: planned,
    benchmarked on a miss, refused inside a capture), and so does every call it does not take
    (another dtype, mixed tensors, a slot of a shared arena, a recorded backward).
    ``$UCUDNN_TORCH_NATIVE=0``, or a build without it, keeps the Functions above;
    :func:`native_status` says which and why.
"""
from __future__ import annotations

import os

import torch

from .ops import (IMPLS, Ops, active, autocast_cast, autocast_dtype, backward_functions,
                  setup_context)
from .runtime import native_call

__all__ = ["EAGER_ENV", "NATIVE_ENV", "eager_enabled", "eager_call", "native_status",
           "conv_fwd", "conv_transpose"]

EAGER_ENV = "UCUDNN_TORCH_EAGER"
NATIVE_ENV = "UCUDNN_TORCH_NATIVE"

_fwd, _bwd_data, _bwd_filter = (IMPLS[n][0] for n in ("conv_fwd", "conv_bwd_data",
                                                      "conv_bwd_filter"))
#: the tensor types an eager call takes: plain tensors and parameters, no subclass
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _on_gpu(t: torch.Tensor) -> bool:
    return t.is_cuda


def _env_on(name: str) -> bool:
    return os.environ.get(name, "1").strip() not in ("0", "false", "no", "off")


def eager_enabled() -> bool:
    """Whether eager calls may bypass the dispatcher (``$UCUDNN_TORCH_EAGER``, read per call
    so that a test or benchmark can compare both paths in one process)."""
    return _env_on(EAGER_ENV)


def _modes_active() -> bool:
    """A torch function or dispatch mode, or a functorch transform, is active (or this
    PyTorch cannot say)."""
    c = torch._C
    try:
        if c._is_torch_function_mode_enabled() or c._len_torch_dispatch_stack():
            return True
        return c._functorch.peek_interpreter_stack() is not None
    except AttributeError:
        return True


def eager_call(*tensors: torch.Tensor) -> bool:
    """Whether a call on ``tensors`` takes the eager path (Note [Eager calls])."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing() or not eager_enabled():
        return False                                            # a trace records the operators
    if _modes_active():
        return False
    for t in tensors:
        if type(t) not in _PLAIN or not _on_gpu(t):
            return False
    return True


def _autocast_on() -> bool:
    try:
        return torch.is_autocast_enabled("cuda")
    except TypeError:                   # a PyTorch before the device argument
        return torch.is_autocast_enabled()


def _cast(*tensors):
    """The tensors as the operators' AutocastCUDA kernel casts them (Note [Autocast])."""
    if not _autocast_on():
        return tensors
    dtype = autocast_dtype()
    return tuple(autocast_cast(t, dtype) for t in tensors)


def _records(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether autograd records a call on ``a`` and ``b``: without it (no_grad, inference, or
    no input that needs a gradient) the implementation runs alone, as the Function's forward
    would, without the Function's own cost."""
    return torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)


def _backward_ops() -> Ops:
    """The calls of a backward: the implementations, or the operators where the backward
    itself is recorded (``create_graph``)."""
    if torch.is_grad_enabled():
        return active()
    return Ops("implementations", _fwd, _bwd_data, _bwd_filter)


_BACKWARD = backward_functions(_backward_ops)


class _ConvFwd(torch.autograd.Function):
    """``conv_fwd`` with the gradients of ``ops``' autograd."""

    @staticmethod
    def forward(ctx, *args):                # x, w, stride, padding, dilation, groups, config
        setup_context(ctx, args, None)
        return _fwd(*args)

    backward = staticmethod(_BACKWARD["conv_fwd"])


class _ConvBwdData(torch.autograd.Function):
    """``conv_bwd_data`` (a transposed convolution's forward) with ``ops``' gradients."""

    @staticmethod
    def forward(ctx, *args):                # w, dy, x_size, stride, ..., config
        setup_context(ctx, args, None)
        return _bwd_data(*args)

    backward = staticmethod(_BACKWARD["conv_bwd_data"])


def recorded_backward(kind: str, a, b, grad, need_a: bool, need_b: bool, *geometry):
    """The gradients of the native ``kind`` ("conv_fwd" or "conv_bwd_data") call on ``a`` and
    ``b`` where autograd records the backward (``create_graph``): the operators'
    (Note [Native calls])."""
    ctx = _Saved((a, b), (need_a, need_b), list(geometry))
    return tuple(_BACKWARD[kind](ctx, grad)[:2])


class _Saved:
    """What :func:`ops.backward_functions` reads of a context."""
    __slots__ = ("saved_tensors", "needs_input_grad", "geometry")

    def __init__(self, saved_tensors, needs_input_grad, geometry):
        self.saved_tensors, self.needs_input_grad = saved_tensors, needs_input_grad
        self.geometry = geometry


_ext = None             # the loaded extension, set up; False where it does not load
_native_reason = ""


def _load_native():
    global _ext, _native_reason
    try:
        from . import _native as ext       # compiled, optional: its one door
    except ImportError as e:    # not built, or built against another PyTorch
        _ext, _native_reason = False, f"ucudnn.torch._native does not load: {e}"
        return False
    ext.init(native_call, _fwd, _bwd_data, _bwd_filter, recorded_backward)
    _ext, _native_reason = ext, "ucudnn.torch._native"
    return ext


def _native_module():
    """The native extension where eager calls use it now, else None (Note [Native calls])."""
    if not _env_on(NATIVE_ENV):
        return None
    ext = _ext if _ext is not None else _load_native()
    return ext or None


def native_status() -> tuple:
    """(whether eager calls run in C++ now, why or why not)."""
    if not _env_on(NATIVE_ENV):
        return False, f"${NATIVE_ENV} is off"
    return _native_module() is not None, _native_reason


def conv_fwd(x, w, stride, padding, dilation, groups: int, config: int) -> torch.Tensor:
    """A convolution's forward, as ``ops.active().fwd`` computes it (Note [Eager calls])."""
    if eager_call(x, w):
        x, w = _cast(x, w)
        native = _native_module()
        if native is not None:
            return native.conv_fwd(x, w, stride, padding, dilation, groups, config)
        if not _records(x, w):
            return _fwd(x, w, stride, padding, dilation, groups, config)
        return _ConvFwd.apply(x, w, stride, padding, dilation, groups, config)
    return active().fwd(x, w, stride, padding, dilation, groups, config)


def conv_transpose(w, x, x_size, stride, padding, dilation, groups: int,
                   config: int) -> torch.Tensor:
    """A transposed convolution's forward of ``x`` (``conv_bwd_data`` with ``x`` as the
    gradient), as ``ops.active().bwd_data`` computes it (Note [Eager calls])."""
    if eager_call(w, x):
        w, x = _cast(w, x)
        native = _native_module()
        if native is not None:
            return native.conv_transpose(w, x, x_size, stride, padding, dilation, groups, config)
        if not _records(w, x):
            return _bwd_data(w, x, x_size, stride, padding, dilation, groups, config)
        return _ConvBwdData.apply(w, x, x_size, stride, padding, dilation, groups, config)
    return active().bwd_data(w, x, x_size, stride, padding, dilation, groups, config)
