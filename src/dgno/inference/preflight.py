"""Checks that run before the first image of a restoration command: options, device, output folder, threads.

A batch that fails on its options after an hour of work, or on a read-only folder after the first
image, wastes the hour: everything that does not depend on one image is checked here, up front, and
fails as one :class:`~dgno.io.InputError` line naming the option and its fix. The functions are
separate from any loop so that every command restoring users' images (``dgno deblur``, whole-slide
restoration) checks the same things the same way.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import torch

from dgno.io import InputError

MIN_TILE = 32  # smaller tiles spend most of each pass on the network's padding and the overlap
DEVICES = ("auto", "cpu", "cuda")


def check_tiling(*, tile: int | None, overlap: int, tile_batch: int | None) -> None:
    """``--tile`` (None: one pass), ``--overlap`` and ``--tile-batch`` valid together, or an InputError."""
    if tile is not None and (tile < MIN_TILE or tile <= overlap):
        raise InputError(
            f"--tile {tile}: a tile must be at least {MIN_TILE} px and larger than --overlap ({overlap} px). "
            f"Fix: --tile 512 (or any size from {max(MIN_TILE, overlap + 1)}), or a smaller --overlap"
        )
    if overlap < 0:
        raise InputError(f"--overlap {overlap}: the overlap between tiles cannot be negative. Fix: --overlap 64, or 0 for none")
    if tile_batch is not None and tile_batch < 1:
        raise InputError(f"--tile-batch {tile_batch}: at least one tile per pass. Fix: --tile-batch 1 (a CPU), 8 (a GPU)")


def check_device(name: str) -> torch.device:
    """``--device``: 'auto' is CUDA when there is one, else the CPU; 'cuda' without a CUDA device is an InputError."""
    if name not in DEVICES:
        raise InputError(f"--device {name}: unknown device; allowed: {', '.join(DEVICES)}. Fix: --device cpu or --device cuda")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device here (or this torch was built without CUDA). Fix: use --device cpu")
    return torch.device(name)


def prepare_output_dir(folder: str | Path) -> Path:
    """Create the output folder (and its parents) and prove it writable by writing and deleting a file in it."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--output {folder}: is a file, not a folder. Fix: choose a folder name for the restored images")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".dgno-write-test-"):
            pass
    except OSError as exc:
        raise InputError(f"--output {folder}: cannot write there ({exc.strerror or exc}). Fix: choose a folder you can write to, or free space on it") from None
    return folder


def default_threads() -> int:
    """The CPU threads this process may use: ``OMP_NUM_THREADS`` when set, else the CPUs it is allowed to run on.

    ``os.sched_getaffinity`` honours ``taskset``, cgroups cpusets and SLURM's ``--cpus-per-task``, where
    ``os.cpu_count`` would count every core of the node.
    """
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) >= 1:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS and Windows have no affinity call
        return max(1, os.cpu_count() or 1)


def check_threads(threads: int | None) -> int:
    """``--threads`` (None: :func:`default_threads`), at least 1."""
    if threads is None:
        return default_threads()
    if threads < 1:
        raise InputError(f"--threads {threads}: at least one thread. Fix: --threads {default_threads()} (the CPUs this process may use), or leave it out")
    return threads


def use_threads(threads: int) -> None:
    """Run torch's CPU operators (OpenMP and MKL) on ``threads`` threads."""
    torch.set_num_threads(threads)


def check_positive(option: str, value: float | None) -> None:
    """A numeric option that must be positive when given (``--max-memory``, ``--channel`` uses >= 0 instead)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise InputError(f"{option} {value}: must be a positive number. Fix: leave it out for the default, or give a positive number")
