"""The ring (LRI) forward model against brute-force superposition, analytic limits and its adjoint."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.signal
import torch
import torch.nn.functional as F

from dgno.optics import polar, ring, superposition
from dgno.optics import ring_spectra as spectra
from dgno.optics.polar import interpolation_taps, polar_grid
from dgno.optics.ring import RingBlur
from dgno.optics.ring_spectra import PSF_UPSAMPLE, band_limits, cosine_series, cosine_table, psf_reach, radial_psfs, ring_spectra
from dgno.optics.seidel import SeidelCoefficients, seidel_psf
from dgno.optics.superposition import pixel_psfs, superposition_blur

COEFFS = SeidelCoefficients(W040=0.15, W131=0.15, W222=0.12, W220=0.08, W311=0.05, W020=0.1)
FIELD_RADIUS = 32.0  # px for H = 1 on the 64-px test frames (corners at H ≈ 1.4)


def blobs(shape: tuple[int, int], *, n: int = 30, sigma: tuple[float, float] = (0.75, 2.25), seed: int = 0) -> torch.Tensor:
    """Sum of Gaussian spots of random size (σ in px) and brightness, max 1: nuclei/bead-like structure."""
    g = np.random.default_rng(seed)
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]]
    img = np.zeros(shape)
    for _ in range(n):
        cy, cx = g.uniform(0, shape[0]), g.uniform(0, shape[1])
        s = g.uniform(*sigma)
        img += g.uniform(0.3, 1.0) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
    return torch.tensor(img / img.max())


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize(
    ("shape", "radial_step", "tol"),
    [((64, 64), 1.0, 0.02), ((45, 58), 1.0, 0.02), ((64, 64), 0.5, 0.01)],
    ids=["64x64", "odd-nonsquare", "64x64-fine-radii"],
)
def test_matches_brute_force_superposition(shape, radial_step, tol):
    """‖A_ring x − Σ_q x(q) PSF_q‖ / ‖Σ_q x(q) PSF_q‖ ≤ 2 % (measured 1.0 % at 64×64 and at 45×58,
    0.6 % with Δr = ½ px)."""
    x = blobs(shape)
    op = RingBlur(coeffs=COEFFS, image_shape=shape, field_radius=FIELD_RADIUS, radial_step=radial_step, dtype=torch.float64)
    reference = superposition_blur(x, pixel_psfs(shape, COEFFS, field_radius=FIELD_RADIUS, psf_size=op.psf_size))
    assert rel_err(op.A(x), reference) <= tol


def test_zero_coefficients_is_convolution_with_diffraction_limited_psf():
    """W = 0: every PSF is the Airy-like on-axis PSF, so A x = x ∗ PSF₀ (zero outside), within 2 % (measured 1.5 %)."""
    x = blobs((64, 64))
    op = RingBlur(coeffs=SeidelCoefficients(), image_shape=(64, 64), dtype=torch.float64)
    psf0 = op.centre_psf().numpy()
    assert abs(psf0.sum() - 1) < 1e-12
    expected = scipy.signal.convolve(x.numpy(), psf0, mode="same")
    assert rel_err(op.A(x), torch.from_numpy(expected)) <= 0.02


def test_rotationally_symmetric_object_stays_symmetric():
    """A radial object about the axis blurs to a radial image: exact for 90° turns (grid), and pixels at one
    radius that no grid symmetry relates agree to 1.5 % of the peak (measured 1.0 %)."""
    n = 65  # odd: the centre is a pixel, so (0, 5) and (3, 4) offsets share a radius
    yy, xx = np.mgrid[0:n, 0:n] - (n - 1) / 2
    rr = np.hypot(yy, xx)
    obj = torch.tensor(np.exp(-((rr - 18) ** 2) / (2 * 1.5**2)) + np.exp(-(rr**2) / 8))
    y = RingBlur(coeffs=COEFFS, image_shape=(n, n), field_radius=FIELD_RADIUS, dtype=torch.float64).A(obj)
    assert torch.allclose(y, torch.rot90(y, 1, (0, 1)), atol=1e-12 * float(y.abs().max()))
    r2 = np.rint(yy**2 + xx**2).astype(int)
    yv = y.numpy()
    spread = max(float(np.ptp(yv[r2 == k])) for k in np.unique(r2) if k <= 30**2)
    assert spread <= 0.015 * float(yv.max())


@pytest.mark.parametrize("interp", ["linear", "cubic"])
@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("shape", [(24, 24), (17, 30)])
def test_adjoint(interp, cache, shape):
    """⟨A x, y⟩ = ⟨x, Aᵀ y⟩ to float64 round-off, for both kernels, both memory modes, odd/even sizes."""
    op = RingBlur(coeffs=COEFFS, image_shape=shape, field_radius=12.0, interp=interp, cache=cache, chunk_radii=5, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(2, 1, *shape, generator=g, dtype=torch.float64)
    y = torch.rand(2, 1, *shape, generator=g, dtype=torch.float64)
    lhs, rhs = (op.A(x) * y).sum(), (x * op.A_adjoint(y)).sum()
    assert abs(float(lhs - rhs)) <= 1e-12 * abs(float(lhs))


def test_streaming_equals_cached():
    """The memory-bounded mode (spectra rebuilt per chunk of radii) gives the cached result."""
    x = blobs((40, 52))[None, None]
    kw = dict(coeffs=COEFFS, image_shape=(40, 52), field_radius=26.0, dtype=torch.float64)
    cached = RingBlur(cache=True, **kw).A(x)
    streamed = RingBlur(cache=False, chunk_radii=7, **kw).A(x)
    assert torch.allclose(cached, streamed, atol=1e-13)


def test_mass_is_conserved_away_from_the_border():
    """Unit-sum PSFs: the light of an object well inside the frame is kept (splatting conserves mass)."""
    x = torch.zeros(64, 64, dtype=torch.float64)
    x[20:44, 24:40] = blobs((24, 16), n=6, seed=3)
    y = RingBlur(coeffs=COEFFS, image_shape=(64, 64), field_radius=FIELD_RADIUS, dtype=torch.float64).A(x)
    assert abs(float(y.sum() / x.sum()) - 1) < 0.01


@pytest.mark.parametrize("tap_block", [polar.TAP_BLOCK, 100])
def test_interpolation_taps_partition_unity(monkeypatch, tap_block):
    """Every pixel's taps sum to one (B keeps constants) and stay inside the polar grid; the padding of the
    last block of pixels has zero weights."""
    monkeypatch.setattr(polar, "TAP_BLOCK", tap_block)
    grid = polar_grid((21, 34))
    for interp in ("linear", "cubic"):
        idx, w = interpolation_taps(grid, interp=interp, dtype=torch.float64)
        sums = w.sum(1).flatten()
        assert torch.allclose(sums[: 21 * 34], torch.ones(21 * 34, dtype=torch.float64))
        assert not sums[21 * 34 :].any()
        assert int(idx.min()) >= 0 and int(idx.max()) < grid.n_radii * grid.n_angles


def test_blocks_of_taps_give_the_same_operator(monkeypatch):
    """Splitting the pixels into blocks of taps (the last one padded) changes neither A nor its adjointness."""
    kw = dict(coeffs=COEFFS, image_shape=(17, 30), field_radius=12.0, dtype=torch.float64)
    x = torch.rand(2, 1, 17, 30, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    whole = RingBlur(**kw).A(x)
    monkeypatch.setattr(polar, "TAP_BLOCK", 64)
    ring.clear_caches()  # the taps of this geometry were cached with the default blocks
    op = RingBlur(**kw)
    assert op.taps_idx.shape[0] == math.ceil(17 * 30 / 64)
    assert torch.allclose(op.A(x), whole, atol=1e-14)
    y = torch.rand(2, 1, 17, 30, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    lhs, rhs = (op.A(x) * y).sum(), (x * op.A_adjoint(y)).sum()
    assert abs(float(lhs - rhs)) <= 1e-12 * abs(float(lhs))


@pytest.mark.parametrize("reach", [2.5, 13.0])
def test_row_windows_cover_every_polar_point_inside_the_psf_square(reach):
    """The per-ring angular windows of the spectra never stop before a polar point that lies inside the PSF's
    support square (it would be dropped from the spectra), and are tight: past the last such point they
    add less than half an angle on average."""
    n_phi, half = 96, 48
    src = torch.arange(0.0, 40.0, dtype=torch.float64)[:, None]  # r′ px
    r = torch.arange(0.0, 60.0, 0.5, dtype=torch.float64)[None, :]  # ring radius px
    phi = torch.arange(half + 1, dtype=torch.float64) * (2 * math.pi / n_phi)
    j = torch.arange(half + 1)
    inside = ((r[..., None] * torch.cos(phi) - src[..., None]).abs() < reach) & (r[..., None] * torch.sin(phi) < reach)
    needed = torch.where(inside, j + 1, 0).amax(-1)  # 1 + last angle index inside, 0 if none
    got = torch.from_numpy(spectra._row_lengths(src.numpy(), r.numpy(), reach, half, n_phi))
    assert (got >= needed).all()
    assert float((got - needed).double().mean()) < 0.5


def test_operators_of_one_geometry_share_its_tables_but_not_their_coefficients():
    """A second operator on frames of the same size reuses the cached taps (the same tensors) and still
    blurs with its own coefficients; after ``clear_caches`` a cold build gives the identical operator."""
    kw = dict(image_shape=(24, 20), field_radius=12.0, psf_size=9, dtype=torch.float64)
    x = blobs((24, 20))
    ring.clear_caches()
    first = RingBlur(coeffs=COEFFS, **kw)
    other = RingBlur(coeffs=SeidelCoefficients(W040=0.3, W020=-0.2), **kw)
    assert other.taps_idx is first.taps_idx and other.taps_w is first.taps_w
    assert rel_err(other.A(x), first.A(x)) > 0.05  # its own PSFs
    y_warm = RingBlur(coeffs=COEFFS, **kw).A(x)
    ring.clear_caches()
    cold = RingBlur(coeffs=COEFFS, **kw)
    assert cold.taps_idx is not first.taps_idx
    assert torch.equal(cold.A(x), y_warm)
    assert not torch.equal(RingBlur(coeffs=COEFFS, **{**kw, "image_shape": (20, 24)}).taps_idx, first.taps_idx)


def test_bad_options_raise():
    with pytest.raises(ValueError, match="'linear', 'cubic'"):
        RingBlur(coeffs=COEFFS, image_shape=(16, 16), interp="bilinear")
    op = RingBlur(coeffs=COEFFS, image_shape=(16, 16))
    with pytest.raises(ValueError, match="built for"):
        op.A(torch.zeros(1, 1, 16, 17))
    with pytest.raises(ValueError, match="odd"):
        RingBlur(coeffs=COEFFS, image_shape=(16, 16), psf_size=20)


@pytest.mark.parametrize("n_angles", [24, 384])
def test_cosine_series_is_the_rfft_of_the_mirrored_zero_filled_profile(n_angles):
    """Both paths (cosine table, rFFT) and shared-table rows, for windows from one angle to the half circle."""
    g = torch.Generator().manual_seed(0)
    for n_terms in sorted({1, 5, n_angles // 4, n_angles // 4 + 1, n_angles // 2, n_angles // 2 + 1}):
        profile = torch.rand(3, 2, n_terms, generator=g, dtype=torch.float64)
        full = torch.zeros(3, 2, n_angles, dtype=torch.float64)
        full[..., :n_terms] = profile
        for j in range(1, n_terms):
            full[..., n_angles - j] = profile[..., j]  # h(−φ) = h(φ); j = n/2 is its own mirror
        expected = torch.fft.rfft(full, dim=-1).real
        assert torch.allclose(cosine_series(profile, n_angles), expected, atol=1e-12)
        table = cosine_table(n_angles, n_angles // 2 + 1, dtype=torch.float64)
        assert torch.allclose(cosine_series(profile, n_angles, table), expected, atol=1e-12)


@pytest.mark.parametrize(("psf_size", "oversampling"), [(25, 2.0), (21, 1.3), (15, 3.0), (9, 0.7)])
def test_radial_psfs_are_the_upper_half_of_the_seidel_psf(psf_size, oversampling):
    """The DFT-matrix PSFs equal ``seidel_psf`` on its U× finer grid, rows −1 … k and columns −k … k about
    its centre, also when the aperture's support fills the pupil grid (q < 1)."""
    radii = torch.arange(0.0, 60.0, 7.0, dtype=torch.float64)
    fine = radial_psfs(COEFFS, radii, field_radius=40.0, psf_size=psf_size, oversampling=oversampling, dtype=torch.float64)
    field = torch.stack([radii / 40.0, torch.zeros_like(radii)], dim=-1)
    full = seidel_psf(COEFFS, field, size=psf_size, oversampling=oversampling, upsample=PSF_UPSAMPLE)
    n = PSF_UPSAMPLE * psf_size
    centre, k = n // 2, n - 1 - n // 2
    expected = full[:, centre - 1 : centre + k + 1, centre - k : centre + k + 1]
    assert fine.shape == expected.shape
    assert torch.allclose(fine, expected, atol=1e-14 * float(expected.max()))


