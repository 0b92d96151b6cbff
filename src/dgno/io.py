"""Reading and writing images and results files, with errors a user can act on.

Every reader here raises :class:`InputError` naming the file, the problem and the fix,
because a training job that dies after an hour on an unreadable TIFF is the most
expensive way to learn about it. Every writer is atomic (temporary file + rename), so
an interrupted job never leaves a file that Snakemake would take as complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_SUFFIXES = (".tif", ".tiff", ".png", ".jpg", ".jpeg")


# Files that operating systems and archivers leave beside real data and that are never images:
# macOS AppleDouble forks ("._name.tif") and Finder state, Windows thumbnail caches, and every other
# dot-file or anything inside a dot-folder or a "__MACOSX" folder (zips made on a Mac).
_JUNK_NAMES = frozenset({".DS_Store", "Thumbs.db", "ehthumbs.db", "desktop.ini", "Icon\r"})
_JUNK_FOLDERS = frozenset({"__MACOSX"})


def is_hidden(path: str | Path) -> bool:
    """True for a file that is not data: a dot-file, an OS leftover, or anything under a hidden folder.

    Looks at every part of a *relative* path (an archive member name, or a path below the folder being
    listed), so ``__MACOSX/x/._a.tif`` and ``.git/a.tif`` are hidden but ``/home/.me/data/a.tif`` given
    as an absolute path is judged by its last part only.
    """
    p = Path(path)
    parts = (p.name,) if p.is_absolute() else p.parts
    return any(part in _JUNK_NAMES or part in _JUNK_FOLDERS or (part.startswith(".") and part not in (".", "..")) for part in parts)


def visible_files(folder: str | Path, suffixes: tuple[str, ...] = IMAGE_SUFFIXES, *, recursive: bool = False) -> tuple[list[Path], list[Path]]:
    """(sorted data files with one of ``suffixes``, sorted hidden files skipped) below ``folder``.

    The skipped list is returned so that callers can count it in a manifest or a summary: a user whose
    archive was packed on a Mac should see "12 hidden files skipped", not a pairing error. It holds
    every hidden file, whatever its suffix (``.DS_Store`` too): what was there and not read.
    """
    root = Path(folder)
    found = root.rglob("*") if recursive else root.iterdir()
    keep, skipped = [], []
    for path in found:
        if not path.is_file():
            continue
        if is_hidden(path.relative_to(root)):
            skipped.append(path)
        elif path.suffix.lower() in suffixes:
            keep.append(path)
    return sorted(keep), sorted(skipped)


class InputError(ValueError):
    """A user-supplied file is missing, unreadable or unsuitable; the message says which and how to fix it."""


def check_model_path(path: Path, *, missing_fix: str) -> None:
    """Refuse a model path that is a folder (naming the model.pt inside, if any), that does not exist (with
    ``missing_fix``) or that this process may not read. Without torch, so that ``dgno`` says it before loading torch."""
    if path.is_dir():
        inside = path / "model.pt"
        raise InputError(f"{path}: is a folder, not a model file. Fix: pass {inside if inside.is_file() else 'the model file itself'}")
    if not path.is_file():
        raise InputError(f"{path}: checkpoint does not exist. Fix: {missing_fix}")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: checkpoint cannot be read (no permission). Fix: ask its owner to make it readable (chmod a+r), or copy it")


def _fail(path: Path | str, problem: str, fix: str) -> InputError:
    return InputError(f"{path}: {problem}. Fix: {fix}")


def read_raw_image(path: str | Path) -> np.ndarray:
    """Read an image file as stored (dtype and value range untouched).

    TIFFs go through tifffile (16-bit microscopy data), PNGs through imagecodecs (libpng), JPEGs
    through scikit-image.  PNGs do not go through scikit-image because its Pillow reader turns 16-bit
    colour PNGs (DPDD's 48-bit photos) into 8-bit RGB, silently dropping the low byte; libpng keeps
    every stored bit depth (1-bit masks come back as 0/255 uint8).
    Raises InputError for a missing, empty, truncated or non-image file.
    """
    path = Path(path)
    if not path.exists():
        raise _fail(path, "file does not exist", "check the path or re-run the rule that produces it")
    if path.stat().st_size == 0:
        raise _fail(path, "file is empty (0 bytes)", "delete it and re-run the step that writes it")
    suffix = path.suffix.lower()
    if suffix not in IMAGE_SUFFIXES:
        raise _fail(path, f"unsupported image type {suffix!r}", f"use one of {', '.join(IMAGE_SUFFIXES)}")
    try:
        if suffix in (".tif", ".tiff"):
            import tifffile

            arr = tifffile.imread(path)
        elif suffix == ".png":
            import imagecodecs

            arr = imagecodecs.png_decode(path.read_bytes())
        else:
            import skimage.io

            arr = skimage.io.imread(path)
    except Exception as exc:  # noqa: BLE001 - every decoder failure means the same thing to the user
        raise _fail(
            path, f"cannot be decoded as an image ({type(exc).__name__}: {exc})", "the file is truncated or not an image; replace it"
        ) from exc
    arr = np.asarray(arr)
    if arr.size == 0:
        raise _fail(path, "cannot be decoded as an image (no pixel data found)", "the file is truncated or not an image; replace it")
    if arr.ndim not in (2, 3):
        raise _fail(path, f"expected a 2-D grayscale or (H, W, C) image, got shape {arr.shape}", "export a single 2-D plane")
    return arr


def to_unit_float(arr: np.ndarray, *, path: str | Path = "<array>", normalise: str = "dtype") -> np.ndarray:
    """Convert a stored image to float32 in [0, 1].

    normalise="dtype" divides integers by their dtype maximum (keeps relative intensities between
    files); normalise="minmax" rescales each image to its own [min, max], which is the BBBC006
    protocol of the paper (per-image min-max of 16-bit data). Float inputs must already lie in [0, 1].
    NaN or infinite values are rejected: they would silently poison every loss and metric.
    """
    if arr.dtype.kind in "ui":
        out = arr.astype(np.float32)
        if normalise == "dtype":
            out /= float(np.iinfo(arr.dtype).max)
    elif arr.dtype.kind == "f":
        out = arr.astype(np.float32)
        if not np.all(np.isfinite(out)):
            n_bad = int((~np.isfinite(out)).sum())
            raise _fail(path, f"contains {n_bad} NaN/inf pixel(s)", "clean the image or regenerate it")
    elif arr.dtype.kind == "b":
        out = arr.astype(np.float32)
    else:
        raise _fail(path, f"unsupported pixel type {arr.dtype}", "save it as 8/16-bit integer or float32")
    if normalise == "minmax":
        lo, hi = float(out.min()), float(out.max())
        out = (out - lo) / (hi - lo) if hi > lo else np.zeros_like(out)
    elif normalise != "dtype":
        raise ValueError(f"normalise={normalise!r}; allowed: 'dtype', 'minmax'")
    if arr.dtype.kind == "f" and (out.min() < -1e-3 or out.max() > 1 + 1e-3):
        raise _fail(path, f"float image outside [0, 1] (min {out.min():.3g}, max {out.max():.3g})", "rescale to [0, 1]")
    return np.clip(out, 0.0, 1.0)


def read_image(path: str | Path, *, normalise: str = "dtype", min_size: int = 1) -> np.ndarray:
    """Read an image as float32 in [0, 1], (H, W) for grayscale or (H, W, C).

    min_size: the smallest allowed height/width; models with p×p elements need at least one element.
    """
    arr = read_raw_image(path)
    if arr.ndim == 3 and arr.shape[-1] not in (1, 3, 4) and arr.shape[0] in (1, 3):
        arr = np.moveaxis(arr, 0, -1)  # channel-first TIFF
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim == 3 and arr.shape[-1] == 4:
        arr = arr[..., :3]  # drop alpha
    h, w = arr.shape[:2]
    if min(h, w) < min_size:
        raise _fail(path, f"image is {h}×{w}, smaller than the minimum {min_size}×{min_size}", "use a larger image")
    return to_unit_float(arr, path=path, normalise=normalise)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix, dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def replace_dir(tmp: Path, target: Path) -> None:
    """Rename the finished folder `tmp` onto `target`, swapping out an existing `target`.

    Two renames on one file system: the old folder is moved aside first, so a crash leaves either
    the old or the new complete folder at `target`, never a mixture.
    """
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        if old.exists():
            shutil.rmtree(old)
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old)
    else:
        os.replace(tmp, target)


@contextlib.contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield a fresh empty folder beside `target`; it replaces `target` only if the block succeeds.

    Results folders (prepared datasets, blur levels, restored images) are read by later rules that
    must never see half of one: the folder is filled under a temporary name and renamed into place
    (``replace_dir``); on any error, interruption included, the temporary folder is deleted and
    `target` is left as it was.
    """
    target = Path(target)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, target)


