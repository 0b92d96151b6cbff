"""Seidel PSFs (normalisation, geometry, gradients) and the bead calibration that fits them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dgno.optics.calibration import detect_beads, extract_patches, fit_seidel, psf_error, synthesize_bead_image
from dgno.optics.seidel import (
    SEIDEL_NAMES,
    SeidelCoefficients,
    SeidelGenerator,
    max_pupil_slope,
    seidel_psf,
    seidel_wavefront,
    suggest_psf_size,
)

COEFFS = SeidelCoefficients(W040=0.15, W131=0.15, W222=0.12, W220=0.08, W311=0.05, W020=0.1)


def centroid(psf: torch.Tensor) -> tuple[float, float]:
    """(x, y) centroid in px relative to the centre index M//2."""
    m = psf.shape[-1]
    ax = torch.arange(m, dtype=psf.dtype) - m // 2
    total = psf.sum()
    return float((psf.sum(0) * ax).sum() / total), float((psf.sum(1) * ax).sum() / total)


@pytest.mark.parametrize("upsample", [1, 2])
def test_psfs_sum_to_one_and_are_nonnegative(upsample):
    fields = torch.tensor([[0.0, 0.0], [0.5, -0.3], [1.0, 1.0]], dtype=torch.float64)
    psf = seidel_psf(COEFFS, fields, size=33, upsample=upsample)  # (3, U·33, U·33)
    assert psf.shape == (3, 33 * upsample, 33 * upsample)
    # density per pixel: the integer grid sums to 1, a U× finer grid to U²
    assert torch.allclose(psf.sum(dim=(-2, -1)), torch.full((3,), float(upsample**2), dtype=torch.float64))
    assert float(psf.min()) >= 0


