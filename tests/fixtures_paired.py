"""Miniature copies of the real paired datasets (DPDD, RealDOF zips with their real folder names, a
hand-placed 3DHistech folder), shared by the paired-set tests and the paper-DAG rehearsal."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import imageio.v3 as iio
import numpy as np
from fixtures_http import zip_bytes

SHAPE = (24, 32)  # (H, W) of the miniature DPDD / RealDOF images
DPDD_COUNTS = {"train_c": 2, "val_c": 1, "test_c": 1}
HISTECH_COUNTS = {"train": 2, "val": 1, "test": 1}


def png16_rgb(a: np.ndarray) -> bytes:
    """A 16-bit RGB PNG, as DPDD ships (Pillow cannot write these, so the few chunks are written here)."""
    h, w, _ = a.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + a[y].astype(">u2").tobytes() for y in range(h))  # filter 0 on every row
    header = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def pair(seed: int, shape=SHAPE, dtype=np.uint8) -> tuple[np.ndarray, np.ndarray]:
    """(blurred, sharp) RGB images; the blurred one is a 3-pixel box average of the sharp one."""
    hi = np.iinfo(dtype).max
    sharp = np.random.default_rng(seed).integers(0, hi, size=(*shape, 3)).astype(dtype)
    k = np.ones(3) / 3
    blur = np.apply_along_axis(lambda r: np.convolve(r, k, mode="same"), 1, sharp.astype(float)).astype(dtype)
    return blur, sharp


def dpdd_zip() -> bytes:
    """dd_dp_dataset_png/{train_c,val_c,test_c}/{source,target}/<name>.png, 16-bit RGB, plus a dual-pixel
    train_l folder that preparing must ignore (only the combined view is used)."""
    members, seed = {}, 0
    for split, n in DPDD_COUNTS.items():
        for _ in range(n):
            blur, sharp = pair(seed, dtype=np.uint16)
            name = f"1P0A{1745 + seed}.png"
            members[f"dd_dp_dataset_png/{split}/source/{name}"] = png16_rgb(blur)
            members[f"dd_dp_dataset_png/{split}/target/{name}"] = png16_rgb(sharp)
            seed += 1
    members["dd_dp_dataset_png/train_l/source/1P0A1745_L.png"] = png16_rgb(pair(99, dtype=np.uint16)[0])
    return zip_bytes(members)


def realdof_zip(n: int = 2) -> bytes:
    members = {}
    for i in range(n):
        blur, sharp = pair(100 + i)
        members[f"RealDOF/source/{i:03d}.png"] = iio.imwrite("<bytes>", blur, extension=".png")
        members[f"RealDOF/target/{i:03d}.png"] = iio.imwrite("<bytes>", sharp, extension=".png")
    return zip_bytes(members)


def write_histech(root: Path) -> Path:
    """{train,val,test}/{blur,sharp}/<name>.png with the paper's 256×256 patch size and tiny counts."""
    seed = 200
    for split, n in HISTECH_COUNTS.items():
        for _ in range(n):
            blur, sharp = pair(seed, shape=(256, 256))
            for sub, img in (("blur", blur), ("sharp", sharp)):
                (root / split / sub).mkdir(parents=True, exist_ok=True)
                iio.imwrite(root / split / sub / f"patch_{seed}.png", img)
            seed += 1
    return root
