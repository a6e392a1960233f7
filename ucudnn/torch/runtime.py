"""Running a convolution through the compiled core from PyTorch: the settings a converted
module plans with (:func:`config_id`), one planned core kernel per input shape
(:func:`kernel_for`), and the call itself on PyTorch's stream with a workspace from PyTorch's
allocator (:func:`run`).

Note [Plans per input shape]
    A core kernel is planned for one exact call: operation, input and weight sizes, stride,
    padding, dilation, groups, layout, dtype, device and the module's settings (their twin
    under PyTorch's deterministic and TF32 flags: Note [Deterministic calls], Note [TF32
    calls]). The first call of a new shape benchmarks it through the benchmark cache that
    ``ucudnn plan`` and Caffe use (:func:`ucudnn.measure.live.prepare_kernel`, the DP within the settings'
    ``limit``), so a second process, or a second layer of the same shape, plans from the
    cache without measuring. Layers of one shape share one kernel. Kernels live as long as
    the process, and so does the cache they plan from: each cache file is opened (and
    validated) once per process, on the first kernel that needs it, and closed at exit (Note
    [One open cache per net] in :mod:`ucudnn.measure.for_plan`: an open cache holds no lock
    between its statements), so a model of a hundred kernels planned from the cache opens it
    once, not a hundred times.

Note [Calls on PyTorch's stream]
    Each call runs on ``torch.cuda.current_stream()``: the thread's cuDNN handle of the core
    (one :class:`Handle` per thread and device, owned here) is pointed at that stream whenever
    it changes, and the plan's workspace is a ``torch.uint8`` tensor from PyTorch's caching
    allocator on that stream, freed back to it after the call (the allocator keeps it for the
    stream's later work, and inside a CUDA-graph capture takes it from the graph's pool). The
    core needs nothing else: ``Kernel.run`` takes a handle, device addresses and the workspace.

Note [No benchmark inside a capture]
    Benchmarking synchronises and allocates outside PyTorch's allocator, which a CUDA-graph
    capture forbids. A shape first seen while the current stream captures raises
    :class:`CaptureError`, naming the shape: run the model once with it before capturing (the
    warm-up that capture needs anyway).

Note [Settings of a model planned together]
    A config names :class:`PlanSettings`, and for ``ilp`` and ``shared`` also the
    :class:`~.netwide.ModelPlan` of one converted model (one config per model): a call of such
    a config takes its kernel, and for ``shared`` its slice of the model's arena, from the
    model's plan (Note [Whole-model plans] in :mod:`.netwide`); a call the plan does not know
    is planned alone with ``dp``. The registry holds the plan weakly: the converted modules
    hold it, so a model's plan, and the arena it holds, go when the model goes. A config of a
    freed model names no plan, and a call with it is refused.
"""
from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..measure import bench
from ..measure.cache import default_cache_path
from ..measure.for_plan import open_caches
from ..measure.live import prepare_kernel
from ..plan.settings import PlanSettings
from ..vocab import InputError, UcudnnError
from .geometry import DTYPE_NAMES, conv_shape
from .netwide import ModelPlan, call_key

__all__ = ["CaptureError", "DTYPE_NAMES", "config_id", "settings_of", "model_plan_of",
           "kernel_for", "run", "native_call", "planned_kernels", "torch_deterministic",
           "torch_tf32", "call_config"]


class CaptureError(UcudnnError, RuntimeError):
    """A shape first seen inside a CUDA-graph capture (Note [No benchmark inside a
    capture])."""


# ---------------------------------------------------------------------------------------------
# settings: an integer the operators carry
# ---------------------------------------------------------------------------------------------

#: config -> (settings, a weak reference to the model plan, or None for dp)
_configs: List[Tuple[PlanSettings, Optional[weakref.ref]]] = []
_config_lock = threading.Lock()


def config_id(settings: PlanSettings, model: Optional[ModelPlan] = None) -> int:
    """The integer that names ``settings`` in the operators' calls (equal settings, one id;
    with ``ilp`` or ``shared``, one id per ``model``: Note [Settings of a model planned
    together]): an operator's arguments are tensors and numbers, and a graph that
    ``torch.compile`` traced keeps the number."""
    if settings.netwide and model is None:
        raise InputError(f"optimizer: {settings.optimizer} plans a model's kernels together; "
                         "convert(model, optimizer=..., example_inputs=...) plans them")
    if not settings.netwide:
        model = None
    with _config_lock:
        for i, (s, ref) in enumerate(_configs):
            if s == settings and (ref is None if model is None
                                  else ref is not None and ref() is model):
                return i
        _configs.append((settings, None if model is None else weakref.ref(model)))
        return len(_configs) - 1


