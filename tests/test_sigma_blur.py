"""Spatially varying Gaussian blur: fast level-interpolation path vs the brute-force reference.

Tolerance: |sigma_blur − sigma_blur_reference| ≤ MAX_ERROR = 5e-4 for images in [0, 1]. The bound is
not just observed on examples: test_interpolation_worst_case_bound evaluates, over a dense σ sweep,
the largest error any [0, 1] image can produce at one pixel, ½‖K_interp − K_σ‖₁.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from dgno.optics import sigma_blur as sb
from dgno.optics.sigma_blur import MAX_ERROR, random_sigma_map, sigma_blur, sigma_blur_reference


def _images(shape: tuple[int, int], seed: int) -> dict[str, np.ndarray]:
    """Test images in [0, 1] that stress interpolation: noise, binary noise, a delta, edges, lines."""
    rng = np.random.default_rng(seed)
    h, w = shape
    delta = np.zeros(shape, np.float32)
    delta[h // 2, w // 3] = 1.0
    edges = np.zeros(shape, np.float32)
    edges[h // 4 : 3 * h // 4, w // 4 : 3 * w // 4] = 1.0
    edges[:, -3] = 1.0  # a thin line near the border exercises the reflection
    return {
        "noise": rng.random(shape).astype(np.float32),
        "binary": (rng.random(shape) > 0.5).astype(np.float32),
        "delta": delta,
        "edges": edges,
    }


def _kernel_1d(sigma: float, radius: int) -> np.ndarray:
    """Sampled, truncated, normalised 1-D Gaussian on offsets −radius..radius (zero outside r(σ))."""
    d = np.arange(-radius, radius + 1, dtype=np.float64)
    if sigma == 0:
        return (d == 0).astype(np.float64)
    k = np.exp(-(d**2) / (2 * sigma**2)) * (np.abs(d) <= sb.kernel_radius(sigma))
    return k / k.sum()


@pytest.mark.parametrize("sigma_range", [(0.6, 4.0), (0.0, 13.0), (8.0, 10.0)])
def test_fast_matches_reference(sigma_range):
    shape = (48, 40)
    sigma = random_sigma_map(shape, sigma_range, seed=3, correlation_length=6.0)
    if sigma_range[0] == 0.0:
        sigma[sigma < 0.4] = 0.0  # include exact zeros and the 0 < σ < 0.3 blend region
    for name, img in _images(shape, seed=1).items():
        err = np.abs(sigma_blur(img, sigma) - sigma_blur_reference(img, sigma)).max()
        assert err <= MAX_ERROR, f"{name} {sigma_range}: max error {err:.2e}"


def test_channels_share_the_map():
    rng = np.random.default_rng(0)
    img = rng.random((20, 18, 3)).astype(np.float32)
    sigma = random_sigma_map((20, 18), (0.2, 5.0), seed=1, correlation_length=3.0)
    fast = sigma_blur(img, sigma)
    assert fast.shape == img.shape and fast.dtype == np.float32
    for c in range(3):
        np.testing.assert_array_equal(fast[..., c], sigma_blur(img[..., c], sigma))
    assert np.abs(fast - sigma_blur_reference(img, sigma)).max() <= MAX_ERROR


def test_interpolation_worst_case_bound():
    """max over [0,1] images of the error at a pixel with blur σ is ½‖K_interp − K_σ‖₁; check it ≤ MAX_ERROR.

    Two grid origins (lo = 0.3 and lo = 1.7) so the bound does not hinge on σ sitting near a level.
    """
    radius = sb.kernel_radius(13.0 * np.exp(0.3)) + 1
    worst = 0.0
    for lo in (sb._SIGMA_FLOOR, 1.7):
        grid = sb._level_grid(lo, 13.0)
        u_grid = np.log(grid)
        kernels = [_kernel_1d(s, radius) for s in grid]
        for s in np.exp(np.linspace(np.log(lo), np.log(13.0), 90)):
            u = np.log(s)
            b = int(np.searchsorted(u_grid, u, side="right")) - 2
            w = sb._lagrange_weights(np.array([u]), u_grid[b : b + 4, None])[:, 0]
            k_interp = sum(w[j] * np.outer(kernels[b + j], kernels[b + j]) for j in range(4))
            k_true = np.outer(_kernel_1d(s, radius), _kernel_1d(s, radius))
            worst = max(worst, 0.5 * np.abs(k_interp - k_true).sum())
    # Below σ_f: blend of the identity and the σ_f level.
    k_floor = np.outer(_kernel_1d(sb._SIGMA_FLOOR, 3), _kernel_1d(sb._SIGMA_FLOOR, 3))
    k_id = np.outer(_kernel_1d(0.0, 3), _kernel_1d(0.0, 3))
    for s in np.linspace(0.01, sb._SIGMA_FLOOR, 30):
        lam = float(sb._small_sigma_weight(np.array([s]))[0])
        k_true = np.outer(_kernel_1d(s, 3), _kernel_1d(s, 3))
        worst = max(worst, 0.5 * np.abs(lam * k_floor + (1 - lam) * k_id - k_true).sum())
    assert worst <= MAX_ERROR, f"worst-case interpolation error {worst:.2e}"


@pytest.mark.parametrize(("shape", "sigma"), [((48, 40), 0.7), ((48, 40), 2.5), ((48, 40), 13.0), ((12, 10), 6.0)])
def test_constant_sigma_is_scipy_gaussian_filter(shape, sigma):
    """Constant σ: both paths equal scipy's gaussian_filter(mode='reflect', truncate=4) — also when the
    kernel is wider than the image (12×10 with r = 24), where the reflection repeats periodically."""
    img = _images(shape, seed=2)["noise"]
    expected = ndimage.gaussian_filter(img.astype(np.float64), sigma, mode="reflect", truncate=4.0)
    const = np.full(shape, sigma)
    np.testing.assert_allclose(sigma_blur(img, const), expected, atol=1e-6)
    np.testing.assert_allclose(sigma_blur_reference(img, const), expected, atol=1e-6)


def test_sigma_zero_is_identity():
    img = _images((30, 26), seed=4)["noise"]
    zero = np.zeros((30, 26))
    np.testing.assert_array_equal(sigma_blur(img, zero), img)
    np.testing.assert_array_equal(sigma_blur_reference(img, zero), img)
    # Zero pixels inside a blurred map stay untouched too.
    sigma = random_sigma_map((30, 26), (0.0, 3.0), seed=5, correlation_length=4.0)
    out = sigma_blur(img, sigma)
    np.testing.assert_array_equal(out[sigma == 0], img[sigma == 0])


def test_constant_image_is_preserved():
    """Normalised kernels: a constant image stays constant (so its mean is preserved) for any map."""
    img = np.full((40, 36), 0.37, np.float32)
    sigma = random_sigma_map((40, 36), (0.0, 13.0), seed=6, correlation_length=5.0)
    out = sigma_blur(img, sigma)
    np.testing.assert_allclose(out, 0.37, atol=1e-6)
    assert abs(float(out.mean()) - 0.37) < 1e-6


def test_rejects_bad_input():
    img = np.zeros((8, 8), np.float32)
    with pytest.raises(ValueError, match="sigma_map shape"):
        sigma_blur(img, np.ones((8, 7)))
    with pytest.raises(ValueError, match=">= 0"):
        sigma_blur(img, -np.ones((8, 8)))
    with pytest.raises(ValueError, match="sigma_range"):
        random_sigma_map((8, 8), (3.0, 1.0), seed=0, correlation_length=2.0)


def test_random_sigma_map_deterministic_and_spans_range():
    a = random_sigma_map((64, 48), (0.6, 13.0), seed=11, correlation_length=8.0)
    b = random_sigma_map((64, 48), (0.6, 13.0), seed=11, correlation_length=8.0)
    c = random_sigma_map((64, 48), (0.6, 13.0), seed=12, correlation_length=8.0)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.dtype == np.float32 and a.shape == (64, 48)
    assert a.min() == np.float32(0.6) and a.max() == np.float32(13.0)
    # Spread over the range (not bunched in the middle) and smooth on the correlation length.
    t = (a - 0.6) / 12.4
    assert (t < 0.2).mean() > 0.05 and (t > 0.8).mean() > 0.05
    assert np.abs(np.diff(a, axis=0)).max() < 0.25 * 12.4
    constant = random_sigma_map((5, 4), (2.0, 2.0), seed=0, correlation_length=1.0)
    np.testing.assert_array_equal(constant, 2.0)
