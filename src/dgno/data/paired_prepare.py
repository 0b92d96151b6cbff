"""A real paired dataset (3DHistech, DPDD, RealDOF) in the shared layout of docs/CONVENTIONS.md: every
(blurred, sharp) pair of the raw folder, one blur level (:data:`dgno.data.paired_sets.LEVEL`) and the
dataset's own split (rule ``paired_prepare``).

Apart from :mod:`dgno.data.paired_sets` (layouts, checks, obtaining) so that a new source's layout, an entry
there, leaves that module small.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import tifffile
from tqdm import tqdm

import dgno
from dgno.data.download import sha256_file
from dgno.data.paired_sets import (
    LAYOUTS,
    LEVEL,
    SPLIT_NAMES,
    Source,
    check,
    checked_counts,
    find_layout_root,
    first_dir,
    images_in,
    layout_for,
)
from dgno.io import InputError, atomic_dir, read_raw_image, write_json


def collect_pairs(
    source: Source, root: str | Path, *, counts: Mapping[str, int] | None = None, check_size: bool = True
) -> list[tuple[str, str, Path, Path]]:
    """[(id, split, blurred file, sharp file)] of every pair, splits in the layout's order, names sorted.

    Only the split folders that were checked are read: those of `counts` when it is given (a subset
    such as a test-only copy), else all of the layout's. The id is ``<split>_<file stem>``: unique
    even if two of the authors' splits reuse a file name, and still traceable to the original file.
    """
    wanted = checked_counts(source, counts)
    layout = layout_for(source, check_size=check_size)
    base = find_layout_root(Path(root), layout)
    if base is None:
        raise InputError(f"{root}: none of the folders of {source} found. Fix: `dgno data check {source} --root {root}` prints the steps")
    out = []
    for folder, split in SPLIT_NAMES[source].items():
        if wanted is not None and folder not in wanted:
            continue
        split_dir = base / folder if folder else base
        blur_dir, sharp_dir = first_dir(split_dir, layout.blur_names), first_dir(split_dir, layout.sharp_names)
        if blur_dir is None or sharp_dir is None:
            continue
        blur, sharp = images_in(blur_dir), images_in(sharp_dir)
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
        manifest = _manifest(source, root, pairs, kind, sizes, check_size)
        folders = sorted({p.parent for *_, blur, sharp in pairs for p in (blur, sharp)})
        manifest["hidden_files_skipped"] = {str(d.relative_to(root)): len(images_in(d, hidden=True)) for d in folders}
        write_json(tmp / "manifest.json", manifest)
    return out_dir


def _manifest(source: str, root: Path, pairs, kind: tuple[int, str], sizes: set, check_size: bool) -> dict:
    """What the prepared files are, where they came from, and what training must build for them."""
    layout = LAYOUTS[source]
    n = {s: sum(1 for _, sp, *_ in pairs if sp == s) for s in ("train", "val", "test")}
    record = root / "archive" / f"{source}.zip"
    return {
        "source": f"{layout.title} ({layout.citation})",
        "generator": "dgno.data.paired_prepare.prepare",
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
