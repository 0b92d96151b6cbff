"""A run's work folder beside its output: what makes a slide's restoration resumable.

``<output>/.<name>.work/`` holds

* ``analysis.json`` + ``analysis.npz``: the tissue shares and focus scores of every tile, keyed by the
  slide file (path, size, modification time) and the analysis settings, so a resumed run does not
  measure the slide again;
* ``run.json``: the key of the restoration (analysis key, network digest, batch, normalisation, the
  list of restored tiles): finished tiles are reused only under the same key;
* ``chunks/<k>.npy``: the restorations of batch k (``network.batch`` tiles, in the slide's dtype), each
  written to a temporary name, flushed to disk (fsync) and renamed, so a batch file exists only whole;
* ``levels/``: the reduced levels' stores while the pyramid is written, and ``output.ome.tif``, the
  output under construction, renamed onto the final name only when complete.

A run stopped by SIGTERM, SLURM's time limit or ``kill -9`` loses at most the batches in flight; the
next run with the same command finds the finished ones and computes only the rest. Batches are fixed
groups of the restored tiles, so a resumed run feeds the network exactly the batches an uninterrupted
run would, and the written file is the same byte for byte.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from dgno.io import InputError


class Aborted(RuntimeError):
    """Waiting for a batch ended because the run is stopping."""


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: temporary name, fsync, rename, fsync of the folder."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class WorkFolder:
    """The work folder of one slide's run (module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.chunks = root / "chunks"
        self.levels = root / "levels"
        self.output = root / "output.ome.tif"
        self._done: set[int] = set()
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def locked(self, slide: Path) -> Iterator[None]:
        """Hold the folder for this process (an advisory lock the kernel drops when the process dies, even by
        ``kill -9``); a second run on the same slide and output is refused instead of mixing its files in."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise InputError(f"{slide}: another run is restoring it into {self.root.parent} right now. Fix: wait for it to finish, or choose another --output") from None
            yield
        finally:
            os.close(fd)

    # --- analysis --------------------------------------------------------------------------------

    def load_analysis(self, key: dict) -> dict[str, np.ndarray] | None:
        """The saved per-tile arrays when they were measured under ``key``, else None."""
        try:
            if json.loads((self.root / "analysis.json").read_text()) != key:
                return None
            with np.load(self.root / "analysis.npz") as saved:
                return {k: saved[k] for k in saved.files}
        except (OSError, ValueError, json.JSONDecodeError):
            return None

    def save_analysis(self, key: dict, arrays: dict[str, np.ndarray]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / ".analysis.npz.tmp.npz"
        np.savez(tmp, **arrays)
        os.replace(tmp, self.root / "analysis.npz")
        write_durable(self.root / "analysis.json", json.dumps(key, sort_keys=True).encode())

    # --- restored batches -------------------------------------------------------------------------

    def holds_tiles(self) -> bool:
        """Whether restored batches are on disk, which a rerun of the same command reuses."""
        return any(p.stem.isdigit() for p in self.chunks.glob("*.npy"))

    def start_run(self, key: dict, n_chunks: int) -> int:
        """Open the run under ``key``: keep its finished batches (cleared if the key changed); how many are done."""
        self.root.mkdir(parents=True, exist_ok=True)
        run = self.root / "run.json"
        try:
            same = json.loads(run.read_text()) == key
        except (OSError, json.JSONDecodeError):
            same = False
        if not same:
            shutil.rmtree(self.chunks, ignore_errors=True)
            write_durable(run, json.dumps(key, sort_keys=True).encode())
        self.chunks.mkdir(exist_ok=True)
        for f in self.chunks.glob(".*.tmp"):
            f.unlink()
        done = {int(p.stem) for p in self.chunks.glob("*.npy") if p.stem.isdigit() and int(p.stem) < n_chunks}
        with self._cond:
            self._done = done
        return len(done)

    def chunk_path(self, k: int) -> Path:
        return self.chunks / f"{k:07d}.npy"

    def is_done(self, k: int) -> bool:
        with self._cond:
            return k in self._done

    def save_chunk(self, k: int, tiles: np.ndarray) -> None:
        """Keep batch k's restorations on disk (whole or not at all) and wake whoever waits for them."""
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.ascontiguousarray(tiles), allow_pickle=False)
        write_durable(self.chunk_path(k), buf.getvalue())
        with self._cond:
            self._done.add(k)
            self._cond.notify_all()

    def load_chunk(self, k: int) -> np.ndarray:
        return np.load(self.chunk_path(k), allow_pickle=False)

    def wait_for(self, k: int, stop: threading.Event) -> None:
        """Block until batch k is on disk; raise :class:`Aborted` once ``stop`` is set."""
        with self._cond:
            while k not in self._done:
                if stop.is_set():
                    raise Aborted(f"stopped while waiting for batch {k}")
                self._cond.wait(timeout=0.2)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
