"""``ucudnn.torch.convert(model, ...)``: swap a model's convolution modules for the core's
(:mod:`.modules`), in place, and say which stay PyTorch's and why (:class:`ConvertReport`).

What is swapped: ``nn.Conv2d``, ``nn.ConvTranspose2d``, ``nn.Conv3d`` and ``nn.ConvTranspose3d``
(the spatial axes the core takes, :data:`.geometry.SPATIAL_DIMS`), with any stride, padding,
dilation and groups, in float32, float16, bfloat16 or float64; a subclass of ``Conv2d`` or
``Conv3d`` with its own forward is converted in place (Note [Subclasses with their own forward]
in :mod:`.modules`). What stays PyTorch's, each with its reason: 1-D convolutions,
``padding_mode`` other than ``'zeros'``, ``padding='same'`` where PyTorch pads one side more,
other dtypes (complex, integer), lazy modules not yet initialised, and subclasses of the
transposed modules or with their own ``_conv_forward`` (under ``ilp`` and ``shared``, every
subclass). The module's device is not checked
here: a model may move later, and a converted module called with tensors off CUDA runs PyTorch's
convolution (:mod:`.modules`). Each module kept is logged with its reason (logger ``ucudnn``,
INFO).

``optimizer``: ``dp`` (the default) plans each call alone when its shape first runs; ``ilp``
and ``shared`` plan the model's kernels together, from one forward of ``example_inputs``
(Note [Whole-model plans] in :mod:`.netwide`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from torch import nn

from ..plan.settings import DEFAULTS, PlanSettings
from ..vocab import InputError
from .eager import native_status
from .geometry import DTYPE_NAMES, same_padding, unsupported
from .modules import UCUDNN_MODULES, CoreConvForward
from .netwide import ModelPlan, model_calls
from .runtime import config_id

log = logging.getLogger("ucudnn")

__all__ = ["convert", "ConvertReport", "settings_from"]

#: PyTorch's convolution modules that are not swapped whatever their settings
_OTHER_CONVS = (nn.Conv1d, nn.ConvTranspose1d)


@dataclass
class ConvertReport:
    """What :func:`convert` did: ``converted`` [(module name, PyTorch class name)], ``kept``
    [(module name, class name, reason)], the settings the converted modules plan with, and
    the model (itself, or the swapped module where the model was one convolution)."""
    settings: PlanSettings
    converted: List[Tuple[str, str]] = field(default_factory=list)
    kept: List[Tuple[str, str, str]] = field(default_factory=list)
    model: Optional[nn.Module] = field(default=None, repr=False)
    #: the model's kernels planned together (``ilp``, ``shared``; None for ``dp``)
    plan: Optional[ModelPlan] = field(default=None, repr=False)

    def __str__(self) -> str:
        s = self.settings
        lines = [f"ucudnn.torch: {len(self.converted)} convolution module(s) converted "
                 f"(optimizer {s.optimizer}, policy {s.policy}, limit {s.limit} B per call, "
                 f"engines {s.engines}), {len(self.kept)} kept as PyTorch's"]
        lines += [f"  {name or '(model)'}  {kind}  stays PyTorch's: {why}"
                  for name, kind, why in self.kept]
        native, why = native_status()
        lines.append("  eager calls: in C++ (Note [Native calls] in ucudnn/torch/eager.py)"
                     if native else f"  eager calls: in Python ({why})")
        return "\n".join(lines)


def settings_from(limit=None, policy=None, optimizer=None, engines=None, math=None,
                  sizes=None, cache=None, budget=None, deterministic=None) -> PlanSettings:
    """:class:`PlanSettings` with the given fields over the defaults (Note [Default
    settings] in :mod:`ucudnn.plan.settings`), each checked with the field named."""
    given = {"limit": limit, "policy": policy, "optimizer": optimizer, "engines": engines,
             "math": math, "sizes": tuple(sizes) if sizes is not None else None,
             "cache_path": str(cache) if cache is not None else None, "budget": budget,
             "deterministic": deterministic}
    return DEFAULTS.replace(**{k: v for k, v in given.items() if v is not None})


def why_kept(module: nn.Module, netwide: bool = False) -> Optional[str]:
    """Why ``module``, a convolution module, stays PyTorch's (None: it is converted);
    ``netwide``: converted for a plan of the model's kernels together (``ilp``, ``shared``)."""
    if isinstance(module, tuple(UCUDNN_MODULES.values())):
        return "already converted"
    if isinstance(module, _OTHER_CONVS):
        return unsupported(1)
    base = next((t for t in UCUDNN_MODULES if isinstance(module, t)), None)
    if base is None:
        return "not a convolution module"
    if type(module) is not base:
        if isinstance(module, nn.modules.lazy.LazyModuleMixin):
            return "a lazy module not yet initialised (run it once first)"
        # Note [Subclasses with their own forward] in ucudnn/torch/modules.py
        if module.transposed:
            return f"a subclass of {base.__name__} with its own forward"
        if type(module)._conv_forward is not base._conv_forward:
            return f"a subclass of {base.__name__} with its own _conv_forward"
        if netwide:
            return (f"a subclass of {base.__name__} with its own forward: converted for "
                    "plans per call (optimizer dp) only")
        if isinstance(module.__dict__.get("_conv_forward"), CoreConvForward):
            return "already converted"
    why = unsupported(len(module.kernel_size))
    if why is not None:
        return why
    if module.padding_mode != "zeros":
        return f"padding_mode={module.padding_mode!r}: the core pads with zeros only"
    if isinstance(module.padding, str):
        try:
            same_padding(module)
        except ValueError as e:
            return str(e)
    if module.weight.dtype not in DTYPE_NAMES:
        return f"dtype {module.weight.dtype}: the core takes {', '.join(map(str, DTYPE_NAMES))}"
    return None


