"""The convolution modules that run through the core: :class:`Conv2d`, :class:`Conv3d`,
:class:`ConvTranspose2d` and :class:`ConvTranspose3d`, subclasses of PyTorch's with the same
parameters and buffers (a state_dict loads unchanged either way), whose forward calls the
operators of :mod:`.ops`, in plain eager mode through :mod:`.eager` (Note [Eager calls]).

A subclass of ``Conv2d`` or ``Conv3d`` with its own forward keeps its class and forward, and
its convolution runs through the core: :class:`CoreConvForward` (Note [Subclasses with their
own forward]).

``from_torch(module, settings)`` makes one from PyTorch's module, sharing its parameters; the
module keeps its :class:`~ucudnn.plan.settings.PlanSettings` (and for ``ilp`` and ``shared`` its
model's :class:`~.netwide.ModelPlan`) and the number that names them in this process
(:func:`.runtime.config_id`, given again to a module unpickled elsewhere).
Tensors that are not on a CUDA device (CPU, say) run PyTorch's own forward, once logged per
module; meta and fake tensors go through the operators' fake implementations.
"""
from __future__ import annotations

import logging
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..plan.settings import PlanSettings
from .geometry import same_padding, transposed_out_size
from .netwide import ModelPlan
from .eager import conv_fwd, conv_transpose
from .runtime import config_id

__all__ = ["Conv2d", "Conv3d", "ConvTranspose2d", "ConvTranspose3d", "UCUDNN_MODULES",
           "CoreConvForward"]

log = logging.getLogger("ucudnn")


class _Runs:
    """What the four modules share: the settings and their id, the padding, the device
    check."""
    ucudnn_settings: PlanSettings
    ucudnn_model: Optional[ModelPlan] = None
    ucudnn_config: int

    def _init_ucudnn(self, settings: PlanSettings, model: Optional[ModelPlan] = None) -> None:
        self.ucudnn_settings = settings
        self.ucudnn_model = model
        self.ucudnn_config = config_id(settings, model)
        self._pad = _padding(self)
        self._logged_fallback = False

    def _on_core(self, x: torch.Tensor) -> bool:
        return _on_core(x, self, type(self).__name__)

    def _bias(self, y: torch.Tensor) -> torch.Tensor:
        return _add_bias(y, self.bias)

    def __setstate__(self, state):
        super().__setstate__(state)
        self.ucudnn_config = config_id(self.ucudnn_settings, self.ucudnn_model)

    @classmethod
    def from_torch(cls, module, settings: PlanSettings, model: Optional[ModelPlan] = None):
        """A module of this class with ``module``'s settings and its very parameters;
        ``model``: the plan of the converted model for ``ilp`` and ``shared``."""
        kw = dict(stride=module.stride, padding=module.padding, dilation=module.dilation,
                  groups=module.groups, bias=module.bias is not None,
                  padding_mode=module.padding_mode, device="meta",
                  dtype=module.weight.dtype)
        if module.transposed:
            kw["output_padding"] = module.output_padding
        new = cls(module.in_channels, module.out_channels, module.kernel_size, **kw)
        new.weight = module.weight
        new.bias = module.bias
        new.train(module.training)
        new._init_ucudnn(settings, model)
        return new


def _padding(module) -> list:
    """The padding the core is given: ``padding='same'`` resolved, else the module's."""
    return list(same_padding(module)) if isinstance(module.padding, str) else list(module.padding)


def _on_core(x: torch.Tensor, owner, name: str) -> bool:
    """Whether ``x`` is where the core runs; where not, log once per ``owner`` (its
    ``_logged_fallback``) that PyTorch's convolution runs."""
    if x.device.type in ("cuda", "meta"):
        return True
    if not owner._logged_fallback:
        owner._logged_fallback = True
        log.warning("ucudnn.torch: %s on %s tensors runs PyTorch's convolution (the core runs "
                    "on CUDA devices)", name, x.device)
    return False


