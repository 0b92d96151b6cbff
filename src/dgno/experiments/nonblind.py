"""The paper's non-blind comparison, as steps a workflow rule can call one by one — without the
"inverse crime" (making test data with the very operator the restoration then inverts).

1. ``calibrate``: bead frames made like the test data (point sources through the brute-force per-pixel
   Seidel blur of the *true* coefficients, plus camera noise) → detected beads → fitted coefficients
   (JSON, with the fit error against the truth).  The fit models each bead by one shifted PSF at its
   detected peak, so it meets the same kind of model mismatch as deconvolution does.
2. ``blur_dataset``: sharp images blurred by brute-force superposition of per-pixel Seidel PSFs of the
   *true* coefficients (``superposition.seidel_superposition``), then Poisson–Gaussian camera noise → a new
   dataset (CONVENTIONS layout, blur level "seidel"), plus the noise-free blurred test images for the
   noise-sensitivity sweep.
3. ``deconvolve_dataset``: restore the noisy test images with a single-centre-PSF baseline (Wiener,
   Richardson–Lucy) or ring deconvolution (ring / LRI model of the *fitted* coefficients).  So the data
   differ from every restoration's model by the calibration error, the ring model's approximation and
   the noise.  Regularisation follows the noise level estimated from each image (``resolve_params``).
4. ``sensitivity``: PSNR of every method against the read-noise σ, from the stored noise-free blurred
   test images.

Steps 1 and 2 make the data (``dgno.experiments.nonblind_data``); 3 and 4 restore it (this module);
the settings of every step come from the config through ``dgno.experiments.nonblind_settings``.

Blurring a frame: the sharp image is mirror-padded by the PSF radius (half-sample symmetric, as
``sigma_blur``), blurred about the frame's centre and cropped.  A microscope field is cut out of a larger
specimen, so light from just outside the frame reaches the border; zero padding would instead darken
the border, an artefact unrelated to the blur being studied.  Ring deconvolution accordingly solves for
the padded frame and crops (``deconv.ring_deconvolve``).  Images are stored as float32 in [0, 1], and
the ground truth beside them the same way (the source's normalisation applied once), so the two are
compared on one intensity scale.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from dgno import metrics, provenance
from dgno.choices import check_choice
from dgno.data.paired import channels_first, channels_last
from dgno.experiments.nonblind_data import select_ids
from dgno.experiments.nonblind_settings import LEVEL, METHODS, MethodName, deconv_params, estimate_noise_sigma, resolve_params
from dgno.io import atomic_dir, read_image, read_json, write_csv, write_json, write_tiff
from dgno.optics.deconv import richardson_lucy_deconvolve, ring_deconvolve, wiener_deconvolve
from dgno.optics.noise import camera_noise
from dgno.optics.ring import RingBlur
from dgno.optics.seidel import SeidelCoefficients


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
    yc = channels_first(y)  # (C, H, W)
    if method == "ring":
        batch = torch.from_numpy(np.ascontiguousarray(yc))[None].to(device)  # (1, C, H, W)
        restored = ring_deconvolve(batch, op, lam=float(used["tv_weight"]), n_iter=int(used["iterations"]), lr=float(used["lr"]))
        x = restored[0].clamp(0, 1).cpu().numpy()  # (C, H, W)
    else:
        psf = op.centre_psf().double().cpu().numpy()  # (M, M)
        if method == "wiener":
            x = np.stack([wiener_deconvolve(ch, psf, balance=float(used["balance"])) for ch in yc])
        else:
            x = np.stack([richardson_lucy_deconvolve(ch, psf, n_iter=int(used["iterations"])) for ch in yc])
    return channels_last(x.astype(np.float32), y.ndim), {**used, "sigma_hat": sigma_hat}


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
    rows = select_ids(data_dir, split, max_images)
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
            "provenance": provenance.collect(),
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
    data_dir, clean_dir = Path(data_dir), Path(clean_dir)
    chosen = deconv_params(params or {})
    calib = read_json(coeffs_json)
    rows = select_ids(data_dir, "test", max_images)
    ops: dict[tuple[int, int], tuple[RingBlur, int]] = {}
    gts = {i: read_image(data_dir / "gt" / f"{i}.tif") for i, _ in rows}
    cleans = {i: read_image(clean_dir / f"{i}.tif") for i, _ in rows}
    out: list[dict[str, Any]] = []
    for k, sigma in enumerate(read_sigmas):
        scores: dict[str, list[float]] = {}
        sig_hats = []
        for n, (ident, _) in enumerate(rows):
            y = camera_noise(cleans[ident], photons=photons, read_noise=float(sigma), unit="intensity", rng=np.random.default_rng((int(seed), k, n)))
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