def reference_spectra(op: RingBlur, radii: torch.Tensor, rows: tuple[int, int]) -> torch.Tensor:
    """FFT over all n_φ angles of the full PSFs read at every polar point of rows δ = rows[0] … rows[1]:
    the straightforward construction, without windows, symmetry or half PSFs.  → (D, R, K)."""
    grid, m = op.grid, op.psf_size
    field = torch.stack([radii * grid.radial_step / op.field_radius, torch.zeros_like(radii)], dim=-1)
    full = seidel_psf(op.coeffs, field, size=m, oversampling=op.oversampling, upsample=PSF_UPSAMPLE)
    n = PSF_UPSAMPLE * m
    centre, k = n // 2, n - 1 - n // 2
    psfs = full[:, centre - k : centre + k + 1, centre - k : centre + k + 1]  # (R, F, F)
    i_out = radii[:, None] + torch.arange(rows[0], rows[1] + 1, dtype=torch.float64)  # (R, D)
    phi = torch.arange(grid.n_angles, dtype=torch.float64) * (2 * math.pi / grid.n_angles)
    r = i_out[..., None] * grid.radial_step
    xy = torch.stack([r * torch.cos(phi) - radii[:, None, None] * grid.radial_step, r * torch.sin(phi)], dim=-1)
    samples = F.grid_sample(psfs[:, None], xy * (PSF_UPSAMPLE / k), mode="bicubic", padding_mode="zeros", align_corners=True)[:, 0]
    samples = samples * ((i_out >= 0) & (i_out < grid.n_radii))[..., None]
    return torch.fft.rfft(samples, dim=-1).real.transpose(0, 1)


