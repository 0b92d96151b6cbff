"""Paired (blurred, sharp) images from a dataset directory, and the random-crop sampler for training.

Layout (docs/CONVENTIONS.md): ``split.csv``, ``gt/<id>.tif``, ``blur/<level>/<id>.tif``,
optional ``labels/<id>.tif`` and ``manifest.json`` (whose ``normalise`` key says how 16-bit data
become [0, 1]: ``dtype`` or the BBBC006 protocol's per-image ``minmax``).

Images are streamed from disk: :func:`load_pairs` decodes every image of the requested split once,
one at a time, so that an unreadable file or a shape mismatch is reported by name before training
starts, not hours into it, and keeps only what fits a bounded least-recently-used cache of decoded
images (``DGNO_IMAGE_CACHE_MB``, default 256 MB per loaded split). Pixels of an image that fell out
of the cache are decoded again when a crop or an evaluation asks for them. Memory therefore does not
grow with the dataset (holding every 3DHistech pair as float32 would take about 105 GB), while a
small dataset stays wholly in the cache and costs no decoding after the first pass. The pixel values
are those of :func:`dgno.io.read_image` either way, so crops and scores do not depend on the budget.
"""

from __future__ import annotations

import csv
import os
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from dgno.io import InputError, read_image, read_json
from dgno.progress import bar as progress_bar

SPLITS = ("train", "val", "test")


def read_split(data_dir: str | Path, name: str = "split.csv") -> dict[str, list[str]]:
    """Return {split: [ids]} from ``split.csv`` (or another split file `name`; columns id, split), in file order."""
    path = Path(data_dir) / name
    if not path.exists():
        raise InputError(f"{path}: split file missing. Fix: re-run the data rule for {Path(data_dir).name}")
    out: dict[str, list[str]] = {}
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or not {"id", "split"} <= set(reader.fieldnames):
            raise InputError(f"{path}: expected columns 'id,split', got {reader.fieldnames}. Fix: regenerate the split")
        for row in reader:
            out.setdefault(row["split"], []).append(row["id"])
    return out


def level_test_set(data_dir: str | Path, level: str) -> dict | None:
    """The manifest's record of a level whose test images are not split.csv's (``test_sets``), else None.

    Only the authors' BBBC006 split has such levels: when their archive names no Broad field, the
    unseen defocus levels come from the by-well split (``dgno.data.bbbc006_authors.prepare_dataset``).
    """
    manifest = Path(data_dir) / "manifest.json"
    return read_json(manifest).get("test_sets", {}).get(level) if manifest.exists() else None


def level_test_ids(data_dir: str | Path, level: str) -> list[str]:
    """The test ids of one blur level: split.csv's, or those of the level's own split file (:func:`level_test_set`)."""
    record = level_test_set(data_dir, level)
    ids = read_split(data_dir, record["file"] if record else "split.csv").get("test", [])
    if not ids:
        raise InputError(f"{Path(data_dir) / (record['file'] if record else 'split.csv')}: no test images. Fix: re-run the data rule for {Path(data_dir).name}")
    return ids


def dataset_normalisation(data_dir: str | Path) -> str:
    """The intensity normalisation the dataset's manifest asks for (default: by dtype)."""
    manifest = Path(data_dir) / "manifest.json"
    if manifest.exists():
        return str(read_json(manifest).get("normalise", "dtype"))
    return "dtype"


DEFAULT_CACHE_MB = 256


def cache_budget_mb() -> float:
    """Decoded-image cache per loaded split, in MB: ``DGNO_IMAGE_CACHE_MB`` or 256."""
    value = os.environ.get("DGNO_IMAGE_CACHE_MB", str(DEFAULT_CACHE_MB))
    try:
        return float(value)
    except ValueError:
        raise InputError(f"DGNO_IMAGE_CACHE_MB={value!r} is not a number. Fix: set it to a size in MB, e.g. 256") from None


