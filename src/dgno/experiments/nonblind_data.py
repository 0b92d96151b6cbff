"""The non-blind comparison's data: calibration from bead frames, and the Seidel-blurred dataset.

Both are made by the brute-force per-pixel superposition of the *true* coefficients' Seidel PSFs
(``dgno.optics.superposition.seidel_superposition``) plus Poisson–Gaussian camera noise, never by the ring
operator or the fitted coefficients that the restorations (``dgno.experiments.nonblind``) use.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from dgno import provenance
from dgno.data.paired import channels_first, channels_last, dataset_normalisation, read_split
from dgno.experiments.nonblind_settings import DEFAULT_NOISE, LEVEL, noise_settings, true_coefficients
from dgno.io import atomic_dir, read_image, read_json, write_json, write_tiff
from dgno.optics.calibration import FITTED_TERMS, BeadImage, bead_grid, detect_beads, extract_patches, fit_seidel, psf_error
from dgno.optics.noise import camera_noise
from dgno.optics.seidel import SeidelCoefficients, seidel_psf, suggest_psf_size
from dgno.optics.superposition import seidel_superposition


def _image_shape(image_size: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    if isinstance(image_size, int):
        return image_size, image_size
    h, w = (int(v) for v in image_size)
    return h, w


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
    beads), blurred by ``superposition.seidel_superposition`` and cropped back.  Returns (L, H, W) float32 (not
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
    (dark surround) and gets camera noise `noise` ({photons, read_sigma}) on a background.  The fit still models each
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
    image = camera_noise(clean + background, photons=noise["photons"], read_noise=noise["read_sigma"], unit="intensity", rng=rng)
    return BeadImage(image=image, positions=pos.astype(np.float64), field_radius=fr, psf_size=psf_size)


def _fit_beads(true: SeidelCoefficients, shape: tuple[int, int], *, patch: int, oversampling: float, noise: Mapping[str, float], n_images: int, seed: int, n_iter: int, n_starts: int):
    """Make `n_images` bead frames of `shape`, detect their beads and fit Seidel coefficients to them."""
    patches, peaks = [], []
    for k in range(int(n_images)):
        beads = bead_frame(true, image_shape=shape, psf_size=patch, oversampling=oversampling, noise=noise, seed=int(seed) * 1000 + k)
        found = detect_beads(beads.image, psf_size=patch)
        if len(found):
            patches.append(extract_patches(beads.image, found, patch))
            peaks.append(found)
    if not peaks:
        raise ValueError(f"no beads detected in {n_images} frame(s) of {shape}: use larger frames or more images")
    return fit_seidel(
        np.concatenate(patches),
        np.concatenate(peaks),
        image_shape=shape,
        field_radius=max(shape) / 2.0,
        oversampling=oversampling,
        n_iter=n_iter,
        n_starts=n_starts,
        seed=seed,
    )


def _calibration_record(true: SeidelCoefficients, fit, *, shape: tuple[int, int], corner: float, patch: int, psf_size: int, oversampling: float, n_images: int, noise: Mapping[str, float], seed: int, n_iter: int) -> dict[str, Any]:
    """The calibration JSON: fitted and true coefficients, the geometry the fit used, and its errors."""
    field_radius = max(shape) / 2.0
    canon = true.canonical()
    abs_err = {t: abs(getattr(fit.coeffs, t) - getattr(canon, t)) for t in FITTED_TERMS}
    probe = torch.tensor([[0.0, 0.0], [1.0, 0.0], [corner / np.sqrt(2), corner / np.sqrt(2)]], dtype=torch.float64)
    return {
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
        "provenance": provenance.collect(),
    }


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
    fit = _fit_beads(true, shape, patch=patch, oversampling=oversampling, noise=noise, n_images=n_images, seed=seed, n_iter=n_iter, n_starts=n_starts)
    psf_size = suggest_psf_size(fit.coeffs, max_field=corner, oversampling=oversampling)  # the model's grid
    result = _calibration_record(true, fit, shape=shape, corner=corner, patch=patch, psf_size=psf_size, oversampling=oversampling, n_images=n_images, noise=noise, seed=seed, n_iter=n_iter)
    write_json(out_json, result)
    return result


def select_ids(data_dir: Path, split: str | None, max_images: int | None) -> list[tuple[str, str]]:
    """(id, split) rows of split.csv for `split` (None: all), in file order, at most max_images."""
    rows = [(i, s) for s, ids in read_split(data_dir).items() for i in ids if split is None or s == split]
    if not rows:
        raise ValueError(f"{data_dir / 'split.csv'}: no images in split {split!r}")
    return rows[:max_images] if max_images is not None else rows


def data_psf_size(coeffs: SeidelCoefficients, shape: tuple[int, int], oversampling: float) -> int:
    """PSF grid that holds the PSFs of `coeffs` up to the corners of a frame of `shape` (field radius = half the larger side)."""
    corner = float(np.hypot((shape[0] - 1) / 2.0, (shape[1] - 1) / 2.0)) / (max(shape) / 2.0)
    return suggest_psf_size(coeffs, max_field=corner, oversampling=oversampling)


def _blur_chunk(images: dict[str, np.ndarray], true: SeidelCoefficients, psf_sizes: dict, *, oversampling: float, device: str) -> tuple[dict[str, np.ndarray], float]:
    """({id: noise-free blurred (C, H, W)}, seconds): frames of one shape blurred together.

    ``psf_sizes`` ({(H, W): PSF grid}) is filled for shapes met the first time.
    """
    by_shape: dict[tuple[int, int], list[str]] = {}
    for ident, x in images.items():
        by_shape.setdefault(x.shape[:2], []).append(ident)
    blurred: dict[str, np.ndarray] = {}
    seconds = 0.0
    for shape, idents in by_shape.items():
        if shape not in psf_sizes:
            psf_sizes[shape] = data_psf_size(true, shape, oversampling)
        stack = np.concatenate([channels_first(images[i]) for i in idents])  # (ΣC, H, W)
        t0 = time.perf_counter()
        y = brute_force_blur(stack, true, field_radius=max(shape) / 2.0, psf_size=psf_sizes[shape], oversampling=oversampling, device=device)
        seconds += time.perf_counter() - t0
        k = 0
        for i in idents:
            c = channels_first(images[i]).shape[0]
            blurred[i] = y[k : k + c]
            k += c
    return blurred, seconds


def _write_pair(tmp: Path, clean_tmp: Path | None, src: Path, ident: str, split: str, x: np.ndarray, clean: np.ndarray, *, noise: Mapping[str, float], rng: np.random.Generator) -> int:
    """Write one image's gt, noisy blurred image (and noise-free copy, label); return its pixels outside [0, 1] before noise."""
    noisy = camera_noise(clean, photons=noise["photons"], read_noise=noise["read_sigma"], unit="intensity", rng=rng)
    clipped = int(((clean < 0) | (clean > 1)).sum())
    write_tiff(tmp / "gt" / f"{ident}.tif", x.astype(np.float32))
    write_tiff(tmp / "blur" / LEVEL / f"{ident}.tif", channels_last(noisy, x.ndim))
    if clean_tmp is not None and split == "test":
        write_tiff(clean_tmp / f"{ident}.tif", channels_last(np.clip(clean, 0, 1).astype(np.float32), x.ndim))
    label = src / "labels" / f"{ident}.tif"
    if label.exists():
        (tmp / "labels").mkdir(exist_ok=True)
        shutil.copyfile(label, tmp / "labels" / f"{ident}.tif")
    return clipped