def write_json(path: str | Path, obj: Any) -> None:
    """Write JSON atomically, with stable key order for diff-friendly results files."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise _fail(path, "file does not exist", "re-run the rule that produces it") from None
    except json.JSONDecodeError as exc:
        raise _fail(path, f"not valid JSON ({exc})", "delete it and re-run the rule that produces it") from exc


def write_tiff(path: str | Path, image: np.ndarray, *, compress: bool = False, plain: bool = False) -> None:
    """Write a TIFF atomically (tifffile), keeping the array's dtype.

    compress: lossless zlib with the predictor for the dtype (floating-point for float32), so the
    values read back are bit-identical; about a fifth smaller for restored float32 images.
    plain: one grey (MINISBLACK) image and no tifffile metadata, so equal arrays give equal bytes
    (the generated datasets are compared file by file).
    """
    import tifffile

    options = {"photometric": "minisblack", "metadata": None} if plain else {}
    with atomic_path(path) as tmp:
        if compress:
            tifffile.imwrite(tmp, image, compression="zlib", predictor=True, **options)
        else:
            tifffile.imwrite(tmp, image, **options)


def write_csv(path: str | Path, frame: Any) -> None:
    """Write a pandas DataFrame as CSV atomically."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


# --- where a seed replicate's results live (docs/CONVENTIONS.md) ------------------------------------
# Replicate 0 of a training keeps the method's own folder; replicate r >= 1 (experiments.<name>.seeds)
# lives in `<method>/seed=<r>/` below it, for the training and for each evaluation alike.


def replicate_dir(method: str, replicate: int) -> str:
    """The folder of one replicate below a dataset: ``<method>`` for 0, ``<method>/seed=<r>`` otherwise."""
    if int(replicate) < 0:
        raise ValueError(f"replicate={replicate!r}; allowed: an integer >= 0")
    return method if int(replicate) == 0 else f"{method}/seed={int(replicate)}"


def replicate_of(path: str | Path) -> int:
    """The replicate a results path belongs to: r of a ``seed=<r>`` folder in it, else 0."""
    for part in Path(path).parts:
        if part.startswith("seed=") and part[5:].isdigit():
            return int(part[5:])
    return 0