@pytest.mark.parametrize("block_values", [spectra.BLOCK_VALUES, 2**10])
@pytest.mark.parametrize("radial_step", [1.0, 0.5])
def test_ring_spectra_match_sampling_every_angle(monkeypatch, block_values, radial_step):
    """The windowed, symmetric, blocked spectra equal the FFT of the PSFs sampled at every polar point, and
    that reference is zero outside the band (so the windows lose nothing); also for a chunk of radii not
    starting at 0 and for one-radius blocks."""
    monkeypatch.setattr(spectra, "BLOCK_VALUES", block_values)
    op = RingBlur(coeffs=COEFFS, image_shape=(40, 52), field_radius=26.0, radial_step=radial_step, dtype=torch.float64)
    lo, hi = op.band
    assert op.band == band_limits(psf_reach(PSF_UPSAMPLE * op.psf_size - 1), radial_step)
    wide = reference_spectra(op, torch.arange(op.grid.n_radii, dtype=torch.float64), (lo - 3, hi + 3))
    scale = float(wide.abs().max())
    assert float(torch.cat([wide[:3], wide[-3:]]).abs().max()) <= 1e-12 * scale
    assert torch.allclose(op.spectra, wide[3:-3], atol=1e-12 * scale)
    first, count = 9, 11
    psfs = radial_psfs(
        COEFFS,
        torch.arange(first, first + count, dtype=torch.float64) * radial_step,
        field_radius=26.0,
        psf_size=op.psf_size,
        oversampling=op.oversampling,
        dtype=torch.float64,
    )
    chunk = ring_spectra(psfs, first, op.grid, band=op.band)
    assert torch.allclose(chunk, wide[3:-3, first : first + count], atol=1e-12 * scale)


