"""Sigma-map blur of another dataset's sharp images: the paper's second controlled synthetic experiment.

The paper blurs the in-focus BBBC006 w1 images (153 test images) with known, spatially varying Gaussian
kernels, σ from 0.6 to 13 px, and compares GG with DG on whole images and on boundary regions.  Here a
dataset of ``source: sigma_map`` takes the sharp images and the split of its ``base`` dataset:

* stage 1 (:func:`copy_sharp`): the base's sharp images, normalised as the base prescribes (BBBC006:
  per-image min-max of the 16-bit data), stored as float32 in [0, 1] with the base's split;
* stage 2 (:func:`write_level`): one random σ map per image and level (``random_sigma_map``), the sharp
  image blurred by it (``sigma_blur``), both stored; noise-free, so the blur is the only degradation.
"""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import tifffile

from dgno.data.demo import write_sigma_level
from dgno.data.paired import dataset_normalisation, read_split
from dgno.io import atomic_dir, read_image, write_tiff
from dgno.optics.sigma_blur import random_sigma_map, sigma_blur
from dgno.progress import bar as progress_bar

KIND = "sigma_map"


def _image_seed(seed: int, image_id: str, level: str) -> int:
    """Seed of one image's σ map: stable in the image id and the level *name* (not in list order)."""
    keys = [seed, zlib.crc32(image_id.encode("utf-8")), zlib.crc32(level.encode("utf-8"))]
    return int(np.random.SeedSequence(keys).generate_state(1)[0])


def copy_sharp(base_dir: str | Path, out_dir: str | Path, *, seed: int, progress: bool = True) -> Path:
    """Stage 1: ``out_dir/{split.csv, gt/, manifest.json}`` from the base dataset's sharp images and split."""
    base_dir, out_dir = Path(base_dir), Path(out_dir)
    norm = dataset_normalisation(base_dir)
    split = read_split(base_dir)
    ids = [i for ids in split.values() for i in ids]
    with atomic_dir(out_dir / "gt") as tmp:
        for image_id in progress_bar(ids, desc=f"sharp {out_dir.name}", unit="image", enabled=progress):
            write_tiff(tmp / f"{image_id}.tif", np.asarray(read_image(base_dir / "gt" / f"{image_id}.tif", normalise=norm), dtype=np.float32), plain=True)
    shutil.copyfile(base_dir / "split.csv", out_dir / "split.csv")
    manifest = {"kind": KIND, "base": base_dir.name, "base_normalise": norm, "normalise": "dtype", "seed": seed, "n_images": len(ids)}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out_dir


def write_level(
    data_dir: str | Path,
    *,
    level: str,
    sigma_range: tuple[float, float],
    correlation_length: float,
    progress: bool = True,
) -> Path:
    """Stage 2: ``blur/<level>/`` and ``sigma/<level>/`` for every sharp image of a sigma_map dataset."""
    data_dir = Path(data_dir)
    manifest = json.loads((data_dir / "manifest.json").read_text())
    lo, hi = (float(v) for v in sigma_range)

    def blur_one(ident: str) -> tuple[np.ndarray, np.ndarray]:
        sharp = tifffile.imread(data_dir / "gt" / f"{ident}.tif").astype(np.float32)
        sigma = random_sigma_map(sharp.shape[:2], (lo, hi), seed=_image_seed(manifest["seed"], ident, level), correlation_length=correlation_length)
        return sigma.astype(np.float32), np.clip(sigma_blur(sharp, sigma), 0.0, 1.0).astype(np.float32)

    idents = sorted(p.stem for p in (data_dir / "gt").glob("*.tif"))
    info = {"level": level, "sigma_range": [lo, hi], "correlation_length": correlation_length, "noise": "none", "blur": "dgno.optics.sigma_blur.sigma_blur"}
    write_sigma_level(data_dir, level, idents, blur_one, info, progress=progress)
    return data_dir / "blur" / level
