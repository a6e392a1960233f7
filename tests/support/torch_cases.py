"""What the GPU tests of ucudnn.torch share: a small 2-D model of every convolution kind
``convert()`` swaps, one training step on a fixed loss, the relative error they compare
with, and its tolerance per dtype.
Imported by test modules that have skipped already where torch is missing."""
import contextlib

import pytest
import torch
from torch import nn

# max error relative to the reference's largest magnitude; fp32 is compared in IEEE fp32 on
# both sides (no_tf32): TF32 moves a gradient whose sum cancels by percents, PyTorch's own
# included (Note [TF32 calls] in ucudnn/torch/runtime.py)
TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 8e-2}


def model2d():
    """Conv2d plain, strided + dilated + grouped, 1x1 without bias; ConvTranspose2d strided
    with output padding, and grouped."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, dilation=2, padding=2, groups=4), nn.ReLU(),
        nn.Conv2d(16, 8, 1, bias=False),
        nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
        nn.ConvTranspose2d(6, 4, 2, stride=1, groups=2))


def train_step(model, x):
    """Output, input gradient and parameter gradients of one step on a fixed loss."""
    model.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    y = model(x)
    (y.float() * torch.linspace(-1, 1, y.numel(), device=y.device).view_as(y)).sum().backward()
    return [y.detach(), x.grad] + [p.grad for p in model.parameters()]


def rel_err(a, b):
    """Max absolute difference relative to ``b``'s largest magnitude."""
    return (a.float() - b.float()).abs().max().item() / max(1e-6, b.float().abs().max().item())


def plans_text() -> str:
    """Every kernel ucudnn.torch planned in this process and its plan, a line each: what a
    failed comparison prints so that the choice behind it can be tried alone."""
    from ucudnn.torch import runtime
    lines = []
    for key, kern in runtime.planned_kernels().items():
        op, xs, ws, stride, pad, dil, groups, layout, dtype = key[:9]
        chunks = ", ".join(f"{c.batch} x {c.engine or f'algo {c.algo} math {c.math}'} "
                           f"ws {c.ws_bytes}" for c in kern.plan.chunks)
        lines.append(f"  {op} x{tuple(xs)} w{tuple(ws)} stride {tuple(stride)} pad "
                     f"{tuple(pad)} dil {tuple(dil)} g{groups} {layout} {dtype} config "
                     f"{key[-1]}: {chunks}")
    return "\n".join(lines)


@contextlib.contextmanager
def conv_tf32(allowed: bool):
    """fp32 cuDNN convolutions with TF32 ``allowed`` or not, set as the user of this PyTorch
    would (Note [TF32 calls] in ucudnn/torch/runtime.py)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if getattr(conv, "fp32_precision", None) is None:   # a PyTorch before that setting
        owner, name, value = torch.backends.cudnn, "allow_tf32", allowed
    else:
        owner, name, value = conv, "fp32_precision", "tf32" if allowed else "ieee"
    before = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, before)


@pytest.fixture(autouse=True)
def ieee_fp32():
    """:func:`no_tf32` around every test of a module that imports this fixture."""
    with no_tf32():
        yield


def no_tf32():
    return conv_tf32(False)