def _config(config: int) -> Tuple[PlanSettings, Optional[ModelPlan]]:
    if not 0 <= config < len(_configs):
        raise InputError(f"config: {config} names no ucudnn.torch settings of this process "
                         f"({len(_configs)} registered)")
    settings, ref = _configs[config]
    if ref is None:
        return settings, None
    model = ref()
    if model is None:
        raise InputError(f"config: {config} names the {settings.optimizer} plan of a converted "
                         "model that no longer exists")
    return settings, model


# Note [Deterministic calls]
#     PyTorch asks for bitwise reproducible convolutions with ``torch.backends.cudnn.
#     deterministic = True`` or ``torch.use_deterministic_algorithms(True)``, and its own
#     convolutions read them when each call runs. So does every call of the operators here
#     (:func:`run`, forward and both gradients): while either is on, a call of a config whose
#     settings are not ``deterministic`` runs under its deterministic twin
#     (:func:`call_config`), the same settings with ``deterministic`` set (Note
#     [Deterministic plans] in ucudnn/plan/dp.py). The config is part of the kernel's key
#     (Note [Plans per input shape]), so a kernel planned without the flag is never run while
#     it is on, nor one planned with it after it is turned off; both stay planned. A model
#     planned together (``ilp``, ``shared``) without the flag has no deterministic plan: its
#     calls are then planned alone with ``dp`` within ``limit`` (Note [Settings of a model
#     planned together]); converting it with ``deterministic=True`` plans the model together
#     from deterministic choices, whatever PyTorch's flags. The config a traced or compiled
#     graph holds is the module's: the twin is chosen when the call runs, as PyTorch's are.

# Note [TF32 calls]
#     PyTorch's fp32 cuDNN convolutions may run TF32 tensor-core math while
#     ``torch.backends.cudnn.conv.fp32_precision`` is "tf32" (the default; ``allow_tf32`` in
#     the older API), and run IEEE fp32 otherwise; the core's math "default" is cuDNN's default math, which lets fp32 run TF32, and
#     its "fma" never does (legacy algorithms with CUDNN_FMA_MATH, no TENSOR_CORE engine of
#     the graph family). So an fp32 call while the flag is off runs under its config's fma
#     twin, as Note [Deterministic calls] runs a deterministic twin, and with both flags the
#     twin has both. TF32 can move a result by percents where a sum cancels, so a model
#     compared with PyTorch's in fp32 is compared with both flags alike. fp16 and bf16 calls
#     do not change. A model planned together has no fma plan unless converted with
#     ``math="fma"``; its fp32 calls are otherwise planned alone with ``dp`` while the flag
#     is off.

#: (config, deterministic, fma) -> the config its calls run under while PyTorch asks for
#: determinism, IEEE fp32, or both
_twins: Dict[Tuple[int, bool, bool], int] = {}


def torch_deterministic() -> bool:
    """Whether PyTorch asks for deterministic convolutions now (Note [Deterministic
    calls])."""
    return bool(torch.backends.cudnn.deterministic) or \
        torch.are_deterministic_algorithms_enabled()