def test_kernel_weights_are_keys_cubic_and_linear():
    """The Horner-form tap weights equal the piecewise definitions (Keys, α = −½; linear)."""
    a = torch.rand(1000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def keys(s):
        s = s.abs()
        return torch.where(s <= 1, 1.5 * s**3 - 2.5 * s**2 + 1, -0.5 * s**3 + 2.5 * s**2 - 4 * s + 2)

    offsets, w = polar._kernel_weights(a, "cubic")
    assert torch.allclose(w, torch.stack([keys(a - o) for o in offsets]), atol=1e-14)
    offsets, w = polar._kernel_weights(a, "linear")
    assert torch.allclose(w, torch.stack([1 - (a - o).abs() for o in offsets]), atol=1e-14)


@pytest.mark.slow
def test_operator_is_differentiable_in_the_image():
    """B and Bᵀ carry each other as derivatives, so autograd through A and Aᵀ matches finite differences."""
    op = RingBlur(coeffs=COEFFS, image_shape=(12, 15), field_radius=8.0, dtype=torch.float64)
    x = torch.rand(2, 1, 12, 15, generator=torch.Generator().manual_seed(2), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op.A, (x,))
    assert torch.autograd.gradcheck(op.A_adjoint, (x,))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU environment)")
@pytest.mark.parametrize("shape", [(64, 64), (52, 70)])
def test_cuda_matches_cpu(shape):
    """The CUDA path (index_select / bincount taps, autograd pair, real band products) equals the CPU one."""
    ops = {dev: RingBlur(coeffs=COEFFS, image_shape=shape, field_radius=FIELD_RADIUS, device=dev) for dev in ("cpu", "cuda")}
    x = blobs(shape)[None, None].float()
    y = {dev: op.A(x.to(dev)).cpu() for dev, op in ops.items()}
    yt = {dev: op.A_adjoint(x.to(dev)).cpu() for dev, op in ops.items()}
    torch.testing.assert_close(y["cuda"], y["cpu"], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(yt["cuda"], yt["cpu"], atol=1e-5, rtol=1e-4)
    grads = {}
    for dev, op in ops.items():
        xd = x.detach().to(dev).clone().requires_grad_(True)
        (op.A(xd) * x.to(dev)).sum().backward()
        grads[dev] = xd.grad.cpu()
    torch.testing.assert_close(grads["cuda"], grads["cpu"], atol=1e-5, rtol=1e-4)


def test_streamed_seidel_superposition_equals_the_stored_psf_reference():
    """seidel_superposition (PSFs made per row block, what makes the non-blind data) is the same sum as
    superposition_blur over all stored per-pixel PSFs, for a batch and an off-centre-friendly odd shape."""
    x = torch.rand(2, 21, 26, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    ref = superposition_blur(x, pixel_psfs((21, 26), COEFFS, field_radius=13.0, psf_size=15))
    out = superposition.seidel_superposition(x, COEFFS, field_radius=13.0, psf_size=15, rows_per_chunk=4)
    assert torch.allclose(out, ref, atol=1e-13)
