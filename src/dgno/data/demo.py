"""Write the offline demo datasets (synthetic nuclei or controlled patterns) in the shared on-disk layout.

For every image and blur level: blur = sigma_blur(clean, σ), σ = random_sigma_map(level range), so each
pair has a fully known spatially varying Gaussian degradation (the paper's controlled experiment), and
the sigma map is stored beside it. Layout (docs/CONVENTIONS.md)::

    manifest.json, split.csv, gt/<id>.tif, blur/<level>/<id>.tif, sigma/<level>/<id>.tif, labels/<id>.tif (nuclei),
    clean/<id>.tif (nuclei: the noise-free render that the blur stage degrades)

Two stages, matching the workflow's `sharp_images` and `sigma_blur` rules: :func:`write_sharp_dataset`
renders the sharp images, labels and split; :func:`write_blur_level` adds one blur level. A level can
so be regenerated alone. :func:`write_demo_dataset` runs both in one call.

Nuclei photometry (background, offset, photons, read noise, haze, illumination; ``synth.Photometry``) is
drawn per image from the ranges given to stage 1, recorded in the manifest, and reused by stage 2, so a
blurred plane is a new exposure of the same microscope. Both stages store images min-max normalised per
image, as the BBBC006 protocol reads them.

Determinism: image `i` of split `s` uses seed SeedSequence([seed, code(s), i]) and each level's map and
noise are drawn from streams keyed by the level *name*, so the same arguments give byte-identical files,
adding images or levels never changes existing ones, and train images do not depend on n_test.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import scipy
import tifffile

import dgno
from dgno.data import synth
from dgno.io import atomic_dir, write_tiff
from dgno.optics.sigma_blur import MAX_ERROR, TRUNCATE, random_sigma_map, sigma_blur
from dgno.progress import bar as progress_bar

Kind = Literal["nuclei", "shapes"]
KINDS: tuple[str, ...] = ("nuclei", "shapes")
SPLIT_CODES = {"train": 0, "test": 1, "val": 2}
NUCLEI_AREA_PER_NUCLEUS = 1600  # px² per nucleus: ~20 % of the field covered, like a BBBC006 well

# Stream numbers under an image's seed (level streams add the CRC32 of the level name).
_STREAM_GT_NOISE, _STREAM_SIGMA, _STREAM_BLUR_NOISE, _STREAM_PHOTOMETRY = 1, 2, 3, 4


def image_seed(seed: int, split: str, index: int) -> int:
    """The per-image seed: SeedSequence([seed, code(split), index]) → one uint32 word."""
    return int(np.random.SeedSequence([seed, SPLIT_CODES[split], index]).generate_state(1)[0])


def _stream(*keys: int) -> int:
    return int(np.random.SeedSequence(list(keys)).generate_state(1)[0])


def _level_key(name: str) -> int:
    """Stable integer key of a level name (CRC32), so maps do not depend on the dict order of levels."""
    return zlib.crc32(name.encode("utf-8"))


def n_nuclei_for(size: tuple[int, int]) -> int:
    """Target nuclei per image: one per NUCLEI_AREA_PER_NUCLEUS px², at least one."""
    return max(1, round(size[0] * size[1] / NUCLEI_AREA_PER_NUCLEUS))


def to_uint16_full_range(image: np.ndarray) -> np.ndarray:
    """q = round(65535 · (x − min x) / (max x − min x)): the per-image full 16-bit range.

    Per-image min-max is exactly what the BBBC006 protocol applies when reading (manifest
    ``normalise: minmax``), so storing it this way makes reading lossless up to 16-bit rounding and
    mirrors real data, where every plane has its own exposure range.
    """
    x = image.astype(np.float64)
    lo, hi = float(x.min()), float(x.max())
    t = (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)
    return np.round(t * 65535.0).astype(np.uint16)


def _validate(kind: str, size, n_train: int, n_test: int, levels: dict, seed: int, correlation_length: float):
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}; allowed: {', '.join(map(repr, KINDS))}")
    if len(size) != 2 or min(int(v) for v in size) < 8:
        raise ValueError(f"size={size!r}: expected (H, W) with both sides >= 8")
    if n_train < 0 or n_test < 0 or n_train + n_test == 0:
        raise ValueError(f"n_train={n_train!r}, n_test={n_test!r}: need >= 0 each and at least one image")
    if seed < 0:
        raise ValueError(f"seed={seed!r}: must be >= 0")
    if correlation_length < 0:
        raise ValueError(f"correlation_length={correlation_length!r}: must be >= 0 (pixels)")
    if not levels:
        raise ValueError("levels is empty: give at least one {name: [sigma_lo, sigma_hi]}")
    for name, rng in levels.items():
        if not name or "/" in name or "\\" in name or name.startswith("."):
            raise ValueError(f"level name {name!r} is not a valid folder name")
        if len(rng) != 2 or not 0 <= float(rng[0]) <= float(rng[1]):
            raise ValueError(f"level {name!r}: sigma range {rng!r} must be [lo, hi] with 0 <= lo <= hi")


def _items(n_train: int, n_val: int, n_test: int) -> list[tuple[str, int, str]]:
    """(split, index, id) of every image, train first; ids are '<split>_<index>'."""
    width = max(4, len(str(max(n_train, n_val, n_test) - 1)))
    counts = (("train", n_train), ("val", n_val), ("test", n_test))
    return [(split, i, f"{split}_{i:0{width}d}") for split, n in counts for i in range(n)]


def _move_into(tmp: Path, out_dir: Path) -> None:
    """Move every entry of `tmp` into `out_dir` (replacing same-named entries), manifest.json last."""
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = sorted(tmp.iterdir(), key=lambda p: p.name == "manifest.json")
    for entry in entries:
        target = out_dir / entry.name
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(entry, target)
    tmp.rmdir()


def _write_nuclei_image(tmp: Path, ident: str, s: int, shape: tuple[int, int], *, n_nuclei: int, ranges) -> dict:
    """gt (noisy, uint16 full range), labels and clean render of one nuclei image; returns its photometry."""
    phot = synth.sample_photometry([s, _STREAM_PHOTOMETRY], ranges)
    clean, labels = synth.render_nuclei(shape, n_nuclei=n_nuclei, seed=s, noise=False, photometry=phot)
    gt = synth.add_camera_noise(clean, seed=[s, _STREAM_GT_NOISE], photometry=phot)
    write_tiff(tmp / "gt" / f"{ident}.tif", to_uint16_full_range(gt), plain=True)
    write_tiff(tmp / "labels" / f"{ident}.tif", labels, plain=True)
    write_tiff(tmp / "clean" / f"{ident}.tif", clean, plain=True)
    return phot.to_dict()


def write_sharp_dataset(
    out_dir: str | Path,
    *,
    kind: Kind,
    size: tuple[int, int],
    n_train: int,
    n_test: int,
    seed: int,
    n_val: int = 0,
    photometry: Mapping[str, Sequence[float]] | None = None,
    progress: bool = True,
) -> Path:
    """Stage 1: render the sharp images (gt/, clean/ for nuclei), labels (nuclei), split.csv and manifest.json.

    Nuclei: each image draws its photometry from `photometry` (ranges on top of synth.PHOTOMETRY_RANGES)
    with its own stream, so the in-focus scene of an image id is the same whatever the ranges; the
    ranges and every image's values go into the manifest, where the blur stage reads them.

    Sharp images are rendered into ``<out_dir>/.tmp-sharp-<pid>`` and moved into place only when all
    are done, so an interruption leaves no complete-looking dataset. Blur levels already in out_dir are
    left alone (the workflow regenerates them because their input changed).
    """
    _validate(kind, size, n_train + n_val, n_test, {"_": [0.0, 0.0]}, seed, 0.0)
    h, w = int(size[0]), int(size[1])
    out_dir = Path(out_dir)
    tmp = out_dir / f".tmp-sharp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    items = _items(n_train, n_val, n_test)
    n_nuclei = n_nuclei_for((h, w))
    ranges = synth.photometry_ranges(photometry)
    per_image = {}
    try:
        for sub in ["gt", "labels", "clean"] if kind == "nuclei" else ["gt"]:
            (tmp / sub).mkdir(parents=True)
        for split, index, ident in progress_bar(items, desc=f"sharp {kind} → {out_dir.name}", unit="image", enabled=progress):
            s = image_seed(seed, split, index)
            if kind == "nuclei":
                per_image[ident] = _write_nuclei_image(tmp, ident, s, (h, w), n_nuclei=n_nuclei, ranges=ranges)
            else:
                write_tiff(tmp / "gt" / f"{ident}.tif", synth.render_shapes((h, w), seed=s), plain=True)
        with (tmp / "split.csv").open("w", newline="") as fh:
            fh.write("id,split\n" + "".join(f"{ident},{split}\n" for split, _, ident in items))
        manifest = _manifest(kind, (h, w), n_train, n_test, {}, seed, None, n_nuclei)
        manifest.update(n_val=n_val, image_seeds={ident: image_seed(seed, split, i) for split, i, ident in items})
        if kind == "nuclei":
            manifest["photometry"] = {
                "ranges": {k: list(v) for k, v in ranges.items()},
                "sampling": "per image, seed [image_seed, 4]: uniform in each range, photons log-uniform; "
                "illumination_centre uniform in the field (fractions y, x)",
                "images": per_image,
            }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        _move_into(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def write_sigma_level(
    data_dir: Path,
    level: str,
    idents: list[str],
    blur_one: Callable[[str], tuple[np.ndarray, np.ndarray]],
    info: dict,
    *,
    progress: bool,
) -> None:
    """``blur/<level>/<id>.tif`` and ``sigma/<level>/<id>.tif`` from ``blur_one(id) -> (sigma, blurred)``,
    plus ``sigma/<level>/level.json`` = ``info``; shared by the demo and the sigma_map datasets.

    Both folders are written atomically, ``blur/<level>`` renamed into place last (the outer block):
    its presence means the level is complete.
    """
    with atomic_dir(data_dir / "blur" / level) as blur_dir, atomic_dir(data_dir / "sigma" / level) as sigma_dir:
        for ident in progress_bar(idents, desc=f"blur {data_dir.name}/{level}", unit="image", enabled=progress):
            sigma, blurred = blur_one(ident)
            write_tiff(blur_dir / f"{ident}.tif", blurred, plain=True)
            write_tiff(sigma_dir / f"{ident}.tif", sigma, plain=True)
        (sigma_dir / "level.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


def write_blur_level(
    data_dir: str | Path,
    *,
    level: str,
    sigma_range: tuple[float, float],
    correlation_length: float,
    progress: bool = True,
) -> Path:
    """Stage 2: blur every sharp image of `data_dir` with a random sigma map in `sigma_range` (pixels).

    Writes ``blur/<level>/`` and ``sigma/<level>/`` (plus ``sigma/<level>/level.json`` with the
    parameters). Each map is drawn from a stream keyed by the image seed and the level *name*, so a
    level is reproducible on its own. Nuclei: the noise-free render is blurred, then fresh camera
    noise is added (a defocused plane is a new exposure); shapes stay noise-free as in the paper.
    """
    data_dir = Path(data_dir)
    manifest = json.loads((data_dir / "manifest.json").read_text())
    kind, seeds = manifest["kind"], manifest["image_seeds"]
    photometry = manifest.get("photometry", {}).get("images", {})
    _validate(kind, manifest["size"], 1, 0, {level: list(sigma_range)}, manifest["seed"], correlation_length)
    lo, hi = float(sigma_range[0]), float(sigma_range[1])
    key = _level_key(level)

    def blur_one(ident: str) -> tuple[np.ndarray, np.ndarray]:
        s = seeds[ident]
        clean = tifffile.imread(data_dir / ("clean" if kind == "nuclei" else "gt") / f"{ident}.tif").astype(np.float32)
        sigma = random_sigma_map(clean.shape, (lo, hi), seed=_stream(s, _STREAM_SIGMA, key), correlation_length=correlation_length)
        blurred = sigma_blur(clean, sigma)
        if kind != "nuclei":
            return sigma, blurred
        if ident not in photometry:
            raise ValueError(
                f"{data_dir / 'manifest.json'}: no photometry for image {ident!r} (written by an older version?); "
                "regenerate the dataset's sharp images (snakemake --forcerun sharp_images)"
            )
        phot = synth.Photometry.from_dict(photometry[ident])  # the same microscope and exposure as its sharp image
        return sigma, to_uint16_full_range(synth.add_camera_noise(blurred, seed=[s, _STREAM_BLUR_NOISE, key], photometry=phot))

    info = {"level": level, "sigma_range": [lo, hi], "correlation_length": correlation_length, **_blur_description()}
    write_sigma_level(data_dir, level, list(seeds), blur_one, info, progress=progress)
    return data_dir


def write_demo_dataset(
    out_dir: str | Path,
    *,
    kind: Kind,
    size: tuple[int, int],
    n_train: int,
    n_test: int,
    levels: dict[str, list[float]],
    seed: int,
    correlation_length: float,
    n_val: int = 0,
    photometry: Mapping[str, Sequence[float]] | None = None,
    progress: bool = True,
) -> Path:
    """Both stages in one call: a complete dataset with every level, built beside `out_dir` and swapped in.

    An existing dataset at out_dir (recognised by its manifest.json) is replaced; any other existing
    path is refused, and a failure part-way leaves nothing at out_dir.
    """
    _validate(kind, size, n_train + n_val, n_test, levels, seed, correlation_length)
    out_dir = Path(out_dir)
    if out_dir.exists() and not (out_dir / "manifest.json").is_file():
        raise FileExistsError(f"{out_dir} exists and is not a dataset (no manifest.json); refusing to replace it")
    with atomic_dir(out_dir) as tmp:
        write_sharp_dataset(
            tmp, kind=kind, size=size, n_train=n_train, n_val=n_val, n_test=n_test, seed=seed, photometry=photometry, progress=progress
        )
        for name, rng in levels.items():
            write_blur_level(tmp, level=name, sigma_range=tuple(rng), correlation_length=correlation_length, progress=progress)
        manifest = json.loads((tmp / "manifest.json").read_text())
        manifest["levels"] = {name: {"sigma_range": [float(r[0]), float(r[1])]} for name, r in levels.items()}
        manifest["sigma_map"]["correlation_length"] = correlation_length
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out_dir


def _blur_description() -> dict:
    """How the blur levels are made: written into the manifest and into every level's level.json."""
    return {
        "blur": {
            "function": "dgno.optics.sigma_blur.sigma_blur",
            "model": "gather form: out(x) = sum_y G_sigma(x)(x-y) img(y) / sum_y G_sigma(x)(x-y)",
            "boundary": "reflect (half-sample symmetric, scipy mode='reflect')",
            "truncate": TRUNCATE,
            "max_abs_error_vs_reference": MAX_ERROR,
            "applied_to": "clean sharp image",
        }
    }


