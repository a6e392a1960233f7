"""The operators ``ucudnn::conv_fwd``, ``ucudnn::conv_bwd_data`` and ``ucudnn::conv_bwd_filter``:
their CUDA implementation (the core, through :mod:`.runtime`; on CPU tensors the same checks
refuse the call with one error), their fake implementation (shapes only, for
``torch.compile``, ``FakeTensorMode`` and meta tensors), their autograd and their autocast
(Note [Autocast]).

Schemas, in the convolution's own terms (Note [PyTorch convolutions in the core] in
:mod:`.geometry`; ``config`` names the module's settings, :func:`.runtime.config_id`)::

    conv_fwd(Tensor x, Tensor w, int[] stride, int[] padding, int[] dilation, int groups,
             int config) -> Tensor                                           # y
    conv_bwd_data(Tensor w, Tensor dy, SymInt[] x_size, ...same...) -> Tensor   # dx
    conv_bwd_filter(Tensor x, Tensor dy, SymInt[] w_size, ...same...) -> Tensor # dw

The gradients of ``conv_fwd`` are ``conv_bwd_data`` and ``conv_bwd_filter``, each planned
through the core (micro-batched as its own kernel). ``conv_bwd_data`` is differentiable too
(a transposed convolution's forward): its gradients are ``conv_bwd_filter`` and ``conv_fwd``.
``conv_bwd_filter`` has no gradient (no double backward).

Note [Two registration styles]
    The operators can be registered in two ways with the same schema, implementations, fake
    implementations and autograd: ``torch.library.custom_op`` (style ``custom_op``), or a
    ``torch.library.Library`` fragment with ``define``/``impl`` (style ``library``).
    ``scripts/bench_torch.py overhead`` measures what each costs per call: on an H200 a
    forward call through ``library`` took 0.87x of one through ``custom_op`` (111.5 against
    127.9 us; results/h200/torch/), so ``library`` is the default. The style the
    modules call is :data:`DEFAULT_STYLE`, or ``$UCUDNN_TORCH_OPS``, read once on import; its
    operators have the plain names above. :func:`registered` registers another style beside
    it for comparison, its names ending in ``_<style>`` (``ucudnn::conv_fwd_library``).

Note [Autocast]
    Under ``torch.autocast("cuda", dtype=...)`` PyTorch's convolutions cast their floating
    inputs to the autocast dtype (float64 excepted) and run in it. The operators do the same:
    each has a kernel for the ``AutocastCUDA`` dispatch key (both styles, through a
    ``torch.library.Library`` fragment) that casts its CUDA floating tensors other than float64
    to ``torch.get_autocast_dtype("cuda")`` and calls the operator again below autocast. The
    casts are ordinary differentiable ``to()`` calls, so gradients reach float32 parameters in
    float32, as with PyTorch's convolution. ``torch.library.register_autocast`` is not used:
    it casts to one dtype fixed at registration, where PyTorch's convolutions take the dtype of
    the enclosing ``autocast``.
"""
import os
from dataclasses import dataclass
from typing import Callable, Dict

import torch

from ..vocab import InputError
from .geometry import conv_out_size, layout_of, memory_format
from .runtime import run

__all__ = ["STYLES", "DEFAULT_STYLE", "STYLE_ENV", "Ops", "registered", "active"]

STYLES = ("custom_op", "library")
#: the style the modules call unless ``$UCUDNN_TORCH_OPS`` names another
DEFAULT_STYLE = "library"
STYLE_ENV = "UCUDNN_TORCH_OPS"
NAMESPACE = "ucudnn"
#: the devices the operators have kernels for: CUDA runs the core; CPU refuses with the
#: reason (one clear error, not the dispatcher's missing-kernel message)
DEVICE_TYPES = ("cuda", "cpu")

_GEOMETRY = "int[] stride, int[] padding, int[] dilation, int groups, int config"
SCHEMAS = {
    "conv_fwd": f"(Tensor x, Tensor w, {_GEOMETRY}) -> Tensor",
    "conv_bwd_data": f"(Tensor w, Tensor dy, SymInt[] x_size, {_GEOMETRY}) -> Tensor",
    "conv_bwd_filter": f"(Tensor x, Tensor dy, SymInt[] w_size, {_GEOMETRY}) -> Tensor",
}


@dataclass(frozen=True)
class Ops:
    """One style's three operators (``torch._ops.OpOverload``)."""
    style: str
    fwd: Callable
    bwd_data: Callable
    bwd_filter: Callable


# ---------------------------------------------------------------------------------------------
# implementations
# ---------------------------------------------------------------------------------------------

