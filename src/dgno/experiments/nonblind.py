"""The paper's non-blind comparison, as steps a workflow rule can call one by one — without the
"inverse crime" (making test data with the very operator the restoration then inverts).

1. ``calibrate``: bead frames made like the test data (point sources through the brute-force per-pixel
   Seidel blur of the *true* coefficients, plus camera noise) → detected beads → fitted coefficients
   (JSON, with the fit error against the truth).  The fit models each bead by one shifted PSF at its
   detected peak, so it meets the same kind of model mismatch as deconvolution does.
2. ``blur_dataset``: sharp images blurred by brute-force superposition of per-pixel Seidel PSFs of the
   *true* coefficients (``ring.seidel_superposition``), then Poisson–Gaussian camera noise → a new
   dataset (CONVENTIONS layout, blur level "seidel"), plus the noise-free blurred test images for the
   noise-sensitivity sweep.
3. ``deconvolve_dataset``: restore the noisy test images with a single-centre-PSF baseline (Wiener,
   Richardson–Lucy) or ring deconvolution (ring / LRI model of the *fitted* coefficients).  So the data
   differ from every restoration's model by the calibration error, the ring model's approximation and
   the noise.  Regularisation follows the noise level estimated from each image (``resolve_params``).
4. ``sensitivity``: PSNR of every method against the read-noise σ, from the stored noise-free blurred
   test images.

Blurring a frame: the sharp image is mirror-padded by the PSF radius (half-sample symmetric, as
``sigma_blur``), blurred about the frame's centre and cropped.  A microscope field is cut out of a larger
specimen, so light from just outside the frame reaches the border; zero padding would instead darken
the border, an artefact unrelated to the blur being studied.  Ring deconvolution accordingly solves for
the padded frame and crops (``deconv.ring_deconvolve``).  Images are stored as float32 in [0, 1], and
the ground truth beside them the same way (the source's normalisation applied once), so the two are
compared on one intensity scale.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import torch

from dgno.choices import check_choice
from dgno.io import atomic_dir, read_image, read_json, write_json, write_tiff
from dgno.optics.calibration import (
    FITTED_TERMS,
    BeadImage,
    bead_grid,
    detect_beads,
    extract_patches,
    fit_seidel,
    psf_error,
)
from dgno.optics.deconv import richardson_lucy_deconvolve, ring_deconvolve, wiener_deconvolve
from dgno.optics.ring import RingBlur, seidel_superposition
from dgno.optics.seidel import SeidelCoefficients, seidel_psf, suggest_psf_size

LEVEL = "seidel"
MethodName = Literal["wiener", "richardson_lucy", "ring"]
METHODS: tuple[str, ...] = get_args(MethodName)

# Moderate aberrations (PSF grid 25 px at q = 2); the paper's Seidel blur on BBBC006 scores 31.07 dB, these
# about 31.7 dB on the demo nuclei.  A starting point for configs, not a value from the paper (it gives none).
REFERENCE_COEFFS = SeidelCoefficients(W040=0.075, W131=0.075, W222=0.06, W220=0.04, W311=0.0, W020=0.05)


def true_coefficients(seidel: Mapping[str, Any]) -> SeidelCoefficients:
    """The coefficients a config's ``seidel`` block asks for, in this package's convention.

    ``coeffs`` is a mapping ``{W040: …}`` or a list of six numbers in rdmpy's order (its calibration
    output); ``convention`` says whose sign convention they are in ("dgno", default, or "rdmpy": coma and
    distortion flipped, see ``SeidelCoefficients.from_rdmpy``). In this package's convention, terms a
    mapping leaves out keep their ``REFERENCE_COEFFS`` value; in rdmpy's, the given numbers are all of it
    (missing terms are 0), so rdmpy users never get a mixture of the two conventions.
    """
    given = seidel.get("coeffs", {})
    convention = seidel.get("convention", "dgno")
    check_choice("Seidel convention", convention, ("dgno", "rdmpy"))
    if convention == "rdmpy":
        values = given if isinstance(given, Sequence) and not isinstance(given, str) else SeidelCoefficients.from_dict(given).as_tensor()
        return SeidelCoefficients.from_rdmpy(values)
    if isinstance(given, Sequence) and not isinstance(given, str):
        return SeidelCoefficients.from_tensor(given)
    return SeidelCoefficients.from_dict({**REFERENCE_COEFFS.as_dict(), **given})


def _image_shape(image_size: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    if isinstance(image_size, int):
        return image_size, image_size
    h, w = (int(v) for v in image_size)
    return h, w


def _provenance() -> dict[str, Any]:
    from dgno import provenance

    return provenance.collect()


# Settings of the camera noise and of the restorations when a config leaves them out (schema defaults
# say the same).  "auto" regularisation = per_sigma · σ̂, at least min (``resolve_params``).
DEFAULT_NOISE: dict[str, float] = {"photons": 2000.0, "read_sigma": 0.005}
DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    "wiener": {"balance": "auto", "balance_per_sigma": 2.0, "balance_min": 1e-3},
    "richardson_lucy": {"iterations": 10},
    "ring": {"lam": "auto", "lam_per_sigma": 0.5, "lam_min": 3e-5, "iterations": 300, "lr": 1e-2},
}


def noise_settings(seidel: Mapping[str, Any]) -> dict[str, float]:
    """The camera noise a config's ``seidel`` block asks for (``noise: {photons, read_sigma}``), defaults filled."""
    return {k: float(v) for k, v in {**DEFAULT_NOISE, **seidel.get("noise", {})}.items()}