def _manifest(kind, size, n_train, n_test, levels, seed, correlation_length, n_nuclei) -> dict:
    """Everything needed to regenerate the dataset and to interpret its files."""
    common = {
        "source": f"synthetic demo ({kind})",
        "generator": "dgno.data.demo.write_demo_dataset",
        "kind": kind,
        "seed": seed,
        "size": list(size),
        "n_train": n_train,
        "n_test": n_test,
        "id_pattern": "<split>_<index, zero-padded>",
        "image_seed": "SeedSequence([seed, split_code, index]).generate_state(1)[0]",
        "split_codes": SPLIT_CODES,
        "levels": {name: {"sigma_range": rng} for name, rng in levels.items()},
        "sigma_units": "pixels of the stored images",
        "sigma_map": {
            "function": "dgno.optics.sigma_blur.random_sigma_map",
            "correlation_length": correlation_length,
            "scaling": "sigma = lo + (hi - lo) * minmax(Phi(z / std z)), z = white noise * Gaussian(correlation_length); "
            "hits lo and hi exactly",
            "seed": f"SeedSequence([image_seed, {_STREAM_SIGMA}, crc32(level name)]).generate_state(1)[0]",
        },
        **_blur_description(),
        "versions": {
            "dgno": dgno.__version__,
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "tifffile": tifffile.__version__,
        },
    }
    common.update(_nuclei_description(n_nuclei) if kind == "nuclei" else _shapes_description())
    return common


