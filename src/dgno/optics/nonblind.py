"""The paper's non-blind comparison, as three steps a workflow rule can call one by one.

1. ``calibrate``: bead image(s) rendered from known Seidel coefficients → detected beads → fitted
   coefficients (JSON, with the fit error against the truth).
2. ``blur_dataset``: sharp images of a dataset blurred by the ring (LRI) forward model with the *fitted*
   coefficients → a new dataset directory (CONVENTIONS layout, blur level "seidel").
3. ``deconvolve_dataset``: restore the blurred test images with a single-centre-PSF baseline (Wiener,
   Richardson–Lucy) or with ring deconvolution, which uses the same spatially varying model as step 2.

Blurring a frame: the sharp image is mirror-padded by the PSF radius (half-sample symmetric, as
``sigma_blur``), blurred about the frame's centre and cropped.  A microscope field is cut out of a larger
specimen, so light from just outside the frame reaches the border; zero padding would instead darken
the border, an artefact unrelated to the blur being studied.  Ring deconvolution accordingly solves for
the padded frame and crops (``deconv.ring_deconvolve``).  The blurred images are stored noise-free as
float32 in [0, 1], and the ground truth is stored beside them the same way (the source's normalisation
applied once), so the two are compared on one intensity scale.
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
    detect_beads,
    extract_patches,
    fit_seidel,
    psf_error,
    synthesize_bead_image,
)
from dgno.optics.deconv import richardson_lucy_deconvolve, ring_deconvolve, wiener_deconvolve
from dgno.optics.ring import RingBlur
from dgno.optics.seidel import SeidelCoefficients, suggest_psf_size

LEVEL = "seidel"
MethodName = Literal["wiener", "richardson_lucy", "ring"]
METHODS: tuple[str, ...] = get_args(MethodName)

# Moderate aberrations (PSF grid 25 px at q = 2).  On six 96×96 demo nuclei test images (calibrated from
# 4 bead frames, mirror-padded blur) they gave: blurred 31.9 dB / SSIM 0.937, Wiener 37.7 / 0.967,
# Richardson–Lucy 37.8 / 0.966, ring deconvolution 40.9 / 0.971 — the paper's Seidel blur on BBBC006
# is 31.07 dB.  A starting point for configs, not a value from the paper (it gives none).
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


def calibrate(
    out_json: str | Path,
    *,
    coeffs_true: SeidelCoefficients | Mapping[str, float],
    image_size: int | tuple[int, int],
    seed: int,
    oversampling: float = 2.0,
    n_images: int = 1,
    noise_std: float = 0.005,
    n_iter: int = 300,
    n_starts: int = 4,
) -> dict[str, Any]:
    """Fit Seidel coefficients to synthetic bead images rendered from `coeffs_true`; write them as JSON.

    coeffs_true: true coefficients, waves.  image_size: (H, W) (or one int) of the calibration frames =
    the frames to be blurred later; the field radius (H = 1) is half the larger side.  seed: of bead
    positions, amplitudes, noise and fit starts.  oversampling: q, px per λ/D.  n_images: frames pooled
    for the fit (small frames hold few beads).  noise_std: Gaussian noise of the frames.  n_iter, n_starts:
    Adam steps per start and random starts.
    JSON keys: coeffs (fitted, canonical, W311 = 0), coeffs_true, coeffs_true_canonical, field_radius_px,
    image_size, oversampling, psf_size (PSF grid for the fitted coefficients, used by blur and deconvolution),
    bead_patch_px, fit {loss, n_beads, start_losses}, error {abs_error per fitted term, max_abs_error,
    psf_rel_error_max (over centre, edge and corner field points)}, provenance.
    Returns the same dict.
    """
    true = coeffs_true if isinstance(coeffs_true, SeidelCoefficients) else SeidelCoefficients.from_dict(coeffs_true)
    shape = _image_shape(image_size)
    field_radius = max(shape) / 2.0
    corner = float(np.hypot((shape[0] - 1) / 2.0, (shape[1] - 1) / 2.0)) / field_radius
    patch = suggest_psf_size(true, max_field=corner, oversampling=oversampling)  # renders beads, cuts patches
    patches, peaks = [], []
    for k in range(int(n_images)):
        beads = synthesize_bead_image(
            true,
            image_shape=shape,
            psf_size=patch,
            field_radius=field_radius,
            oversampling=oversampling,
            noise_std=noise_std,
            seed=int(seed) * 1000 + k,
        )
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
        "noise_std": float(noise_std),
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


def blur_dataset(
    src_data_dir: str | Path,
    out_data_dir: str | Path,
    coeffs_json: str | Path,
    *,
    split: str | None = "test",
    max_images: int | None = None,
    device: str = "cpu",
) -> Path:
    """y = crop(A_ring · mirror_pad(x)) for every gt image x of `split`: a new dataset with level "seidel".

    src_data_dir: dataset in the CONVENTIONS layout (gt/, split.csv, optional labels/, manifest.json whose
    ``normalise`` is honoured).  out_data_dir: written atomically (``dgno.io.atomic_dir``).
    coeffs_json: output of ``calibrate`` (fitted coefficients, field radius, q, PSF size).  split: which
    rows to blur (None: all).  max_images: first n of them.  device: torch device of the forward model.
    Writes gt/<id>.tif and blur/seidel/<id>.tif as float32 in [0, 1], labels/ (copied where present),
    split.csv (the blurred rows) and manifest.json (normalise "dtype").
    """
    from dgno.data.paired import dataset_normalisation

    src, out = Path(src_data_dir), Path(out_data_dir)
    calib = read_json(coeffs_json)
    rows = _select_ids(src, split, max_images)
    normalise = dataset_normalisation(src)
    ops: dict[tuple[int, int], tuple[RingBlur, int]] = {}
    clipped = 0
    with atomic_dir(out) as tmp:
        for sub in ("gt", f"blur/{LEVEL}"):
            (tmp / sub).mkdir(parents=True)
        for ident, _ in rows:
            x = read_image(src / "gt" / f"{ident}.tif", normalise=normalise)  # (H, W) or (H, W, C) float32
            shape = x.shape[:2]
            if shape not in ops:
                ops[shape] = _operator(calib, shape, device)
            op, m = ops[shape]
            xc = _channels_first(x)  # (C, H, W)
            padded = np.pad(xc, ((0, 0), (m, m), (m, m)), mode="symmetric")
            with torch.no_grad():
                y = op.A(torch.from_numpy(padded)[None].to(device))[0, :, m : m + shape[0], m : m + shape[1]].cpu().numpy()
            clipped += int(((y < 0) | (y > 1)).sum())
            y = np.clip(y, 0.0, 1.0).astype(np.float32)
            write_tiff(tmp / "gt" / f"{ident}.tif", x.astype(np.float32))
            write_tiff(tmp / "blur" / LEVEL / f"{ident}.tif", _channels_last(y, x.ndim))
            label = src / "labels" / f"{ident}.tif"
            if label.exists():
                (tmp / "labels").mkdir(exist_ok=True)
                shutil.copyfile(label, tmp / "labels" / f"{ident}.tif")
        with (tmp / "split.csv").open("w", newline="") as fh:
            fh.write("id,split\n" + "".join(f"{i},{s}\n" for i, s in rows))
        src_manifest = read_json(src / "manifest.json") if (src / "manifest.json").exists() else {}
        manifest = {
            "source": f"{src_manifest.get('source', src.name)} + Seidel ring blur",
            "generator": "dgno.optics.nonblind.blur_dataset",
            "source_dir": str(src),
            "source_normalise": normalise,
            "normalise": "dtype",
            "n_images": len(rows),
            "split": split,
            "levels": {
                LEVEL: {
                    "model": "ring / LRI forward model (dgno.optics.ring.RingBlur), mirror padding by the PSF radius",
                    "coeffs": calib["coeffs"],
                    "field_radius_px": calib["field_radius_px"],
                    "oversampling": calib["oversampling"],
                    "psf_size": calib["psf_size"],
                    "margin_px": int(calib["psf_size"]) // 2,
                    "noise": "none",
                    "pixels_clipped_to_unit_range": clipped,
                }
            },
            "calibration": str(coeffs_json),
            "provenance": _provenance(),
        }
        write_json(tmp / "manifest.json", manifest)
    return out


def deconvolve_dataset(
    data_dir: str | Path,
    coeffs_json: str | Path,
    out_dir: str | Path,
    *,
    method: MethodName,
    level: str = LEVEL,
    split: str = "test",
    max_images: int | None = None,
    wiener_balance: float = 1e-3,
    rl_iterations: int = 30,
    ring_lam: float = 3e-5,
    ring_iterations: int = 300,
    ring_lr: float = 1e-2,
    device: str = "cpu",
) -> Path:
    """Restore blur/<level>/<id>.tif of `split` with `method`; write out_dir/<id>.tif and settings.json.

    method: "wiener" or "richardson_lucy" (one PSF: the on-axis PSF of the fitted coefficients) or "ring"
    (all PSFs, ``ring_deconvolve``).  data_dir: dataset written by ``blur_dataset``.  coeffs_json: the
    calibration JSON used to blur it.  max_images: first n test images.  wiener_balance: Wiener
    regularisation.  rl_iterations: Richardson–Lucy iterations.  ring_lam, ring_iterations, ring_lr: TV
    weight, Adam steps and step size of ring deconvolution.  device: torch device (ring only).
    Restored images are float32 (H, W[, C]) in [0, 1].  out_dir is written atomically.
    """
    check_choice("method", method, METHODS)
    data_dir, out = Path(data_dir), Path(out_dir)
    calib = read_json(coeffs_json)
    rows = _select_ids(data_dir, split, max_images)
    ops: dict[tuple[int, int], tuple[RingBlur, int]] = {}
    seconds = 0.0
    with atomic_dir(out) as tmp:
        for ident, _ in rows:
            y = read_image(data_dir / "blur" / level / f"{ident}.tif")  # (H, W[, C]) float32
            shape = y.shape[:2]
            if shape not in ops:
                ops[shape] = _operator(calib, shape, device)
            op, _ = ops[shape]
            yc = _channels_first(y)  # (C, H, W)
            start = time.perf_counter()
            if method == "ring":
                batch = torch.from_numpy(yc)[None].to(device)  # (1, C, H, W)
                restored = ring_deconvolve(batch, op, lam=ring_lam, n_iter=ring_iterations, lr=ring_lr)
                x = restored[0].clamp(0, 1).cpu().numpy()  # (C, H, W)
            else:
                psf = op.centre_psf().double().cpu().numpy()  # (M, M)
                if method == "wiener":
                    x = np.stack([wiener_deconvolve(ch, psf, balance=wiener_balance) for ch in yc])
                else:
                    x = np.stack([richardson_lucy_deconvolve(ch, psf, n_iter=rl_iterations) for ch in yc])
            seconds += time.perf_counter() - start
            write_tiff(tmp / f"{ident}.tif", _channels_last(x.astype(np.float32), y.ndim), compress=True)
        settings = {
            "method": method,
            "level": level,
            "split": split,
            "n_images": len(rows),
            "coeffs_json": str(coeffs_json),
            "coeffs": calib["coeffs"],
            "psf": "on-axis PSF of the fitted coefficients" if method != "ring" else "all PSFs (ring / LRI model)",
            "params": {
                "wiener": {"balance": wiener_balance},
                "richardson_lucy": {"iterations": rl_iterations},
                "ring": {"lam": ring_lam, "iterations": ring_iterations, "lr": ring_lr, "tv_eps": 1e-3},
            }[method],
            "seconds_total": seconds,
            "device": device,
            "provenance": _provenance(),
        }
        write_json(tmp / "settings.json", settings)
    return out


__all__ = ["LEVEL", "METHODS", "REFERENCE_COEFFS", "blur_dataset", "calibrate", "deconvolve_dataset"]
