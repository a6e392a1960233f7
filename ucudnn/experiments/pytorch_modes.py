"""The PyTorch modes a comparison times, and which of them is the baseline (Note [PyTorch's
modes]). Pure: scripts/time_pytorch.py builds a mode from its :class:`Mode`, and
:mod:`.baseline` chooses among the timed ones.

Note [PyTorch's modes]
    The baseline is every mode a user would pick to train these nets in fp32, with
    ``cudnn.benchmark`` on in each (TF32 convolutions and strict fp32 GEMMs, PyTorch's
    defaults, as Caffe's):

    ``eager``                  the model as built, NCHW, the layout of Caffe's blobs;
    ``channels_last``          model and input in ``torch.channels_last`` (NHWC);
    ``compile``                ``torch.compile(model)``, default mode. Not NCHW: Inductor's
                               layout optimisation (on by default) runs the convolutions
                               channels-last, and it fuses BatchNorm, ReLU and the residual
                               adds into Triton kernels;
    ``compile_channels_last``  the same on a channels-last model and input;
    ``max_autotune``           ``mode="max-autotune"``: Triton convolution and GEMM templates
                               tried beside cuDNN and cuBLAS, and CUDA graphs;
    ``reduce_overhead``        ``mode="reduce-overhead"``: CUDA graphs, no launch gaps.

    The fp32 baseline (``pytorch_mode``, ``pytorch_ms``, ``vs_pytorch_best``) is the fastest
    of these that ran (:func:`fastest`). Mixed precision is a class of its own, never the
    fp32 baseline: ``bf16_<compile mode>`` is bf16 autocast on a channels-last model and
    input under that compile mode, and the one timed is the bf16 of the fastest fp32 compile
    mode (:func:`bf16_of`), with a ratio of its own.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, Optional


@dataclasses.dataclass(frozen=True)
class Mode:
    """``channels_last``: model and input in channels-last memory format; ``compile``:
    torch.compile's mode ("default", "max-autotune", "reduce-overhead"), None for eager;
    ``dtype``: "fp32", or "bf16" for bf16 autocast."""
    name: str
    channels_last: bool
    compile: Optional[str] = None
    dtype: str = "fp32"

    @property
    def cuda_graphs(self) -> bool:
        """The compiled step replays CUDA graphs (Inductor's ``triton.cudagraphs``)."""
        return self.compile in ("max-autotune", "reduce-overhead")


FP32 = (Mode("eager", False), Mode("channels_last", True), Mode("compile", False, "default"),
        Mode("compile_channels_last", True, "default"),
        Mode("max_autotune", False, "max-autotune"),
        Mode("reduce_overhead", False, "reduce-overhead"))
BF16 = (Mode("bf16_compile", True, "default", "bf16"),
        Mode("bf16_max_autotune", True, "max-autotune", "bf16"),
        Mode("bf16_reduce_overhead", True, "reduce-overhead", "bf16"))
MODES: Dict[str, Mode] = {m.name: m for m in FP32 + BF16}
FP32_MODES = tuple(m.name for m in FP32)
BF16_MODES = tuple(m.name for m in BF16)


def fastest(medians: Dict[str, Optional[float]], among: Iterable[str] = FP32_MODES
            ) -> Optional[str]:
    """The mode of ``among`` with the least median in ``medians`` (mode -> ms, None where it
    failed); None where none ran. Ties go to the earlier of ``among``."""
    ran = [m for m in among if medians.get(m) is not None]
    return min(ran, key=lambda m: medians[m]) if ran else None


def bf16_of(medians: Dict[str, Optional[float]]) -> Optional[str]:
    """The bf16 mode to time: bf16 under the compile mode of the fastest fp32 compiled mode in
    ``medians``; None where no compiled mode ran."""
    best = fastest(medians, [m.name for m in FP32 if m.compile])
    if best is None:
        return None
    return next(b.name for b in BF16 if b.compile == MODES[best].compile)
