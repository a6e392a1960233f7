"""The whole models of ``scripts/bench_torch.py models`` and ``startup``, in torch.nn, built from
the specs of :data:`ucudnn.experiments.torch_study.MODELS` (their sources: Note [3-D layers of
the study] in that module).

* :class:`UNet3d`: nnU-Net's PlainConvUNet (``nnunet``: its 3d_fullres network; ``unet``: the
  same small): per stage two 3x3x3 convolutions (the
  first of stride 2 from the second stage on), each followed by InstanceNorm3d and LeakyReLU;
  the decoder a 2x2x2 transposed convolution, the skip connection concatenated, two
  convolutions; a 1x1x1 segmentation head. Its step is a training step (forward, loss,
  backward).
* :class:`CausalDecoder`: a CogVideoX-like causal video decoder: a 3x3x3 causal convolution
  from the latent to the first level's channels, per level ``blocks`` SiLU + causal
  convolution pairs with a residual, between levels nearest upsampling (time too while the
  frames are fewer than the output's) and a causal convolution, and one to RGB. A causal
  convolution pads time at the front with the first frame repeated (as CogVideoX's
  ``CogVideoXCausalConv3d``), the spatial axes by one on each side. Its step is a decode
  (forward, no gradients).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv3d(cin, cout, 3, stride=stride, padding=1),
                         nn.InstanceNorm3d(cout, affine=True), nn.LeakyReLU(0.01, inplace=True))


class UNet3d(nn.Module):
    def __init__(self, channels, cin: int = 1, classes: int = 4):
        super().__init__()
        self.down = nn.ModuleList()
        prev = cin
        for i, ch in enumerate(channels):
            self.down.append(nn.Sequential(_block(prev, ch, 1 if i == 0 else 2),
                                           _block(ch, ch, 1)))
            prev = ch
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        for ch, skip in zip(channels[:0:-1], channels[-2::-1]):
            self.up.append(nn.ConvTranspose3d(ch, skip, 2, stride=2))
            self.merge.append(nn.Sequential(_block(2 * skip, skip, 1), _block(skip, skip, 1)))
        self.head = nn.Conv3d(channels[0], classes, 1)

    def forward(self, x):
        skips = []
        for stage in self.down:
            x = stage(x)
            skips.append(x)
        for up, merge, skip in zip(self.up, self.merge, skips[-2::-1]):
            x = merge(torch.cat([up(x), skip], dim=1))
        return self.head(x)


class CausalConv3d(nn.Conv3d):
    """A 3x3x3 convolution padded causally in time (two copies of the first frame)."""

    def __init__(self, cin: int, cout: int):
        super().__init__(cin, cout, 3, padding=(0, 1, 1))

    def forward(self, x):
        x = torch.cat([x[:, :, :1]] * 2 + [x], dim=2)
        return super().forward(x)


class CausalDecoder(nn.Module):
    def __init__(self, channels, latent: int = 16, blocks: int = 2, frames: int = 8):
        super().__init__()
        self.frames = frames
        self.conv_in = CausalConv3d(latent, channels[0])
        self.levels = nn.ModuleList()
        self.ups = nn.ModuleList()
        prev = channels[0]
        for i, ch in enumerate(channels):
            if i:
                self.ups.append(CausalConv3d(prev, ch))
            self.levels.append(nn.ModuleList(CausalConv3d(ch, ch) for _ in range(blocks)))
            prev = ch
        self.conv_out = CausalConv3d(prev, 3)

    def forward(self, z):
        x = self.conv_in(z)
        for i, level in enumerate(self.levels):
            if i:
                t = 2 if x.shape[2] * 2 <= self.frames else 1
                x = self.ups[i - 1](F.interpolate(x, scale_factor=(t, 2, 2), mode="nearest"))
            for conv in level:
                x = x + conv(F.silu(x))
        return self.conv_out(F.silu(x))


def latent_frames(frames: int, levels: int) -> int:
    """The latent's frames: the output's halved once per level up to two (CogVideoX's 4x)."""
    return max(1, frames // 2 ** min(2, levels - 1))


def build(spec: dict):
    """(model, input, step) of a model ``spec`` (its ``kind`` "unet" or "vae"): ``step`` is
    "train" or "decode"."""
    if spec["kind"] == "unet":
        model = UNet3d(spec["channels"], spec["in"], spec["classes"])
        p = spec["patch"]
        return model, torch.randn(spec["batch"], spec["in"], p, p, p), "train"
    chans = spec["channels"]
    scale = 2 ** (len(chans) - 1)
    h, w = spec["size"]
    model = CausalDecoder(chans, spec["latent"], spec["blocks"], spec["frames"])
    z = torch.randn(spec["batch"], spec["latent"], latent_frames(spec["frames"], len(chans)),
                    h // scale, w // scale)
    return model, z, "decode"
