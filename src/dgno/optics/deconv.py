"""Deconvolution for the non-blind comparison: ring deconvolution and single-centre-PSF baselines.

Ring deconvolution (knows every PSF through the ring forward model A)::

    x̂ = argmin_{x ≥ 0}  ½ mean_p (C A x − y)²(p)  +  λ mean_p √(|∇x(p)|² + ε²)

C crops the operator's (possibly padded) frame to the observed image: with a margin of unknown pixels
around y, light that entered the field from outside is explained by x there instead of by artefacts at
the border.  Minimised by projected Adam (step, then clamp at 0).  The data gradient is the exact
Aᵀ Cᵀ (C A x − y) from the operator's adjoint (no autograd graph through A, so memory stays at a few
images); the smoothed-TV gradient comes from autograd.

Baselines assume one PSF — the on-axis one — for the whole field: Wiener (``skimage.restoration.wiener``)
and Richardson–Lucy (``skimage.restoration.richardson_lucy``), each on the image reflect-padded by the
PSF radius and cropped back, so FFT wrap-around and zero borders do not add ringing that the ring
method does not have.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from dgno.optics.ring import RingBlur
from dgno.optics.sigma_blur import pad_reflect


def smoothed_tv(x: Tensor, eps: float = 1e-3) -> Tensor:
    """TV_ε(x) = Σ_p √((x(p+e_x) − x(p))² + (x(p+e_y) − x(p))² + ε²), zero difference past the last row/column.

    x: (..., H, W).  eps: smoothing, image units; it makes the gradient defined where ∇x = 0.
    Returns (...,) sums over pixels.
    """
    dx = F.pad(x[..., :, 1:] - x[..., :, :-1], (0, 1))  # (..., H, W)
    dy = F.pad(x[..., 1:, :] - x[..., :-1, :], (0, 0, 0, 1))
    return torch.sqrt(dx * dx + dy * dy + eps * eps).sum(dim=(-2, -1))


def _margin(op: RingBlur, y: Tensor) -> tuple[int, int]:
    (hh, ww), (h, w) = op.grid.image_shape, tuple(y.shape[-2:])
    mh, mw = hh - h, ww - w
    if mh < 0 or mw < 0 or mh % 2 or mw % 2:
        raise ValueError(f"operator frame {op.grid.image_shape} must exceed the image {(h, w)} by an even margin on each axis")
    return mh // 2, mw // 2


def ring_deconvolve(
    y: Tensor,
    op: RingBlur,
    *,
    lam: float = 3e-5,
    n_iter: int = 300,
    lr: float = 1e-2,
    eps: float = 1e-3,
) -> Tensor:
    """x̂ = argmin_{x ≥ 0} ½ mean (C A x − y)² + λ mean √(|∇x|² + ε²), projected Adam from x₀ = reflect-pad(y).

    y: (B, C, H, W) blurred image, values in [0, 1].  op: ``RingBlur`` built for (H + 2m_h, W + 2m_w),
    m ≥ 0 the margin of unknown pixels on each side (the same optical centre).  lam: λ, TV weight (the
    default suits noiseless data; with noise of σ ≈ 0.01, λ ≈ 1e-3 did best on demo nuclei).
    n_iter: Adam steps.  lr: initial step, image units per step, cosine-decayed to lr/100.  eps: TV smoothing.
    Returns the restored (B, C, H, W) (the margin cropped off), ≥ 0.
    """
    mh, mw = _margin(op, y)
    y = y.to(op.dtype)
    x = F.pad(y, (mw, mw, mh, mh), mode="reflect") if (mh or mw) else y.clone()
    x = x.clamp_min(0).requires_grad_(True)
    h, w = y.shape[-2:]
    n_pix = float(h * w)
    opt = torch.optim.Adam([x], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(n_iter, 1), eta_min=lr * 0.01)
    for _ in range(n_iter):
        opt.zero_grad()
        with torch.no_grad():
            resid = op.A(x)[..., mh : mh + h, mw : mw + w] - y  # (B, C, H, W)
            grad_data = op.A_adjoint(F.pad(resid, (mw, mw, mh, mh))) / n_pix  # Aᵀ Cᵀ r
        tv = lam * smoothed_tv(x, eps).sum() / n_pix
        tv.backward()
        x.grad += grad_data
        opt.step()
        sched.step()
        with torch.no_grad():
            x.clamp_(min=0.0)
    return x.detach()[..., mh : mh + h, mw : mw + w]


def wiener_deconvolve(image: np.ndarray, psf: np.ndarray, *, balance: float = 1e-3) -> np.ndarray:
    """x̂ = F⁻¹[ conj(K) Y / (|K|² + balance·|Λ|²) ] (scikit-image ``wiener``, Laplacian Λ) with one PSF K.

    image: (H, W) float in [0, 1].  psf: (M, M) unit-sum, centre at M//2.  balance: regularisation weight
    (larger = smoother).  Returns (H, W) float32, clipped to [0, 1].
    """
    from skimage.restoration import wiener

    pad = psf.shape[0] // 2
    out = wiener(pad_reflect(np.asarray(image, np.float64), pad), np.asarray(psf, np.float64), balance, clip=False)
    h, w = image.shape
    return np.clip(out[pad : pad + h, pad : pad + w], 0.0, 1.0).astype(np.float32)


def richardson_lucy_deconvolve(image: np.ndarray, psf: np.ndarray, *, n_iter: int = 30) -> np.ndarray:
    """x_{t+1} = x_t · (K̃ ∗ (y / (K ∗ x_t))) (scikit-image ``richardson_lucy``) with one PSF K, K̃ its flip.

    image: (H, W) float in [0, 1].  psf: (M, M) unit-sum, centre at M//2.  n_iter: iterations (more =
    sharper and noisier).  Returns (H, W) float32 in [0, 1].
    """
    from skimage.restoration import richardson_lucy

    pad = psf.shape[0] // 2
    out = richardson_lucy(
        pad_reflect(np.asarray(image, np.float64), pad), np.asarray(psf, np.float64), num_iter=n_iter, clip=False
    )
    h, w = image.shape
    return np.clip(out[pad : pad + h, pad : pad + w], 0.0, 1.0).astype(np.float32)


__all__ = ["richardson_lucy_deconvolve", "ring_deconvolve", "smoothed_tv", "wiener_deconvolve"]
