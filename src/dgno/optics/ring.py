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

Code: :mod:`dgno.optics.polar` holds the grid and B, Bᵀ; :mod:`dgno.optics.ring_spectra` builds R's
banded spectra from the PSFs; this module applies A and Aᵀ (``ring_conv``, ``ring_conv_adjoint``,
``RingBlur``); :mod:`dgno.optics.superposition` is the brute-force reference.

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

from collections.abc import Iterator

import torch
from torch import Tensor, nn

from dgno.choices import check_choice
from dgno.optics import polar
from dgno.optics import ring_spectra as spectra
from dgno.optics.polar import INTERPS, InterpName, PolarGrid, cart_to_polar, polar_grid, polar_to_cart, shared_taps
from dgno.optics.ring_spectra import band_limits, fine_half, psf_reach, radial_psfs, ring_spectra
from dgno.optics.seidel import SeidelCoefficients, check_psf_size, seidel_psf, suggest_psf_size


def clear_caches() -> None:
    """Forget the cached geometry tables (interpolation taps, sampling rays, cosine and pupil DFT tables).

    They depend only on the image geometry, the PSF size and dtype/device, never on the coefficients, and are
    kept like FFT plans.  The taps are the large ones (H·W·16 index/weight pairs, 128 MB at 1024²; the last
    two geometries are kept); call this to release them, or to time a cold build.
    """
    polar.clear_caches()
    spectra.clear_caches()


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
        self.band = band_limits(psf_reach(2 * fine_half(self.psf_size) + 1), self.grid.radial_step)  # (δ_lo, δ_hi)
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
        idx, w = shared_taps(self.grid, interp, dtype, None if device is None else torch.device(device))
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
