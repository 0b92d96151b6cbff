"""GKMNet (Quan, Wu & Ji, "Gaussian Kernel Mixture Network for Single Image Defocus Deblurring", NeurIPS 2021).

Defocus blur model: the PSF at pixel r is a pixel-wise mixture of isotropic Gaussians,

    k_r ≈ Σ_m β_m(r) G_{σ_m},

so the blurred image is a per-pixel linear combination of the sharp image filtered by a fixed
Gaussian bank.  Unrolling a fixed-point iteration of the inverse problem gives an update that is
again a per-pixel linear combination of Gaussian-filtered images — of the blurred input y and of
the current estimate x_t:

    x_{t+1} = Σ_m a_m ⊙ (G_{σ_m} * y) + Σ_m b_m ⊙ (G_{σ_m} * x_t),      (G_{σ_0} = identity)

GKMNet predicts the mixing coefficients (a, b) with a network and runs one iteration per scale
of a coarse-to-fine pyramid (1/4 → 1/2 → 1), x_0 at a scale being the upsampled result of the
coarser one (the blurred image at the coarsest).  Parts:

* Gaussian bank: ``num_kernels`` Gaussians σ_m = m · ``sigma_step`` (m = 1..M) plus the identity,
  ``kernel_size`` taps, fixed (buffers, not learned), applied separably with replicate padding.
* Feature extractor: a light U-Net on y (stem, two stride-2 stages, bottleneck, two transposed-conv
  stages; additive skips).  Each stage is conv (+BN+ReLU) → two residual conv-BN-ReLU units →
  triplet attention (spatial / channel-height / channel-width gates from max+mean pooling).
* Scale-recurrent attention module (SRAM): a ConvLSTM on 2×-pooled features whose hidden state is
  carried (bilinearly upsampled) from scale to scale, modulating a conv branch:
  w = 2σ(h↑ ⊙ f + h↑) − 1 ∈ (−1, 1), 2(M + 1) weight maps shared by all image channels.
* The weighted Gaussian stacks are summed by a learned 1×1 convolution.

Forward returns [x_1/4, x_1/2, x_1], coarse to fine, like DGNO.  The weights are shared across
scales (the recurrence is over scales, not over separate sub-networks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgno.layers.blocks import pad_to_multiple


def _cbr(cin: int, cout: int, k: int = 3, *, stride: int = 1) -> nn.Sequential:
    """Conv k×k → BatchNorm → ReLU (the conv's bias is redundant before BN and dropped)."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


def _upsample2(x: Tensor) -> Tensor:
    """Bilinear ×2: carries the SRAM's ConvLSTM state to the next, finer scale."""
    return F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)


def gaussian_bank_1d(num_kernels: int, sigma_step: float, kernel_size: int) -> Tensor:
    """(M + 1, kernel_size) unit-sum 1-D taps: row 0 the identity, row m a Gaussian of σ = m·sigma_step.

    Gaussians are separable, so the 2-D bank G_σ = g_σ ⊗ g_σ costs 2·K instead of K² taps per
    pixel; truncation at the kernel border is compensated by renormalising to unit sum.
    """
    if kernel_size % 2 == 0 or kernel_size < 3:
        raise ValueError(f"kernel_size must be odd and >= 3, got {kernel_size}")
    t = torch.arange(kernel_size, dtype=torch.float64) - kernel_size // 2
    sigmas = sigma_step * torch.arange(1, num_kernels + 1, dtype=torch.float64)
    g = torch.exp(-0.5 * (t[None] / sigmas[:, None]) ** 2)
    delta = (t == 0).to(torch.float64)[None]
    bank = torch.cat([delta, g], dim=0)
    return (bank / bank.sum(dim=1, keepdim=True)).float()


