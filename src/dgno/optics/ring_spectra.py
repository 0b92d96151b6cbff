"""R of the ring model: per-radius Seidel PSFs → banded angular spectra H_k(r, r′).

A PSF read by bicubic interpolation of its 0.5-px samples is exactly zero outside a square about the
source (``psf_reach``), so H_k(r, r′) ≠ 0 only for r − r′ in a band (``band_limits``) and the spectra
are stored as (D, N, n_φ//2+1). The PSF of each source radius (``radial_psfs``, one per radius rather
than one per pixel) is sampled at the polar points where its square can be met, and each sampled
angular profile, even in φ, becomes its real rFFT as a cosine series (``ring_spectra``,
``cosine_series``). See :mod:`dgno.optics.ring` for the whole operator A = B R Bᵀ.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from dgno.optics.polar import PolarGrid
from dgno.optics.seidel import SeidelCoefficients, check_psf_size, pupil_coordinates, seidel_wavefront

PSF_UPSAMPLE = 2  # PSFs are sampled at 0.5 px and read by bicubic interpolation at polar points
# ``ring_spectra`` handles radius blocks of at most BLOCK_VALUES spectra values (bounding its temporaries,
# 2 MB in float32).
BLOCK_VALUES = 2**19


def _dft_phases(a: Tensor, b: Tensor, n: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin of 2π a_i b_j / n, (A, B), evaluated in float64 (phase error ≲ 1e-16 · 2π max|a b| / n)."""
    phase = torch.outer(a.to(torch.float64), b.to(torch.float64) * (2 * math.pi / n))
    return torch.cos(phase).to(dtype), torch.sin(phase).to(dtype)


def radial_psfs(
    coeffs: SeidelCoefficients, radii: Tensor, *, field_radius: float, psf_size: int, oversampling: float, dtype: torch.dtype
) -> Tensor:
    """Upper halves of the PSFs of sources at (r′, 0), r′ = radii (R,) px (float), field h = (r′ / field_radius, 0).

    Sampled every 1/U px (U = ``PSF_UPSAMPLE``): columns at the offsets d_x = −k/U … k/U, rows at
    d_y = −1/U … k/U, k = ``fine_half(M)``; → (R, k+2, 2k+1).  The values are the samples of
    ``seidel_psf(…, upsample=U)``, kept symmetric about its centre (the even-sized FFT grid has one unpaired
    edge row/column, which would make the model's PSFs, and so the blur of a symmetric object, slightly
    lopsided).  These PSFs are mirror-symmetric, h(d_x, −d_y) = h(d_x, d_y), and the ring model reads them
    at d_y ≥ 0 only (``ring_spectra``), so the rows below −1/U (outside the bicubic footprint) are not
    computed.  Two DFT matrix products over the aperture's support (|u| ≤ M/(2q) + ½ samples, about half
    the M×M pupil grid at q = 2) replace a zero-padded U·M-point 2-D FFT: only the kept frequencies are
    evaluated, and the pupil is even in u_y (W depends on u_y only through ρ²), so the u_y sum is a cosine
    sum over the rows u_y ≥ 0.
    """
    k = fine_half(psf_size)
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
    c, n, k = m // 2, PSF_UPSAMPLE * m, fine_half(psf_size)
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


def fine_half(psf_size: int) -> int:
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


def _block_points(lengths: np.ndarray, off_grid: np.ndarray, most: int, n_rays: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, angle index, unused) of the points one block samples, from each (radius, row)'s length (Rb, Db).

    One set of (δ, j) points serves every radius when that is no longer than the longest radius's own
    list (all but the innermost block): then each is (P,) and ``unused`` (Rb, P) marks rows off a radius's
    grid. Otherwise each radius gets its own points, padded to the longest list, all (Rb, P); padding
    reads ray ``n_rays``, the unused point.
    """
    n_rb, n_rows = lengths.shape
    rb = np.arange(n_rb)[:, None]  # (Rb, 1)
    shared = lengths.max(0)  # (Db,) the longest row over the block's radii
    if int(shared.sum()) <= most:
        row = np.repeat(np.arange(n_rows), shared)  # (P,)
        ang = np.arange(row.size) - (np.cumsum(shared) - shared)[row]  # (P,)
        return row, ang, off_grid[:, row]  # unused (Rb, P): another radius's row, off this one's grid
    ends = np.cumsum(lengths, 1)  # (Rb, Db) the radius's points row after row, then padding
    point = np.broadcast_to(np.arange(most), (n_rb, most))  # (Rb, P)
    # one sorted search for all radii: offset each radius's ends and points past the previous ones
    found = np.searchsorted((ends + rb * (most + 1)).ravel(), (point + rb * (most + 1)).ravel(), side="right")
    row = np.minimum(found.reshape(n_rb, most) - rb * n_rows, n_rows - 1)  # (Rb, P) row of each point
    ang = point - np.take_along_axis(ends - lengths, row, 1)  # (Rb, P) angle index within its row
    unused = point >= ends[:, -1:]  # (Rb, P) padding
    return row, np.where(unused, n_rays, ang), unused  # padding reads the unused point's ray


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
        row, ang, unused = _block_points(lengths, off_grid, most, n_rays)
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


def clear_caches() -> None:
    """Forget the cached sampling rays, cosine and pupil DFT tables and sampling plans (see
    :func:`dgno.optics.ring.clear_caches`)."""
    for fn in (_pupil_dft, cosine_table, _sample_rays, _sampling_plan):
        fn.cache_clear()