def _check(what: str, a: torch.Tensor, b: torch.Tensor, fake: bool = False) -> None:
    """One dtype, one device, and (``fake`` aside) a CUDA device."""
    if a.dtype != b.dtype:
        raise InputError(f"ucudnn.torch {what}: tensors of {a.dtype} and {b.dtype}; a "
                         "convolution takes one dtype (cast the input or the module)")
    if a.device != b.device or (a.device.type != "cuda" and not fake):
        raise InputError(f"ucudnn.torch {what}: tensors on {a.device} and {b.device}; the core "
                         "runs on one CUDA device")


def _empty(size, like: torch.Tensor, layout: str) -> torch.Tensor:
    return torch.empty(tuple(size), dtype=like.dtype, device=like.device,
                       memory_format=memory_format(layout, len(size)))


def _fwd(x, w, stride, padding, dilation, groups, config):
    _check("conv_fwd", x, w)
    layout = layout_of(x, groups)
    fmt = memory_format(layout, x.dim())
    x, w = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
    y = _empty(conv_out_size(x.shape, w.shape, stride, padding, dilation), x, layout)
    if y.numel() == 0:
        return y
    return run("fwd", x, w, y, tuple(x.shape), tuple(w.shape), stride, padding, dilation,
               groups, layout, config)


def _bwd_data(w, dy, x_size, stride, padding, dilation, groups, config):
    _check("conv_bwd_data", w, dy)
    layout = layout_of(dy, groups)
    fmt = memory_format(layout, dy.dim())
    w, dy = w.contiguous(memory_format=fmt), dy.contiguous(memory_format=fmt)
    x_size, w_size = tuple(int(v) for v in x_size), tuple(w.shape)
    if conv_out_size(x_size, w_size, stride, padding, dilation) != tuple(dy.shape):
        raise InputError(f"ucudnn.torch conv_bwd_data: input size {x_size} convolved by "
                         f"{w_size} is not the gradient's {tuple(dy.shape)}")
    dx = _empty(x_size, dy, layout)
    if dx.numel() == 0:
        return dx
    return run("bwd_data", w, dy, dx, x_size, w_size, stride, padding, dilation, groups,
               layout, config)


def _bwd_filter(x, dy, w_size, stride, padding, dilation, groups, config):
    _check("conv_bwd_filter", x, dy)
    layout = layout_of(x, groups)
    fmt = memory_format(layout, x.dim())
    x, dy = x.contiguous(memory_format=fmt), dy.contiguous(memory_format=fmt)
    w_size = tuple(int(v) for v in w_size)
    dw = _empty(w_size, dy, layout)
    if x.numel() == 0 or dy.numel() == 0:
        return dw.zero_()
    return run("bwd_filter", x, dy, dw, tuple(x.shape), w_size, stride, padding, dilation,
               groups, layout, config)


# fake implementations: the same sizes and memory formats, nothing run

def _fwd_fake(x, w, stride, padding, dilation, groups, config):
    _check("conv_fwd", x, w, fake=True)
    return _empty(conv_out_size(x.shape, w.shape, stride, padding, dilation), x,
                  layout_of(x, groups))


def _bwd_data_fake(w, dy, x_size, stride, padding, dilation, groups, config):
    _check("conv_bwd_data", w, dy, fake=True)
    return _empty(x_size, dy, layout_of(dy, groups))


def _bwd_filter_fake(x, dy, w_size, stride, padding, dilation, groups, config):
    _check("conv_bwd_filter", x, dy, fake=True)
    return _empty(w_size, dy, layout_of(x, groups))


IMPLS = {"conv_fwd": (_fwd, _fwd_fake), "conv_bwd_data": (_bwd_data, _bwd_data_fake),
         "conv_bwd_filter": (_bwd_filter, _bwd_filter_fake)}


# ---------------------------------------------------------------------------------------------
# autograd
# ---------------------------------------------------------------------------------------------

def setup_context(ctx, inputs, output):
    """What a backward needs of a call: its two tensors and its geometry."""
    a, b, *rest = inputs
    ctx.save_for_backward(a, b)
    ctx.geometry = rest[-5:]            # stride, padding, dilation, groups, config


