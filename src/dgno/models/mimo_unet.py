"""MIMO-UNet (Cho et al., "Rethinking Coarse-to-Fine Approach in Single Image Deblurring", ICCV 2021).

One U-Net replaces a stack of coarse-to-fine sub-networks:

* multi-input encoder: the blurred image enters at 1, 1/2 and 1/4 resolution; a shallow
  convolutional module (SCM) lifts each resized image and a feature attention module (FAM)
  merges it into the strided encoder path:  f ← f + Conv3×3(f ⊙ SCM(x↓));
* asymmetric feature fusion (AFF): every decoder skip sees the encoder features of *all*
  levels (resized to its own resolution), Conv1×1 → ReLU → Conv3×3 of their concatenation;
* multi-output decoder: a 3×3 conv head at 1/4, 1/2 and 1 produces a residual that is added
  to the resized input, so the network returns three restorations, coarse to fine — the same
  list interface as DGNO, and the multi-scale loss of the training loop applies unchanged.

Every encoder/decoder block (EB/DB) is ``num_res`` residual blocks (Conv3×3 → ReLU → Conv3×3,
+ skip): 8 for MIMO-UNet (6.8 M parameters with RGB input), 20 for MIMO-UNet+ (16.1 M).
Resized inputs and resized features use bilinear interpolation (the loss targets of this
project are bilinear too); the paper does not fix the interpolation.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgno.layers.blocks import pad_to_multiple


def _resize(x: Tensor, size: tuple[int, int]) -> Tensor:
    """Bilinear resize of (B, C, h, w) to ``size``; identity when the size already matches."""
    if tuple(x.shape[-2:]) == tuple(size):
        return x
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


def _conv(cin: int, cout: int, k: int, *, stride: int = 1, relu: bool = True) -> nn.Sequential:
    """Conv k×k (same padding, bias) optionally followed by ReLU: MIMO-UNet's basic layer."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


def _up(cin: int, cout: int) -> nn.Sequential:
    """Transposed 4×4 conv, stride 2, + ReLU: (B, cin, h, w) → (B, cout, 2h, 2w)."""
    return nn.Sequential(nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1), nn.ReLU(inplace=True))


class ResBlock(nn.Module):
    """x + Conv3×3(ReLU(Conv3×3(x))): the only building block of the encoder/decoder stages."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_conv(dim, dim, 3), _conv(dim, dim, 3, relu=False))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


class ShallowConv(nn.Module):
    """SCM: (B, in_channels, h, w) → (B, dim, h, w); light conv stack + the raw image, 1×1-mixed.

    Four convolutions (3×3, 1×1, 3×3, 1×1 with ReLUs) grow the image to dim − in_channels maps;
    the image itself is concatenated back so the encoder sees it unfiltered at every scale.
    """

    def __init__(self, *, in_channels: int, dim: int) -> None:
        super().__init__()
        if dim % 4 or dim <= in_channels:
            raise ValueError(f"ShallowConv needs dim divisible by 4 and larger than in_channels, got {dim}")
        q, h = dim // 4, dim // 2
        self.body = nn.Sequential(
            _conv(in_channels, q, 3), _conv(q, h, 1), _conv(h, h, 3), _conv(h, dim - in_channels, 1)
        )
        self.mix = _conv(dim, dim, 1, relu=False)

    def forward(self, image: Tensor) -> Tensor:
        return self.mix(torch.cat([self.body(image), image], dim=1))


class FeatureAttention(nn.Module):
    """FAM: f + Conv3×3(f ⊙ s) — the shallow features s gate which encoder features are refined."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.merge = _conv(dim, dim, 3, relu=False)

    def forward(self, feat: Tensor, shallow: Tensor) -> Tensor:
        return feat + self.merge(feat * shallow)