def deconv_params(nonblind: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per-method restoration settings from a config's ``experiments.nonblind`` block, defaults filled."""
    return {m: {**DEFAULT_PARAMS[m], **nonblind.get(m, {})} for m in METHODS}


def camera_noise(clean: np.ndarray, *, photons: float, read_sigma: float, rng: np.random.Generator) -> np.ndarray:
    """y = Poisson(photons · x) / photons + N(0, read_sigma²), clipped to [0, 1]: a camera's shot and read noise.

    clean: noise-free image in [0, 1] (intensity 1 = `photons` expected photo-electrons).  photons ≤ 0
    leaves out the shot noise.  Clipping is the detector's: no negative counts, saturation at 1.
    Returns float32 of clean's shape.
    """
    x = np.clip(np.asarray(clean, np.float64), 0.0, None)
    y = rng.poisson(x * photons) / photons if photons > 0 else x.copy()
    if read_sigma > 0:
        y = y + rng.normal(0.0, read_sigma, x.shape)
    return np.clip(y, 0.0, 1.0).astype(np.float32)


def estimate_noise_sigma(image: np.ndarray) -> float:
    """σ̂ = median |d| / 0.6745 of the diagonal Haar detail d = (a − b − c + e)/2 of each 2×2 block.

    The robust wavelet estimate (Donoho & Johnstone) with the Haar wavelet, so no PyWavelets is needed:
    a blurred image has almost no diagonal detail of its own, so d is nearly pure noise, and for
    Poisson–Gaussian noise σ̂ is a typical σ over the image.  image: (H, W) or (H, W, C); channels averaged.
    """
    img = np.asarray(image, np.float64)
    img = img[..., None] if img.ndim == 2 else img
    h, w = img.shape[0] // 2 * 2, img.shape[1] // 2 * 2
    if h < 2 or w < 2:
        raise ValueError(f"image {img.shape[:2]} too small to estimate its noise (needs at least 2×2 px)")
    v = img[:h, :w]
    d = (v[0::2, 0::2] - v[0::2, 1::2] - v[1::2, 0::2] + v[1::2, 1::2]) / 2.0
    return float(np.mean([np.median(np.abs(d[..., c])) / 0.6745 for c in range(d.shape[-1])]))


def resolve_params(method: str, params: Mapping[str, Any], sigma_hat: float) -> dict[str, Any]:
    """The settings one image is restored with: "auto" regularisation replaced by max(min, per_sigma · σ̂).

    Why linear in σ̂: on the demo nuclei (brute-force blur, fitted coefficients, 2000 photons + read σ
    0.0025-0.02) the best TV weight λ of ring deconvolution grew from 3e-3 to 1e-2 as σ̂ went from 0.005 to
    0.02, and Wiener's best balance from 1e-2 to 3e-2…1e-1: both ≈ proportional to σ̂, not σ̂² (the data term
    is a mean, and the image's own edges set the scale).  The floors keep noise-free data from losing all
    regularisation.  Numbers given in the config are used as they are.
    """
    check_choice("method", method, METHODS)
    out = dict(params)
    key = {"wiener": "balance", "ring": "lam"}.get(method)
    if key and out.get(key) == "auto":
        out[key] = max(float(out[f"{key}_min"]), float(out[f"{key}_per_sigma"]) * float(sigma_hat))
    return out


def brute_force_blur(
    images: np.ndarray,
    coeffs: SeidelCoefficients,
    *,
    field_radius: float,
    psf_size: int,
    oversampling: float = 2.0,
    pad: Literal["symmetric", "constant"] = "symmetric",
    device: str = "cpu",
) -> np.ndarray:
    """Blur a batch of frames by superposing the exact Seidel PSF of every source pixel (no ring model).

    images: (L, H, W) in [0, 1], optical axis at the frame's centre.  The frames are padded by the PSF
    radius (``pad``: "symmetric" mirrors the specimen beyond the border, "constant" = dark surround, for
    beads), blurred by ``ring.seidel_superposition`` and cropped back.  Returns (L, H, W) float32 (not
    clipped).
    """
    arr = np.asarray(images, np.float32)
    m = int(psf_size) // 2
    padded = np.pad(arr, ((0, 0), (m, m), (m, m)), mode=pad)
    with torch.no_grad():
        y = seidel_superposition(
            torch.from_numpy(padded).to(device),
            coeffs,
            field_radius=field_radius,
            psf_size=psf_size,
            oversampling=oversampling,
        )
    return y[:, m : m + arr.shape[1], m : m + arr.shape[2]].cpu().numpy()


def bead_frame(
    coeffs: SeidelCoefficients,
    *,
    image_shape: tuple[int, int],
    psf_size: int,
    oversampling: float,
    noise: Mapping[str, float],
    background: float = 0.02,
    seed: int = 0,
) -> BeadImage:
    """A calibration frame made like the test data: beads → brute-force Seidel blur → camera noise.

    Beads sit on a jittered square grid (pitch M + 4 px), each a point source on one pixel (the sources of
    the per-pixel superposition are pixels; a bilinear spread of sub-pixel beads would add a blur that is
    in neither the data nor the fit, and biased the fit to a 25 % PSF error), with amplitudes U(0.6, 1)
    scaled so a perfect bead would peak at its amplitude.  The frame is blurred by ``brute_force_blur``
    (dark surround) and gets ``camera_noise`` with `noise` on a background.  The fit still models each
    bead by one PSF at its *detected* peak with a free sub-pixel offset, so it sees the noise and the
    peak-vs-source displacement of coma, as a real calibration would.
    """
    h, w = image_shape
    fr = max(h, w) / 2.0
    pitch = psf_size + 4
    rng = np.random.default_rng(seed)
    grid = bead_grid(image_shape, psf_size, pitch)
    jitter = rng.integers(-(pitch // 4), pitch // 4 + 1, grid.shape)
    pos = (grid + jitter).astype(np.int64)  # (n, 2) px
    amp = rng.uniform(0.6, 1.0, len(pos))
    peak0 = float(seidel_psf(SeidelCoefficients(), (0.0, 0.0), size=psf_size, oversampling=oversampling).max())
    points = np.zeros((h, w))
    points[pos[:, 0], pos[:, 1]] = amp / peak0
    clean = brute_force_blur(points[None], coeffs, field_radius=fr, psf_size=psf_size, oversampling=oversampling, pad="constant")[0]
    image = camera_noise(clean + background, rng=rng, **noise)
    return BeadImage(image=image, positions=pos.astype(np.float64), field_radius=fr, psf_size=psf_size)


def calibrate(
    out_json: str | Path,
    *,
    coeffs_true: SeidelCoefficients | Mapping[str, float],
    image_size: int | tuple[int, int],
    seed: int,
    oversampling: float = 2.0,
    n_images: int = 1,
    noise: Mapping[str, float] | None = None,
    n_iter: int = 300,
    n_starts: int = 4,
) -> dict[str, Any]:
    """Fit Seidel coefficients to noisy synthetic bead frames made from `coeffs_true`; write them as JSON.

    coeffs_true: true coefficients, waves.  image_size: (H, W) (or one int) of the calibration frames =
    the frames to be blurred later; the field radius (H = 1) is half the larger side.  seed: of bead
    positions, amplitudes, noise and fit starts.  oversampling: q, px per λ/D.  n_images: frames pooled
    for the fit (small frames hold few beads).  noise: camera noise {photons, read_sigma} of the frames
    (``camera_noise``; default ``DEFAULT_NOISE``), the same as the test data's.  n_iter, n_starts:
    Adam steps per start and random starts.
    JSON keys: coeffs (fitted, canonical, W311 = 0), coeffs_true, coeffs_true_canonical, field_radius_px,
    image_size, oversampling, psf_size (PSF grid for the fitted coefficients, used by blur and deconvolution),
    bead_patch_px, fit {loss, n_beads, start_losses}, error {abs_error per fitted term, max_abs_error,
    psf_rel_error_max (over centre, edge and corner field points)}, provenance.
    Returns the same dict.
    """
    true = coeffs_true if isinstance(coeffs_true, SeidelCoefficients) else SeidelCoefficients.from_dict(coeffs_true)
    noise = {**DEFAULT_NOISE, **(noise or {})}
    shape = _image_shape(image_size)
    field_radius = max(shape) / 2.0
    corner = float(np.hypot((shape[0] - 1) / 2.0, (shape[1] - 1) / 2.0)) / field_radius
    patch = suggest_psf_size(true, max_field=corner, oversampling=oversampling)  # renders beads, cuts patches
    patches, peaks = [], []
    for k in range(int(n_images)):
        beads = bead_frame(true, image_shape=shape, psf_size=patch, oversampling=oversampling, noise=noise, seed=int(seed) * 1000 + k)
        found = detect_beads(beads.image, psf_size=patch)
        if len(found):
            patches.append(extract_patches(beads.image, found, patch))
            peaks.append(found)
    if not peaks:
        raise ValueError(f"no beads detected in {n_images} frame(s) of {shape}: use larger frames or more images")
    fit = fit_seidel(
        np.concatenate(patches),
        np.concatenate(peaks),
        image_shape=shape,
        field_radius=field_radius,
        oversampling=oversampling,
        n_iter=n_iter,
        n_starts=n_starts,
        seed=seed,
    )
    psf_size = suggest_psf_size(fit.coeffs, max_field=corner, oversampling=oversampling)  # the model's grid
    canon = true.canonical()
    abs_err = {t: abs(getattr(fit.coeffs, t) - getattr(canon, t)) for t in FITTED_TERMS}
    probe = torch.tensor([[0.0, 0.0], [1.0, 0.0], [corner / np.sqrt(2), corner / np.sqrt(2)]], dtype=torch.float64)
    result = {
        "coeffs": fit.coeffs.as_dict(),
        "coeffs_true": true.as_dict(),
        "coeffs_true_canonical": canon.as_dict(),
        "field_radius_px": field_radius,
        "image_size": list(shape),
        "oversampling": float(oversampling),
        "psf_size": psf_size,
        "bead_patch_px": patch,
        "n_images": int(n_images),
        "noise": {k: float(v) for k, v in noise.items()},
        "bead_model": "bilinear point sources, brute-force per-pixel Seidel blur of the true coefficients, Poisson-Gaussian noise",
        "seed": int(seed),
        "fit": {"loss": fit.loss, "n_beads": fit.n_beads, "start_losses": fit.start_losses, "n_iter": n_iter},
        "error": {
            "abs_error": abs_err,
            "max_abs_error": max(abs_err.values()),
            "psf_rel_error_max": psf_error(true, fit.coeffs, fields=probe, psf_size=patch, oversampling=oversampling),
            "note": "W311 (distortion) is not identifiable from a bead image with unknown bead positions and is "
            "fitted as 0; the even terms are compared in canonical sign (SeidelCoefficients.canonical)",
        },
        "provenance": _provenance(),
    }
    write_json(out_json, result)
    return result


def _operator(calib: Mapping[str, Any], shape: tuple[int, int], device: str) -> tuple[RingBlur, int]:
    """RingBlur for frames of `shape` padded by the PSF radius m; returns (operator, m)."""
    psf_size = int(calib["psf_size"])
    margin = psf_size // 2
    op = RingBlur(
        coeffs=SeidelCoefficients.from_dict(calib["coeffs"]),
        image_shape=(shape[0] + 2 * margin, shape[1] + 2 * margin),
        field_radius=float(calib["field_radius_px"]),
        psf_size=psf_size,
        oversampling=float(calib["oversampling"]),
        device=device,
    )
    return op, margin


def _select_ids(data_dir: Path, split: str | None, max_images: int | None) -> list[tuple[str, str]]:
    """(id, split) rows of split.csv for `split` (None: all), in file order, at most max_images."""
    from dgno.data.paired import read_split

    rows = [(i, s) for s, ids in read_split(data_dir).items() for i in ids if split is None or s == split]
    if not rows:
        raise ValueError(f"{data_dir / 'split.csv'}: no images in split {split!r}")
    return rows[:max_images] if max_images is not None else rows


def _channels_first(img: np.ndarray) -> np.ndarray:
    return img[None] if img.ndim == 2 else np.moveaxis(img, -1, 0)  # (C, H, W)


def _channels_last(arr: np.ndarray, ndim: int) -> np.ndarray:
    return arr[0] if ndim == 2 else np.moveaxis(arr, 0, -1)


def data_psf_size(coeffs: SeidelCoefficients, shape: tuple[int, int], oversampling: float) -> int:
    """PSF grid that holds the PSFs of `coeffs` up to the corners of a frame of `shape` (field radius = half the larger side)."""
    corner = float(np.hypot((shape[0] - 1) / 2.0, (shape[1] - 1) / 2.0)) / (max(shape) / 2.0)
    return suggest_psf_size(coeffs, max_field=corner, oversampling=oversampling)


def blur_dataset(
    src_data_dir: str | Path,
    out_data_dir: str | Path,
    *,
    seidel: Mapping[str, Any],
    clean_dir: str | Path | None = None,
    split: str | None = None,
    max_images: int | None = None,
    oversampling: float = 2.0,
    seed: int = 0,
    batch: int = 8,
    device: str = "cpu",
) -> Path:
    """y = noise(crop(superposition_true · mirror_pad(x))) for every gt image x of `split`: level "seidel".

    The blur is the brute-force per-pixel PSF superposition of the config's *true* coefficients
    (``true_coefficients(seidel)``), never the ring operator or the fitted coefficients that deconvolution
    uses; the noise is ``camera_noise`` with ``noise_settings(seidel)``, seeded by (seed, image index).
    src_data_dir: dataset in the CONVENTIONS layout (gt/, split.csv, optional labels/, manifest.json whose
    ``normalise`` is honoured).  out_data_dir: written atomically (``dgno.io.atomic_dir``).
    clean_dir: if given, the noise-free blurred *test* images go there as <id>.tif (for ``sensitivity``).
    split: which rows to blur (None: all).  max_images: first n of them.  oversampling: q, px per λ/D.
    batch: frames blurred together (they share the PSF computation; memory grows with it).
    device: torch device of the superposition.
    Writes gt/<id>.tif and blur/seidel/<id>.tif as float32 in [0, 1], labels/ (copied where present),
    split.csv (the blurred rows) and manifest.json (normalise "dtype", the blur and noise settings).
    """
    from dgno.data.paired import dataset_normalisation

    src, out = Path(src_data_dir), Path(out_data_dir)
    true = true_coefficients(seidel)
    noise = noise_settings(seidel)
    rows = _select_ids(src, split, max_images)
    normalise = dataset_normalisation(src)
    psf_sizes: dict[tuple[int, int], int] = {}
    clipped, seconds = 0, 0.0
    clean_tmp = None
    with atomic_dir(out) as tmp:
        for sub in ("gt", f"blur/{LEVEL}"):
            (tmp / sub).mkdir(parents=True)
        if clean_dir is not None:
            clean_tmp = tmp / "_clean"
            clean_tmp.mkdir()
        for start in range(0, len(rows), max(1, int(batch))):
            chunk = rows[start : start + max(1, int(batch))]
            images = {ident: read_image(src / "gt" / f"{ident}.tif", normalise=normalise) for ident, _ in chunk}
            by_shape: dict[tuple[int, int], list[str]] = {}
            for ident, x in images.items():
                by_shape.setdefault(x.shape[:2], []).append(ident)
            blurred: dict[str, np.ndarray] = {}
            for shape, idents in by_shape.items():
                if shape not in psf_sizes:
                    psf_sizes[shape] = data_psf_size(true, shape, oversampling)
                stack = np.concatenate([_channels_first(images[i]) for i in idents])  # (ΣC, H, W)
                t0 = time.perf_counter()
                y = brute_force_blur(stack, true, field_radius=max(shape) / 2.0, psf_size=psf_sizes[shape], oversampling=oversampling, device=device)
                seconds += time.perf_counter() - t0
                k = 0
                for i in idents:
                    c = _channels_first(images[i]).shape[0]
                    blurred[i] = y[k : k + c]
                    k += c
            for n, (ident, sp) in enumerate(chunk):
                x, clean = images[ident], blurred[ident]
                noisy = camera_noise(clean, rng=np.random.default_rng((int(seed), start + n)), **noise)
                clipped += int(((clean < 0) | (clean > 1)).sum())
                write_tiff(tmp / "gt" / f"{ident}.tif", x.astype(np.float32))
                write_tiff(tmp / "blur" / LEVEL / f"{ident}.tif", _channels_last(noisy, x.ndim))
                if clean_tmp is not None and sp == "test":
                    write_tiff(clean_tmp / f"{ident}.tif", _channels_last(np.clip(clean, 0, 1).astype(np.float32), x.ndim))
                label = src / "labels" / f"{ident}.tif"
                if label.exists():
                    (tmp / "labels").mkdir(exist_ok=True)
                    shutil.copyfile(label, tmp / "labels" / f"{ident}.tif")
        with (tmp / "split.csv").open("w", newline="") as fh:
            fh.write("id,split\n" + "".join(f"{i},{s}\n" for i, s in rows))
        src_manifest = read_json(src / "manifest.json") if (src / "manifest.json").exists() else {}
        manifest = {
            "source": f"{src_manifest.get('source', src.name)} + brute-force Seidel blur + camera noise",
            "generator": "dgno.experiments.nonblind.blur_dataset",
            "source_dir": str(src),
            "source_normalise": normalise,
            "normalise": "dtype",
            "n_images": len(rows),
            "split": split,
            "levels": {
                LEVEL: {
                    "model": "brute-force superposition of per-pixel Seidel PSFs of the true coefficients "
                    "(dgno.optics.ring.seidel_superposition), mirror padding by the PSF radius; not the ring operator "
                    "or the fitted coefficients that deconvolution uses",
                    "coeffs_true": true.as_dict(),
                    "field_radius": "half the larger image side",
                    "oversampling": float(oversampling),
                    "psf_size": {f"{h}x{w}": m for (h, w), m in psf_sizes.items()},
                    "noise": {"model": "Poisson-Gaussian: Poisson(photons * y) / photons + N(0, read_sigma^2), clipped to [0, 1]", **noise, "seed": int(seed)},
                    "pixels_outside_unit_range_before_noise": clipped,
                    "blur_seconds": seconds,
                }
            },
            "provenance": _provenance(),
        }
        write_json(tmp / "manifest.json", manifest)
        if clean_tmp is not None:
            with atomic_dir(Path(clean_dir)) as ctmp:
                for f in clean_tmp.iterdir():
                    shutil.move(str(f), ctmp / f.name)
                write_json(ctmp / "manifest.json", {"content": "noise-free blurred test images (before camera noise)", "of": str(out)})
            clean_tmp.rmdir()
    return out


def restore_image(
    y: np.ndarray, method: MethodName, op: RingBlur, params: Mapping[str, Any], *, device: str = "cpu"
) -> tuple[np.ndarray, dict[str, Any]]:
    """Restore one noisy blurred image (H, W[, C]) in [0, 1] with `method`; returns (image, settings used).

    params: that method's block of ``deconv_params`` ("auto" regularisation is resolved from the image's
    ``estimate_noise_sigma``).  op: ``RingBlur`` of the fitted coefficients for the mirror-padded frame
    (``_operator``); Wiener and Richardson–Lucy use only its on-axis PSF.
    """
    sigma_hat = estimate_noise_sigma(y)
    used = resolve_params(method, params, sigma_hat)
    yc = _channels_first(y)  # (C, H, W)
    if method == "ring":
        batch = torch.from_numpy(np.ascontiguousarray(yc))[None].to(device)  # (1, C, H, W)
        restored = ring_deconvolve(batch, op, lam=float(used["lam"]), n_iter=int(used["iterations"]), lr=float(used["lr"]))
        x = restored[0].clamp(0, 1).cpu().numpy()  # (C, H, W)
    else:
        psf = op.centre_psf().double().cpu().numpy()  # (M, M)
        if method == "wiener":
            x = np.stack([wiener_deconvolve(ch, psf, balance=float(used["balance"])) for ch in yc])
        else:
            x = np.stack([richardson_lucy_deconvolve(ch, psf, n_iter=int(used["iterations"])) for ch in yc])
    return _channels_last(x.astype(np.float32), y.ndim), {**used, "sigma_hat": sigma_hat}


def deconvolve_dataset(
    data_dir: str | Path,
    coeffs_json: str | Path,
    out_dir: str | Path,
    *,
    method: MethodName,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    level: str = LEVEL,
    split: str = "test",
    max_images: int | None = None,
    device: str = "cpu",
) -> Path:
    """Restore blur/<level>/<id>.tif of `split` with `method`; write out_dir/<id>.tif and settings.json.

    method: "wiener" or "richardson_lucy" (one PSF: the on-axis PSF of the fitted coefficients) or "ring"
    (all PSFs of the ring model, ``ring_deconvolve``).  params: ``deconv_params(config block)`` — balance,
    iterations, λ, step; the config's, so no setting lives in code (missing ones: ``DEFAULT_PARAMS``).
    data_dir: dataset written by ``blur_dataset``.  coeffs_json: the calibration JSON.  max_images:
    first n test images.  device: torch device (ring only).
    Restored images are float32 (H, W[, C]) in [0, 1].  settings.json records the settings of every
    image (σ̂ and the resolved regularisation).  out_dir is written atomically.
    """
    check_choice("method", method, METHODS)
    chosen = deconv_params(params or {})[method]
    data_dir, out = Path(data_dir), Path(out_dir)
    calib = read_json(coeffs_json)
    rows = _select_ids(data_dir, split, max_images)
    ops: dict[tuple[int, int], tuple[RingBlur, int]] = {}
    seconds = 0.0
    per_image: dict[str, dict[str, Any]] = {}
    with atomic_dir(out) as tmp:
        for ident, _ in rows:
            y = read_image(data_dir / "blur" / level / f"{ident}.tif")  # (H, W[, C]) float32
            shape = y.shape[:2]
            if shape not in ops:
                ops[shape] = _operator(calib, shape, device)
            start = time.perf_counter()
            x, per_image[ident] = restore_image(y, method, ops[shape][0], chosen, device=device)
            seconds += time.perf_counter() - start
            write_tiff(tmp / f"{ident}.tif", x, compress=True)
        settings = {
            "method": method,
            "level": level,
            "split": split,
            "n_images": len(rows),
            "coeffs_json": str(coeffs_json),
            "coeffs": calib["coeffs"],
            "psf": "on-axis PSF of the fitted coefficients" if method != "ring" else "all PSFs (ring / LRI model of the fitted coefficients)",
            "params": {**chosen, **({"tv_eps": 1e-3} if method == "ring" else {})},
            "per_image": per_image,
            "seconds_total": seconds,
            "device": device,
            "provenance": _provenance(),
        }
        write_json(tmp / "settings.json", settings)
    return out


def sensitivity(
    data_dir: str | Path,
    clean_dir: str | Path,
    coeffs_json: str | Path,
    out_csv: str | Path,
    *,
    read_sigmas: Sequence[float],
    photons: float,
    methods: Sequence[str] = METHODS,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    restorers: Mapping[str, Any] | None = None,
    seed: int = 0,
    max_images: int | None = None,
    device: str = "cpu",
) -> list[dict[str, Any]]:
    """PSNR of the blurred input, each deconvolution and each network against the camera's read-noise σ.

    For every σ in `read_sigmas`, the noise-free blurred test images (clean_dir, from ``blur_dataset``)
    get fresh ``camera_noise`` (shot noise of `photons`, read σ; seeded by (seed, σ index, image)) and are
    restored by each method with the config's settings (``params``; "auto" follows each image's σ̂) and by
    each ``restorers[name]`` (image → restored image, e.g. the trained DGNO).  data_dir: the dataset
    (gt/, split.csv).  Writes out_csv with columns read_sigma, sigma_hat, method, n_images, psnr (mean
    over images) and returns its rows.
    """
    import pandas as pd

    from dgno import metrics
    from dgno.io import write_csv

    data_dir, clean_dir = Path(data_dir), Path(clean_dir)
    chosen = deconv_params(params or {})
    calib = read_json(coeffs_json)
    rows = _select_ids(data_dir, "test", max_images)
    ops: dict[tuple[int, int], tuple[RingBlur, int]] = {}
    gts = {i: read_image(data_dir / "gt" / f"{i}.tif") for i, _ in rows}
    cleans = {i: read_image(clean_dir / f"{i}.tif") for i, _ in rows}
    out: list[dict[str, Any]] = []
    for k, sigma in enumerate(read_sigmas):
        scores: dict[str, list[float]] = {}
        sig_hats = []
        for n, (ident, _) in enumerate(rows):
            y = camera_noise(cleans[ident], photons=photons, read_sigma=float(sigma), rng=np.random.default_rng((int(seed), k, n)))
            sig_hats.append(estimate_noise_sigma(y))
            gt = gts[ident]
            scores.setdefault("input", []).append(metrics.psnr(y, gt))
            shape = y.shape[:2]
            for method in methods:
                if shape not in ops:
                    ops[shape] = _operator(calib, shape, device)
                x, _ = restore_image(y, method, ops[shape][0], chosen[method], device=device)
                scores.setdefault(method, []).append(metrics.psnr(x, gt))
            for name, restore in (restorers or {}).items():
                scores.setdefault(name, []).append(metrics.psnr(restore(y), gt))
        for name, vals in scores.items():
            out.append({"read_sigma": float(sigma), "sigma_hat": float(np.mean(sig_hats)), "method": name, "n_images": len(vals), "psnr": float(np.mean(vals))})
    write_csv(out_csv, pd.DataFrame(out))
    return out


__all__ = [
    "DEFAULT_NOISE",
    "DEFAULT_PARAMS",
    "LEVEL",
    "METHODS",
    "REFERENCE_COEFFS",
    "bead_frame",
    "blur_dataset",
    "brute_force_blur",
    "calibrate",
    "camera_noise",
    "data_psf_size",
    "deconv_params",
    "deconvolve_dataset",
    "estimate_noise_sigma",
    "noise_settings",
    "resolve_params",
    "restore_image",
    "sensitivity",
]
