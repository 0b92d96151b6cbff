"""Checks that run before the first image of a restoration command: options, device, output folder, threads.

A batch that fails on its options after an hour of work, or on a read-only folder after the first
image, wastes the hour: everything that does not depend on one image is checked here, up front, and
fails as one :class:`~dgno.io.InputError` line naming the option and its fix. The functions are
separate from any loop so that every command restoring users' images (``dgno deblur``, whole-slide
restoration) checks the same things the same way. Torch is imported only by the two functions that use
it, so that ``dgno`` checks its arguments here before torch loads (``dgno.arguments``).
"""

from __future__ import annotations

import errno
import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from dgno.inference.axes import check_axes_option
from dgno.io import InputError

if TYPE_CHECKING:
    import torch

MIN_TILE = 32  # smaller tiles spend most of each pass on the network's padding and the overlap
DEVICES = ("auto", "cpu", "cuda")
DEFAULT_OVERLAP = 64  # a project model's tile overlap, in px
AUTHORS_TILES = {"tile": 512, "overlap": 32, "blend": "crossfade"}  # the authors' BBBC006 test network's tiling
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def check_tiling(*, tile: int | None, overlap: int | None, tile_batch: int | None) -> None:
    """``--tile`` (None: one pass), ``--overlap`` and ``--tile-batch`` valid together, or an InputError.

    ``overlap`` is the overlap that will apply (the option, else the model's default); None while it is
    not known yet (a ``--checkpoint`` not read yet, which may be a project model or an authors' one):
    then only what holds for every model is checked, and the message names both defaults.
    """
    if overlap is not None and overlap < 0:
        raise InputError(f"--overlap {overlap}: the overlap between tiles cannot be negative. Fix: --overlap {DEFAULT_OVERLAP}, or 0 for none")
    if tile is not None and overlap is None and tile < MIN_TILE:
        authors = AUTHORS_TILES["overlap"]
        raise InputError(
            f"--tile {tile}: a tile must be at least {MIN_TILE} px and larger than --overlap (by default {DEFAULT_OVERLAP} px, "
            f"{authors} px for the authors' networks). Fix: --tile 512 (or any size from {DEFAULT_OVERLAP + 1}; from {authors + 1} for the authors' networks)"
        )
    if tile is not None and overlap is not None and (tile < MIN_TILE or tile <= overlap):
        raise InputError(
            f"--tile {tile}: a tile must be at least {MIN_TILE} px and larger than --overlap ({overlap} px). "
            f"Fix: --tile 512 (or any size from {max(MIN_TILE, overlap + 1)}), or a smaller --overlap"
        )
    if tile_batch is not None and tile_batch < 1:
        raise InputError(f"--tile-batch {tile_batch}: at least one tile per pass. Fix: --tile-batch 1 (a CPU), 8 (a GPU)")


def check_image_options(*, tile: int | None, overlap: int | None, tile_batch: int | None, threads: int | None,
                        max_memory_gb: float | None, channel: int | None, axes: str | None) -> tuple[int, str | None]:  # fmt: skip
    """The options of ``dgno deblur`` that need neither torch nor the model, each an InputError naming it;
    returns (threads, axes) resolved. ``overlap`` as in :func:`check_tiling`."""
    check_tiling(tile=tile, overlap=overlap, tile_batch=tile_batch)
    check_positive("--max-memory", max_memory_gb)
    if channel is not None and channel < 0:
        raise InputError(f"--channel {channel}: channels are numbered from 0. Fix: --channel 0 for the first")
    return check_threads(threads), check_axes_option(axes)


def check_device(name: str) -> torch.device:
    """``--device``: 'auto' is CUDA when there is one, else the CPU; 'cuda' without a CUDA device is an InputError."""
    import torch  # seconds to import: only once the command's arguments passed the checks above

    if name not in DEVICES:
        raise InputError(f"--device {name}: unknown device; allowed: {', '.join(DEVICES)}. Fix: --device cpu or --device cuda")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device here (or this torch was built without CUDA). Fix: use --device cpu")
    return torch.device(name)


def _cannot_write(folder: Path, exc: OSError) -> InputError:
    if exc.errno in DISK_FULL:
        return InputError(f"--output {folder}: disk full ({exc.strerror}). Fix: free space on that disk, or choose an --output folder on another one")
    return InputError(f"--output {folder}: cannot write there ({exc.strerror or exc}). Fix: choose a folder you can write to, or free space on it")


def _write_test(folder: Path) -> None:
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".dgno-write-test-"):
            pass
    except OSError as exc:
        raise _cannot_write(folder, exc) from None


def check_output_dir(folder: str | Path) -> Path:
    """The output folder, proved writable without creating it: the folder itself when it exists, else the
    nearest folder above it that does. A command checks it before reading its model and creates it
    after (:func:`prepare_output_dir`), so that a model that fails to load leaves no empty folder behind."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--output {folder}: is a file, not a folder. Fix: choose a folder name for the restored images")
    if folder.is_dir():
        _write_test(folder)
        return folder
    above = next((p for p in folder.absolute().parents if p.exists()), None)
    if above is None or not above.is_dir():
        raise InputError(f"--output {folder}: cannot write there ({above} is a file, not a folder). Fix: choose a folder name whose parents are folders")
    if not os.access(above, os.W_OK | os.X_OK):
        raise InputError(f"--output {folder}: cannot write there (no permission to create it in {above}). Fix: choose a folder you can write to")
    return folder


def prepare_output_dir(folder: str | Path) -> Path:
    """Create the output folder (and its parents) and prove it writable by writing and deleting a file in it."""
    folder = check_output_dir(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot_write(folder, exc) from None
    _write_test(folder)
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
        n = default_threads()
        why = "$OMP_NUM_THREADS" if os.environ.get("OMP_NUM_THREADS", "").strip() == str(n) else "the CPUs this process may use"
        raise InputError(f"--threads {threads}: at least one thread. Fix: --threads {n}, or leave it out to use {n} ({why})")
    return threads


def use_threads(threads: int) -> None:
    """Run torch's CPU operators (OpenMP and MKL) on ``threads`` threads."""
    import torch  # seconds to import: only once the command's arguments passed the checks above

    torch.set_num_threads(threads)


def check_positive(option: str, value: float | None) -> None:
    """A numeric option that must be positive when given (``--max-memory``, ``--channel`` uses >= 0 instead)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise InputError(f"{option} {value}: must be a positive number. Fix: leave it out for the default, or give a positive number")
