"""The training loss: multi-scale L1 plus an FFT-L1 term, as in the authors' code."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dgno.layers.blocks import at_least_fp32  # bf16 outputs in float32; a float64 network keeps float64


def multiscale_targets(gt: torch.Tensor, outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Ground truth at each output's size: bilinear, no antialiasing (the authors' 1/4, 1/2, 1 targets).

    On sizes divisible by 4 this is the authors' ``interpolate(gt, scale_factor=0.5 | 0.25,
    mode="bilinear")``: a 2-tap (1/2) or 2-tap-at-offset (1/4) sample of the sharp image, so the
    coarse targets keep some aliasing, as theirs do.
    """
    return [gt if o.shape[-2:] == gt.shape[-2:] else F.interpolate(gt, size=o.shape[-2:], mode="bilinear", align_corners=False) for o in outputs]


def fft_l1(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """mean over every frequency of ½(|Δ Re F| + |Δ Im F|), F = 2-D FFT (full spectrum, unnormalised).

    The authors' FFT term: real and imaginary parts stacked and compared by a mean L1. It penalises
    missing high frequencies that a pixel L1 barely sees, which is the point of deblurring.
    """
    diff = torch.fft.fft2(at_least_fp32(out)) - torch.fft.fft2(at_least_fp32(target))
    return torch.view_as_real(diff).abs().mean()


def restoration_loss(outputs: list[torch.Tensor], gt: torch.Tensor, *, fft_weight: float) -> torch.Tensor:
    """Σ_scales  L1(ŷ_s, y_s) + λ · fft_l1(ŷ_s, y_s)  (the authors' loss, λ = 0.1).

    Single-output models pass a one-element list.
    """
    total = gt.new_zeros(())
    for out, target in zip(outputs, multiscale_targets(gt, outputs)):
        total = total + F.l1_loss(out, target)
        if fft_weight:
            total = total + fft_weight * fft_l1(out, target)
    return total
