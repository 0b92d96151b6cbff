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
* R: the per-frequency sums above, with H_k(r, r′) ≠ 0 only for |r − r′| ≤ b (the PSF support), so the
  spectra are stored as a band (2b+1, N, n_φ//2+1) and applied in O(b N n_φ).  (Computing one PSF per
  radius instead of one per pixel is where most of the gain over direct superposition comes from.)
* B (polar → Cartesian) interpolates the blurred polar image back at the pixel centres, with the same
  kernel.  Because B and Bᵀ share their weights and R's adjoint is the per-frequency conjugate transpose,
  the adjoint Aᵀ = B Rᵀ Bᵀ is exact (``ring_conv_adjoint``).

Image sizes: the optical axis is the image centre ((H−1)/2, (W−1)/2) and the polar disc covers the
corners, so any H×W (odd, even, non-square such as BBBC006's 520×696) is handled directly; the region of
the disc outside the image carries no mass, which is the same as zero-padding the image to the disc.
To model light entering from outside the frame, pad the image before blurring (see ``nonblind``).

Memory: ``cache=True`` keeps the banded spectra, (2b+1)·N·(n_φ/2+1) real numbers (they are real because
Seidel PSFs are mirror-symmetric about the field axis; ≈0.16 GB at 1024×1024 with a 25-px PSF);
``cache=False`` recomputes them for ``chunk_radii`` source radii at a time inside every call, bounding
the extra memory by the chunk.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgno.optics.seidel import SeidelCoefficients, check_psf_size, next_smooth, seidel_psf, suggest_psf_size

InterpName = Literal["linear", "cubic"]
INTERPS: tuple[str, ...] = get_args(InterpName)
PSF_UPSAMPLE = 2  # PSFs are sampled at 0.5 px and read by bicubic interpolation at polar points


def check_choice(what: str, value: object, allowed: tuple[str, ...]) -> None:
    """Raise a ValueError that echoes the bad value and lists the allowed ones."""
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; allowed: {', '.join(map(repr, allowed))}")


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


def _kernel_weights(frac: Tensor, interp: str) -> tuple[list[int], Tensor]:
    """Tap offsets and weights (P, T) for fractional positions frac ∈ [0, 1) (P,).

    linear: taps 0, 1 with 1 − a, a.  cubic: Keys' kernel (α = −½) at taps −1 … 2; it reproduces
    polynomials up to degree 2, i.e. interpolation keeps local means, slopes and curvatures.
    """
    if interp == "linear":
        return [0, 1], torch.stack([1 - frac, frac], dim=-1)
    a = frac

    def near(s: Tensor) -> Tensor:  # |s| ≤ 1
        return 1.5 * s**3 - 2.5 * s**2 + 1

    def far(s: Tensor) -> Tensor:  # 1 < |s| < 2
        return -0.5 * s**3 + 2.5 * s**2 - 4 * s + 2

    return [-1, 0, 1, 2], torch.stack([far(1 + a), near(a), near(1 - a), far(2 - a)], dim=-1)


def interpolation_taps(
    grid: PolarGrid, *, interp: InterpName = "cubic", dtype: torch.dtype = torch.float32, device=None
) -> tuple[Tensor, Tensor]:
    """Sparse matrix B (pixels × polar samples) as taps: y_pix[p] = Σ_t w[p, t] · y_polar.flat[idx[p, t]].

    Pixel (i, j) sits at x = j − c_x, y = i − c_y, i.e. radius ρ and angle φ = atan2(y, x) ∈ [0, 2π).
    A radial tap at index −1 is the radius-1 sample on the opposite side (angle + π), so the kernel stays
    centred through the origin.  Returns idx (H·W, T) int64 and w (H·W, T), T = 4 (linear) or 16 (cubic);
    built in blocks of rows so the float64 temporaries stay small next to the result.
    """
    check_choice("interp", interp, INTERPS)
    h, w = grid.image_shape
    cy, cx = grid.centre
    n_phi = grid.n_angles
    n_taps = 4 if interp == "linear" else 16
    idx = torch.empty(h * w, n_taps, dtype=torch.int64)  # int64: index_add_ is ~20× slower with int32
    weights = torch.empty(h * w, n_taps, dtype=dtype)
    xx = torch.arange(w, dtype=torch.float64) - cx  # (W,)
    rows = max(1, 65536 // w)
    for i0 in range(0, h, rows):
        yy = (torch.arange(i0, min(h, i0 + rows), dtype=torch.float64) - cy)[:, None]  # (n, 1)
        t = torch.sqrt(xx * xx + yy * yy).flatten() / grid.radial_step  # (p,) radius index, fractional
        s = (
            torch.remainder(torch.atan2(yy.expand(-1, w), xx.expand(yy.shape[0], -1)).flatten(), 2 * math.pi)
            * n_phi
            / (2 * math.pi)
        )
        r0, a0 = torch.floor(t), torch.floor(s)
        r_off, wr = _kernel_weights(t - r0, interp)  # (p, Tr)
        a_off, wa = _kernel_weights(s - a0, interp)  # (p, Ta)
        ri = r0.long()[:, None] + torch.tensor(r_off)  # (p, Tr) radius index
        opposite = ri < 0
        ri = ri.abs()
        aj = a0.long()[:, None, None] + torch.tensor(a_off)[None, None, :] + (opposite * (n_phi // 2))[:, :, None]  # (p, Tr, Ta)
        sl = slice(i0 * w, min(h, i0 + rows) * w)
        idx[sl] = (ri[:, :, None] * n_phi + torch.remainder(aj, n_phi)).flatten(1)
        weights[sl] = (wr[:, :, None] * wa[:, None, :]).flatten(1)
    assert int(idx.max()) < grid.n_radii * n_phi, "the guard rings keep every tap on the grid"
    return idx.to(device), weights.to(device)


def polar_to_cart(yp: Tensor, idx: Tensor, w: Tensor, image_shape: tuple[int, int]) -> Tensor:
    """B: y(p) = Σ_t w[p,t] y_polar[idx[p,t]].  yp: (..., N, n_φ) → (..., H, W)."""
    flat = yp.flatten(-2)  # (..., N·n_φ)
    vals = flat[..., idx]  # (..., P, T)
    return (vals * w).sum(-1).unflatten(-1, tuple(image_shape))


def cart_to_polar(x: Tensor, idx: Tensor, w: Tensor, grid: PolarGrid) -> Tensor:
    """Bᵀ: mass splat, m[q] = Σ_{p,t: idx[p,t]=q} w[p,t] x(p).  x: (..., H, W) → (..., N, n_φ)."""
    lead = x.shape[:-2]
    xf = x.reshape(-1, x.shape[-2] * x.shape[-1])  # (L, P)
    contrib = (xf[:, :, None] * w).reshape(xf.shape[0], -1)  # (L, P·T)
    out = xf.new_zeros(xf.shape[0], grid.n_radii * grid.n_angles)
    out.index_add_(1, idx.reshape(-1), contrib)
    return out.reshape(*lead, grid.n_radii, grid.n_angles)


# --------------------------------------------------------------------------------------------------
# PSF angular spectra (R) and their application
# --------------------------------------------------------------------------------------------------


def band_halfwidth(psf_size: int, radial_step: float = 1.0) -> int:
    """b = ⌈√2 · (M/2) / Δr⌉ + 2 radii: a PSF on an M×M grid reaches at most √2·M/2 px from its centre."""
    return math.ceil(math.sqrt(2.0) * psf_size / 2.0 / radial_step) + 2


def ring_spectra(psfs: Tensor, radii: Tensor, grid: PolarGrid, *, psf_size: int, band: int) -> Tensor:
    """G[δ+b, i, k] = FFT_φ[ h_{r′_i}(r′_i + δ, φ_j) ](k): banded angular spectra of radial PSFs, real.

    h_{r′}(r, φ) = PSF_{r′}(r cos φ − r′, r sin φ), the PSF of a source at (r′, 0) read at the polar point
    (r, φ) by bicubic interpolation of its 0.5-px sampling.  A Seidel PSF is mirror-symmetric about its
    field axis (W depends on u only through u·h and |u|), so h(r, −φ) = h(r, φ): only φ ∈ [0, π] is
    sampled and the spectra, cosine series, are real, which halves their memory and the cost of applying
    them.  Only angles within the PSF's reach of the source are evaluated (|φ| ≤ asin(e / r′), e the grid
    corner distance); the rest are exact zeros.  The radii are processed in blocks spanning a factor
    ≤ 1.3 in radius, so each block's angular window is close to what its radii need.

    psfs: (R, F, F) PSFs of the sources at radii r′ (px) along +x, sampled every 1/U px (U =
    ``PSF_UPSAMPLE``) about the centre index F//2, unit sum on the pixel grid (``radial_psfs``).
    radii: (R,) ascending radius indices i (r′ = i Δr).  psf_size: M.  band: b, in radius steps.
    Returns (2b+1, R, n_φ//2+1) real; rows with r′ + δ outside [0, N) are zero.
    """
    n_src, fine, _ = psfs.shape
    n_phi = grid.n_angles
    reach = math.sqrt(2.0) * psf_size / 2.0 + 2.0  # px, with the bicubic footprint
    r_px = radii.detach().cpu().double() * grid.radial_step  # (R,) px, ascending
    delta = torch.arange(-band, band + 1, device=psfs.device, dtype=psfs.dtype)  # (D,)
    centre, scale = fine // 2, 2.0 / (fine - 1)  # align_corners=True: index 0 → −1, fine−1 → +1
    full = psfs.new_zeros(2 * band + 1, n_src, n_phi)  # (D, R, n_φ)
    start = 0
    while start < n_src:
        r_min = float(r_px[start])
        if r_min <= reach:  # the PSF surrounds the origin: every angle
            stop, half = int((r_px <= reach).sum()), n_phi // 2
        else:
            stop = int((r_px <= 1.3 * r_min).sum())
            half = min(n_phi // 2, math.ceil(math.asin(reach / r_min) * n_phi / (2 * math.pi)) + 2)
        phi = torch.arange(0, half + 1, device=psfs.device, dtype=psfs.dtype) * (2 * math.pi / n_phi)  # (J,) 0 … half
        i_out = radii[start:stop].to(psfs.dtype)[:, None, None] + delta[None, :, None]  # (Rb, D, 1) output radius index
        r_src = radii[start:stop].to(psfs.dtype)[:, None, None] * grid.radial_step  # (Rb, 1, 1) px
        # grid_sample coordinate of the offset d (px): (centre + U d) · scale − 1, with d = (r cos φ − r′, r sin φ)
        a = PSF_UPSAMPLE * scale * grid.radial_step * i_out  # (Rb, D, 1): r in grid_sample units
        offset = centre * scale - 1
        gx = torch.addcmul(offset - PSF_UPSAMPLE * scale * r_src, a, torch.cos(phi))  # (Rb, D, J)
        gy = torch.addcmul(torch.full_like(a, offset), a, torch.sin(phi))
        grid_xy = torch.stack([gx, gy], dim=-1)  # (Rb, D, J, 2)
        samples = F.grid_sample(psfs[start:stop, None], grid_xy, mode="bicubic", padding_mode="zeros", align_corners=True)
        valid = (i_out >= 0) & (i_out < grid.n_radii)  # (Rb, D, 1)
        samples = (samples[:, 0] * valid).transpose(0, 1)  # (D, Rb, J)
        full[:, start:stop, : half + 1] = samples
        if half:  # h(r, −φ) = h(r, φ): angles n_φ − half … n_φ − 1 mirror half … 1
            full[:, start:stop, n_phi - half :] = samples[..., 1:].flip(-1)
        start = stop
    return torch.fft.rfft(full, dim=-1).real.contiguous()  # (D, R, K); imaginary parts are round-off


def ring_accumulate(src: Tensor, spectra: Tensor, r0: int, out: Tensor, *, adjoint: bool = False) -> None:
    """out[:, r′+δ] += G[δ, r′] src[:, r′] (forward) or out[:, r′] += conj(G[δ, r′]) src[:, r′+δ] (adjoint).

    src, out: (L, N, K) complex angular spectra.  spectra: (2b+1, R, K), real or complex, for source radii
    r0 … r0+R−1.
    """
    n = src.shape[-2]
    n_band, n_src, _ = spectra.shape
    b = n_band // 2
    for d in range(n_band):
        delta = d - b
        lo = max(r0, -delta)
        hi = min(r0 + n_src, n - delta)
        if hi <= lo:
            continue
        g = spectra[d, lo - r0 : hi - r0]  # (n_valid, K)
        if adjoint:
            out[:, lo:hi] += g.conj() * src[:, lo + delta : hi + delta]
        else:
            out[:, lo + delta : hi + delta] += g * src[:, lo:hi]


def radial_psfs(
    coeffs: SeidelCoefficients, radii: Tensor, *, field_radius: float, psf_size: int, oversampling: float, dtype: torch.dtype
) -> Tensor:
    """PSFs of sources at (r′, 0), r′ = radii (R,) px (float): field h = (r′ / field_radius, 0).  → (R, F, F).

    Sampled every 1/U px (U = ``PSF_UPSAMPLE``) and cropped to the F = 2k+1 samples symmetric about the
    centre: the even-sized FFT grid has one unpaired edge row/column, which would make the model's PSFs
    (and so the blur of a symmetric object) slightly lopsided.
    """
    field = torch.stack([radii.to(dtype) / field_radius, torch.zeros(radii.shape, dtype=dtype, device=radii.device)], dim=-1)
    c = coeffs.as_tensor(dtype=dtype, device=radii.device)
    fine = seidel_psf(c, field, size=psf_size, oversampling=oversampling, upsample=PSF_UPSAMPLE)
    n = fine.shape[-1]
    centre = n // 2
    k = min(centre, n - 1 - centre)
    return fine[..., centre - k : centre + k + 1, centre - k : centre + k + 1].to(dtype)


def ring_conv(x: Tensor, spectra_chunks: Iterator[tuple[int, Tensor]], idx: Tensor, w: Tensor, grid: PolarGrid) -> Tensor:
    """y = B · irfft_φ( Σ_{r′} H_k(·, r′) X_k(r′) ) with X = rfft_φ(Bᵀ x): the ring forward model.

    x: (..., H, W) image (any units; the PSFs are unit-sum, so a constant stays ≈ constant away from
    the borders).  spectra_chunks: iterable of (r0, (2b+1, R, K) banded spectra for radii r0 … r0+R−1),
    covering every radius once.  idx, w: taps of ``interpolation_taps``.  Returns (..., H, W).
    """
    lead = x.shape[:-2]
    xp = cart_to_polar(x.reshape(-1, *x.shape[-2:]), idx, w, grid)  # (L, N, n_φ) masses
    xk = torch.fft.rfft(xp, dim=-1)  # (L, N, K)
    yk = torch.zeros_like(xk)
    for r0, g in spectra_chunks:
        ring_accumulate(xk, g, r0, yk)
    yp = torch.fft.irfft(yk, n=grid.n_angles, dim=-1)  # (L, N, n_φ) intensity per px²
    return polar_to_cart(yp, idx, w, grid.image_shape).reshape(*lead, *grid.image_shape)


def ring_conv_adjoint(y: Tensor, spectra_chunks: Iterator[tuple[int, Tensor]], idx: Tensor, w: Tensor, grid: PolarGrid) -> Tensor:
    """Aᵀ y = B · irfft_φ( Σ_r conj(H_k(r, ·)) Y_k(r) ) with Y = rfft_φ(Bᵀ y); same arguments as ``ring_conv``."""
    lead = y.shape[:-2]
    yp = cart_to_polar(y.reshape(-1, *y.shape[-2:]), idx, w, grid)
    yk = torch.fft.rfft(yp, dim=-1)
    xk = torch.zeros_like(yk)
    for r0, g in spectra_chunks:
        ring_accumulate(yk, g, r0, xk, adjoint=True)
    xp = torch.fft.irfft(xk, n=grid.n_angles, dim=-1)
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
    Buffers: ``taps_idx`` (H·W, T), ``taps_w`` (H·W, T), and with cache ``spectra`` (2b+1, N, n_φ/2+1).
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
        self.band = band_halfwidth(self.psf_size, self.grid.radial_step)
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
        idx, w = interpolation_taps(self.grid, interp=interp, dtype=dtype, device=device)
        self.register_buffer("taps_idx", idx, persistent=False)
        self.register_buffer("taps_w", w, persistent=False)
        if self.cache:
            spectra = None
            for r0, g in self._build_chunks(torch.device(device) if device is not None else torch.device("cpu")):
                if spectra is None:  # allocate once, fill chunk by chunk: no second full-size copy
                    spectra = g.new_empty(g.shape[0], self.grid.n_radii, g.shape[2])
                spectra[:, r0 : r0 + g.shape[1]] = g
            self.register_buffer("spectra", spectra, persistent=False)  # (2b+1, N, K)

    def _build_chunks(self, device: torch.device) -> Iterator[tuple[int, Tensor]]:
        """Yield (r0, banded spectra) for source radii r0 … r0+chunk−1, computed on the fly."""
        n = self.grid.n_radii
        with torch.no_grad():
            for r0 in range(0, n, self.chunk_radii):
                radii = torch.arange(r0, min(n, r0 + self.chunk_radii), device=device)  # indices
                psfs = radial_psfs(
                    self.coeffs,
                    radii * self.grid.radial_step,
                    field_radius=self.field_radius,
                    psf_size=self.psf_size,
                    oversampling=self.oversampling,
                    dtype=self.dtype,
                )
                yield r0, ring_spectra(psfs, radii, self.grid, psf_size=self.psf_size, band=self.band)

    def _chunks(self) -> Iterator[tuple[int, Tensor]]:
        if self.cache:
            return iter([(0, self.spectra)])
        return self._build_chunks(self.taps_w.device)

    def _check(self, x: Tensor) -> None:
        if tuple(x.shape[-2:]) != self.grid.image_shape:
            raise ValueError(f"image is {tuple(x.shape[-2:])}, operator was built for {self.grid.image_shape}")

    def A(self, x: Tensor) -> Tensor:
        """Blur x: (..., H, W) → (..., H, W), e.g. (B, C, H, W)."""
        self._check(x)
        return ring_conv(x.to(self.dtype), self._chunks(), self.taps_idx, self.taps_w, self.grid)

    def A_adjoint(self, y: Tensor) -> Tensor:
        """Aᵀ y: (..., H, W) → (..., H, W)."""
        self._check(y)
        return ring_conv_adjoint(y.to(self.dtype), self._chunks(), self.taps_idx, self.taps_w, self.grid)

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
) -> Tensor:
    """PSF(·; h_q) for every pixel q, h_q = (q − centre) / field_radius: the brute-force model's kernels.

    image_shape: (H, W) px.  field_radius: px for H = 1.  psf_size: M (odd).  Returns (H, W, M, M), each
    unit-sum with its centre at index M//2.  Memory H·W·M² values: small images only.
    """
    check_psf_size(psf_size)
    h, w = image_shape
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    fy, fx = torch.meshgrid(
        (torch.arange(h, dtype=dtype) - cy) / field_radius, (torch.arange(w, dtype=dtype) - cx) / field_radius, indexing="ij"
    )
    field = torch.stack([fx, fy], dim=-1)  # (H, W, 2)
    c = coeffs.as_tensor(dtype=dtype)
    out = torch.empty(h, w, psf_size, psf_size, dtype=dtype)
    for i0 in range(0, h, 16):  # row blocks bound the complex pupil/far-field temporaries
        out[i0 : i0 + 16] = seidel_psf(c, field[i0 : i0 + 16], size=psf_size, oversampling=oversampling)
    return out  # (H, W, M, M)


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
        i1 = min(h, i0 + rows_per_chunk)
        contrib = xf[:, i0:i1, :, None, None] * psfs[i0:i1]  # (L, n, W, M, M)
        cols = contrib.reshape(xf.shape[0], (i1 - i0) * w, m * m).transpose(1, 2)  # (L, M², n·W)
        block = F.fold(cols, output_size=(i1 - i0 + m - 1, w + m - 1), kernel_size=m)  # (L, 1, n+M−1, W+M−1)
        out[:, i0 : i1 + m - 1] += block[:, 0]  # block (i, j) at kernel offset (a, b) lands on (i + a, j + b)
    half = m // 2
    return out[:, half : half + h, half : half + w].reshape(*lead, h, w)


__all__ = [
    "INTERPS",
    "PolarGrid",
    "RingBlur",
    "band_halfwidth",
    "cart_to_polar",
    "interpolation_taps",
    "pixel_psfs",
    "polar_grid",
    "polar_to_cart",
    "radial_psfs",
    "ring_accumulate",
    "ring_conv",
    "ring_conv_adjoint",
    "ring_spectra",
    "superposition_blur",
]