def test_psf_is_differentiable_in_the_coefficients():
    """Autograd gradient is finite, nonzero and matches central finite differences (gradcheck-lite)."""
    c = COEFFS.as_tensor().requires_grad_(True)
    field = torch.tensor([0.7, 0.4], dtype=torch.float64)
    weights = torch.rand(25, 25, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def f(coeffs: torch.Tensor) -> torch.Tensor:
        return (seidel_psf(coeffs, field, size=25) * weights).sum()

    f(c).backward()
    grad = c.grad
    assert torch.isfinite(grad).all() and float(grad.abs().max()) > 0
    eps = 1e-6
    for i in range(len(SEIDEL_NAMES)):
        step = torch.zeros(6, dtype=torch.float64)
        step[i] = eps
        fd = (f(c.detach() + step) - f(c.detach() - step)) / (2 * eps)
        assert abs(float(fd) - float(grad[i])) <= 1e-6 * max(1.0, abs(float(fd)))


def test_diffraction_limited_psf_is_centred_and_round():
    psf = seidel_psf(SeidelCoefficients(), (0.0, 0.0), size=33)
    assert np.unravel_index(int(psf.argmax()), psf.shape) == (16, 16)
    assert torch.allclose(psf, torch.rot90(psf, 1, (0, 1)), atol=1e-15)
    assert torch.allclose(psf, psf.T, atol=1e-15)


def test_shift_and_distortion_move_the_psf():
    """A pupil tilt s/(2q)·u shifts by s px; W311 moves an off-axis image point outward by 2q·W311·H³ px."""
    shifted = seidel_psf(SeidelCoefficients(), (0.0, 0.0), size=41, shift=torch.tensor([1.5, -2.0], dtype=torch.float64))
    cx, cy = centroid(shifted)
    assert abs(cx - 1.5) < 0.05 and abs(cy + 2.0) < 0.05
    distorted = seidel_psf(SeidelCoefficients(W311=0.25), (0.0, 1.0), size=41)  # field along +y (rows), H = 1
    cx, cy = centroid(distorted)
    assert abs(cx) < 1e-9 and abs(cy - 2 * 2.0 * 0.25) < 0.05


def test_psf_rotates_with_the_field_direction():
    """θ is measured from the field direction: W depends on u and h only through u·h, |u|, |h|, so mirroring
    both in the diagonal (x ↔ y) maps the PSF at (H, 0) onto the PSF at (0, H), its transpose."""
    along_x = seidel_psf(COEFFS, (0.8, 0.0), size=33)
    along_y = seidel_psf(COEFFS, (0.0, 0.8), size=33)
    assert torch.allclose(along_y, along_x.T, atol=1e-14)


def test_even_terms_sign_flip_leaves_the_psf_unchanged():
    flipped = SeidelCoefficients(**{n: (-v if n in ("W040", "W222", "W220", "W020") else v) for n, v in COEFFS.as_dict().items()})
    field = (0.6, 0.3)
    assert torch.allclose(seidel_psf(COEFFS, field, size=33), seidel_psf(flipped, field, size=33), atol=1e-15)
    assert flipped.canonical() == COEFFS.canonical() == COEFFS


def test_coefficient_conversions_and_validation():
    assert SeidelCoefficients.from_tensor(COEFFS.as_tensor()) == COEFFS
    assert SeidelCoefficients.from_dict(COEFFS.as_dict()) == COEFFS
    with pytest.raises(ValueError, match="W131"):
        SeidelCoefficients.from_dict({"W13": 0.1})
    with pytest.raises(ValueError, match="odd"):
        seidel_psf(COEFFS, (0.0, 0.0), size=32)


def test_suggested_size_holds_the_geometric_spot():
    size = suggest_psf_size(COEFFS, max_field=1.42)
    r_geo = 2 * 2.0 * max_pupil_slope(COEFFS, 1.42)
    assert size % 2 == 1 and size > 2 * r_geo
    psf = seidel_psf(COEFFS, (1.0, 1.0), size=size)
    border = torch.cat([psf[0], psf[-1], psf[:, 0], psf[:, -1]])
    assert float(border.max()) < 1e-3 * float(psf.max())


def test_generator_is_reproducible_and_in_range():
    gen = SeidelGenerator(ranges={"W040": 0.2, "W131": 0.1})
    a, b = gen.step(4, seed=3)["coeffs"], gen.step(4, seed=3)["coeffs"]
    assert a == b and len(a) == 4
    assert all(abs(c.W040) <= 0.2 and abs(c.W131) <= 0.1 and c.W222 == 0 for c in a)
    with pytest.raises(ValueError, match="unknown"):
        SeidelGenerator(ranges={"defocus": 1.0})


def test_calibration_recovers_known_coefficients():
    """Bead image (noise σ = 0.005, beads at unknown sub-pixel positions) → detect → fit.

    Every identifiable term is recovered to 0.03 waves (measured: ≤ 0.015 at this seed, ≤ 0.022 over
    seeds 0–3) and the PSFs to 10 % relative L2 (measured 5.4 %, 3.6–6.2 % over seeds 0–3); W311 is
    absorbed by the per-bead offsets (see ``calibration``).
    """
    shape = (160, 160)  # 3×3 beads
    size = suggest_psf_size(COEFFS, max_field=1.42)
    beads = synthesize_bead_image(COEFFS, image_shape=shape, psf_size=size, noise_std=0.005, seed=1)
    peaks = detect_beads(beads.image, psf_size=size)
    assert len(peaks) == len(beads.positions)
    fit = fit_seidel(
        extract_patches(beads.image, peaks, size),
        peaks,
        image_shape=shape,
        field_radius=beads.field_radius,
        n_iter=250,
        n_starts=3,
    )
    truth = COEFFS.canonical()
    for name in ("W040", "W131", "W222", "W220", "W020"):
        assert abs(getattr(fit.coeffs, name) - getattr(truth, name)) <= 0.03, name
    fields = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    assert psf_error(COEFFS, fit.coeffs, fields=fields, psf_size=size) <= 0.10


@pytest.mark.parametrize("max_field", [0.0, 0.7, 1.42])
def test_max_pupil_slope_matches_a_full_pupil_scan(max_field):
    """The vectorised half-pupil evaluation equals the plain loop over the 9 field radii on the full grid."""
    axis = torch.linspace(-1.0, 1.0, 65, dtype=torch.float64)
    uy, ux = torch.meshgrid(axis, axis, indexing="ij")
    for c in (COEFFS, SeidelCoefficients(W040=-0.2, W131=0.3, W222=-0.1, W220=0.05, W311=-0.2, W020=-0.15)):
        best = 0.0
        for h in torch.linspace(0.0, max_field, 9, dtype=torch.float64).tolist():
            field = torch.tensor([h, 0.0], dtype=torch.float64)
            w = seidel_wavefront(c.as_tensor(), field, ux.requires_grad_(True), uy.requires_grad_(True))
            gx, gy = torch.autograd.grad(w.sum(), (ux, uy))
            inside = ux.detach() ** 2 + uy.detach() ** 2 <= 1.0
            best = max(best, float(torch.sqrt(gx * gx + gy * gy)[inside].max()))
        assert max_pupil_slope(c, max_field) == pytest.approx(best, rel=1e-12)


def _rdmpy_psf(coeffs_rdmpy, x_px: float, dim: int = 64):
    """rdmpy's PSF of a point at (x_px, 0) px right of the optical axis, from its published formula
    (apsk14/rdmpy, _src/seidel.py: pupil phase of the negated, rotated frequency grid, H = circ·exp(−ikW),
    PSF = |ifft(H)|², default system parameters: pupil radius = a quarter of the frequency range),
    before rdmpy shifts it to the point. Written here from those facts, as an independent reference."""
    import numpy as np

    f = np.linspace(-1.0, 1.0, dim) * 2.0  # normalised pupil coordinates: |f| <= 1 is the pupil
    fx, fy = np.meshgrid(f, f)
    X, Y = -fx, -fy
    r = x_px / (dim / 2)  # field radius, the point on the +x axis (no rotation)
    rho2 = X * X + Y * Y
    w040, w131, w222, w220, w311, w020 = coeffs_rdmpy
    poly = w040 * rho2**2 + w131 * r * rho2 * X + w222 * r**2 * X**2 + w220 * r**2 * rho2 + w311 * r**3 * X + w020 * rho2
    h = (np.sqrt(rho2) <= 1.0) * np.exp(-1j * 2 * np.pi * poly)
    psf = np.abs(np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(h)))) ** 2
    return psf / psf.sum()


