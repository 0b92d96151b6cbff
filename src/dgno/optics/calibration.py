"""Calibration: Seidel coefficients from an image of sub-resolution beads.

Model of one bead patch b (M×M pixels around a detected peak)::

    patch_b ≈ a_b · PSF(· ; W, h_b, s_b) + c_b

with W the Seidel coefficients shared by all beads, h_b the bead's normalised field position, s_b its
sub-pixel offset from the patch centre (a pupil tilt, ``seidel_psf(shift=...)``), and the amplitude a_b and
background c_b solved in closed form (linear least squares) for every trial W, s.  The coefficients and
offsets minimise  L = Σ_b ‖patch_b − a_b PSF_b − c_b‖² / Σ_b ‖patch_b − mean(patch_b)‖²  by Adam, from a few
random starts (the intensity PSF is not convex in the phase), keeping the lowest loss.

What one in-focus bead image cannot determine, by construction:

* W311 (distortion) is a pure tilt, H³ ρ cos θ: it moves each bead without changing its shape, and the
  beads' true positions are unknown, so the free offsets s_b absorb it.  It is held at zero.
* The common sign of the even terms (W040, W222, W220, W020): the PSF is identical under that flip (see
  ``SeidelCoefficients.canonical``), so results are returned in canonical form.  Neither affects the PSFs
  used for blurring or deconvolution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from dgno.optics.seidel import SeidelCoefficients, check_psf_size, seidel_psf

FITTED_TERMS: tuple[str, ...] = ("W040", "W131", "W222", "W220", "W020")  # W311 is not identifiable (module doc)


@dataclass(frozen=True)
class BeadImage:
    image: np.ndarray  # (H, W) float32 in [0, 1]
    positions: np.ndarray  # (n, 2) float64, true (row, col) of each bead's paraxial image point, px
    field_radius: float  # px for H = 1
    psf_size: int  # M used to render


def _field(rows: np.ndarray | Tensor, cols: np.ndarray | Tensor, image_shape: tuple[int, int], field_radius: float) -> Tensor:
    """Normalised field positions h = ((col − c_x), (row − c_y)) / field_radius → (n, 2) float64 tensor."""
    h, w = image_shape
    rows_t = torch.as_tensor(rows, dtype=torch.float64)
    cols_t = torch.as_tensor(cols, dtype=torch.float64)
    return torch.stack([(cols_t - (w - 1) / 2.0) / field_radius, (rows_t - (h - 1) / 2.0) / field_radius], dim=-1)


def bead_grid(image_shape: tuple[int, int], psf_size: int, pitch: int) -> np.ndarray:
    """Bead centres (n, 2) (row, col) px on a square grid of ``pitch`` px, before jitter.

    The margin keeps a bead jittered by up to ±pitch/4 and its M×M patch inside the frame.
    """
    h, w = image_shape
    margin = psf_size // 2 + 1 + pitch // 4
    rows = np.arange(margin, h - margin, pitch, dtype=np.float64)
    cols = np.arange(margin, w - margin, pitch, dtype=np.float64)
    if rows.size == 0 or cols.size == 0:
        raise ValueError(f"image {image_shape} too small for beads with psf_size={psf_size}, spacing={pitch}: use larger images")
    rr, cc = np.meshgrid(rows, cols, indexing="ij")
    return np.stack([rr.ravel(), cc.ravel()], axis=-1)


def synthesize_bead_image(
    coeffs: SeidelCoefficients,
    *,
    image_shape: tuple[int, int],
    psf_size: int,
    field_radius: float | None = None,
    oversampling: float = 2.0,
    spacing: int | None = None,
    background: float = 0.02,
    noise_std: float = 0.005,
    seed: int = 0,
) -> BeadImage:
    """image = background + Σ_b a_b PSF(· − p_b; W, h_b) / max(PSF_0) + N(0, noise_std²), clipped to [0, 1].

    Beads sit on a square grid (pitch ``spacing`` px, default M + 4 so patches never overlap) jittered by
    up to ±pitch/4 at sub-pixel positions p_b; amplitudes a_b ~ U(0.6, 1).  Dividing by the peak of the
    diffraction-limited PSF PSF_0 makes a perfect bead peak at a_b.

    coeffs: true coefficients (waves).  image_shape: (H, W) px.  psf_size: M, odd, px.  field_radius: px
    for H = 1 (default half the larger side).  oversampling: q, px per λ/D.  background, noise_std: in
    image units.  seed: of jitter, amplitudes and noise.
    """
    check_psf_size(psf_size)
    h, w = image_shape
    fr = float(field_radius) if field_radius is not None else max(h, w) / 2.0
    pitch = int(spacing) if spacing is not None else psf_size + 4
    rng = np.random.default_rng(seed)
    grid = bead_grid(image_shape, psf_size, pitch)
    pos = grid + rng.uniform(-pitch / 4, pitch / 4, grid.shape)  # (n, 2)
    amp = rng.uniform(0.6, 1.0, len(pos))
    anchor = np.round(pos).astype(int)
    frac = pos - anchor  # (n, 2) in [−½, ½]
    psfs = seidel_psf(
        coeffs,
        _field(pos[:, 0], pos[:, 1], image_shape, fr),
        size=psf_size,
        oversampling=oversampling,
        shift=torch.as_tensor(frac[:, ::-1].copy()),  # (x, y) order
    ).numpy()  # (n, M, M)
    peak0 = float(seidel_psf(SeidelCoefficients(), (0.0, 0.0), size=psf_size, oversampling=oversampling).max())
    image = np.full((h, w), background, dtype=np.float64)
    half = psf_size // 2
    for (r, c), a, psf in zip(anchor, amp, psfs):
        image[r - half : r + half + 1, c - half : c + half + 1] += a * psf / peak0
    image += rng.normal(0.0, noise_std, image.shape)
    return BeadImage(image=np.clip(image, 0, 1).astype(np.float32), positions=pos, field_radius=fr, psf_size=psf_size)


def detect_beads(image: np.ndarray, *, psf_size: int, threshold_rel: float = 0.2, smooth_sigma: float = 1.0) -> np.ndarray:
    """Bead centres (n, 2) int (row, col): local maxima of the lightly smoothed image.

    Smoothing (Gaussian, ``smooth_sigma`` px) keeps noise from creating peaks; peaks closer than M/2 to each
    other or to the border are dropped, so every bead has a full, mostly unshared M×M patch.
    image: (H, W) float.  psf_size: M px.  threshold_rel: minimum peak height relative to the brightest.
    """
    from scipy import ndimage
    from skimage.feature import peak_local_max

    check_psf_size(psf_size)
    smooth = ndimage.gaussian_filter(np.asarray(image, dtype=np.float64), smooth_sigma)
    smooth = smooth - np.median(smooth)
    return peak_local_max(
        smooth, min_distance=psf_size // 2, threshold_rel=threshold_rel, exclude_border=psf_size // 2 + 1
    ).astype(int)


def extract_patches(image: np.ndarray, peaks: np.ndarray, psf_size: int) -> np.ndarray:
    """M×M patches centred on each peak: (n, M, M) float64."""
    half = psf_size // 2
    img = np.asarray(image, dtype=np.float64)
    return np.stack([img[r - half : r + half + 1, c - half : c + half + 1] for r, c in peaks])


def _fit_amplitude(patch: Tensor, model: Tensor) -> Tensor:
    """Residual of min_{a,c} ‖patch − a·model − c‖² per bead (closed form).  (n, M, M) → (n, M, M)."""
    p = patch - patch.mean(dim=(-2, -1), keepdim=True)
    m = model - model.mean(dim=(-2, -1), keepdim=True)
    a = (p * m).sum(dim=(-2, -1), keepdim=True) / (m * m).sum(dim=(-2, -1), keepdim=True).clamp_min(1e-30)
    return p - a * m


@dataclass(frozen=True)
class SeidelFit:
    coeffs: SeidelCoefficients  # canonical form, W311 = 0
    loss: float  # relative residual energy of the best start
    n_beads: int
    shifts: np.ndarray  # (n, 2) fitted (x, y) offsets, px
    start_losses: list[float]


def _centroids(patches: Tensor) -> Tensor:
    """(n, 2) (x, y) centroid of each patch above its median, px from the centre: where the PSF offsets
    start (close to the bead, cheap, robust to noise)."""
    m = patches.shape[-1]
    ax = torch.arange(m, dtype=torch.float64) - m // 2
    bump = (patches - patches.flatten(1).median(dim=1).values[:, None, None]).clamp_min(0)
    mass = bump.sum(dim=(-2, -1)).clamp_min(1e-12)
    return torch.stack([(bump.sum(-2) * ax).sum(-1) / mass, (bump.sum(-1) * ax).sum(-1) / mass], dim=-1)  # (n, 2) x, y


def _model_shift(a: Tensor, s: Tensor, field: Tensor, oversampling: float) -> Tensor:
    """PSF offsets (n, 2) px.  s is where the tilt-free (Zernike) coma PSF sits; the tilt inside the
    coma term, ⅔ W131 (u·h), moves the PSF by 2q·⅔ W131 h, so it is subtracted here."""
    return s - 2.0 * oversampling * (2.0 / 3.0) * a[1] * field


def _descend(a: Tensor, s: Tensor, patches: Tensor, field: Tensor, norm: Tensor, *, oversampling: float, n_iter: int, lr: float) -> float:
    """Adam with a cosine schedule on the balanced coefficients `a` and offsets `s` (in place) from one start; the final loss."""
    m = patches.shape[-1]
    opt = torch.optim.Adam([a, s], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=n_iter, eta_min=lr * 0.02)
    for _ in range(n_iter):
        opt.zero_grad()
        model = seidel_psf(_balanced_to_seidel(a), field, size=m, oversampling=oversampling, shift=_model_shift(a, s, field, oversampling))  # (n, M, M)
        loss = (_fit_amplitude(patches, model) ** 2).sum() / norm
        loss.backward()
        opt.step()
        sched.step()
    return float(loss.detach())


def fit_seidel(
    patches: np.ndarray,
    peaks: np.ndarray,
    *,
    image_shape: tuple[int, int],
    field_radius: float,
    oversampling: float = 2.0,
    n_iter: int = 400,
    lr: float = 0.03,
    n_starts: int = 4,
    init_scale: float = 0.3,
    seed: int = 0,
) -> SeidelFit:
    """argmin_{W, s} Σ_b ‖patch_b − a_b PSF(·; W, h_b, s_b) − c_b‖² / Σ_b ‖patch_b − mean‖²  (Adam).

    patches: (n, M, M) bead patches centred on ``peaks``.  peaks: (n, 2) int (row, col) px in the image.
    image_shape: (H, W) of the image (its centre is the optical axis).  field_radius: px for H = 1.
    oversampling: q of the PSF model.  n_iter, lr: Adam steps and step size (waves and px).
    n_starts: random starts, coefficients ~ U(−init_scale, init_scale) waves; W = 0 itself is a
    stationary point for the even terms (the PSF is even in them), so no start is at zero.
    seed: of the starts.
    """
    patches_t = torch.as_tensor(np.asarray(patches), dtype=torch.float64)  # (n, M, M)
    n, m, _ = patches_t.shape
    check_psf_size(m)
    field = _field(peaks[:, 0], peaks[:, 1], image_shape, field_radius)  # (n, 2)
    centroid = _centroids(patches_t)
    norm = ((patches_t - patches_t.mean(dim=(-2, -1), keepdim=True)) ** 2).sum()
    gen = torch.Generator().manual_seed(int(seed))
    best: tuple[float, Tensor, Tensor] | None = None
    losses: list[float] = []
    for _ in range(n_starts):
        a = ((2 * torch.rand(len(FITTED_TERMS), generator=gen, dtype=torch.float64) - 1) * init_scale).requires_grad_(True)
        s = centroid.clone().requires_grad_(True)
        final = _descend(a, s, patches_t, field, norm, oversampling=oversampling, n_iter=n_iter, lr=lr)
        losses.append(final)
        if best is None or final < best[0]:
            best = (final, a.detach().clone(), _model_shift(a, s, field, oversampling).detach().clone())
    assert best is not None
    return SeidelFit(
        coeffs=SeidelCoefficients.from_tensor(_balanced_to_seidel(best[1])).canonical(),
        loss=best[0],
        n_beads=n,
        shifts=best[2].numpy(),
        start_losses=losses,
    )


def _balanced_to_seidel(a: Tensor) -> Tensor:
    """Seidel coefficients (6,) from the fit's balanced variables a = (a040, a131, a222, a220, a020).

    The Seidel terms overlap: ρ⁴ contains a best-fit defocus ρ² (ρ⁴ = Z₄⁰/6 + ρ² − 1/6), and
    H²ρ²cos²θ half a field curvature (= H²ρ²/2 + H²ρ²cos 2θ / 2).  In the balanced variables each one
    moves a nearly orthogonal aberration (W020 = a020 − a040, W220 = a220 − a222/2), which keeps Adam's
    steps from trading one term against another; coma's tilt is balanced the same way in the offsets.
    """
    zero = a.new_zeros(())
    # order SEIDEL_NAMES: W040, W131, W222, W220, W311, W020
    return torch.stack([a[0], a[1], a[2], a[3] - a[2] / 2, zero, a[4] - a[0]])


def psf_error(a: SeidelCoefficients, b: SeidelCoefficients, *, fields: Tensor, psf_size: int, oversampling: float = 2.0) -> float:
    """max over field points of ‖PSF_a − PSF_b‖₂ / ‖PSF_a‖₂, with W311 ignored (it only moves the PSF).

    fields: (k, 2) normalised field positions.  The PSF is what blurring and deconvolution see, so this
    is the error that matters; it is blind to the even-sign flip by construction.
    """
    strip = {**a.as_dict(), "W311": 0.0}, {**b.as_dict(), "W311": 0.0}
    pa = seidel_psf(SeidelCoefficients(**strip[0]), fields, size=psf_size, oversampling=oversampling)
    pb = seidel_psf(SeidelCoefficients(**strip[1]), fields, size=psf_size, oversampling=oversampling)
    return float(((pa - pb).flatten(1).norm(dim=1) / pa.flatten(1).norm(dim=1)).max())


__all__ = [
    "FITTED_TERMS",
    "BeadImage",
    "SeidelFit",
    "detect_beads",
    "extract_patches",
    "fit_seidel",
    "psf_error",
    "synthesize_bead_image",
]
