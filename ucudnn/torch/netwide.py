"""A converted model's kernels planned together: the ILP and the shared arena (``convert(model,
optimizer="ilp" | "shared", example_inputs=...)``), through the one network planner.

Note [Whole-model plans]
    ``dp`` plans each call alone, when its shape first runs (Note [Plans per input shape] in
    :mod:`.runtime`). ``ilp`` and ``shared`` divide one budget among the model's kernels, so
    they need every kernel before any runs: :func:`model_calls` runs the converted model once on
    fake CUDA tensors with the example inputs, through the operators' fake implementations
    (under the caller's autocast, if any), and :class:`ModelPlan` keeps one layer per
    convolution call, each with the key its operator calls will have. On the first call of a
    device the whole model is benchmarked and planned there by
    :func:`ucudnn.measure.live.plan_net` (:func:`ucudnn.plan.network.plan_network`: the ILP of
    :mod:`ucudnn.plan.ilp`, or the shared arena's division per pass), with the core kernels that
    ``ucudnn.torch`` runs: a grouped convolution is one grouped cuDNN call, so its layer is
    planned as one call per pass (``groups`` 1 in the planner's record, the grouped kernel's own
    benchmark).

    Workspace: ``ilp`` kernels take their planned workspace from PyTorch's caching allocator
    per call, as ``dp`` ones do. ``shared`` kernels use slices of one arena of the plan's
    ``arena_bytes``, a tensor from PyTorch's caching allocator taken once per model and device
    and kept as long as the process, as its kernels are (Note [Plans per input shape] in
    :mod:`.runtime`): each kernel at its slot's offset (the slots of a layer's
    passes overlap, and the calls of one model run one after another on PyTorch's stream).

    A call whose key is not among the planned ones (another input shape or dtype) is planned
    alone with ``dp`` within the settings' ``limit``, as a ``dp`` model's would be, and logged
    once per key. A device first seen inside a CUDA-graph capture raises
    :class:`~.runtime.CaptureError` (Note [No benchmark inside a capture] in :mod:`.runtime`).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from ..measure import bench
from ..measure.live import plan_net
from ..plan.layers import LayerSpec
from ..plan.network import NetworkPlan, Slot
from ..plan.settings import PlanSettings
from ..vocab import InputError
from .geometry import DTYPE_NAMES, conv_shape, layer_spec, layout_of, same_padding

__all__ = ["CONVS", "model_calls", "own_forward", "ModelPlan", "call_key"]

log = logging.getLogger("ucudnn")

CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
         nn.ConvTranspose3d)


def own_forward(module: nn.Module) -> bool:
    """Whether ``module`` is a subclass of ``Conv2d`` or ``Conv3d`` with its own forward
    over PyTorch's ``_conv_forward`` (Note [Subclasses with their own forward] in
    :mod:`.modules`): its convolutions are seen at ``_conv_forward``, not at its forward.
    ucudnn's own modules (which carry ``ucudnn_config``) are not such subclasses."""
    base = next((t for t in (nn.Conv2d, nn.Conv3d) if isinstance(module, t)), None)
    return (base is not None and not hasattr(module, "ucudnn_config")
            and type(module).forward is not base.forward
            and type(module)._conv_forward is base._conv_forward)


def model_calls(model: nn.Module, inputs: Sequence, device: Optional[str] = None) -> list:
    """[(name, module, x, y)] of every convolution call of one forward on fake tensors (the
    model's parameters and buffers replaced by fakes for the call: it is left as it was);
    ``device``: the fakes are on that device (default: the tensors' own). A module with its
    own forward (:func:`own_forward`) is seen at its ``_conv_forward``, with the input its
    forward gives the convolution."""
    calls, hooks, wrapped = [], [], []

    def seen_at_conv_forward(name, m):
        inner = m.__dict__.get("_conv_forward", m._conv_forward)

        def record(x, w, b):
            y = inner(x, w, b)
            calls.append((name or "(model)", m, x, y))
            return y
        wrapped.append((m, m.__dict__.get("_conv_forward")))
        m._conv_forward = record

    for name, m in model.named_modules():
        if own_forward(m):
            seen_at_conv_forward(name, m)
        elif isinstance(m, CONVS):
            hooks.append(m.register_forward_hook(
                lambda mod, args, out, name=name: calls.append((name or "(model)", mod,
                                                                args[0], out))))
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            def fake(t):
                f = mode.from_tensor(t)
                return f if device is None else f.to(device)
            state = {n: fake(t) for n, t in
                     list(model.named_parameters()) + list(model.named_buffers())}
            args = [fake(t) if isinstance(t, torch.Tensor) else t for t in inputs]
            torch.func.functional_call(model, state, tuple(args))
    finally:
        for h in hooks:
            h.remove()
        for m, before in wrapped:
            if before is None:
                del m._conv_forward
            else:
                m._conv_forward = before
    return calls


def call_key(op: str, x_size, w_size, stride, padding, dilation, groups: int, layout: str,
             dtype: torch.dtype) -> tuple:
    """What identifies an operator call in a model's plan: the runtime's key less device and
    settings."""
    return (op, tuple(int(v) for v in x_size), tuple(int(v) for v in w_size),
            tuple(int(v) for v in stride), tuple(int(v) for v in padding),
            tuple(int(v) for v in dilation), int(groups), layout, dtype)