def convert(model: nn.Module, *, limit=None, policy=None, optimizer=None, engines=None,
            math=None, sizes=None, cache=None, budget=None, example_inputs=None,
            name: Optional[str] = None, deterministic=None) -> ConvertReport:
    """Swap ``model``'s convolution modules for the core's, in place (``model`` itself too,
    where it is one), sharing their parameters, so that a state_dict loads unchanged either
    way. Settings as ``ucudnn plan`` takes them: ``limit`` (bytes or text such as
    ``"64MiB"``) per cuDNN call, ``policy``, ``optimizer``, ``engines``, ``math``, ``sizes``
    (micro-batch sizes), ``cache`` (the benchmark cache; default ``$UCUDNN_CACHE`` or the
    user's), ``budget`` (bytes for ``ilp`` and ``shared``; default ``limit`` per call),
    ``deterministic`` (plan only deterministic choices always; without it, calls follow
    PyTorch's deterministic flags when they run: Note [Deterministic calls] in
    :mod:`.runtime`).
    ``optimizer`` ``dp`` plans each call alone when its shape first runs; ``ilp`` and
    ``shared`` plan the model's kernels together from one forward of ``example_inputs`` (a
    tensor or a tuple of the forward's arguments, as the model will be called; Note
    [Whole-model plans] in :mod:`.netwide`). Returns the report; the model is
    ``report.model``."""
    settings = settings_from(limit, policy, optimizer, engines, math, sizes, cache, budget,
                             deterministic)
    plan = None
    if settings.netwide:
        if example_inputs is None:
            raise InputError(f"optimizer: {settings.optimizer} plans the model's kernels "
                             "together; convert() needs example_inputs (the forward's "
                             "arguments) to find them")
        plan = ModelPlan(settings, name or type(model).__name__)
    config_id(settings, plan)           # refuses what the modules cannot plan, before any swap
    report = ConvertReport(settings, plan=plan)
    convs = tuple(UCUDNN_MODULES) + _OTHER_CONVS

    def swap(name: str, module: nn.Module) -> nn.Module:
        kind = type(module).__name__
        why = why_kept(module, plan is not None)
        if why is None:
            report.converted.append((name, kind))
            if type(module) not in UCUDNN_MODULES:     # a subclass: converted in place
                module._conv_forward = CoreConvForward(module, settings)
                return module
            return UCUDNN_MODULES[type(module)].from_torch(module, settings, plan)
        if why != "already converted":
            report.kept.append((name, kind, why))
            log.info("ucudnn.torch: %s (%s) stays PyTorch's: %s", name or "(model)", kind, why)
        return module

    def walk(prefix: str, parent: nn.Module) -> None:
        for child_name, child in list(parent.named_children()):
            name = f"{prefix}{child_name}"
            if isinstance(child, convs):
                new = swap(name, child)
                if new is not child:
                    setattr(parent, child_name, new)
            else:
                walk(name + ".", child)

    if isinstance(model, convs):
        model = swap("", model)
    else:
        walk("", model)
    report.model = model
    if plan is not None:
        inputs = (example_inputs if isinstance(example_inputs, (tuple, list))
                  else (example_inputs,))
        calls = [c for c in model_calls(model, inputs, device="cuda")
                 if getattr(c[1], "ucudnn_model", None) is plan]
        plan.add_calls(calls)
    return report
