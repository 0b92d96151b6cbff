"""Seidel aberrations → point-spread functions (PSFs) at any field position.

Wavefront error in waves at the normalised pupil point u = (u_x, u_y), ρ = |u| ≤ 1, for a point source at
the normalised field position h = (h_x, h_y), H = |h|, with θ the pupil angle measured from the direction
of h (so ρ cos θ = u·h / H)::

    W(u; h) = W040 ρ⁴ + W131 H ρ³ cos θ + W222 H² ρ² cos²θ + W220 H² ρ² + W311 H³ ρ cos θ + W020 ρ²
            = W040 ρ⁴ + W131 ρ² (u·h) + W222 (u·h)² + W220 |h|² ρ² + W311 |h|² (u·h) + W020 ρ²

The second line is what the code evaluates: it has no division by H, so it is smooth at the optical axis
and differentiable in the coefficients and in h.  The pupil function is P(u) = A(u) exp(2πi W(u; h)) with
A the clear circular aperture, and the PSF is its far field, PSF(d) ∝ |F[P](d)|², normalised to unit sum
over the pixel grid.

Sampling.  The PSF is computed on an M×M pixel grid (M = ``size``, odd, centred at index M // 2) from a
pupil sampled on the same M×M grid with radius R = M / (2q) samples, where q (``oversampling``) is the
number of image pixels per diffraction unit λ/D: the Airy core's first zero lies at 1.22 q px, and q = 2 is
Nyquist sampling of the intensity.  A ray leaving the pupil at u lands 2q ∇W(u) px from the paraxial image
point, which sets how large M must be (:func:`suggest_psf_size`).  A pupil tilt of s/(2q)·u waves shifts the
PSF by s px, which is how sub-pixel source positions enter (``shift``).

Positive W311 moves the image of an off-axis point outward (pincushion), positive W131 puts the coma flare
on the outward side.  The PSF is unchanged when all even terms (W040, W222, W220, W020) flip sign together:
an in-focus intensity image cannot tell a wavefront from its mirror image (see ``calibration``).

Tiers, as in deepinv: pure functions (:func:`seidel_wavefront`, :func:`seidel_psf`), the operator that
holds PSF spectra as buffers lives in ``ring.RingBlur``, and :class:`SeidelGenerator` draws coefficients.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from dgno.optics.aberrations import EVEN_TERMS, SEIDEL_NAMES, SeidelCoefficients  # noqa: F401  (part of this module's API)


def _as_coeff_tensor(coeffs: SeidelCoefficients | Tensor | Sequence[float], *, dtype, device) -> Tensor:
    if isinstance(coeffs, SeidelCoefficients):
        return coeffs.as_tensor(dtype=dtype, device=device)
    t = torch.as_tensor(coeffs, dtype=dtype, device=device)
    if t.shape[-1:] != (len(SEIDEL_NAMES),):
        raise ValueError(f"coefficients must have a last axis of {len(SEIDEL_NAMES)} {SEIDEL_NAMES}, got shape {tuple(t.shape)}")
    return t


def check_psf_size(size: int) -> int:
    """PSF grids are odd so that the centre pixel is unambiguous for every consumer (FFT, scipy 'same')."""
    if int(size) != size or size < 3 or size % 2 == 0:
        raise ValueError(f"PSF size must be an odd integer >= 3, got {size!r}")
    return int(size)


def pupil_coordinates(size: int, oversampling: float, *, dtype: torch.dtype = torch.float64, device=None) -> tuple[Tensor, Tensor, Tensor]:
    """u_x, u_y = (index − M//2) / R and the aperture A(u), all (M, M); R = M / (2q) samples.

    A is the fraction of each pupil sample inside ρ ≤ 1 (linear ramp over one sample at the rim) rather
    than a hard 0/1 disc: a pixelated disc has a square-ish far field, and the ring model needs PSFs
    that rotate with the field direction; the soft rim makes the on-axis PSF round to ~1e-3.

    size: M, odd, PSF grid size in image pixels.  oversampling: q, image pixels per λ/D (≥ 2 avoids
    aliasing of the intensity PSF; smaller values still give exact samples of the periodised PSF).
    """
    check_psf_size(size)
    if not oversampling > 0:
        raise ValueError(f"oversampling must be > 0, got {oversampling!r}")
    radius = size / (2.0 * oversampling)  # pupil radius in samples
    axis = (torch.arange(size, dtype=dtype, device=device) - size // 2) / radius
    uy, ux = torch.meshgrid(axis, axis, indexing="ij")  # rows ↔ y, columns ↔ x
    rho = torch.sqrt(ux * ux + uy * uy)
    aperture = torch.clamp(radius * (1.0 - rho) + 0.5, 0.0, 1.0)
    return ux, uy, aperture


def seidel_wavefront(coeffs: Tensor, field: Tensor, ux: Tensor, uy: Tensor) -> Tensor:
    """W(u; h) = W040 ρ⁴ + W131 ρ²(u·h) + W222 (u·h)² + W220 |h|²ρ² + W311 |h|²(u·h) + W020 ρ²  [waves].

    coeffs: (..., 6) waves, order ``SEIDEL_NAMES``.  field: (..., 2) normalised field position (h_x, h_y),
    h = position / field radius, x along image columns, y along rows.  ux, uy: (M, M) normalised pupil
    coordinates.  Leading axes of coeffs and field broadcast.  Returns (..., M, M) waves.
    """
    c = coeffs[..., :, None, None]  # (..., 6, 1, 1)
    hx, hy = field[..., 0, None, None], field[..., 1, None, None]  # (..., 1, 1)
    rho2 = ux * ux + uy * uy  # (M, M)
    uh = ux * hx + uy * hy  # (..., M, M)
    h2 = hx * hx + hy * hy  # (..., 1, 1)
    return (
        c[..., 0, :, :] * rho2 * rho2
        + c[..., 1, :, :] * rho2 * uh
        + c[..., 2, :, :] * uh * uh
        + c[..., 3, :, :] * h2 * rho2
        + c[..., 4, :, :] * h2 * uh
        + c[..., 5, :, :] * rho2
    )


def seidel_psf(
    coeffs: SeidelCoefficients | Tensor | Sequence[float],
    field: Tensor | Sequence[float],
    *,
    size: int,
    oversampling: float = 2.0,
    upsample: int = 1,
    shift: Tensor | None = None,
) -> Tensor:
    """PSF(d; h) = |F[A · exp(2πi (W(u; h) + s·u / (2q)))](d)|² / (M² Σ_u |A(u)|²).

    The normaliser is Parseval's Σ_d |F[P]|² on the M×M pixel grid, so the PSF sums to 1 over pixels
    whatever ``upsample`` is (an upsampled grid sums to upsample²: its values are densities per pixel).

    coeffs: (6,) or (..., 6) waves (``SeidelCoefficients`` or tensor; gradients flow through a tensor).
    field: (2,) or (..., 2) normalised field position h (x = columns, y = rows), broadcast with coeffs.
    size: M, odd PSF grid size in pixels.  oversampling: q, pixels per λ/D.
    upsample: U ≥ 1, sample the same continuous PSF on a grid U× finer (pupil zero-padded to U·M); offsets
    of fine index k from the centre (U·M)//2 are (k − (U·M)//2) / U px.  shift: (..., 2) px (x, y), moves
    the PSF by this sub-pixel amount via a pupil tilt.
    Returns (..., U·M, U·M) float PSF, centre at index (U·M)//2, dtype of the coefficients (float64 for
    ``SeidelCoefficients``).
    """
    if int(upsample) != upsample or upsample < 1:
        raise ValueError(f"upsample must be an integer >= 1, got {upsample!r}")
    if isinstance(coeffs, Tensor) and coeffs.is_floating_point():
        dtype, device = coeffs.dtype, coeffs.device
    elif isinstance(field, Tensor) and field.is_floating_point():
        dtype, device = field.dtype, field.device
    else:
        dtype, device = torch.float64, None
    c = _as_coeff_tensor(coeffs, dtype=dtype, device=device)
    h = torch.as_tensor(field, dtype=dtype, device=c.device)
    ux, uy, aperture = pupil_coordinates(size, oversampling, dtype=dtype, device=c.device)
    w = seidel_wavefront(c, h, ux, uy)  # (..., M, M) waves
    if shift is not None:
        s = torch.as_tensor(shift, dtype=dtype, device=c.device)
        w = w + (s[..., 0, None, None] * ux + s[..., 1, None, None] * uy) / (2.0 * oversampling)
    phase = 2 * math.pi * w  # (..., M, M) rad
    pupil = torch.complex(aperture * torch.cos(phase), aperture * torch.sin(phase))  # cheaper than complex exp
    n = size * int(upsample)
    far = torch.fft.fft2(pupil, s=(n, n))  # (..., U·M, U·M), zero offset at index 0
    psf = torch.fft.fftshift(far.real**2 + far.imag**2, dim=(-2, -1))  # zero offset at index n // 2
    # Pupil centred at index M//2 only adds a phase ramp to the far field: |·|² removes it.
    return psf / (size * size * (aperture * aperture).sum())


def max_pupil_slope(coeffs: SeidelCoefficients, max_field: float, *, n_samples: int = 65) -> float:
    """max |∇_u W| over the pupil ρ ≤ 1 and field radii H ≤ max_field, in waves per unit pupil radius.

    Evaluated on the u_y ≥ 0 half of an n×n pupil grid (with h along x, |∇W| is even in u_y) and 9 field
    radii at once, with the analytic gradient
    ∇W = 4W040 ρ² u + W131 (2u(u·h) + ρ² h) + 2W222 (u·h) h + 2W220 H² u + W311 H² h + 2W020 u,
    h along x (the PSF only rotates with the field direction).  Term-wise bounds would double-count:
    the terms peak at different pupil points and often partly cancel.
    """
    axis = torch.linspace(-1.0, 1.0, n_samples, dtype=torch.float64)
    uy, ux = torch.meshgrid(axis[n_samples // 2 :], axis, indexing="ij")
    inside = ux * ux + uy * uy <= 1.0
    ux, uy = ux[inside], uy[inside]  # (P,)
    rho2 = ux * ux + uy * uy
    c = coeffs
    hx = torch.linspace(0.0, float(max_field), 9, dtype=torch.float64)[:, None]  # (9, 1) field radii
    uh = ux * hx  # (9, P)
    gx = 4 * c.W040 * rho2 * ux + c.W131 * (2 * ux * uh + rho2 * hx) + 2 * c.W222 * uh * hx
    gx = gx + 2 * c.W220 * hx**2 * ux + c.W311 * hx**3 + 2 * c.W020 * ux
    gy = 4 * c.W040 * rho2 * uy + c.W131 * 2 * uy * uh + 2 * c.W220 * hx**2 * uy + 2 * c.W020 * uy
    return float(torch.sqrt(gx * gx + gy * gy).max())


def suggest_psf_size(coeffs: SeidelCoefficients, *, max_field: float, oversampling: float = 2.0) -> int:
    """M = the smallest odd 7-smooth integer ≥ 2 ⌈r_geo + 3 q⌉ + 1, r_geo = 2 q max|∇W| px the geometric spot radius.

    The margin 3q (≈ 2.5 Airy radii) keeps the first diffraction rings on the grid for a weak aberration,
    and M > 2 r_geo is also the condition for the pupil phase to be sampled above Nyquist.  Rounding up to
    a product of 3, 5 and 7 keeps the FFTs of M and 2M fast (23 → 25 makes a 2M-point FFT 2× faster).
    max_field: largest normalised field radius H the PSFs are needed at (image corners).
    """
    r_geo = 2.0 * oversampling * max_pupil_slope(coeffs, max_field)
    return next_smooth(2 * math.ceil(r_geo + 3.0 * oversampling) + 1, primes=(3, 5, 7))


def next_smooth(n: int, *, primes: tuple[int, ...]) -> int:
    """Smallest m ≥ n whose prime factors all lie in `primes` (FFT-friendly sizes)."""
    m = max(int(n), 1)
    while True:
        k = m
        for p in primes:
            while k % p == 0:
                k //= p
        if k == 1:
            return m
        m += 1


class SeidelGenerator:
    """Random Seidel coefficients, uniform per term in a symmetric range (deepinv-style generator).

    ranges: {name: max |value| in waves}; names not given stay zero.  ``step`` returns the parameters
    a new ``RingBlur`` takes.
    """

    def __init__(self, *, ranges: Mapping[str, float]) -> None:
        unknown = set(ranges) - set(SEIDEL_NAMES)
        if unknown:
            raise ValueError(f"unknown Seidel coefficient(s) {sorted(unknown)}; allowed: {', '.join(SEIDEL_NAMES)}")
        if any(v < 0 for v in ranges.values()):
            raise ValueError(f"ranges must be >= 0 (max |coefficient| in waves), got {dict(ranges)}")
        self.ranges = dict(ranges)

    def step(self, batch_size: int = 1, seed: int | None = None) -> dict[str, list[SeidelCoefficients]]:
        """Draw `batch_size` coefficient sets: {"coeffs": [SeidelCoefficients, ...]}."""
        gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        bound = torch.tensor([self.ranges.get(n, 0.0) for n in SEIDEL_NAMES], dtype=torch.float64)
        draws = (2 * torch.rand(batch_size, len(SEIDEL_NAMES), generator=gen, dtype=torch.float64) - 1) * bound
        return {"coeffs": [SeidelCoefficients.from_tensor(row) for row in draws]}


__all__ = [
    "SEIDEL_NAMES",
    "EVEN_TERMS",
    "SeidelCoefficients",
    "SeidelGenerator",
    "check_psf_size",
    "max_pupil_slope",
    "next_smooth",
    "pupil_coordinates",
    "seidel_psf",
    "seidel_wavefront",
    "suggest_psf_size",
]