@dataclass(frozen=True)
class TorchLayer:
    """One convolution call of the example forward: the planner's layer (one call per pass)
    and the core's geometry of the convolution it runs."""
    spec: LayerSpec
    x_size: Tuple[int, ...]
    w_size: Tuple[int, ...]
    stride: Tuple[int, ...]
    padding: Tuple[int, ...]
    dilation: Tuple[int, ...]
    groups: int
    layout: str
    dtype: torch.dtype

    def key(self, op: str) -> tuple:
        return call_key(op, self.x_size, self.w_size, self.stride, self.padding,
                        self.dilation, self.groups, self.layout, self.dtype)


def torch_layer(name: str, module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> TorchLayer:
    """The layer of one call of a 2-D or 3-D convolution module (a transposed one's is the
    convolution from its output to its input, Note [PyTorch convolutions in the core]), in
    the output's dtype (the operator's: under autocast, the autocast dtype)."""
    spec = layer_spec(name, module, x, y)
    src = y if module.transposed else x
    pad = same_padding(module) if isinstance(module.padding, str) else tuple(module.padding)
    return TorchLayer(dataclasses.replace(spec, groups=1), tuple(src.shape),
                      tuple(module.weight.shape), tuple(module.stride), tuple(pad),
                      tuple(module.dilation), int(module.groups),
                      layout_of(src, module.groups), y.dtype)


@dataclass
class _Live:
    """A model's plan on one device: the kernels by (layer, op), the plan, the arena."""
    plan: NetworkPlan
    kernels: Dict[Tuple[str, str], object]
    arena: Optional[torch.Tensor]


@dataclass(eq=False)
class ModelPlan:
    """The kernels of one converted model planned together (Note [Whole-model plans]):
    ``settings`` (``ilp`` or ``shared``), ``layers`` from the example forward, ``name`` for
    logs and records. Planned per device on first use (:meth:`kernel`)."""
    settings: PlanSettings
    name: str = "model"
    layers: List[TorchLayer] = field(default_factory=list)
    _live: Dict[int, _Live] = field(default_factory=dict, repr=False)
    _unplanned: set = field(default_factory=set, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self):
        if not self.settings.netwide:
            raise InputError(f"optimizer: {self.settings.optimizer} plans each kernel alone; "
                             "a model's plan takes ilp or shared")

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(_live={}, _unplanned=set(), _lock=None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def add_calls(self, calls) -> None:
        """One layer per call of ``calls`` (:func:`model_calls`) of a converted module; a
        module called twice gives two layers, the second named ``name#2``."""
        seen: Dict[str, int] = {}
        for name, module, x, y in calls:
            seen[name] = seen.get(name, 0) + 1
            layer_name = name if seen[name] == 1 else f"{name}#{seen[name]}"
            self.layers.append(torch_layer(layer_name, module, x, y))

    def keys(self) -> Dict[tuple, Tuple[str, str]]:
        """Call key -> (layer, op) of the first layer with that key (calls of one key share
        its kernel)."""
        out: Dict[tuple, Tuple[str, str]] = {}
        for l in self.layers:
            for op in l.spec.ops:
                out.setdefault(l.key(op), (l.spec.name, op))
        return out

    def planned(self, device: torch.device) -> Optional[_Live]:
        """The plan on ``device`` (None: not planned there yet)."""
        return self._live.get(device.index)

    def plan_on(self, device: torch.device) -> _Live:
        """Benchmark and plan the model's kernels on ``device`` (the current one within
        ``torch.cuda.device``), and take the arena of a shared plan."""
        with self._lock:
            live = self._live.get(device.index)
            if live is not None:
                return live
            Kernel = bench.core().Kernel
            kernels, settings = {}, {}
            for l in self.layers:
                dtype = DTYPE_NAMES[l.dtype]
                settings[l.spec.name] = self.settings.replace(dtype=dtype)
                shape = conv_shape(l.x_size, l.w_size, l.stride, l.padding, l.dilation,
                                   l.groups, l.layout)
                for op in l.spec.ops:
                    kernels[l.spec.name, op] = Kernel(shape, op, l.spec.n, dtype,
                                                      self.settings.math, l.spec.name, 1)
            net = plan_net([l.spec for l in self.layers], settings, name=self.name,
                           kernels=kernels)
            arena = None
            if self.settings.optimizer == "shared" and net.arena_bytes:
                arena = torch.empty(net.arena_bytes, dtype=torch.uint8, device=device)
            live = self._live[device.index] = _Live(net.plan, net.kernels, arena)
            return live

    def kernel(self, key: tuple, device: torch.device):
        """(kernel, workspace slot of a shared plan or None) for the call ``key``
        (:func:`call_key`), planning the model on ``device`` first; None where the key is not
        among the planned calls (logged once)."""
        where = self.keys().get(key)
        if where is None:
            if key not in self._unplanned:
                self._unplanned.add(key)
                log.warning("ucudnn.torch: model %s: %s of input %s, weight %s, %s was not in "
                            "the example forward; planned alone with dp within %d B",
                            self.name, key[0], key[1], key[2], key[-1], self.settings.limit)
            return None
        live = self._live.get(device.index) or self.plan_on(device)
        kern = live.kernels[where]
        slot = None
        if live.arena is not None:
            slot = next(k.slot for k in live.plan.kernels if (k.layer, k.op) == where)
        return kern, slot

    def workspace(self, device: torch.device, slot: Slot, need: int) -> torch.Tensor:
        """The slice of the arena on ``device`` at ``slot`` for a call that needs ``need``
        bytes."""
        arena = self._live[device.index].arena
        if not slot.arena or slot.offset + need > arena.numel():
            raise InputError(f"ucudnn.torch: model {self.name}: a kernel needs {need} B at "
                             f"offset {slot.offset} of an arena of {arena.numel()} B")
        return arena[slot.offset:slot.offset + need]