def _nuclei_description(n_nuclei: int) -> dict:
    """The manifest's description of nuclei images: encoding, labels, rendering and camera noise."""
    return {
        "dtype": "uint16",
        "normalise": "minmax",
        "intensity_encoding": "per image: round(65535 * (x - min x) / (max x - min x))",
        "labels": "labels/<id>.tif, uint16 instance ids (0 = background)",
        "render": {
            "function": "dgno.data.synth.render_nuclei",
            "n_nuclei": n_nuclei,
            "area_per_nucleus_px2": NUCLEI_AREA_PER_NUCLEUS,
            "radius_range": list(synth.NUCLEUS_RADIUS_RANGE),
            "aspect_range": list(synth.NUCLEUS_ASPECT_RANGE),
            "brightness_range": list(synth.NUCLEUS_BRIGHTNESS_RANGE),
            "edge_width": synth.EDGE_WIDTH,
            "scene": "s * illumination * (background + haze + nuclei), s <= 1 only where it would saturate",
        },
        "noise": {
            "model": "clip((Poisson(photons * x) + N(0, read_noise^2)) / photons + offset, 0, 1); "
            "photons, read_noise (electrons), offset per image: photometry.images",
            "gt": f"noise on the clean render, seed [image_seed, {_STREAM_GT_NOISE}]",
            "blur": f"fresh noise after the blur, seed [image_seed, {_STREAM_BLUR_NOISE}, crc32(level name)]",
        },
    }


def _shapes_description() -> dict:
    """The manifest's description of the noise-free shape images."""
    return {
        "dtype": "float32",
        "normalise": "dtype",
        "intensity_encoding": "float32 in [0, 1], stored as rendered",
        "render": {"function": "dgno.data.synth.render_shapes"},
        "noise": None,
    }
