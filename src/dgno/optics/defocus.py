"""Shift-invariant defocus PSFs as arrays, and their convolution with an image.

Three families, all normalised to unit sum and centred at index (M // 2, M // 2) of an odd M × M grid:

* :func:`gaussian_psf`: exp(−|d|² / 2σ²), the smooth blur of the paper's sigma-map experiments;
* :func:`disk_psf`: the uniform disc of radius R, geometric optics' defocus (a point out of focus
  images to the shadow of the aperture); edge pixels weighted by the share of their area inside the
  disc (sampled 8 × 8 per pixel), so a disc of radius 1.3 differs from one of 1.2;
* :func:`seidel_defocus_psf`: the diffraction PSF of a defocus W020 with spherical aberration W040 and
  astigmatism W222 at a field position (``dgno.optics.seidel``): rings and asymmetry a disc lacks.

Their strength is compared by :func:`psf_sigma`, the root-mean-square spread along one axis
(√(Σ PSF · |d|² / 2)): a Gaussian's σ; R / 2 for a disc; about 4 q W020 / 2 px for a large pure
defocus (its geometric disc of radius 2q · 2 W020 px, q pixels per λ/D).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import signal

from dgno.optics.aberrations import SeidelCoefficients


def _grid(radius: int) -> tuple[np.ndarray, np.ndarray]:
    r = np.arange(-radius, radius + 1, dtype=np.float64)
    return np.meshgrid(r, r, indexing="ij")


def gaussian_psf(sigma: float) -> np.ndarray:
    """The sampled Gaussian of ``sigma`` px (truncated at 4σ, at least 3 × 3)."""
    if not sigma > 0:
        raise ValueError(f"sigma={sigma!r}; allowed: a width in pixels > 0")
    y, x = _grid(max(1, int(4 * sigma + 0.5)))
    k = np.exp(-(y * y + x * x) / (2 * sigma * sigma))
    return k / k.sum()


def disk_psf(radius: float, *, supersample: int = 8) -> np.ndarray:
    """The uniform disc of ``radius`` px, each pixel weighted by its area inside (module docstring)."""
    if not radius > 0:
        raise ValueError(f"radius={radius!r}; allowed: a radius in pixels > 0")
    half = int(math.ceil(radius + 0.5))
    offsets = (np.arange(supersample) + 0.5) / supersample - 0.5
    y, x = _grid(half)
    inside = np.zeros_like(y)
    for dy in offsets:
        for dx in offsets:
            inside += (y + dy) ** 2 + (x + dx) ** 2 <= radius * radius
    return inside / inside.sum()


def seidel_defocus_psf(w020: float, *, w040: float = 0.0, w222: float = 0.0, field: tuple[float, float] = (0.0, 0.0), oversampling: float = 2.0) -> np.ndarray:
    """The diffraction PSF of defocus ``w020``, spherical ``w040`` and astigmatism ``w222`` (waves) at the
    normalised ``field`` position, ``oversampling`` px per λ/D; on a grid wide enough for its geometric spread."""
    import torch  # the PSF code needs it; the Gaussian and disc do not

    from dgno.optics.seidel import seidel_psf, suggest_psf_size  # imports torch: kept out of the Gaussian's and disc's path

    coeffs = SeidelCoefficients(W040=w040, W222=w222, W020=w020)
    size = suggest_psf_size(coeffs, max_field=float(np.hypot(*field)), oversampling=oversampling)
    psf = seidel_psf(coeffs, torch.tensor(field, dtype=torch.float64), size=size, oversampling=oversampling).numpy()
    return psf / psf.sum()


def psf_sigma(psf: np.ndarray) -> float:
    """Root-mean-square spread of ``psf`` along one axis, in px, about its centroid (module docstring)."""
    p = psf / psf.sum()
    y, x = np.indices(p.shape, dtype=np.float64)
    cy, cx = float((p * y).sum()), float((p * x).sum())
    return math.sqrt(float((p * ((y - cy) ** 2 + (x - cx) ** 2)).sum()) / 2.0)


def convolve(image: np.ndarray, psf: np.ndarray) -> np.ndarray:
    """``image`` (H, W) or (H, W, C) convolved with ``psf``, float32, mirrored at the border (half-sample
    symmetric, as ``dgno.optics.sigma_blur``), so the border keeps its intensity level."""
    r = psf.shape[0] // 2
    pad = ((r, r), (r, r)) + ((0, 0),) * (image.ndim - 2)
    padded = np.pad(np.asarray(image, np.float32), pad, mode="symmetric")
    kernel = psf.astype(np.float32) if image.ndim == 2 else psf.astype(np.float32)[..., None]
    return signal.fftconvolve(padded, kernel, mode="valid", axes=(0, 1)).astype(np.float32)