def torch_tf32() -> bool:
    """Whether PyTorch lets fp32 cuDNN convolutions run TF32 now (Note [TF32 calls]):
    ``torch.backends.cudnn.conv.fp32_precision`` is "tf32" (its getter resolves "none" from
    the settings above it; reading the older ``allow_tf32`` raises once the two APIs are
    mixed), or, in a PyTorch before that setting, ``allow_tf32``."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    precision = getattr(conv, "fp32_precision", None)
    if precision is not None:
        return precision == "tf32"
    return bool(torch.backends.cudnn.allow_tf32)


def call_config(config: int, dtype: torch.dtype = torch.float32) -> int:
    """The config a call of ``config`` in ``dtype`` runs under now (Note [Deterministic
    calls], Note [TF32 calls])."""
    det = torch_deterministic()
    fma = dtype == torch.float32 and not torch_tf32()
    if not det and not fma:
        return config
    settings, model = _config(config)       # refuses a config of a model that is gone
    twin = _twins.get((config, det, fma))
    if twin is None:
        changes = {}
        if det and not settings.deterministic:
            changes["deterministic"] = True
        if fma and settings.math != "fma":
            changes["math"] = "fma"
        if not changes:
            twin = config
        elif model is not None:
            twin = config_id(settings.replace(optimizer="dp", budget=None, **changes))
        else:
            twin = config_id(settings.replace(**changes))
        _twins[(config, det, fma)] = twin
    return twin


def settings_of(config: int) -> PlanSettings:
    return _config(config)[0]


def model_plan_of(config: int) -> Optional[ModelPlan]:
    """The model plan of an ``ilp`` or ``shared`` config (None for ``dp``)."""
    return _config(config)[1]


# ---------------------------------------------------------------------------------------------
# kernels per input shape (Note [Plans per input shape])
# ---------------------------------------------------------------------------------------------

_kernels: Dict[tuple, object] = {}
#: call key -> (weak reference to the model plan, workspace slot) of a kernel of a shared plan
_slots: Dict[tuple, tuple] = {}
_kernel_lock = threading.Lock()


def planned_kernels() -> Dict[tuple, object]:
    """The kernels planned in this process, by call key (a copy)."""
    return dict(_kernels)


def _capture_check(what: str) -> None:
    if torch.cuda.is_current_stream_capturing():
        raise CaptureError(f"ucudnn.torch: {what}: a shape first seen inside a CUDA-graph "
                           "capture cannot be benchmarked; run the model with this shape once "
                           "before capturing")


def _name(op: str, x_size, w_size, stride, padding, dilation, groups, layout) -> str:
    def t(v):
        return "x".join(str(int(i)) for i in v)
    g = f" g{groups}" if groups > 1 else ""
    return (f"torch {op} x{t(x_size)} w{t(w_size)} s{t(stride)} p{t(padding)} d{t(dilation)}"
            f"{g} {layout}")


def kernel_for(key: tuple, op: str, x_size: Sequence[int], w_size: Sequence[int],
               stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
               groups: int, layout: str, dtype: torch.dtype, device: torch.device,
               config: int):
    """The planned core kernel of ``key`` (Note [Plans per input shape]); on a miss, benchmark
    and plan it, unless the stream captures (Note [No benchmark inside a capture])."""
    kern = _kernels.get(key)
    if kern is not None:
        return kern
    name = _name(op, x_size, w_size, stride, padding, dilation, groups, layout)
    what = f"{name} {DTYPE_NAMES.get(dtype, dtype)}"
    settings, model = _config(config)
    if model is not None:
        if model.planned(device) is None:
            _capture_check(what)
        with torch.cuda.device(device):
            got = model.kernel(call_key(op, x_size, w_size, stride, padding, dilation, groups,
                                        layout, dtype), device)
        if got is not None:
            with _kernel_lock:
                if got[1] is not None:
                    _slots[key] = (weakref.ref(model), got[1])
                _kernels[key] = got[0]
            return got[0]
        settings = settings.replace(optimizer="dp", budget=None)
    _capture_check(what)
    try:
        shape = conv_shape(x_size, w_size, stride, padding, dilation, groups, layout)
    except ValueError as e:
        raise InputError(f"ucudnn.torch: {name}: {e}") from None
    settings = settings.replace(dtype=DTYPE_NAMES[dtype])
    with _kernel_lock, torch.cuda.device(device):
        kern = _kernels.get(key)
        if kern is None:
            kern = bench.core().Kernel(shape, op, int(x_size[0]), settings.dtype,
                                       settings.math, name, 1)
            prepare_kernel(kern, settings, cache=_cache(settings.cache_path))
            _kernels[key] = kern
    return kern


#: [cache_of] from the first kernel planned on (Note [Plans per input shape])
_caches: List = []


def _cache(path):
    """The process's open cache at ``path`` (None: the default, as ``$UCUDNN_CACHE`` names it
    now); called under _kernel_lock."""
    if not _caches:
        stack = contextlib.ExitStack()
        _caches.append(stack.enter_context(open_caches()))
        atexit.register(stack.close)
    return _caches[0](str(path or default_cache_path()))


# ---------------------------------------------------------------------------------------------
# the call (Note [Calls on PyTorch's stream])
# ---------------------------------------------------------------------------------------------

_local = threading.local()


#: the current stream's address on a device index, without making a torch.cuda.Stream
#: (PyTorch's generated code reads it so); current_stream() where this PyTorch lacks it
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream_of(device: torch.device) -> int:
    if _raw_stream is not None:
        index = device.index
        return _raw_stream(torch.cuda.current_device() if index is None else index)
    return torch.cuda.current_stream(device).cuda_stream


def _handle(device: torch.device):
    handles = getattr(_local, "handles", None)
    if handles is None:
        handles = _local.handles = {}
    stream = _stream_of(device)
    h = handles.get(device.index)
    if h is None:
        with torch.cuda.device(device):
            h = handles[device.index] = bench.core().Handle(stream)
    elif h.stream != stream:
        h.set_stream(stream)
    return h


def workspace(key: tuple, need: int, device: torch.device) -> Optional[torch.Tensor]:
    """The workspace of the call ``key``: its slice of the model's arena for a shared plan,
    else a tensor from PyTorch's caching allocator for this call (Note [Calls on PyTorch's
    stream]); None where the plan needs none."""
    if not need:
        return None
    shared = _slots.get(key)
    if shared is not None:
        model = shared[0]()
        if model is None:
            raise InputError(f"ucudnn.torch: a call of {key[0]} {key[1]} of a converted model "
                             "that no longer exists")
        return model.workspace(device, shared[1], need)
    return torch.empty(need, dtype=torch.uint8, device=device)


def _call_key(op, x_size, w_size, stride, padding, dilation, groups, layout, out, config):
    """The key of a call (Note [Plans per input shape]), ``config`` already its twin."""
    return (op, tuple(x_size), tuple(w_size), tuple(stride), tuple(padding), tuple(dilation),
            groups, layout, out.dtype, out.device.index, config)


def run(op: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, x_size: Tuple[int, ...],
        w_size: Tuple[int, ...], stride, padding, dilation, groups: int, layout: str,
        config: int) -> torch.Tensor:
    """Run ``op`` of the core on CUDA tensors laid out as ``layout`` (fwd: a=x, b=w, out=y;
    bwd_data: a=w, b=dy, out=dx; bwd_filter: a=x, b=dy, out=dw) and return ``out``; under
    PyTorch's deterministic flags or without TF32 with the config's twin (Note [Deterministic
    calls], Note [TF32 calls])."""
    _run(op, a, b, out, x_size, w_size, stride, padding, dilation, groups, layout, config)
    return out


def _run(op, a, b, out, x_size, w_size, stride, padding, dilation, groups, layout,
         config) -> tuple:
    """:func:`run`; the call's key."""
    config = call_config(config, out.dtype)
    device = out.device
    key = _call_key(op, x_size, w_size, stride, padding, dilation, groups, layout, out, config)
    kern = kernel_for(key, op, x_size, w_size, stride, padding, dilation, groups, layout,
                      out.dtype, device, config)
    need = kern.workspace_size
    ws = workspace(key, need, device)
    # cuDNN runs on the current device: the tensors' (a dispatcher's Python kernel gets no
    # device guard)
    with (torch.cuda.device(device) if device.index != torch.cuda.current_device()
          else contextlib.nullcontext()):
        kern.run(_handle(device), a.data_ptr(), b.data_ptr(), out.data_ptr(),
                 ws.data_ptr() if ws is not None else 0, need)
    return key


def native_call(op: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, x_size, w_size,
                stride, padding, dilation, groups: int, layout: str, config: int) -> int:
    """A call of the native eager path whose key it has not seen (Note [Native calls] in
    :mod:`.eager`): run it as :func:`run` does, planning on a miss, and return the address of
    its kernel (the C API's ``ucudnn_kernel*``) for the native path to run the key's later
    calls itself; 0 where every call must come here (a slot of a model's shared arena)."""
    x_size, w_size = tuple(int(v) for v in x_size), tuple(int(v) for v in w_size)
    key = _run(op, a, b, out, x_size, w_size, stride, padding, dilation, groups, layout, config)
    kern = _kernels.get(key)
    if kern is None or key in _slots:
        return 0
    return int(kern.address)