class AsymmetricFusion(nn.Module):
    """AFF: Conv3×3(ReLU(Conv1×1([e1, e2, e3]))) with all encoder outputs resized to one level."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_conv(cin, cout, 1), _conv(cout, cout, 3, relu=False))

    def forward(self, feats: list[Tensor], size: tuple[int, int]) -> Tensor:
        return self.body(torch.cat([_resize(f, size) for f in feats], dim=1))


class MIMOUNet(nn.Module):
    """forward(x) → [s_1/4, s_1/2, s_1]; x (B, in_channels, H, W), any H, W.

    Args (keyword-only): in_channels; base_channels (C: levels have C, 2C, 4C channels; paper 32);
    num_res (residual blocks per encoder/decoder block; 8 = MIMO-UNet, 20 = MIMO-UNet+).

    x is reflect-padded at the bottom/right to a multiple of 4 (two stride-2 levels); the outputs
    are cropped to (⌈H/4⌉, ⌈W/4⌉), (⌈H/2⌉, ⌈W/2⌉) and (H, W), as DGNO's are.
    """

    def __init__(self, *, in_channels: int = 1, base_channels: int = 32, num_res: int = 8) -> None:
        super().__init__()
        if num_res < 1:
            raise ValueError(f"num_res must be >= 1, got {num_res}")
        self.hparams: dict[str, Any] = {"in_channels": in_channels, "base_channels": base_channels, "num_res": num_res}
        c1, c2, c3 = base_channels, 2 * base_channels, 4 * base_channels

        def stage(dim: int) -> nn.Sequential:
            return nn.Sequential(*(ResBlock(dim) for _ in range(num_res)))

        # encoder
        self.stem = _conv(in_channels, c1, 3)
        self.enc1 = stage(c1)
        self.down2 = _conv(c1, c2, 3, stride=2)
        self.scm2 = ShallowConv(in_channels=in_channels, dim=c2)
        self.fam2 = FeatureAttention(c2)
        self.enc2 = stage(c2)
        self.down4 = _conv(c2, c3, 3, stride=2)
        self.scm4 = ShallowConv(in_channels=in_channels, dim=c3)
        self.fam4 = FeatureAttention(c3)
        self.enc4 = stage(c3)
        # asymmetric feature fusion for the two decoder skips
        self.aff1 = AsymmetricFusion(c1 + c2 + c3, c1)
        self.aff2 = AsymmetricFusion(c1 + c2 + c3, c2)
        # decoder, coarse to fine
        self.dec4 = stage(c3)
        self.head4 = _conv(c3, in_channels, 3, relu=False)
        self.up2 = _up(c3, c2)
        self.reduce2 = _conv(2 * c2, c2, 1)
        self.dec2 = stage(c2)
        self.head2 = _conv(c2, in_channels, 3, relu=False)
        self.up1 = _up(c2, c1)
        self.reduce1 = _conv(2 * c1, c1, 1)
        self.dec1 = stage(c1)
        self.head1 = _conv(c1, in_channels, 3, relu=False)

    def forward(self, x: Tensor) -> list[Tensor]:
        h, w = x.shape[-2:]
        x1 = pad_to_multiple(x, 4)  # (B, Cin, Hp, Wp)
        hp, wp = x1.shape[-2:]
        size2, size4 = (hp // 2, wp // 2), (hp // 4, wp // 4)
        x2, x4 = _resize(x1, size2), _resize(x1, size4)

        e1 = self.enc1(self.stem(x1))  # (B, C, Hp, Wp)
        e2 = self.enc2(self.fam2(self.down2(e1), self.scm2(x2)))  # (B, 2C, Hp/2, Wp/2)
        e4 = self.enc4(self.fam4(self.down4(e2), self.scm4(x4)))  # (B, 4C, Hp/4, Wp/4)
        skip1 = self.aff1([e1, e2, e4], (hp, wp))
        skip2 = self.aff2([e1, e2, e4], size2)

        d4 = self.dec4(e4)
        out4 = self.head4(d4) + x4
        d2 = self.dec2(self.reduce2(torch.cat([self.up2(d4), skip2], dim=1)))
        out2 = self.head2(d2) + x2
        d1 = self.dec1(self.reduce1(torch.cat([self.up1(d2), skip1], dim=1)))
        out1 = self.head1(d1) + x1
        return [out4[..., : -(-h // 4), : -(-w // 4)], out2[..., : -(-h // 2), : -(-w // 2)], out1[..., :h, :w]]
