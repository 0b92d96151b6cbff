"""The brute-force reference of spatially varying Seidel blur: every pixel blurred by its own exact PSF.

No polar resampling and no radial interpolation of PSFs: each source pixel's light goes through the
PSF of its own field point. It makes the non-blind experiment's test data (``seidel_superposition``)
and is what the ring model (:mod:`dgno.optics.ring`) is validated against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from dgno.optics.seidel import SeidelCoefficients, check_psf_size, seidel_psf


def pixel_psfs(
    image_shape: tuple[int, int],
    coeffs: SeidelCoefficients,
    *,
    field_radius: float,
    psf_size: int,
    oversampling: float = 2.0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """PSF(·; h_q) for every pixel q, h_q = (q − centre) / field_radius: the brute-force model's kernels.

    image_shape: (H, W) px.  field_radius: px for H = 1.  psf_size: M (odd).  Returns (H, W, M, M) on
    ``device``, each unit-sum with its centre at index M//2.  Memory H·W·M² values: small images only.
    """
    check_psf_size(psf_size)
    h, w = image_shape
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    fy, fx = torch.meshgrid(
        (torch.arange(h, dtype=dtype, device=device) - cy) / field_radius,
        (torch.arange(w, dtype=dtype, device=device) - cx) / field_radius,
        indexing="ij",
    )
    field = torch.stack([fx, fy], dim=-1)  # (H, W, 2)
    c = coeffs.as_tensor(dtype=dtype, device=device)
    out = torch.empty(h, w, psf_size, psf_size, dtype=dtype, device=device)
    for i0 in range(0, h, 16):  # row blocks bound the complex pupil/far-field temporaries
        out[i0 : i0 + 16] = seidel_psf(c, field[i0 : i0 + 16], size=psf_size, oversampling=oversampling)
    return out  # (H, W, M, M)


def _superpose_rows(xf: Tensor, psfs: Tensor, i0: int, out: Tensor) -> None:
    """Add the light of source rows i0 … i0+n−1 of xf (L, H, W) through their PSFs (n, W, M, M) to out
    (L, H+M−1, W+M−1), which is indexed by target pixel + M//2."""
    n, w, m = psfs.shape[0], xf.shape[-1], psfs.shape[-1]
    contrib = xf[:, i0 : i0 + n, :, None, None] * psfs  # (L, n, W, M, M)
    cols = contrib.reshape(xf.shape[0], n * w, m * m).transpose(1, 2)  # (L, M², n·W)
    block = F.fold(cols, output_size=(n + m - 1, w + m - 1), kernel_size=m)  # (L, 1, n+M−1, W+M−1)
    out[:, i0 : i0 + n + m - 1] += block[:, 0]  # block (i, j) at kernel offset (a, b) lands on (i + a, j + b)


def superposition_blur(x: Tensor, psfs: Tensor, *, rows_per_chunk: int = 16) -> Tensor:
    """y(p) = Σ_q x(q) PSF_q(p − q): direct superposition of per-pixel PSFs (the reference).

    Cost O(H W M²); the ring model is validated against it.  x: (..., H, W).  psfs: (H, W, M, M) from
    ``pixel_psfs``.  Returns (..., H, W); zero outside the image, like the ring model.
    """
    lead = x.shape[:-2]
    h, w = x.shape[-2:]
    m = psfs.shape[-1]
    if tuple(psfs.shape) != (h, w, m, m):
        raise ValueError(f"psfs must be (H, W, M, M) = ({h}, {w}, M, M), got {tuple(psfs.shape)}")
    xf = x.reshape(-1, h, w)  # (L, H, W)
    psfs = psfs.to(xf.dtype)
    out = xf.new_zeros(xf.shape[0], h + m - 1, w + m - 1)
    for i0 in range(0, h, rows_per_chunk):
        _superpose_rows(xf, psfs[i0 : i0 + rows_per_chunk], i0, out)
    half = m // 2
    return out[:, half : half + h, half : half + w].reshape(*lead, h, w)


def seidel_superposition(
    x: Tensor,
    coeffs: SeidelCoefficients,
    *,
    field_radius: float,
    psf_size: int,
    oversampling: float = 2.0,
    rows_per_chunk: int = 8,
) -> Tensor:
    """``superposition_blur(x, pixel_psfs(...))`` without holding all H·W PSFs: each row block's PSFs are
    made, used for every image of the batch and dropped, so memory stays O(rows · W · M² · L).

    This is the brute-force forward model that makes the non-blind test data: no polar resampling, no
    radial interpolation of PSFs, each pixel blurred by the exact PSF of its own field point.  Cost
    O(H W M²) per image plus one M×M FFT per pixel (shared by the batch).  x: (..., H, W), optical axis
    at its centre ((H−1)/2, (W−1)/2).  field_radius: px for H = 1.  psf_size: M (odd).
    Returns (..., H, W), zero outside the frame (pad the object first where light from outside matters).
    """
    check_psf_size(psf_size)
    lead = x.shape[:-2]
    h, w = x.shape[-2:]
    m = int(psf_size)
    xf = x.reshape(-1, h, w)  # (L, H, W)
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    fx = (torch.arange(w, dtype=torch.float64, device=x.device) - cx) / field_radius  # (W,)
    c = coeffs.as_tensor(dtype=torch.float64, device=x.device)
    out = xf.new_zeros(xf.shape[0], h + m - 1, w + m - 1)
    for i0 in range(0, h, rows_per_chunk):
        rows = torch.arange(i0, min(h, i0 + rows_per_chunk), dtype=torch.float64, device=x.device)
        fy = (rows - cy) / field_radius
        field = torch.stack(torch.broadcast_tensors(fx[None, :], fy[:, None]), dim=-1)  # (n, W, 2): (x, y)
        psfs = seidel_psf(c, field, size=m, oversampling=oversampling).to(xf.dtype)  # (n, W, M, M)
        _superpose_rows(xf, psfs, i0, out)
    half = m // 2
    return out[:, half : half + h, half : half + w].reshape(*lead, h, w)
