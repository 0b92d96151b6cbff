"""Paired (blurred, sharp) images from a dataset directory, and the random-crop sampler for training.

Layout (docs/CONVENTIONS.md): ``split.csv``, ``gt/<id>.tif``, ``blur/<level>/<id>.tif``,
optional ``labels/<id>.tif`` and ``manifest.json`` (whose ``normalise`` key says how 16-bit data
become [0, 1]: ``dtype`` or the BBBC006 protocol's per-image ``minmax``).

Every image of the requested split is decoded once at construction. That is deliberate: an
unreadable file is reported by name before training starts, not hours into it, and decoding a
16-bit TIFF on every crop would starve the model of data.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from dgno.io import InputError, read_image, read_json

SPLITS = ("train", "val", "test")


def read_split(data_dir: str | Path) -> dict[str, list[str]]:
    """Return {split: [ids]} from ``split.csv`` (columns id, split), in file order."""
    path = Path(data_dir) / "split.csv"
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


def dataset_normalisation(data_dir: str | Path) -> str:
    """The intensity normalisation the dataset's manifest asks for (default: by dtype)."""
    manifest = Path(data_dir) / "manifest.json"
    if manifest.exists():
        return str(read_json(manifest).get("normalise", "dtype"))
    return "dtype"


@dataclass(frozen=True)
class Pair:
    id: str
    level: str
    blur: np.ndarray  # (H, W) or (H, W, C) float32 in [0, 1]
    gt: np.ndarray  # same shape


def load_pairs(
    data_dir: str | Path,
    *,
    split: str,
    levels: list[str],
    ids: list[str] | None = None,
    min_size: int = 1,
    progress: bool = False,
) -> list[Pair]:
    """Decode every (blur, gt) pair of `split` at each of `levels`.

    Raises InputError naming the first missing/unreadable file or the first shape mismatch.
    """
    data_dir = Path(data_dir)
    if ids is None:
        split_ids = read_split(data_dir)
        if split not in split_ids:
            raise InputError(
                f"{data_dir / 'split.csv'}: no images in split {split!r} (have {sorted(split_ids)}). Fix: regenerate the split"
            )
        ids = split_ids[split]
    norm = dataset_normalisation(data_dir)
    gts = {i: read_image(data_dir / "gt" / f"{i}.tif", normalise=norm, min_size=min_size) for i in ids}
    pairs = []
    todo = [(lvl, i) for lvl in levels for i in ids]
    for lvl, i in tqdm(todo, desc=f"load {data_dir.name}/{split}", disable=not progress, leave=False):
        path = data_dir / "blur" / lvl / f"{i}.tif"
        blur = read_image(path, normalise=norm, min_size=min_size)
        if blur.shape != gts[i].shape:
            raise InputError(f"{path}: shape {blur.shape} differs from its ground truth {gts[i].shape}. Fix: regenerate the pair")
        pairs.append(Pair(id=i, level=lvl, blur=blur, gt=gts[i]))
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
        small = [p for p in pairs if min(p.gt.shape[:2]) < patch]
        if small:
            p = small[0]
            raise InputError(
                f"image {p.id} ({p.level}) is {p.gt.shape[0]}×{p.gt.shape[1]}, smaller than the training patch {patch}. "
                "Fix: lower train.patch_size in the config"
            )
        self.pairs, self.patch, self.batch_size, self.augment = pairs, patch, batch_size, augment
        self.rng = np.random.default_rng(seed)

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """Return (blur, gt) batches of shape (B, C, patch, patch), float32."""
        blurs, gts = [], []
        for _ in range(self.batch_size):
            pair = self.pairs[self.rng.integers(len(self.pairs))]
            h, w = pair.gt.shape[:2]
            y = int(self.rng.integers(h - self.patch + 1))
            x = int(self.rng.integers(w - self.patch + 1))
            k = int(self.rng.integers(8)) if self.augment else 0
            for src, dst in ((pair.blur, blurs), (pair.gt, gts)):
                crop = dihedral(src[y : y + self.patch, x : x + self.patch], k)
                dst.append(_channels_first(crop))
        return np.stack(blurs), np.stack(gts)

    def state(self) -> dict:
        return self.rng.bit_generator.state

    def load_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state


def _channels_first(img: np.ndarray) -> np.ndarray:
    """(H, W) → (1, H, W); (H, W, C) → (C, H, W); contiguous float32."""
    arr = img[None] if img.ndim == 2 else np.moveaxis(img, -1, 0)
    return np.ascontiguousarray(arr, dtype=np.float32)


def to_tensor_image(img: np.ndarray):
    """(H, W[, C]) numpy → (1, C, H, W) torch tensor."""
    import torch

    return torch.from_numpy(_channels_first(img))[None]


def from_tensor_image(t) -> np.ndarray:
    """(1, C, H, W) torch tensor → (H, W) or (H, W, C) float32 numpy."""
    arr = t.detach().float().cpu().numpy()[0]
    return arr[0] if arr.shape[0] == 1 else np.moveaxis(arr, 0, -1)