def backward_functions(ops_of: Callable[[], Ops]) -> Dict[str, Callable]:
    """The backward functions of ``conv_fwd`` and ``conv_bwd_data``, calling the three calls
    of ``ops_of()`` (the operators of the same style, known once registered; the eager path's
    choice, Note [Eager calls] in :mod:`.eager`)."""
    def fwd_backward(ctx, gy):
        x, w = ctx.saved_tensors
        ops, need = ops_of(), ctx.needs_input_grad
        dx = ops.bwd_data(w, gy, list(x.shape), *ctx.geometry) if need[0] else None
        dw = ops.bwd_filter(x, gy, list(w.shape), *ctx.geometry) if need[1] else None
        return (dx, dw) + (None,) * 5

    def bwd_data_backward(ctx, gx):
        w, dy = ctx.saved_tensors
        ops, need = ops_of(), ctx.needs_input_grad
        dw = ops.bwd_filter(gx, dy, list(w.shape), *ctx.geometry) if need[0] else None
        ddy = ops.fwd(gx, w, *ctx.geometry) if need[1] else None
        return (dw, ddy) + (None,) * 6

    return {"conv_fwd": fwd_backward, "conv_bwd_data": bwd_data_backward}


# ---------------------------------------------------------------------------------------------
# registration (Note [Two registration styles])
# ---------------------------------------------------------------------------------------------

_registered: Dict[str, Ops] = {}
_libraries = []                 # a Library's registrations last as long as the object


def chosen_style() -> str:
    style = os.environ.get(STYLE_ENV, "").strip() or DEFAULT_STYLE
    if style not in STYLES:
        raise InputError(f"{STYLE_ENV}: unknown registration style {style!r} (expected one of "
                         f"{', '.join(STYLES)})")
    return style


_CHOSEN = chosen_style()


def autocast_dtype() -> torch.dtype:
    """The dtype CUDA autocast runs convolutions in now."""
    get = getattr(torch, "get_autocast_dtype", None)
    return get("cuda") if get is not None else torch.get_autocast_gpu_dtype()


def autocast_cast(value, dtype: torch.dtype):
    """``value`` as autocast casts a convolution's operand to ``dtype`` (Note [Autocast])."""
    if (isinstance(value, torch.Tensor) and value.is_floating_point()
            and value.device.type == "cuda" and value.dtype != torch.float64):
        return value.to(dtype)
    return value


def _register_autocast(qualname: str) -> None:
    """The operator's ``AutocastCUDA`` kernel (Note [Autocast])."""
    ns, short = qualname.split("::", 1)
    op = getattr(getattr(torch.ops, ns), short).default
    below = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)

    def autocast(*args):
        dtype = autocast_dtype()
        with torch._C._ExcludeDispatchKeyGuard(below):
            return op(*(autocast_cast(a, dtype) for a in args))

    lib = torch.library.Library(ns, "FRAGMENT")
    lib.impl(short, autocast, "AutocastCUDA")
    _libraries.append(lib)


def _register_custom_op(qualname: str, name: str, backward) -> None:
    impl, fake = IMPLS[name]
    op = torch.library.custom_op(qualname, impl, mutates_args=(), device_types=DEVICE_TYPES,
                                 schema=SCHEMAS[name])
    op.register_fake(fake)
    if backward is not None:
        op.register_autograd(backward, setup_context=setup_context)
    _libraries.append(op)


def _register_library(qualname: str, name: str, backward) -> None:
    impl, fake = IMPLS[name]
    lib = torch.library.Library(NAMESPACE, "FRAGMENT")
    short = qualname.split("::", 1)[1]
    lib.define(short + SCHEMAS[name])
    for device_type in DEVICE_TYPES:
        lib.impl(short, impl, device_type.upper())
    torch.library.register_fake(qualname, fake, lib=lib)
    if backward is not None:
        torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=lib)
    _libraries.append(lib)


def registered(style: str) -> Ops:
    """The operators of ``style``, registered on first use: plain names for the chosen style,
    ``<name>_<style>`` for another (Note [Two registration styles])."""
    if style in _registered:
        return _registered[style]
    if style not in STYLES:
        raise InputError(f"style: unknown registration style {style!r} (expected one of "
                         f"{', '.join(STYLES)})")
    suffix = "" if style == _CHOSEN else f"_{style}"
    backwards = backward_functions(lambda: _registered[style])
    register = _register_custom_op if style == "custom_op" else _register_library
    for name in SCHEMAS:
        register(f"{NAMESPACE}::{name}{suffix}", name, backwards.get(name))
        _register_autocast(f"{NAMESPACE}::{name}{suffix}")
    ns = getattr(torch.ops, NAMESPACE)
    _registered[style] = Ops(style, *(getattr(ns, f"{n}{suffix}").default for n in SCHEMAS))
    return _registered[style]


def active() -> Ops:
    """The operators the modules call."""
    return registered(_CHOSEN)
