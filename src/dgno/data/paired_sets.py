"""Real paired defocus datasets (3DHistech, DPDD, RealDOF) in the workflow: obtain, check, prepare.

These datasets already come as (blurred, sharp) pairs, so unlike BBBC006 there are no planes to pair
and no blur to synthesise: preparing one means copying every pair into the shared layout of
docs/CONVENTIONS.md with a single blur level (:data:`LEVEL`) and the dataset's *own* split, because
the paper's numbers are on the authors' splits (3DHistech train/val/test, DPDD train_c/val_c/test_c,
RealDOF test only). How the raw files must look and how to obtain them is :mod:`dgno.data.manual`'s
business; this module drives it from the workflow:

- :func:`obtain` (rule ``paired_source``): check the raw folder, download when a URL is configured
  and the check fails, and raise the check's full report (folder, what is missing, step-by-step
  instructions) when the data are still not there. A small JSON record is written only on success,
  so a failed job leaves nothing that Snakemake or a user could take as complete.
- :func:`prepare` (rule ``paired_prepare``): write ``gt/<id>.tif``, ``blur/real/<id>.tif``,
  ``split.csv`` and ``manifest.json``, built in a temporary folder and renamed into place.

Images keep their stored dtype (8- or 16-bit) and channels; ``normalise: dtype`` in the manifest
makes :func:`dgno.io.read_image` divide by the dtype maximum, and ``channels`` records the channel
count that training builds the model for (3 for the RGB sets; training reads it off the images).
DPDD's 16-bit colour PNGs are prepared as uint16 TIFFs with all 16 bits (``dgno.io.read_raw_image``
decodes PNGs with libpng), and the manifest records the dtype actually stored.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Literal

import numpy as np
import tifffile
from tqdm import tqdm

import dgno
from dgno.data.download import sha256_file
from dgno.data.manual import LAYOUTS, PairedLayout, Report, _first_dir, _images, check_paired, download_or_instructions, find_layout_root
from dgno.io import InputError, atomic_dir, read_raw_image, write_json

Source = Literal["3dhistech", "dpdd", "realdof"]
SOURCES: tuple[str, ...] = ("3dhistech", "dpdd", "realdof")
LEVEL = "real"  # the one blur level of a real paired dataset: the camera's own defocus
# Raw split folder -> split name of the prepared layout ('' = the dataset's root folder).
SPLIT_NAMES: dict[str, dict[str, str]] = {
    "3dhistech": {"train": "train", "val": "val", "test": "test"},
    "dpdd": {"train_c": "train", "val_c": "val", "test_c": "test"},
    "realdof": {"": "test"},
}


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise ValueError(f"source {source!r}; allowed: {', '.join(map(repr, SOURCES))}")


def _counts(source: str, counts: Mapping[str, int] | None) -> dict[str, int] | None:
    """Config counts → check counts; '.' may stand for the root folder ('' is awkward in YAML)."""
    if counts is None:
        return None
    out = {("" if k == "." else k): int(v) for k, v in counts.items()}
    unknown = sorted(set(out) - set(SPLIT_NAMES[source]))
    if unknown:
        allowed = ", ".join(repr(k or ".") for k in SPLIT_NAMES[source])
        raise ValueError(f"counts for {source}: unknown split folder {unknown[0] or '.'!r}; allowed: {allowed}")
    return out


def layout_for(source: Source, *, check_size: bool = True) -> PairedLayout:
    """The layout of `source`; without the paper's image-size check when `check_size` is False
    (resized copies, miniature test data)."""
    _check_source(source)
    layout = LAYOUTS[source]
    return layout if check_size else replace(layout, shape=None)


def check(source: Source, root: str | Path, *, counts: Mapping[str, int] | None = None, check_size: bool = True) -> Report:
    """Disk-only check of the raw folder (no network)."""
    return check_paired(layout_for(source, check_size=check_size), root, counts=_counts(source, counts))


def obtain(
    source: Source,
    root: str | Path,
    record: str | Path,
    *,
    url: str | None = None,
    counts: Mapping[str, int] | None = None,
    check_size: bool = True,
    retries: int = 4,
    timeout: float = 60,
) -> Path:
    """Make the raw dataset present under `root` (downloading from `url` if it is not), then write `record`.

    `url`: "" or None never downloads (3DHistech has no public download; the user places it). When
    the data are still incomplete, raise :class:`InputError` with the check's whole report, which
    names `root` and lists the steps to place the files by hand.
    """
    _check_source(source)
    root, record = Path(root), Path(record)
    counts_ = _counts(source, counts)
    layout = layout_for(source, check_size=check_size)
    if url:
        report = download_or_instructions(source, root, url=url, counts=counts_, retries=retries, timeout=timeout, check_size=check_size)
    else:
        report = check_paired(layout, root, counts=counts_)
    report.raise_if_incomplete()
    base = find_layout_root(root, layout)
    write_json(record, {"source": source, "root": str(root), "layout_root": str(base), "url": url or None, "report": report.text()})
    return record


def collect_pairs(
    source: Source, root: str | Path, *, counts: Mapping[str, int] | None = None, check_size: bool = True
) -> list[tuple[str, str, Path, Path]]:
    """[(id, split, blurred file, sharp file)] of every pair, splits in the layout's order, names sorted.

    Only the split folders that were checked are read: those of `counts` when it is given (a subset
    such as a test-only copy), else all of the layout's. The id is ``<split>_<file stem>``: unique
    even if two of the authors' splits reuse a file name, and still traceable to the original file.
    """
    wanted = _counts(source, counts)
    layout = layout_for(source, check_size=check_size)
    base = find_layout_root(Path(root), layout)
    if base is None:
        raise InputError(f"{root}: none of the folders of {source} found. Fix: `dgno data check {source} --root {root}` prints the steps")
    out = []
    for folder, split in SPLIT_NAMES[source].items():
        if wanted is not None and folder not in wanted:
            continue
        split_dir = base / folder if folder else base
        blur_dir, sharp_dir = _first_dir(split_dir, layout.blur_names), _first_dir(split_dir, layout.sharp_names)
        if blur_dir is None or sharp_dir is None:
            continue
        blur, sharp = _images(blur_dir), _images(sharp_dir)
        for stem in sorted(blur.keys() & sharp.keys()):
            out.append((f"{split}_{stem}", split, blur[stem], sharp[stem]))
    if not out:
        raise InputError(f"{base}: no (blurred, sharp) pairs found. Fix: `dgno data check {source} --root {root}`")
    return out


def _pixels(path: Path) -> np.ndarray:
    """Stored pixels as (H, W) or (H, W, C) integers; alpha dropped (the sets are opaque photos)."""
    arr = read_raw_image(path)
    if arr.ndim == 3 and arr.shape[-1] == 4:
        arr = arr[..., :3]
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.dtype.kind not in "u" or arr.dtype.itemsize > 2:
        raise InputError(f"{path}: pixel type {arr.dtype}, expected 8- or 16-bit unsigned. Fix: use the dataset's original files")
    return np.ascontiguousarray(arr)


def prepare(
    source: Source,
    root: str | Path,
    out_dir: str | Path,
    *,
    counts: Mapping[str, int] | None = None,
    check_size: bool = True,
    progress: bool = True,
) -> Path:
    """Write the raw dataset under `root` in the shared layout at `out_dir` (atomically) and return out_dir.

    The raw folder is checked first (same counts as the ``paired_source`` rule), so a copy that
    changed since it was obtained fails here with the same instructions. Every pair must agree in
    shape, and all images in channel count and dtype: one model is trained per dataset.
    """
    _check_source(source)
    root, out_dir = Path(root), Path(out_dir)
    check(source, root, counts=counts, check_size=check_size).raise_if_incomplete()
    if out_dir.exists() and not (out_dir / "manifest.json").is_file() and any(out_dir.iterdir()):
        raise InputError(f"{out_dir}: exists and is not a dataset (no manifest.json). Fix: choose another output folder or empty it")
    pairs = collect_pairs(source, root, counts=counts, check_size=check_size)
    with atomic_dir(out_dir) as tmp:
        (tmp / "gt").mkdir(parents=True)
        (tmp / "blur" / LEVEL).mkdir(parents=True)
        kind: tuple[int, str] | None = None  # (channels, dtype) of the first image: all must match
        sizes = set()
        for ident, _, blur_path, sharp_path in tqdm(pairs, desc=f"{source} → {out_dir.name}", disable=not progress):
            sharp, blur = _pixels(sharp_path), _pixels(blur_path)
            if blur.shape != sharp.shape:
                raise InputError(f"{blur_path}: shape {blur.shape} differs from its sharp image {sharp_path} {sharp.shape}. Fix: replace the pair")
            this = (1 if sharp.ndim == 2 else sharp.shape[-1], str(sharp.dtype))
            kind = kind or this
            if this != kind or blur.dtype != sharp.dtype:
                raise InputError(f"{sharp_path}: {this[0]} channel(s) {this[1]}, the first image has {kind[0]} {kind[1]}. Fix: use the dataset's original files")
            sizes.add(sharp.shape[:2])
            tifffile.imwrite(tmp / "gt" / f"{ident}.tif", sharp, compression="zlib", metadata=None)
            tifffile.imwrite(tmp / "blur" / LEVEL / f"{ident}.tif", blur, compression="zlib", metadata=None)
        with (tmp / "split.csv").open("w", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(["id", "split"])
            writer.writerows((ident, split) for ident, split, *_ in pairs)
        write_json(tmp / "manifest.json", _manifest(source, root, pairs, kind, sizes, check_size))
    return out_dir


def _manifest(source: str, root: Path, pairs, kind: tuple[int, str], sizes: set, check_size: bool) -> dict:
    """What the prepared files are, where they came from, and what training must build for them."""
    layout = LAYOUTS[source]
    n = {s: sum(1 for _, sp, *_ in pairs if sp == s) for s in ("train", "val", "test")}
    record = root / "archive" / f"{source}.zip"
    return {
        "source": f"{layout.title} ({layout.citation})",
        "generator": "dgno.data.paired_sets.prepare",
        "dataset_source": source,
        "raw_root": str(root),
        "archive": {"file": str(record), "sha256": sha256_file(record), "size": record.stat().st_size} if record.is_file() else None,
        "levels": {LEVEL: {"role": "train+test", "description": "the camera's own defocus blur (real blurred/sharp pairs)"}},
        "train_levels": [LEVEL] if n["train"] else [],
        "test_levels": [LEVEL],
        "split": {"method": "the dataset authors' split, unchanged", "folders": {k or ".": v for k, v in SPLIT_NAMES[source].items()}},
        "id_pattern": "<split>_<original file stem>",
        "n_train": n["train"],
        "n_val": n["val"],
        "n_test": n["test"],
        "channels": kind[0],
        "dtype": kind[1],
        "normalise": "dtype",
        "intensity_encoding": "original pixel values (8/16-bit) as zlib TIFF; read divided by the dtype maximum",
        "size": list(next(iter(sizes))) if len(sizes) == 1 else None,
        "sizes": sorted(list(s) for s in sizes) if len(sizes) > 1 else None,
        "paper_size_checked": check_size,
        "labels": None,
        "versions": {"dgno": dgno.__version__, "numpy": np.__version__, "tifffile": tifffile.__version__},
    }