def _add_bias(y: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    if bias is None:
        return y
    # under autocast y has the autocast dtype, and the bias is cast to it as PyTorch's
    # convolution casts it (Note [Autocast] in ucudnn/torch/ops.py)
    return y + bias.to(y.dtype).view((1, -1) + (1,) * (y.dim() - 2))


class _Conv(_Runs):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._on_core(x):
            return super().forward(x)
        y = conv_fwd(x, self.weight, list(self.stride), self._pad, list(self.dilation),
                     self.groups, self.ucudnn_config)
        return self._bias(y)


class _ConvTranspose(_Runs):
    def forward(self, x: torch.Tensor, output_size=None) -> torch.Tensor:
        if not self._on_core(x):
            return super().forward(x, output_size)
        dims = len(self.kernel_size)
        output_padding = self._output_padding(x, output_size, list(self.stride), self._pad,
                                              list(self.kernel_size), dims,
                                              list(self.dilation))
        x_size = transposed_out_size(x.shape, self.weight.shape, self.stride, self._pad,
                                     output_padding, self.dilation, self.groups)
        y = conv_transpose(self.weight, x, list(x_size), list(self.stride), self._pad,
                           list(self.dilation), self.groups, self.ucudnn_config)
        return self._bias(y)


class Conv2d(_Conv, nn.Conv2d):
    """``torch.nn.Conv2d`` through the core."""


class Conv3d(_Conv, nn.Conv3d):
    """``torch.nn.Conv3d`` through the core."""


class ConvTranspose2d(_ConvTranspose, nn.ConvTranspose2d):
    """``torch.nn.ConvTranspose2d`` through the core."""


class ConvTranspose3d(_ConvTranspose, nn.ConvTranspose3d):
    """``torch.nn.ConvTranspose3d`` through the core."""


# Note [Subclasses with their own forward]
#     Video models subclass Conv3d to pad causally in time and then call PyTorch's forward:
#     Wan's CausalConv3d, the study's decoder (scripts/study3d_models.py); CogVideoX's
#     SafeConv3d splits its input in time and calls it per piece. Swapping such a module for
#     ours would drop its forward; keeping it PyTorch's leaves every convolution of those
#     models outside ucudnn (the study's decoder ran entirely in PyTorch so). PyTorch's
#     forward of Conv2d and Conv3d is ``self._conv_forward(input, self.weight, self.bias)``,
#     so ``convert`` gives such a module an instance attribute ``_conv_forward``, a
#     :class:`CoreConvForward`: its own forward runs unchanged and each convolution it asks
#     of PyTorch's goes through the core, on whatever input and weight it passes. A subclass
#     that overrides ``_conv_forward`` itself, and every transposed subclass (whose forward
#     calls the functional convolution directly), stays PyTorch's. The plans are per call
#     (optimizer ``dp``): under ``ilp`` and ``shared`` such a module stays PyTorch's, as its
#     calls would run outside the model's plan. ``ucudnn.torch.plan()`` and the whole-model
#     planners see its calls at ``_conv_forward``, with the input its forward gives
#     (``netwide.model_calls``).


class CoreConvForward:
    """A Conv2d or Conv3d subclass's ``_conv_forward(input, weight, bias)`` through the core
    (Note [Subclasses with their own forward]), with the module's stride, padding, dilation
    and groups; tensors off CUDA run PyTorch's functional convolution."""

    def __init__(self, module, settings: PlanSettings):
        self.name = type(module).__name__
        self.settings = settings
        self.config = config_id(settings, None)
        self.stride, self.dilation = list(module.stride), list(module.dilation)
        self.padding = _padding(module)
        self.groups = module.groups
        self._logged_fallback = False

    def __call__(self, x: torch.Tensor, weight: torch.Tensor,
                 bias: Optional[torch.Tensor]) -> torch.Tensor:
        if not _on_core(x, self, self.name):
            conv = F.conv3d if x.dim() == 5 else F.conv2d
            return conv(x, weight, bias, self.stride, self.padding, self.dilation, self.groups)
        y = conv_fwd(x, weight, self.stride, self.padding, self.dilation, self.groups,
                     self.config)
        return _add_bias(y, bias)

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.config = config_id(self.settings, None)     # this process's number for them


#: PyTorch's module class -> ours
UCUDNN_MODULES = {nn.Conv2d: Conv2d, nn.Conv3d: Conv3d, nn.ConvTranspose2d: ConvTranspose2d,
                  nn.ConvTranspose3d: ConvTranspose3d}