def _blur_manifest(src: Path, rows: list, *, split: str | None, normalise: str, true: SeidelCoefficients, oversampling: float, psf_sizes: dict, noise: Mapping[str, float], seed: int, clipped: int, seconds: float) -> dict[str, Any]:
    """manifest.json of the blurred dataset: its source, the true blur and the noise that made it."""
    src_manifest = read_json(src / "manifest.json") if (src / "manifest.json").exists() else {}
    return {
        "source": f"{src_manifest.get('source', src.name)} + brute-force Seidel blur + camera noise",
        "generator": "dgno.experiments.nonblind_data.blur_dataset",
        "source_dir": str(src),
        "source_normalise": normalise,
        "normalise": "dtype",
        "n_images": len(rows),
        "split": split,
        "levels": {
            LEVEL: {
                "model": "brute-force superposition of per-pixel Seidel PSFs of the true coefficients "
                "(dgno.optics.superposition.seidel_superposition), mirror padding by the PSF radius; not the ring operator "
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
        "provenance": provenance.collect(),
    }


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
    uses; the noise is ``dgno.optics.noise.camera_noise`` with ``noise_settings(seidel)``, seeded by (seed, image index).
    src_data_dir: dataset in the CONVENTIONS layout (gt/, split.csv, optional labels/, manifest.json whose
    ``normalise`` is honoured).  out_data_dir: written atomically (``dgno.io.atomic_dir``).
    clean_dir: if given, the noise-free blurred *test* images go there as <id>.tif (for ``sensitivity``).
    split: which rows to blur (None: all).  max_images: first n of them.  oversampling: q, px per λ/D.
    batch: frames blurred together (they share the PSF computation; memory grows with it).
    device: torch device of the superposition.
    Writes gt/<id>.tif and blur/seidel/<id>.tif as float32 in [0, 1], labels/ (copied where present),
    split.csv (the blurred rows) and manifest.json (normalise "dtype", the blur and noise settings).
    """
    src, out = Path(src_data_dir), Path(out_data_dir)
    true = true_coefficients(seidel)
    noise = noise_settings(seidel)
    rows = select_ids(src, split, max_images)
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
            blurred, took = _blur_chunk(images, true, psf_sizes, oversampling=oversampling, device=device)
            seconds += took
            for n, (ident, sp) in enumerate(chunk):
                rng = np.random.default_rng((int(seed), start + n))
                clipped += _write_pair(tmp, clean_tmp, src, ident, sp, images[ident], blurred[ident], noise=noise, rng=rng)
        with (tmp / "split.csv").open("w", newline="") as fh:
            fh.write("id,split\n" + "".join(f"{i},{s}\n" for i, s in rows))
        manifest = _blur_manifest(src, rows, split=split, normalise=normalise, true=true, oversampling=oversampling, psf_sizes=psf_sizes, noise=noise, seed=seed, clipped=clipped, seconds=seconds)
        write_json(tmp / "manifest.json", manifest)
        if clean_tmp is not None:
            with atomic_dir(Path(clean_dir)) as ctmp:
                for f in clean_tmp.iterdir():
                    shutil.move(str(f), ctmp / f.name)
                write_json(ctmp / "manifest.json", {"content": "noise-free blurred test images (before camera noise)", "of": str(out)})
            clean_tmp.rmdir()
    return out