class GaussianBank(nn.Module):
    """(B, C, H, W) → (B, C, M + 1, H, W): the image filtered by each kernel of the fixed bank."""

    def __init__(self, *, num_kernels: int, sigma_step: float, kernel_size: int) -> None:
        super().__init__()
        self.register_buffer("taps", gaussian_bank_1d(num_kernels, sigma_step, kernel_size))  # (M+1, K)

    def forward(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        n, k = self.taps.shape
        p = k // 2
        y = F.pad(x.reshape(b * c, 1, h, w), (p, p, p, p), mode="replicate")
        y = F.conv2d(y, self.taps.view(n, 1, 1, k))  # rows: (B·C, M+1, H+2p, W)
        y = F.conv2d(y, self.taps.view(n, 1, k, 1), groups=n)  # columns: (B·C, M+1, H, W)
        return y.view(b, c, n, h, w)


class ZPoolGate(nn.Module):
    """x ⊙ σ(BN(Conv7×7([max_1 x, mean_1 x]))): a gate over the last two axes from axis-1 pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 1, 7, padding=3, bias=False)
        self.bn = nn.BatchNorm2d(1)

    def forward(self, x: Tensor) -> Tensor:
        pooled = torch.cat([x.amax(dim=1, keepdim=True), x.mean(dim=1, keepdim=True)], dim=1)
        return x * torch.sigmoid(self.bn(self.conv(pooled)))


class TripletAttention(nn.Module):
    """Mean of three ZPool gates on (C, H, W) seen as (C|H, W), (H|C, W) and (W|H, C).

    Each branch pools one axis and gates the other two, so spatial positions and channels
    re-weight each other at the cost of three 7×7 single-output convolutions.
    """

    def __init__(self) -> None:
        super().__init__()
        self.hw, self.cw, self.hc = ZPoolGate(), ZPoolGate(), ZPoolGate()

    def forward(self, x: Tensor) -> Tensor:  # (B, C, H, W)
        hw = self.hw(x)
        cw = self.cw(x.transpose(1, 2)).transpose(1, 2)  # pool over H, gate (C, W)
        hc = self.hc(x.transpose(1, 3)).transpose(1, 3)  # pool over W, gate (H, C)
        return (hw + cw + hc) / 3


class ResidualUnits(nn.Module):
    """y = x + CBR(x); y + CBR(y): two residual conv-BN-ReLU units."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.a, self.b = _cbr(dim, dim), _cbr(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        y = x + self.a(x)
        return y + self.b(y)


class Stage(nn.Module):
    """Resample/project → residual units → triplet attention; ``kind`` picks the first layer.

    "in": plain 3×3 conv; "same": 3×3 CBR; "down": stride-2 3×3 CBR; "up": 2×2 transposed conv + BN + ReLU.
    """

    def __init__(self, cin: int, cout: int, kind: str) -> None:
        super().__init__()
        if kind == "in":
            self.project: nn.Module = nn.Conv2d(cin, cout, 3, padding=1)
        elif kind == "same":
            self.project = _cbr(cin, cout)
        elif kind == "down":
            self.project = _cbr(cin, cout, stride=2)
        elif kind == "up":
            self.project = nn.Sequential(
                nn.ConvTranspose2d(cin, cout, 2, stride=2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
            )
        else:
            raise ValueError(f"unknown stage kind {kind!r}; allowed: 'in', 'same', 'down', 'up'")
        self.res = ResidualUnits(cout)
        self.attn = TripletAttention()

    def forward(self, x: Tensor) -> Tensor:
        return self.attn(self.res(self.project(x)))


class ConvLSTMCell(nn.Module):
    """(i, f, o, g) = split(Conv_k([x, h])); c' = σ(f) c + σ(i) tanh(g); h' = σ(o) tanh(c')."""

    def __init__(self, cin: int, hidden: int, kernel_size: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.conv = nn.Conv2d(cin + hidden, 4 * hidden, kernel_size, padding=kernel_size // 2)

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        h, c = state
        i, f, o, g = self.conv(torch.cat([x, h], dim=1)).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class ScaleRecurrentAttention(nn.Module):
    """SRAM: features (B, C, H, W) + LSTM state at (H/2, W/2) → weights (B, n, H, W) in (−1, 1), new state."""

    def __init__(self, cin: int, n_weights: int, lstm_kernel: int) -> None:
        super().__init__()
        self.local = _cbr(cin, n_weights)
        self.lstm = ConvLSTMCell(cin, n_weights, lstm_kernel)

    def forward(self, feat: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        h, c = self.lstm(F.avg_pool2d(feat, 2), state)
        g = F.interpolate(h, scale_factor=2.0, mode="nearest")
        return 2 * torch.sigmoid(g * self.local(feat) + g) - 1, (h, c)


class GKMNet(nn.Module):
    """forward(x) → [x_1/4, x_1/2, x_1]; x (B, in_channels, H, W), any H, W.

    Args (keyword-only): in_channels; channels (U-Net widths at 1, 1/2, 1/4 of a scale; paper
    32/64/128); num_kernels (M Gaussians besides the identity; 21); sigma_step (σ_m = m·step; 0.25);
    kernel_size (taps of the bank; 21); lstm_kernel (ConvLSTM kernel; 5).

    x is reflect-padded at the bottom/right to a multiple of 32 (1/4-scale image through the
    U-Net's two strides and SRAM's pooling); outputs are cropped to (⌈H/4⌉, ⌈W/4⌉), (⌈H/2⌉, ⌈W/2⌉), (H, W).
    """

    pad_multiple = 32

    def __init__(
        self,
        *,
        in_channels: int = 1,
        channels: Sequence[int] = (32, 64, 128),
        num_kernels: int = 21,
        sigma_step: float = 0.25,
        kernel_size: int = 21,
        lstm_kernel: int = 5,
    ) -> None:
        super().__init__()
        if len(channels) != 3:
            raise ValueError(f"channels needs 3 widths (full, 1/2, 1/4 of a scale), got {list(channels)}")
        if num_kernels < 1 or sigma_step <= 0:
            raise ValueError(f"need num_kernels >= 1 and sigma_step > 0, got {num_kernels}, {sigma_step}")
        self.hparams: dict[str, Any] = {
            "in_channels": in_channels,
            "channels": list(channels),
            "num_kernels": num_kernels,
            "sigma_step": sigma_step,
            "kernel_size": kernel_size,
            "lstm_kernel": lstm_kernel,
        }
        c1, c2, c3 = channels
        n_weights = 2 * (num_kernels + 1)  # coefficients for the y stack and the x_t stack
        self.bank = GaussianBank(num_kernels=num_kernels, sigma_step=sigma_step, kernel_size=kernel_size)
        self.inp = Stage(in_channels, c1, "in")
        self.down1 = Stage(c1, c2, "down")
        self.down2 = Stage(c2, c3, "down")
        self.bottleneck = Stage(c3, c3, "same")
        self.up2 = Stage(c3, c2, "up")
        self.up1 = Stage(c2, c1, "up")
        self.sram = ScaleRecurrentAttention(c1, n_weights, lstm_kernel)
        self.combine = nn.Conv2d(in_channels * n_weights, in_channels, 1)

    def features(self, y: Tensor) -> Tensor:
        """U-Net features of the blurred image at one scale: (B, Cin, h, w) → (B, c1, h, w)."""
        f1 = self.inp(y)
        f2 = self.down1(f1)
        f3 = self.down2(f2)
        u2 = self.up2(self.bottleneck(f3) + f3)
        return self.up1(u2 + f2)

    def step(self, y: Tensor, x: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """One unrolled fixed-point iteration at one scale: x ← Σ a ⊙ G y + Σ b ⊙ G x."""
        weights, state = self.sram(self.features(y), state)  # (B, 2(M+1), h, w)
        stacks = torch.cat([self.bank(y), self.bank(x)], dim=2)  # (B, Cin, 2(M+1), h, w)
        mixed = stacks * weights.unsqueeze(1)
        return self.combine(mixed.flatten(1, 2)), state

    def forward(self, x: Tensor) -> list[Tensor]:
        h, w = x.shape[-2:]
        xp = pad_to_multiple(x, self.pad_multiple)
        hp, wp = xp.shape[-2:]
        pyramid = [
            F.interpolate(xp, size=(hp // f, wp // f), mode="bilinear", align_corners=False) if f > 1 else xp
            for f in (4, 2, 1)
        ]
        n = self.sram.lstm.hidden
        zeros = xp.new_zeros(xp.shape[0], n, hp // 8, wp // 8)
        state = (zeros, zeros)
        outs: list[Tensor] = []
        estimate = pyramid[0]
        for k, y in enumerate(pyramid):
            if k:
                estimate = F.interpolate(outs[-1], size=y.shape[-2:], mode="bilinear", align_corners=False)
                state = (_upsample2(state[0]), _upsample2(state[1]))
            out, state = self.step(y, estimate, state)
            outs.append(out)
        crops = [(math.ceil(h / 4), math.ceil(w / 4)), (math.ceil(h / 2), math.ceil(w / 2)), (h, w)]
        return [o[..., :ch, :cw] for o, (ch, cw) in zip(outs, crops)]
