"""The ring / linear revolution-invariant (LRI) forward model of a spatially varying blur.

Forward model (superposition of per-source PSFs, written in polar coordinates about the optical axis)::

    y(r, φ) = ∫∫ x(r′, φ′) h_{r′}(r, φ − φ′) r′ dr′ dφ′

where h_{r′}(r, φ) is the PSF of a point source at (r′, 0), evaluated at the polar point (r, φ).  It
assumes revolution invariance: the PSF of a source at (r′, φ′) is h_{r′} rotated by φ′, which holds for
any rotationally symmetric optical system and exactly for the Seidel model of ``seidel``.  The integral
over φ′ is a circular convolution, so after an FFT along the angle each angular frequency k decouples::

    Y_k(r) = Σ_{r′} H_k(r, r′) X_k(r′),      H_k(r, r′) = FFT_φ[h_{r′}(r, ·)](k).

Discretisation (operator A = B R Bᵀ):

* Polar grid: radii r_i = i px, i = 0 … N−1, reaching past the image corners (plus interpolation guard
  rings), and n_φ = ``angular_factor``·N angles (a multiple of 4, so the grid maps to itself under 90°
  rotations).
* Bᵀ (Cartesian → polar) *splats* each pixel's value, read as a mass, onto its neighbouring polar samples
  with the weights of an interpolation kernel (bilinear or Keys cubic) in (radius, angle) index space.
  Splatting, unlike point-sampling the image at the polar points, conserves mass everywhere: the outer
  rings are sparser than the pixel grid (1.6 px arc spacing at the corners for n_φ = 4N) and point
  sampling would skip pixels there.  The cubic kernel also keeps first and second moments, so the
  discretisation adds no extra blur to second order.
* R: the per-frequency sums above.  A PSF read by bicubic interpolation of its 0.5-px samples is exactly
  zero outside a square |d_x|, |d_y| < e about the source (``psf_reach``), so H_k(r, r′) ≠ 0 only for
  r − r′ = δΔr with δ_lo ≤ δ ≤ δ_hi (``band_limits``, −e < δΔr < √2 e) and the spectra are stored as a band
  (D, N, n_φ//2+1), D = δ_hi − δ_lo + 1, applied in O(D N n_φ) as real multiply-adds on the real and
  imaginary planes of the angular spectra (``ring_accumulate``).  To build them, the PSF of each source
  radius (``radial_psfs``, one per radius rather than one per pixel: most of the gain over direct
  superposition) is sampled at the polar points where its square can be met, and each
  sampled angular profile, even in φ, becomes its real rFFT as a cosine series (``ring_spectra``,
  ``cosine_series``).
* B (polar → Cartesian) interpolates the blurred polar image back at the pixel centres, with the same
  kernel.  Because B and Bᵀ share their weights and R's adjoint is the per-frequency transpose (the
  spectra are real), the adjoint Aᵀ = B Rᵀ Bᵀ is exact (``ring_conv_adjoint``).

Image sizes: the optical axis is the image centre ((H−1)/2, (W−1)/2) and the polar disc covers the
corners, so any H×W (odd, even, non-square such as BBBC006's 520×696) is handled directly; the region of
the disc outside the image carries no mass, which is the same as zero-padding the image to the disc.
To model light entering from outside the frame, pad the image before blurring (see ``nonblind``).

Memory: ``cache=True`` keeps the banded spectra, D·N·(n_φ/2+1) real numbers (they are real because Seidel
PSFs are mirror-symmetric about the field axis; D = 31 and ≈0.13 GB at 1024×1024 with a 25-px PSF);
``cache=False`` recomputes them for ``chunk_radii`` source radii at a time inside every call, bounding
the extra memory by the chunk.  The geometry tables (interpolation taps, sampling rays, cosine and pupil
DFT tables) do not depend on the coefficients and are cached like FFT plans, so a new operator on frames of
a known size only computes its PSFs and spectra; ``clear_caches`` releases them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgno.choices import check_choice
from dgno.optics.seidel import (
    SeidelCoefficients,
    check_psf_size,
    next_smooth,
    pupil_coordinates,
    seidel_psf,
    seidel_wavefront,
    suggest_psf_size,
)

InterpName = Literal["linear", "cubic"]
INTERPS: tuple[str, ...] = get_args(InterpName)
PSF_UPSAMPLE = 2  # PSFs are sampled at 0.5 px and read by bicubic interpolation at polar points
# Work sizes: ``ring_spectra`` handles radius blocks of at most BLOCK_VALUES spectra values (bounding its
# temporaries, 2 MB in float32); B and Bᵀ sweep all taps of TAP_BLOCK pixels before the next ones, so the polar
# samples they touch stay in cache (2× faster on one CPU core at 1024², whose polar image is 8.5 MB).
BLOCK_VALUES = 2**19
TAP_BLOCK = 2**15


# --------------------------------------------------------------------------------------------------
# Geometry and interpolation taps (B and Bᵀ)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolarGrid:
    """Polar sampling about the image centre: radii i·Δr, i < n_radii; angles 2π j / n_angles."""

    image_shape: tuple[int, int]  # (H, W) pixels
    n_radii: int  # N, including two guard rings beyond the corners for the cubic kernel
    n_angles: int  # n_φ, multiple of 4
    radial_step: float  # Δr, px

    @property
    def centre(self) -> tuple[float, float]:
        h, w = self.image_shape
        return (h - 1) / 2.0, (w - 1) / 2.0

    @property
    def n_freq(self) -> int:
        return self.n_angles // 2 + 1

    @property
    def corner_radius(self) -> float:
        cy, cx = self.centre
        return math.hypot(cy, cx)


def polar_grid(image_shape: tuple[int, int], *, angular_factor: float = 4.0, radial_step: float = 1.0) -> PolarGrid:
    """N = ⌈corner radius / Δr⌉ + 1 radii to the corners (+2 guard), n_φ ≥ angular_factor·N angles.

    n_φ is 4 times a product of 2, 3 and 5: a multiple of 4 keeps the grid closed under 90° turns, and the
    smooth factor keeps the angular FFTs fast (pocketfft is ~3× slower on 378 = 2·3³·7 than on 384).
    image_shape: (H, W) pixels.  angular_factor: angles per radius; with Δr = 1 px, 4 gives an arc spacing
    of about π/2 px at the corners.  radial_step: Δr in px.
    """
    h, w = (int(v) for v in image_shape)
    if h < 1 or w < 1:
        raise ValueError(f"image_shape must be positive (H, W), got {image_shape!r}")
    if not angular_factor > 0:
        raise ValueError(f"angular_factor must be > 0, got {angular_factor!r}")
    if not radial_step > 0:
        raise ValueError(f"radial_step must be > 0 px, got {radial_step!r}")
    n_core = math.ceil(math.hypot((h - 1) / 2.0, (w - 1) / 2.0) / radial_step) + 1
    n_angles = 4 * next_smooth(math.ceil(angular_factor * n_core / 4), primes=(2, 3, 5))
    return PolarGrid(image_shape=(h, w), n_radii=n_core + 2, n_angles=n_angles, radial_step=float(radial_step))


# Interpolation kernels: (tap offsets, coefficients), the weight of offset i at the fractional position a
# being Σ_k coeff[i][k] aᵏ.  Keys' cubic (α = −½) reproduces polynomials up to degree 2, i.e. interpolation
# keeps local means, slopes and curvatures.
_KERNELS: dict[str, tuple[list[int], list[list[float]]]] = {
    "linear": ([0, 1], [[1.0, -1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]),
    "cubic": (
        [-1, 0, 1, 2],
        [[0.0, -0.5, 1.0, -0.5], [1.0, 0.0, -2.5, 1.5], [0.0, 0.5, 2.0, -1.5], [0.0, 0.0, -0.5, 0.5]],
    ),
}


@functools.lru_cache(maxsize=2)
def _shared_taps(grid: PolarGrid, interp: str, dtype: torch.dtype, device) -> tuple[Tensor, Tensor]:
    """``interpolation_taps``, kept for the last two geometries: they depend on the image geometry only, so
    operators for new coefficients on the same frames (a coefficient sweep, one operator per calibration)
    share them instead of recomputing them (1–2 ms of a 5–10 ms build and apply at 128²)."""
    return interpolation_taps(grid, interp=interp, dtype=dtype, device=device)


def clear_caches() -> None:
    """Forget the cached geometry tables (interpolation taps, sampling rays, cosine and pupil DFT tables).

    They depend only on the image geometry, the PSF size and dtype/device, never on the coefficients, and are
    kept like FFT plans.  The taps are the large ones (H·W·16 index/weight pairs, 128 MB at 1024²; the last
    two geometries are kept); call this to release them, or to time a cold build.
    """
    for fn in (_shared_taps, _pupil_dft, cosine_table, _sample_rays, _sampling_plan):
        fn.cache_clear()


def _kernel_weights(frac: Tensor, interp: str) -> tuple[list[int], Tensor]:
    """Tap offsets and weights (T, P) for fractional positions frac ∈ [0, 1) (P,), by Horner's rule on all
    taps at once (three multiply-adds instead of a dozen ops per tap)."""
    offsets, coeff = _KERNELS[interp]
    c = torch.tensor(coeff, dtype=frac.dtype, device=frac.device)[:, :, None]  # (T, 4, 1)
    w = torch.addcmul(c[:, 2], frac, c[:, 3])
    w = torch.addcmul(c[:, 1], frac, w)
    return offsets, torch.addcmul(c[:, 0], frac, w)


def interpolation_taps(
    grid: PolarGrid, *, interp: InterpName = "cubic", dtype: torch.dtype = torch.float32, device=None
) -> tuple[Tensor, Tensor]:
    """Sparse matrix B (pixels × polar samples) as taps: y_pix[p] = Σ_t w[c, t, m] · y_polar.flat[idx[c, t, m]]
    for pixel p = c·S + m (row-major flat index, S = min(H·W, ``TAP_BLOCK``)).

    Pixel (i, j) sits at x = j − c_x, y = i − c_y, i.e. radius ρ and angle φ = atan2(y, x).  A radial tap
    at index −1 is the radius-1 sample on the opposite side (angle + π), so the kernel stays centred
    through the origin.  Returns idx (C, T, S) int32 and w (C, T, S), T = 4 (linear) or 16 (cubic), in
    blocks of S pixels (``TAP_BLOCK``; the last block padded with zero weights), tap-major within a block.
    int32 indices halve the memory and make ``index_select`` ~1.6× faster than int64 on CPU, and
    ``bincount`` takes them for the splat.
    """
    check_choice("interp", interp, INTERPS)
    h, w = grid.image_shape
    cy, cx = grid.centre
    yy = (torch.arange(h, dtype=torch.float64, device=device) - cy)[:, None]  # (H, 1)
    xx = torch.arange(w, dtype=torch.float64, device=device) - cx  # (W,)
    t = (torch.hypot(yy, xx) / grid.radial_step).flatten()  # (P,) radius index, fractional
    s = (torch.atan2(yy, xx) * (grid.n_angles / (2 * math.pi))).flatten()  # (P,) angle index in (−n_φ/2, n_φ/2]
    size = min(h * w, TAP_BLOCK)
    blocks = [_pixel_taps(t[p0 : p0 + size], s[p0 : p0 + size], grid.n_angles, interp, dtype) for p0 in range(0, h * w, size)]
    if len(blocks) == 1:
        return blocks[0][0][None], blocks[0][1][None]
    pad = size - blocks[-1][0].shape[-1]  # padding pixels read sample 0 with weight 0
    blocks[-1] = F.pad(blocks[-1][0], (0, pad)), F.pad(blocks[-1][1], (0, pad))
    return torch.stack([idx for idx, _ in blocks]), torch.stack([w for _, w in blocks])


def _pixel_taps(t: Tensor, s: Tensor, n_phi: int, interp: str, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Taps of the pixels at fractional radius indices t and angle indices s (P,): idx (T, P) int32, w (T, P).

    Tap-major, so that every elementwise op runs along the pixels (with the taps innermost, the 4-long
    broadcast loops are several times slower).  The geometry is float64, the weights are evaluated in
    ``dtype`` and the index arithmetic is int32 (~4× faster than int64).
    """
    r0, a0 = torch.floor(t), torch.floor(s)
    r_off, wr = _kernel_weights((t - r0).to(dtype), interp)  # (Tr, P)
    a_off, wa = _kernel_weights((s - a0).to(dtype), interp)  # (Ta, P)
    ri = r0.int() + torch.tensor(r_off, dtype=torch.int32, device=t.device)[:, None]  # (Tr, P), −1 next to the centre
    aj = a0.int() + torch.tensor(a_off, dtype=torch.int32, device=t.device)[:, None]  # (Ta, P) in (−n_φ, n_φ)
    aj = torch.where(aj < 0, aj + n_phi, aj)
    idx = (ri.abs() * n_phi)[:, None] + aj  # (Tr, Ta, P)
    for tr in (i for i, off in enumerate(r_off) if off < 0):  # only these taps can cross the centre
        cols = torch.nonzero(ri[tr] < 0).flatten()  # the few pixels within Δr of the centre
        idx[tr][:, cols] = torch.remainder(aj[:, cols] + n_phi // 2, n_phi) + ri[tr, cols].abs() * n_phi
    return idx.flatten(0, 1), (wr[:, None] * wa).flatten(0, 1)  # (T, P) each


def _gather(flat: Tensor, idx: Tensor, w: Tensor, n_pix: int) -> Tensor:
    """B on flattened polar images: (L, Q) → (L, n_pix), Σ_t w flat[:, idx] per pixel (taps of
    ``interpolation_taps``).  One ``index_select`` over all taps: advanced indexing is ~3× slower."""
    vals = flat.index_select(1, idx.reshape(-1)).view(flat.shape[0], *idx.shape)  # (L, C, T, S)
    return vals.mul_(w).sum(2).flatten(1)[:, :n_pix]


def _splat(x: Tensor, idx: Tensor, w: Tensor, size: int) -> Tensor:
    """Bᵀ: (L, P) → (L, Q = size), Σ_{taps with idx = q} w x per polar sample, as a weighted ``bincount`` per
    image: it takes int32 indices, which ``index_add_`` handles ~50× slower than int64 ones."""
    n_blocks, _, block = idx.shape
    x = F.pad(x, (0, n_blocks * block - x.shape[1])).view(x.shape[0], n_blocks, 1, block)  # (L, C, 1, S)
    flat = idx.reshape(-1)
    return torch.stack([torch.bincount(flat, weights=(xi * w).reshape(-1), minlength=size) for xi in x])


class _Interpolate(torch.autograd.Function):
    """B, differentiable in the image: its derivative is Bᵀ (``bincount`` has none of its own)."""

    @staticmethod
    def forward(ctx, flat: Tensor, idx: Tensor, w: Tensor, n_pix: int) -> Tensor:
        ctx.save_for_backward(idx, w)
        ctx.size = flat.shape[1]
        return _gather(flat, idx, w, n_pix)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:
        idx, w = ctx.saved_tensors
        return _Splat.apply(grad, idx, w, ctx.size), None, None, None


class _Splat(torch.autograd.Function):
    """Bᵀ, differentiable in the image: its derivative is B."""

    @staticmethod
    def forward(ctx, x: Tensor, idx: Tensor, w: Tensor, size: int) -> Tensor:
        ctx.save_for_backward(idx, w)
        ctx.n_pix = x.shape[1]
        return _splat(x, idx, w, size)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:
        idx, w = ctx.saved_tensors
        return _Interpolate.apply(grad, idx, w, ctx.n_pix), None, None, None


def polar_to_cart(yp: Tensor, idx: Tensor, w: Tensor, image_shape: tuple[int, int]) -> Tensor:
    """B: y(p) = Σ_t w_t(p) y_polar[idx_t(p)] (taps of ``interpolation_taps``).  yp: (..., N, n_φ) → (..., H, W)."""
    lead = yp.shape[:-2]
    flat = yp.reshape(-1, yp.shape[-2] * yp.shape[-1])  # (L, N·n_φ)
    return _Interpolate.apply(flat, idx, w, image_shape[0] * image_shape[1]).reshape(*lead, *image_shape)


def cart_to_polar(x: Tensor, idx: Tensor, w: Tensor, grid: PolarGrid) -> Tensor:
    """Bᵀ: mass splat, m[q] = Σ_{p,t: idx_t(p)=q} w_t(p) x(p).  x: (..., H, W) → (..., N, n_φ)."""
    lead = x.shape[:-2]
    xf = x.reshape(-1, x.shape[-2] * x.shape[-1])  # (L, P)
    return _Splat.apply(xf, idx, w, grid.n_radii * grid.n_angles).reshape(*lead, grid.n_radii, grid.n_angles)


# --------------------------------------------------------------------------------------------------
# PSF angular spectra (R) and their application
# --------------------------------------------------------------------------------------------------


def _dft_phases(a: Tensor, b: Tensor, n: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin of 2π a_i b_j / n, (A, B), evaluated in float64 (phase error ≲ 1e-16 · 2π max|a b| / n)."""
    phase = torch.outer(a.to(torch.float64), b.to(torch.float64) * (2 * math.pi / n))
    return torch.cos(phase).to(dtype), torch.sin(phase).to(dtype)


def radial_psfs(
    coeffs: SeidelCoefficients, radii: Tensor, *, field_radius: float, psf_size: int, oversampling: float, dtype: torch.dtype
) -> Tensor:
    """Upper halves of the PSFs of sources at (r′, 0), r′ = radii (R,) px (float), field h = (r′ / field_radius, 0).

    Sampled every 1/U px (U = ``PSF_UPSAMPLE``): columns at the offsets d_x = −k/U … k/U, rows at
    d_y = −1/U … k/U, k = ``_fine_half(M)``; → (R, k+2, 2k+1).  The values are the samples of
    ``seidel_psf(…, upsample=U)``, kept symmetric about its centre (the even-sized FFT grid has one unpaired
    edge row/column, which would make the model's PSFs, and so the blur of a symmetric object, slightly
    lopsided).  These PSFs are mirror-symmetric, h(d_x, −d_y) = h(d_x, d_y), and the ring model reads them
    at d_y ≥ 0 only (``ring_spectra``), so the rows below −1/U (outside the bicubic footprint) are not
    computed.  Two DFT matrix products over the aperture's support (|u| ≤ M/(2q) + ½ samples, about half
    the M×M pupil grid at q = 2) replace a zero-padded U·M-point 2-D FFT: only the kept frequencies are
    evaluated, and the pupil is even in u_y (W depends on u_y only through ρ²), so the u_y sum is a cosine
    sum over the rows u_y ≥ 0.
    """
    k = _fine_half(psf_size)
    dev = radii.device
    ux, uy, amp, dft_x, cos_y = _pupil_dft(check_psf_size(psf_size), float(oversampling), dtype, dev)
    field = torch.stack([radii.to(dtype) / field_radius, torch.zeros(radii.shape, dtype=dtype, device=dev)], dim=-1)
    phase = 2 * math.pi * seidel_wavefront(coeffs.as_tensor(dtype=dtype, device=dev), field[None], ux, uy)[:, :, 0]  # (w+1, R, 2w+1)
    pupil = torch.cat([amp * torch.cos(phase), amp * torch.sin(phase)], dim=-1)  # (w+1, R, 2(2w+1)): Re | Im
    far = (cos_y @ (pupil @ dft_x).flatten(1)).view(k + 2, -1, 2, 2 * k + 1)  # (rows, R, Re|Im, columns)
    far.square_()
    return (far[:, :, 0] + far[:, :, 1]).transpose(0, 1)  # (R, k+2, 2k+1), a view of (k+2, R, 2k+1)


@functools.lru_cache(maxsize=8)
def _pupil_dft(psf_size: int, oversampling: float, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
    """The coefficient-independent tables of ``radial_psfs`` (cached: shared, never modified in place).

    Pupil coordinates u_x, u_y (w+1, 1, 1, 2w+1) over the aperture's support (rows u_y ≥ 0, |u| ≤ w
    samples), the aperture weighted 2 for the rows u_y > 0 that stand for ±u_y (w+1, 1, 2w+1), the real
    form of the u_x DFT (2(2w+1), 2F) and the normalised u_y cosine sums (k+2, w+1).
    """
    m = psf_size
    c, n, k = m // 2, PSF_UPSAMPLE * m, _fine_half(psf_size)
    ux, uy, aperture = pupil_coordinates(m, oversampling, dtype=dtype, device=device)  # (M, M)
    norm = m * m * (aperture * aperture).sum()  # Parseval: unit sum on the pixel grid
    w = min(c, math.ceil(m / (2.0 * oversampling) + 0.5) - 1)  # aperture support |u| ≤ w samples (A = 0 beyond)
    crop = (slice(c, c + w + 1), slice(c - w, c + w + 1))  # rows u_y ≥ 0, columns |u_x| ≤ w
    ux, uy, aperture = ux[crop][:, None, None], uy[crop][:, None, None], aperture[crop]  # (w+1, 1, 1, 2w+1)
    amp = aperture[:, None] * torch.where(torch.arange(w + 1, device=device) > 0, 2.0, 1.0).to(dtype)[:, None, None]  # ±u_y
    cos_x, sin_x = _dft_phases(torch.arange(-w, w + 1, device=device), torch.arange(-k, k + 1, device=device), n, dtype)  # (2w+1, F)
    dft_x = torch.cat([torch.cat([cos_x, -sin_x], dim=1), torch.cat([sin_x, cos_x], dim=1)])  # (2(2w+1), 2F)
    cos_y = cos_x[w:, k - 1 :].T / norm.sqrt()  # (k+2, w+1): cos(2π u_y f / n) for f = −1 … k, normalised
    return ux, uy, amp, dft_x, cos_y


def _fine_half(psf_size: int) -> int:
    """k = U·M − 1 − ⌊U·M/2⌋: the radial PSFs keep the fine offsets −k … k of the U·M-point FFT grid."""
    n = PSF_UPSAMPLE * psf_size
    return n - 1 - n // 2


def psf_reach(fine: int) -> float:
    """e = (k + 2) / U px for PSFs of F = 2k+1 fine samples: bicubic reads of the PSF are exactly zero at
    offsets with |d_x| ≥ e or |d_y| ≥ e (the taps reach two samples past the last one)."""
    return (fine // 2 + 2) / PSF_UPSAMPLE


def band_limits(reach: float, radial_step: float = 1.0) -> tuple[int, int]:
    """(δ_lo, δ_hi): the radius offsets r − r′ (in Δr) at which a PSF of reach e can be nonzero.

    Inside the source radius the point (r cos φ − r′, r sin φ) has |x| ≥ r′ − r, so r − r′ > −e.  Outside
    it, the circle of radius r meets the square |x|, |y| < e about (r′, 0) only while
    r < √((r′ + e)² + e²) (``_outer_limit``), which is largest, √2 e, at r′ = 0.
    """
    return math.floor(-reach / radial_step) + 1, _outer_limit(0.0, reach, radial_step)


def _outer_limit(r_src: float, reach: float, radial_step: float) -> int:
    """Largest δ with r′ + δ Δr < √((r′ + e)² + e²): the outermost ring a source at r′ px can reach."""
    return math.ceil((math.hypot(r_src + reach, reach) - r_src) / radial_step) - 1


def _angular_limit(r_src: float, reach: float, n_angles: int) -> int:
    """Largest angle index j at which a PSF of reach e about (r′, 0), r′ ≥ e, can be nonzero, and n_φ/2 when
    the PSF's square surrounds the origin: the square's polar angles stay below atan2(e, r′ − e)."""
    if r_src < reach:
        return n_angles // 2
    return min(n_angles // 2, math.ceil(math.atan2(reach, r_src - reach) * n_angles / (2 * math.pi)) - 1)


@functools.lru_cache(maxsize=8)
def cosine_table(n_angles: int, n_terms: int, *, dtype: torch.dtype, device=None) -> Tensor:
    """C[j, k] = c_j cos(2π j k / n), (J, n/2+1), c_0 = 1, c_j = 2 for 0 < j < n/2, c_{n/2} = 1: the weights
    with which sample j of an even profile enters its rFFT (it stands for angles ±j).  Cached (a geometry
    table, see ``clear_caches``): do not modify the result in place."""
    j = torch.arange(n_terms, device=device)
    cos, _ = _dft_phases(j, torch.arange(n_angles // 2 + 1, device=device), n_angles, torch.float64)
    weight = torch.where((j == 0) | (2 * j == n_angles), 1.0, 2.0).to(torch.float64)
    return (cos * weight[:, None]).to(dtype)


def cosine_series(profile: Tensor, n_angles: int, table: Tensor | None = None) -> Tensor:
    """rFFT over n angles of an even profile known on angles 0 … J−1 ≤ n/2 and zero beyond ±(J−1).

    G_k = Σ_j c_j s_j cos(2π j k / n) (weights c_j of ``cosine_table``): the real rFFT of the mirrored,
    zero-filled profile, without building it.  A short window (``_short_window``) is a product with the
    (J, K) cosine table, O(J K) per profile (table: rows of a shared, longer table may be passed); a long
    one an rFFT of the weighted profile, O(n log n).  profile: (..., J).  Returns (..., n/2+1), real.
    """
    n_terms = profile.shape[-1]
    if _short_window(n_terms, n_angles):
        table = table[:n_terms] if table is not None else cosine_table(n_angles, n_terms, dtype=profile.dtype, device=profile.device)
        return profile @ table
    weight = torch.full((n_terms,), 2.0, dtype=profile.dtype, device=profile.device)
    weight[0] = 1.0
    if 2 * (n_terms - 1) == n_angles:
        weight[-1] = 1.0
    return torch.fft.rfft(F.pad(profile * weight, (0, n_angles - n_terms)), dim=-1).real


def _short_window(n_terms: int, n_angles: int) -> bool:
    """Whether a J-sample profile's spectrum is cheaper as a cosine-table product (J·K multiply-adds per
    profile) than as an rFFT of n angles: J ≤ min(n/4, 160), the crossover measured on one CPU core for
    n = 384 … 2916."""
    return 4 * n_terms <= n_angles and n_terms <= 160


@functools.lru_cache(maxsize=8)
def _sample_rays(fine: int, n_rays: int, grid: PolarGrid, *, dtype: torch.dtype, device=None) -> Tensor:
    """(A, B, C), (3, J, 2): the grid_sample coordinates (x, y) of the polar point (r′ + δ Δr, φ_j) in the half
    PSF of a source at (r′, 0) (``radial_psfs``: 2k+1 columns, k+2 rows, F = fine = 2k+1) are i A_j + δ B_j + C,
    i = r′/Δr the source's radius index.

    The offset from the source is d = ((r′ + δΔr) cos φ − r′, (r′ + δΔr) sin φ), and with align_corners
    (first/last sample ↔ ∓1) x = s_x d_x, y = s_y d_y + y₀, s_x = U/k and s_y = 2U/(k+1) per px and
    y₀ = (1 − k)/(k + 1) the row d_y = 0.  So A = Δr (s_x (cos φ − 1), s_y sin φ), B = Δr (s_x cos φ,
    s_y sin φ), C = (0, y₀); cos φ − 1 = −2 sin²(φ/2) avoids the cancellation of r cos φ − r′.
    """
    k = fine // 2
    s_x, s_y = grid.radial_step * PSF_UPSAMPLE / k, grid.radial_step * 2 * PSF_UPSAMPLE / (k + 1)  # per radius step
    phi = torch.arange(n_rays, dtype=torch.float64, device=device) * (2 * math.pi / grid.n_angles)
    rays = torch.zeros(3, n_rays, 2, dtype=torch.float64, device=device)
    rays[0, :, 0] = -2 * s_x * torch.sin(phi / 2) ** 2
    rays[0, :, 1] = rays[1, :, 1] = s_y * torch.sin(phi)
    rays[1, :, 0] = s_x * torch.cos(phi)
    rays[2, :, 1] = (1 - k) / (k + 1)
    return rays.to(dtype)


@dataclass(frozen=True)
class _SampleBlock:
    """Where ``ring_spectra`` samples the PSFs of one radius block: coefficient-independent, so cached.

    start, stop: the block's radii (offsets from the first); rows: (first, last) δ of its band rows; half: its
    last angle index J − 1; xy: (Rb, 1, P, 2) grid_sample coordinates of each radius's samples, P the most
    any radius of the block needs, the rest padding far outside the PSF (reads 0); slot: (Rb, P) int64,
    where each sample goes in the block's flattened (Db, Rb, J) profiles, padding → Db·Rb·J (a spill
    slot): in that layout the cosine series are one matrix product and land in the spectra's row order.
    """

    start: int
    stop: int
    rows: tuple[int, int]
    half: int
    xy: Tensor | None
    slot: Tensor | None


def _row_lengths(r_src: np.ndarray, r: np.ndarray, reach: float, half: int, n_phi: int) -> np.ndarray:
    """1 + the largest angle index j ≤ half whose polar point (r, φ_j) can fall inside the support square
    |r cos φ − r′| < e, r sin φ < e of the PSF of a source at (r′, 0); 0 where none can (broadcast, px).

    On φ ∈ [0, π] the square's x-slab is the arc a < cos φ < b, a = (r′ − e)/r, b = (r′ + e)/r, i.e.
    arccos(min(b, 1)) < φ < arccos(max(a, −1)), and for r > e the y-slab leaves out the middle
    arcsin(e/r) ≤ φ ≤ π − arcsin(e/r).  The supremum of the intersection is the slab's upper end unless that
    falls in the left-out middle, then arcsin(e/r) if the arc starts below it.  Rounded up by a relative
    1e-9, so float32 coordinates never put a skipped point inside.
    """
    e = reach * (1 + 1e-9)
    r = np.maximum(np.asarray(r, dtype=np.float64), 1e-300)
    lo = np.arccos(np.clip((r_src + e) / r, -1.0, 1.0))  # the arc starts after this
    hi = np.arccos(np.clip((r_src - e) / r, -1.0, 1.0))  # and ends before this (r = 0: 0 if r′ ≥ e, else π)
    gap = np.arcsin(np.minimum(e / r, 1.0))  # y-slab: φ < gap or φ > π − gap (nothing left out if e ≥ r)
    beyond = hi > math.pi - gap  # the arc reaches the y-slab's upper part
    sup = np.where(beyond, hi, np.minimum(hi, gap))
    empty = (lo >= hi) | (~beyond & (lo >= gap))
    j_max = np.minimum(np.floor(sup * (n_phi / (2 * math.pi)) * (1 + 1e-9)), half).astype(np.int64)
    return np.where(empty, 0, j_max + 1)


@functools.lru_cache(maxsize=64)
def _sampling_plan(
    first: int, n_src: int, fine: int, grid: PolarGrid, band: tuple[int, int], block_values: int, dtype: torch.dtype, device
) -> tuple[_SampleBlock, ...]:
    """The radius blocks of ``ring_spectra`` and, per source radius r′ and band row r = r′ + δ, the angles
    j = 0 … j_max(r′, r) up to the last polar point inside the PSF's support square |d_x|, |d_y| < e.

    The block windows (set by each block's smallest radius) are what the cosine series need; sampling only
    up to each row's own j_max (``_row_lengths``) skips points that would read exact zeros: 36 % of them at
    128² and 31 % at 512², mostly on the innermost radii, whose full circles the block window must cover.
    Cached (``clear_caches``): it depends on the geometry only.  One entry per chunk of radii in the
    memory-bounded mode; its coordinates take about a tenth of the spectra's memory (17 MB at 1024²).
    Computed with NumPy on the host: a few dozen small-array steps per block, where torch's per-call
    overhead would dominate.
    """
    n_phi, step = grid.n_angles, grid.radial_step
    reach = psf_reach(fine)
    lo, hi = band
    blocks = []
    for start, stop in _radius_blocks(first, n_src, reach, step, max(1, block_values // ((hi - lo + 1) * grid.n_freq))):
        r_min = (first + start) * step
        rows = max(lo, -(first + stop - 1)), min(hi, grid.n_radii - 1 - first - start, _outer_limit(r_min, reach, step))
        blocks.append((start, stop, rows, _angular_limit(r_min, reach, n_phi)))
    n_rays = max(half for *_, half in blocks) + 1
    real = np.float32 if dtype == torch.float32 else np.float64  # coordinates are used at this precision
    rays = np.empty((3, n_rays + 1, 2), dtype=real)  # (3, J + 1, 2): the rays, then an unused point's (0, 0, −3)
    rays[:, :n_rays] = _sample_rays(fine, n_rays, grid, dtype=torch.float64).numpy()
    rays[:, n_rays] = ((0.0, 0.0), (0.0, 0.0), (-3.0, -3.0))  # beyond any bicubic tap of the PSF: reads 0
    plan = []
    for start, stop, (r_lo, r_hi), half in blocks:
        n_rb, n_rows, n_ang = stop - start, r_hi - r_lo + 1, half + 1
        src = np.arange(first + start, first + stop, dtype=real)  # (Rb,) radius index
        delta = np.arange(r_lo, r_hi + 1, dtype=real)  # (Db,)
        r_out = src[:, None] + delta  # (Rb, Db) radius index of the row
        off_grid = (r_out < 0) | (r_out >= grid.n_radii)  # rows past the polar grid's ends
        lengths = np.where(off_grid, 0, _row_lengths(src[:, None] * step, r_out * step, reach, half, n_phi))  # (Rb, Db)
        most = int(lengths.sum(1).max()) if n_rows > 0 else 0  # the most points any radius needs
        if most == 0:
            plan.append(_SampleBlock(start, stop, (r_lo, r_hi), half, None, None))
            continue
        rb = np.arange(n_rb)[:, None]  # (Rb, 1)
        shared = lengths.max(0)  # (Db,) the longest row over the block's radii
        if int(shared.sum()) <= most:  # one set of (δ, j) points serves every radius (all but the innermost block)
            row = np.repeat(np.arange(n_rows), shared)  # (P,)
            ang = np.arange(row.size) - (np.cumsum(shared) - shared)[row]  # (P,)
            unused = off_grid[:, row]  # (Rb, P): another radius's row, off this one's grid
        else:  # each radius its own points, padded to the longest list
            ends = np.cumsum(lengths, 1)  # (Rb, Db) the radius's points row after row, then padding
            point = np.broadcast_to(np.arange(most), (n_rb, most))  # (Rb, P)
            # one sorted search for all radii: offset each radius's ends and points past the previous ones
            found = np.searchsorted((ends + rb * (most + 1)).ravel(), (point + rb * (most + 1)).ravel(), side="right")
            row = np.minimum(found.reshape(n_rb, most) - rb * n_rows, n_rows - 1)  # (Rb, P) row of each point
            ang = point - np.take_along_axis(ends - lengths, row, 1)  # (Rb, P) angle index within its row
            unused = point >= ends[:, -1:]  # (Rb, P) padding
            ang = np.where(unused, n_rays, ang)  # the unused point's ray
        a_j, b_j, c_j = (np.take(rays[i], ang, axis=0) for i in range(3))  # (…, P, 2) each
        xy = np.multiply(src[:, None, None], a_j)  # (Rb, P, 2) = i A_j + δ B_j + C, in place after the first step
        xy += c_j
        xy += np.take(delta, row)[..., None] * b_j
        if unused.any() and ang.ndim == 1:  # shared points on rows past some radii's grid ends
            np.putmask(xy, np.broadcast_to(unused[..., None], xy.shape), -3.0)
        slot = np.where(unused, n_rows * n_rb * n_ang, (row * n_rb + rb) * n_ang + ang)  # (Rb, P) in (Db, Rb, J)
        xy_t = torch.from_numpy(xy[:, None]).to(device=device, dtype=dtype)  # (Rb, 1, P, 2)
        plan.append(_SampleBlock(start, stop, (r_lo, r_hi), half, xy_t, torch.from_numpy(slot).to(device)))
    return tuple(plan)


def _radius_blocks(first: int, n_src: int, reach: float, radial_step: float, max_radii: int, ratio: float = 1.4) -> list[tuple[int, int]]:
    """Split the radius indices first … first+n_src−1 into [start, stop) blocks (offsets from first): those
    inside the reach (whose PSFs surround the origin: every angle), then radii within a factor ``ratio``, so
    each block's angular and radial window, set by its smallest radius, is close to what its other radii
    need, and at most ``max_radii`` radii, which bounds the block's temporaries."""
    blocks, start = [], 0
    while start < n_src:
        r_min = (first + start) * radial_step
        limit = reach if r_min < reach else ratio * r_min  # px
        stop = max(start + 1, min(n_src, start + max_radii, math.ceil(limit / radial_step) - first))
        blocks.append((start, stop))
        start = stop
    return blocks


def ring_spectra(psfs: Tensor, first: int, grid: PolarGrid, *, band: tuple[int, int]) -> Tensor:
    """G[δ − δ_lo, i, k] = FFT_φ[ h_{r′_i}(r′_i + δ Δr, φ) ](k): banded angular spectra of radial PSFs, real.

    h_{r′}(r, φ) = PSF_{r′}(r cos φ − r′, r sin φ), the PSF of a source at (r′, 0) read at the polar point
    (r, φ) by bicubic interpolation of its 0.5-px sampling.  A Seidel PSF is mirror-symmetric about its
    field axis (W depends on u only through u·h and |u|), so h(r, −φ) = h(r, φ): the spectra are cosine
    series of the samples at φ ∈ [0, π], real, which halves their memory and the cost of applying them.
    Only the window where the PSF's support square |d_x|, |d_y| < e (``psf_reach``) can be met enters the
    cosine series (``cosine_series``): angles below atan2(e, r′ − e) (``_angular_limit``) and rows up to
    ``_outer_limit``, for blocks of radii (``_radius_blocks``) whose windows are set by their smallest radius;
    within it, each radius and ring is read only up to its own last angle inside the square and the rest
    of the window is zero-filled (``_sampling_plan``).  The rest are exact zeros.

    psfs: (R, k+2, F) upper halves of the PSFs of the sources at radii r′_i = (first + i) Δr along +x,
    sampled every 1/U px (U = ``PSF_UPSAMPLE``), unit sum on the pixel grid (``radial_psfs``).
    first: radius index of the first source.  band: (δ_lo, δ_hi) of ``band_limits``.
    Returns (δ_hi − δ_lo + 1, R, n_φ//2+1) real; rows with r′ + δ outside [0, N) are zero.
    """
    n_src, n_phi = psfs.shape[0], grid.n_angles
    lo, hi = band
    plan = _sampling_plan(first, n_src, psfs.shape[-1], grid, band, BLOCK_VALUES, psfs.dtype, psfs.device)
    short = [b.half + 1 for b in plan if _short_window(b.half + 1, n_phi)]
    table = cosine_table(n_phi, max(short), dtype=psfs.dtype, device=psfs.device) if short else None
    out = psfs.new_empty(hi - lo + 1, n_src, grid.n_freq)  # (D, R, K)
    for b in plan:
        block = out[:, b.start : b.stop]  # (D, Rb, K)
        (r_lo, r_hi), n_rows = b.rows, b.rows[1] - b.rows[0] + 1
        if b.xy is None:  # the PSFs reach no ring of the grid
            block.zero_()
            continue
        block[: max(0, r_lo - lo)].zero_()  # rows the PSFs cannot reach
        block[max(0, r_hi - lo + 1) :].zero_()
        samples = F.grid_sample(psfs[b.start : b.stop, None], b.xy, mode="bicubic", padding_mode="zeros", align_corners=True)  # (Rb, 1, 1, P)
        profiles = psfs.new_zeros(n_rows * (b.stop - b.start) * (b.half + 1) + 1)  # (Db·Rb·J + spill)
        profiles.scatter_(0, b.slot.flatten(), samples.flatten())
        profiles = profiles[:-1].view(n_rows, -1, b.half + 1)  # (Db, Rb, J): h at (r′ + δ, φ_j), zero past j_max
        block[r_lo - lo : r_hi - lo + 1] = cosine_series(profiles, n_phi, table)
    return out


def ring_accumulate(src: Tensor, spectra: Tensor, r0: int, out: Tensor, *, adjoint: bool = False) -> None:
    """out[:, r′ + d] += G[d, r′] src[:, r′] (forward) or out[:, r′] += G[d, r′] src[:, r′ + d] (adjoint), r′ = r0 … r0+R−1.

    src, out: (C, ·, K) real planes (real and imaginary parts of the angular spectra, ``_planes``); the
    side indexed by r′ + d is padded: its row r′ + d holds radius r′ + δ, δ = δ_lo + d, so that rows
    below 0 or past N−1 fall into the padding instead of needing clipped slices.  spectra: (D, R, K) real
    band for source radii r0 … r0+R−1.  Real spectra make the adjoint the same sums transposed, and one
    real multiply-add per band row serves all C planes.
    """
    n_src = spectra.shape[1]
    for d in range(spectra.shape[0]):
        if adjoint:
            out[:, r0 : r0 + n_src].addcmul_(spectra[d], src[:, r0 + d : r0 + d + n_src])
        else:
            out[:, r0 + d : r0 + d + n_src].addcmul_(spectra[d], src[:, r0 : r0 + n_src])


def _planes(zk: Tensor, pad: tuple[int, int] = (0, 0)) -> Tensor:
    """(L, N, K) complex → (2L, pad[0] + N + pad[1], K) real planes Re z_0, Im z_0, Re z_1, …, zero padding rows."""
    n_lead, n, k = zk.shape
    out = zk.real.new_zeros(n_lead, 2, pad[0] + n + pad[1], k) if any(pad) else zk.real.new_empty(n_lead, 2, n, k)
    out[:, :, pad[0] : pad[0] + n] = torch.view_as_real(zk).movedim(-1, 1)
    return out.view(2 * n_lead, -1, k)


def _from_planes(planes: Tensor) -> Tensor:
    """Inverse of ``_planes`` without padding: (2L, N, K) real → (L, N, K) complex."""
    return torch.complex(planes[0::2], planes[1::2])


def ring_conv(
    x: Tensor, spectra_chunks: Iterator[tuple[int, Tensor]], idx: Tensor, w: Tensor, grid: PolarGrid, band: tuple[int, int]
) -> Tensor:
    """y = B · irfft_φ( Σ_{r′} H_k(·, r′) X_k(r′) ) with X = rfft_φ(Bᵀ x): the ring forward model.

    x: (..., H, W) image (any units; the PSFs are unit-sum, so a constant stays ≈ constant away from
    the borders).  spectra_chunks: iterable of (r0, (D, R, K) banded spectra for radii r0 … r0+R−1),
    covering every radius once.  idx, w: taps of ``interpolation_taps``.  band: (δ_lo, δ_hi) of the
    spectra.  Returns (..., H, W).
    """
    lead = x.shape[:-2]
    n, lo = grid.n_radii, band[0]
    xk = torch.fft.rfft(cart_to_polar(x.reshape(-1, *x.shape[-2:]), idx, w, grid), dim=-1)  # (L, N, K)
    src = _planes(xk)  # (2L, N, K)
    out = src.new_zeros(src.shape[0], n + band[1] - lo, src.shape[-1])  # row r − δ_lo holds radius r
    for r0, g in spectra_chunks:
        ring_accumulate(src, g, r0, out)
    yp = torch.fft.irfft(_from_planes(out[:, -lo : n - lo]), n=grid.n_angles, dim=-1)  # (L, N, n_φ) per px²
    return polar_to_cart(yp, idx, w, grid.image_shape).reshape(*lead, *grid.image_shape)


def ring_conv_adjoint(
    y: Tensor, spectra_chunks: Iterator[tuple[int, Tensor]], idx: Tensor, w: Tensor, grid: PolarGrid, band: tuple[int, int]
) -> Tensor:
    """Aᵀ y = B · irfft_φ( Σ_r H_k(r, ·) Y_k(r) ) with Y = rfft_φ(Bᵀ y) (H_k real); arguments as ``ring_conv``."""
    lead = y.shape[:-2]
    lo = band[0]
    yk = torch.fft.rfft(cart_to_polar(y.reshape(-1, *y.shape[-2:]), idx, w, grid), dim=-1)
    src = _planes(yk, (-lo, band[1]))  # (2L, N + D − 1, K), row r − δ_lo holds radius r
    out = torch.zeros_like(src[:, : grid.n_radii])
    for r0, g in spectra_chunks:
        ring_accumulate(src, g, r0, out, adjoint=True)
    xp = torch.fft.irfft(_from_planes(out), n=grid.n_angles, dim=-1)
    return polar_to_cart(xp, idx, w, grid.image_shape).reshape(*lead, *grid.image_shape)


# --------------------------------------------------------------------------------------------------
# Operator class
# --------------------------------------------------------------------------------------------------


class RingBlur(nn.Module):
    """A x = B R Bᵀ x: spatially varying Seidel blur by the ring (LRI) model, with its exact adjoint.

    Keyword-only arguments:
        coeffs: Seidel coefficients (waves).
        image_shape: (H, W) pixels of the images it will be applied to; the optical axis is the centre.
        field_radius: px that correspond to H = 1 (default: half the larger image side, the design's
            "image half-width"); pass it explicitly when blurring a padded image.
        psf_size: odd PSF grid M in px (default: ``suggest_psf_size`` for the corner field).
        oversampling: q, pixels per λ/D.
        angular_factor: angles per radius of the polar grid.
        radial_step: Δr of the polar grid, px.
        interp: "linear" or "cubic" kernel for B and Bᵀ.
        cache: keep the banded spectra as a buffer (fast repeated use) or rebuild them per call in
            chunks of ``chunk_radii`` source radii (bounded memory).
        dtype, device: of the spectra and of the images it accepts.
    Buffers: ``taps_idx`` (C, T, S) int32, ``taps_w`` (C, T, S) (``interpolation_taps``), and with cache
    ``spectra`` (D, N, n_φ/2+1).
    ``band``: (δ_lo, δ_hi), the radius offsets of the spectra rows.
    """

    def __init__(
        self,
        *,
        coeffs: SeidelCoefficients,
        image_shape: tuple[int, int],
        field_radius: float | None = None,
        psf_size: int | None = None,
        oversampling: float = 2.0,
        angular_factor: float = 4.0,
        radial_step: float = 1.0,
        interp: InterpName = "cubic",
        cache: bool = True,
        chunk_radii: int = 128,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        check_choice("interp", interp, INTERPS)
        if chunk_radii < 1:
            raise ValueError(f"chunk_radii must be >= 1, got {chunk_radii!r}")
        self.coeffs = coeffs if isinstance(coeffs, SeidelCoefficients) else SeidelCoefficients.from_tensor(coeffs)
        self.grid = polar_grid(image_shape, angular_factor=angular_factor, radial_step=radial_step)
        self.field_radius = float(field_radius) if field_radius is not None else max(self.grid.image_shape) / 2.0
        if not self.field_radius > 0:
            raise ValueError(f"field_radius must be > 0 px, got {field_radius!r}")
        max_field = self.grid.corner_radius / self.field_radius
        self.psf_size = (
            check_psf_size(psf_size)
            if psf_size is not None
            else suggest_psf_size(self.coeffs, max_field=max_field, oversampling=oversampling)
        )
        self.oversampling = float(oversampling)
        self.band = band_limits(psf_reach(2 * _fine_half(self.psf_size) + 1), self.grid.radial_step)  # (δ_lo, δ_hi)
        self.chunk_radii = int(chunk_radii)
        self.cache = bool(cache)
        self.dtype = dtype
        self.hparams = dict(
            coeffs=self.coeffs.as_dict(),
            image_shape=list(self.grid.image_shape),
            field_radius=self.field_radius,
            psf_size=self.psf_size,
            oversampling=self.oversampling,
            angular_factor=float(angular_factor),
            radial_step=self.grid.radial_step,
            interp=interp,
            cache=self.cache,
            chunk_radii=self.chunk_radii,
        )
        idx, w = _shared_taps(self.grid, interp, dtype, None if device is None else torch.device(device))
        self.register_buffer("taps_idx", idx, persistent=False)
        self.register_buffer("taps_w", w, persistent=False)
        if self.cache:  # all radii in one pass: the PSFs are small next to the spectra
            self.register_buffer("spectra", self._spectra(0, self.grid.n_radii, idx.device), persistent=False)  # (D, N, K)

    def _spectra(self, r0: int, r1: int, device: torch.device) -> Tensor:
        """Banded spectra (D, r1 − r0, K) of the source radii r0 … r1−1."""
        with torch.no_grad():
            psfs = radial_psfs(
                self.coeffs,
                torch.arange(r0, r1, device=device) * self.grid.radial_step,
                field_radius=self.field_radius,
                psf_size=self.psf_size,
                oversampling=self.oversampling,
                dtype=self.dtype,
            )
            return ring_spectra(psfs, r0, self.grid, band=self.band)

    def _chunks(self) -> Iterator[tuple[int, Tensor]]:
        """(r0, spectra) covering every radius: the cached band, or chunks of ``chunk_radii`` rebuilt on the fly."""
        if self.cache:
            yield 0, self.spectra
            return
        n = self.grid.n_radii
        for r0 in range(0, n, self.chunk_radii):
            yield r0, self._spectra(r0, min(n, r0 + self.chunk_radii), self.taps_w.device)

    def _check(self, x: Tensor) -> None:
        if tuple(x.shape[-2:]) != self.grid.image_shape:
            raise ValueError(f"image is {tuple(x.shape[-2:])}, operator was built for {self.grid.image_shape}")

    def A(self, x: Tensor) -> Tensor:
        """Blur x: (..., H, W) → (..., H, W), e.g. (B, C, H, W)."""
        self._check(x)
        return ring_conv(x.to(self.dtype), self._chunks(), self.taps_idx, self.taps_w, self.grid, self.band)

    def A_adjoint(self, y: Tensor) -> Tensor:
        """Aᵀ y: (..., H, W) → (..., H, W)."""
        self._check(y)
        return ring_conv_adjoint(y.to(self.dtype), self._chunks(), self.taps_idx, self.taps_w, self.grid, self.band)

    def forward(self, x: Tensor) -> Tensor:
        return self.A(x)

    def psf_at(self, row: float, col: float) -> Tensor:
        """The pixel-grid PSF (M, M) of a source at image position (row, col), centre index M//2."""
        cy, cx = self.grid.centre
        field = torch.tensor([(col - cx) / self.field_radius, (row - cy) / self.field_radius], dtype=torch.float64)
        return seidel_psf(self.coeffs, field, size=self.psf_size, oversampling=self.oversampling).to(self.dtype)

    def centre_psf(self) -> Tensor:
        """The on-axis PSF (M, M): what a single-PSF deconvolution assumes everywhere."""
        cy, cx = self.grid.centre
        return self.psf_at(cy, cx)


# --------------------------------------------------------------------------------------------------
# Brute-force reference
# --------------------------------------------------------------------------------------------------


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


__all__ = [
    "INTERPS",
    "PolarGrid",
    "RingBlur",
    "band_limits",
    "cart_to_polar",
    "clear_caches",
    "cosine_series",
    "cosine_table",
    "interpolation_taps",
    "pixel_psfs",
    "polar_grid",
    "polar_to_cart",
    "psf_reach",
    "radial_psfs",
    "ring_accumulate",
    "ring_conv",
    "ring_conv_adjoint",
    "ring_spectra",
    "seidel_superposition",
    "superposition_blur",
]
