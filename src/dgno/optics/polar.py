"""The polar grid of the ring model and the interpolation between it and the pixels: B and Bᵀ.

Bᵀ (Cartesian → polar) *splats* each pixel's value, read as a mass, onto its neighbouring polar samples
with the weights of an interpolation kernel (bilinear or Keys cubic) in (radius, angle) index space; B
(polar → Cartesian) interpolates the polar image back at the pixel centres with the same weights, so B
and Bᵀ are exact adjoints. See :mod:`dgno.optics.ring` for the whole operator A = B R Bᵀ.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor

from dgno.choices import check_choice
from dgno.optics.seidel import next_smooth

InterpName = Literal["linear", "cubic"]
INTERPS: tuple[str, ...] = get_args(InterpName)
# B and Bᵀ sweep all taps of TAP_BLOCK pixels before the next ones, so the polar samples they touch stay in
# cache (2× faster on one CPU core at 1024², whose polar image is 8.5 MB).
TAP_BLOCK = 2**15


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
def shared_taps(grid: PolarGrid, interp: str, dtype: torch.dtype, device) -> tuple[Tensor, Tensor]:
    """``interpolation_taps``, kept for the last two geometries: they depend on the image geometry only, so
    operators for new coefficients on the same frames (a coefficient sweep, one operator per calibration)
    share them instead of recomputing them (1–2 ms of a 5–10 ms build and apply at 128²)."""
    return interpolation_taps(grid, interp=interp, dtype=dtype, device=device)


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


def clear_caches() -> None:
    """Forget the cached interpolation taps (see :func:`dgno.optics.ring.clear_caches`)."""
    shared_taps.cache_clear()