class ImageCache:
    """Decoded images by path; beyond `max_bytes` the least recently used are dropped (thread-safe).

    The training batches are cut in a background thread (dgno.train.BatchStream), hence the lock.
    The one image being asked for is always kept, even if it alone exceeds the budget. Cached arrays
    are read-only: they are shared by every caller.
    """

    def __init__(self, max_bytes: float, *, normalise: str, min_size: int):
        self.max_bytes, self.normalise, self.min_size = max_bytes, normalise, min_size
        self._images: OrderedDict[Path, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.decodes = 0  # how many times an image was decoded (tests, benchmarks)

    def get(self, path: Path) -> np.ndarray:
        with self._lock:
            if path in self._images:
                self._images.move_to_end(path)
                return self._images[path]
        arr = read_image(path, normalise=self.normalise, min_size=self.min_size)
        arr.setflags(write=False)
        with self._lock:
            self.decodes += 1
            if path not in self._images:
                self._images[path] = arr
                self._bytes += arr.nbytes
            while self._bytes > self.max_bytes and len(self._images) > 1:
                _, old = self._images.popitem(last=False)
                self._bytes -= old.nbytes
        return arr

    @property
    def nbytes(self) -> int:
        return self._bytes


class Pair:
    """One (blurred, sharp) pair at one blur level.

    Pairs from :func:`load_pairs` decode their pixels on access through their split's bounded
    cache; pairs built from arrays (tests, data made in memory) hold them. ``blur`` and ``gt`` are
    (H, W) or (H, W, C) float32 in [0, 1], of the same shape ``shape``.
    """

    __slots__ = ("_arrays", "_cache", "_files", "id", "level", "shape")

    def __init__(self, id: str, level: str, blur: np.ndarray | None = None, gt: np.ndarray | None = None, *,
                 files: tuple[Path, Path] | None = None, cache: ImageCache | None = None, shape: tuple[int, ...] | None = None):  # fmt: skip
        self.id, self.level = id, level
        self._arrays = (blur, gt) if files is None else None
        self._files, self._cache = files, cache
        self.shape = tuple(gt.shape if shape is None else shape)

    @property
    def blur(self) -> np.ndarray:
        return self._arrays[0] if self._arrays is not None else self._cache.get(self._files[0])

    @property
    def gt(self) -> np.ndarray:
        return self._arrays[1] if self._arrays is not None else self._cache.get(self._files[1])

    def __repr__(self) -> str:
        return f"Pair(id={self.id!r}, level={self.level!r}, shape={self.shape})"


def load_pairs(
    data_dir: str | Path,
    *,
    split: str,
    levels: list[str],
    ids: list[str] | None = None,
    min_size: int = 1,
    progress: bool = False,
    cache_mb: float | None = None,
) -> list[Pair]:
    """The (blur, gt) pairs of `split` at each of `levels`, streamed from disk (module docstring).

    Every image is decoded once here to check it; raises InputError naming the first
    missing/unreadable file or the first shape mismatch. cache_mb: the decoded-image budget
    (default :func:`cache_budget_mb`).
    """
    data_dir = Path(data_dir)
    if ids is None:
        split_ids = read_split(data_dir)
        if split not in split_ids:
            raise InputError(
                f"{data_dir / 'split.csv'}: no images in split {split!r} (have {sorted(split_ids)}). Fix: regenerate the split"
            )
        ids = split_ids[split]
    budget = cache_budget_mb() if cache_mb is None else cache_mb
    cache = ImageCache(budget * 1e6, normalise=dataset_normalisation(data_dir), min_size=min_size)
    shapes = {}
    for i in progress_bar(ids, desc=f"check {data_dir.name}/{split} gt", unit="image", enabled=progress, leave=False):
        shapes[i] = cache.get(data_dir / "gt" / f"{i}.tif").shape
    pairs = []
    todo = [(lvl, i) for lvl in levels for i in ids]
    for lvl, i in progress_bar(todo, desc=f"check {data_dir.name}/{split}", unit="image", enabled=progress, leave=False):
        path = data_dir / "blur" / lvl / f"{i}.tif"
        shape = cache.get(path).shape
        if shape != shapes[i]:
            raise InputError(f"{path}: shape {shape} differs from its ground truth {shapes[i]}. Fix: regenerate the pair")
        pairs.append(Pair(i, lvl, files=(path, data_dir / "gt" / f"{i}.tif"), cache=cache, shape=shape))
    return pairs


def dihedral(x: np.ndarray, k: int) -> np.ndarray:
    """The k-th of the 8 flips/rotations of the square (k in 0..7) on the first two axes.

    Defocus blur has no preferred orientation, so all eight are valid augmentations.
    """
    if k >= 4:
        x = x[:, ::-1]
    return np.rot90(x, k % 4, axes=(0, 1))


class CropSampler:
    """Random (blur, gt) crops of size `patch`, with the 8 dihedral augmentations.

    All randomness comes from one numpy Generator whose state is saved in checkpoints, so a
    resumed run sees exactly the batches an uninterrupted run would have seen.
    """

    def __init__(self, pairs: list[Pair], *, patch: int, batch_size: int, seed: int | np.random.SeedSequence, augment: bool = True):
        if not pairs:
            raise ValueError("CropSampler needs at least one image pair")
        small = [p for p in pairs if min(p.shape[:2]) < patch]
        if small:
            p = small[0]
            raise InputError(
                f"image {p.id} ({p.level}) is {p.shape[0]}×{p.shape[1]}, smaller than the training patch {patch}. "
                "Fix: lower train.patch_size in the config"
            )
        self.pairs, self.patch, self.batch_size, self.augment = pairs, patch, batch_size, augment
        self.rng = np.random.default_rng(seed)

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """Return (blur, gt) batches of shape (B, C, patch, patch), float32."""
        blurs, gts = [], []
        for _ in range(self.batch_size):
            pair = self.pairs[self.rng.integers(len(self.pairs))]
            h, w = pair.shape[:2]
            y = int(self.rng.integers(h - self.patch + 1))
            x = int(self.rng.integers(w - self.patch + 1))
            k = int(self.rng.integers(8)) if self.augment else 0
            for src, dst in ((pair.blur, blurs), (pair.gt, gts)):  # decoded now if not in the cache
                crop = dihedral(src[y : y + self.patch, x : x + self.patch], k)
                dst.append(channels_first(crop))
        return np.stack(blurs), np.stack(gts)

    def state(self) -> dict:
        return self.rng.bit_generator.state

    def load_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state


def channels_first(img: np.ndarray) -> np.ndarray:
    """(H, W) → (1, H, W); (H, W, C) → (C, H, W); contiguous float32."""
    arr = img[None] if img.ndim == 2 else np.moveaxis(img, -1, 0)
    return np.ascontiguousarray(arr, dtype=np.float32)


def channels_last(arr: np.ndarray, ndim: int) -> np.ndarray:
    """Inverse of :func:`channels_first` for an image that had ``ndim`` dimensions: (1, H, W) → (H, W), (C, H, W) → (H, W, C)."""
    return arr[0] if ndim == 2 else np.moveaxis(arr, 0, -1)


def to_tensor_image(img: np.ndarray):
    """(H, W[, C]) numpy → (1, C, H, W) torch tensor."""
    import torch

    arr = channels_first(img)
    if not arr.flags.writeable:  # a cached image (shared, read-only): torch wants its own copy
        arr = arr.copy()
    return torch.from_numpy(arr)[None]


def from_tensor_image(t) -> np.ndarray:
    """(1, C, H, W) torch tensor → (H, W) or (H, W, C) float32 numpy."""
    arr = t.detach().float().cpu().numpy()[0]
    return arr[0] if arr.shape[0] == 1 else np.moveaxis(arr, 0, -1)