def _moments_x(psf):
    """(centroid, third central moment) along columns, in px from the grid centre."""
    import numpy as np

    psf = np.asarray(psf, dtype=np.float64)
    n = psf.shape[-1]
    x = np.arange(n) - n // 2
    px = psf.sum(axis=0) / psf.sum()
    mean = float((x * px).sum())
    return mean, float((((x - mean) ** 3) * px).sum())


@pytest.mark.parametrize("term", ["W311", "W131"])
def test_rdmpy_coefficients_point_the_way_rdmpys_do(term):
    """A point source right of the axis: distortion moves the centroid, and coma throws its flare,
    to the same side in this package (coefficients given in rdmpy's convention) as in rdmpy."""
    import numpy as np

    from dgno.optics.seidel import SEIDEL_NAMES, SeidelCoefficients, seidel_psf

    values = [0.6 if n == term else 0.0 for n in SEIDEL_NAMES]  # rdmpy's order is the same
    ref_mean, ref_skew = _moments_x(_rdmpy_psf(values, x_px=24.0))
    ours = seidel_psf(SeidelCoefficients.from_rdmpy(values), (24.0 / 32, 0.0), size=65)
    mean, skew = _moments_x(ours.numpy())
    if term == "W311":
        assert abs(ref_mean) > 0.3 and np.sign(mean) == np.sign(ref_mean)
    else:
        assert abs(ref_skew) > 0.1 and np.sign(skew) == np.sign(ref_skew)
    # copied unchanged (this package's own convention), they would point the other way
    mirrored_mean, mirrored_skew = _moments_x(seidel_psf(SeidelCoefficients.from_tensor(values), (24.0 / 32, 0.0), size=65).numpy())
    assert np.sign(mirrored_mean if term == "W311" else mirrored_skew) == -np.sign(ref_mean if term == "W311" else ref_skew)


def test_rdmpy_conversion_round_trips_and_only_flips_odd_terms():
    from dgno.optics.seidel import SeidelCoefficients

    rd = [0.1, 0.2, -0.3, 0.4, 0.5, -0.6]
    c = SeidelCoefficients.from_rdmpy(rd)
    assert (c.W040, c.W131, c.W222, c.W220, c.W311, c.W020) == (0.1, -0.2, -0.3, 0.4, -0.5, -0.6)
    assert c.to_rdmpy() == rd
    with pytest.raises(ValueError, match="expected 6 coefficients"):
        SeidelCoefficients.from_rdmpy([0.1, 0.2])


def test_config_coefficients_in_either_convention():
    """The seidel block of a config: a mapping (this package's convention, missing terms from the
    reference), or rdmpy's six numbers / mapping with convention rdmpy (odd terms flipped, nothing mixed in)."""
    from dgno.experiments.nonblind_settings import REFERENCE_COEFFS, true_coefficients

    assert true_coefficients({}) == REFERENCE_COEFFS
    assert true_coefficients({"coeffs": {"W131": 0.2}}).W131 == 0.2 and true_coefficients({"coeffs": {"W131": 0.2}}).W040 == REFERENCE_COEFFS.W040
    rd = [0.1, 0.2, 0.05, 0.04, 0.01, 0.3]
    c = true_coefficients({"coeffs": rd, "convention": "rdmpy"})
    assert c.to_rdmpy() == rd and c.W131 == -0.2
    assert true_coefficients({"coeffs": {"W311": 0.5}, "convention": "rdmpy"}) == SeidelCoefficients(W311=-0.5)  # no reference terms mixed in
    with pytest.raises(ValueError, match="unknown Seidel convention 'zemax'"):
        true_coefficients({"convention": "zemax"})
