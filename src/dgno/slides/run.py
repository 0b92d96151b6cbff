"""The streaming part of a slide's restoration: network, reading and writing side by side, resumable.

    reader thread   read the tiles of batch k+1, k+2            (bounded queue, dgno.inference.pipeline)
    caller thread   run the network on batch k                   (the device's thread)
    saver thread    keep batch k−1 on disk (work folder)         → wakes the writer
    writer thread   blend + write the output pyramid tile by tile, waiting only for the batches it needs

The writer walks the output in its own order (512-px tiles, channel by channel, row by row) and
blends every restored tile it meets from the batches on disk (a few kept in memory), so neither the
network's tiles nor the output are ever held whole. A SIGTERM or SIGINT (SLURM's time limit, Ctrl-C)
stops the run at the next batch with :class:`SlideInterrupted`; the batches already on disk are kept for
the next run (``dgno.slides.work``). Progress (``dgno.progress``: a bar on a terminal, lines in a log):
the restored tiles (tiles/s, time left), then the output tiles written, for the writer's tail (the rest
of level 0 and the reduced levels) after the network's last batch.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dgno import progress
from dgno.inference.normalisation import Scaling
from dgno.inference.pipeline import run_pipeline
from dgno.slides.grid import Blender, TileGrid
from dgno.slides.network import SlideNetwork, restore_batch
from dgno.slides.pyramid import OUT_TILE, OutputLayout, tile_count, write_pyramid
from dgno.slides.reader import Slide
from dgno.slides.work import Aborted, WorkFolder

STOPPED = "stopped by a signal"
CHUNKS_KEPT = 8  # restored batches the writer keeps in memory (a row of output tiles meets a few)


class SlideInterrupted(RuntimeError):
    """The run was stopped by a signal; its finished batches are on disk and a rerun resumes.

    ``status``: the exit status a shell gives a process that signal ended (143 for SIGTERM, 130 for Ctrl-C).
    """

    def __init__(self, message: str, signum: int = signal.SIGTERM) -> None:
        super().__init__(message)
        self.status = 128 + int(signum)


class Signalled(threading.Event):
    """Set by SIGTERM or SIGINT (:func:`stop_on_signals`), remembering which."""

    signum: int = signal.SIGTERM

    def name(self) -> str:
        return signal.Signals(self.signum).name


@dataclass
class RunPlan:
    """Everything the streaming part needs about one slide's run."""

    slide: Slide
    level: int
    grid: TileGrid
    network: SlideNetwork
    channels: tuple[int, ...]  # slide channels through the network
    scaling: Scaling  # the slide's one map into the network's [0, 1]
    restored: list[tuple[int, int]]  # network tiles to restore, in raster order
    layout: OutputLayout
    work: WorkFolder
    compression: str
    key: str
    workers: int = 2
    progress: bool = True

    @property
    def batches(self) -> list[list[tuple[int, int]]]:
        b = self.network.batch
        return [self.restored[i : i + b] for i in range(0, len(self.restored), b)]


@contextlib.contextmanager
def stop_on_signals(stop: Signalled) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop`` instead of ending the process (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        stop.signum = signum
        stop.set()

    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    for s in previous:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class _Writer(threading.Thread):
    """Writes the output pyramid, blending in restored tiles as their batches reach the disk."""

    def __init__(self, plan: RunPlan, stop: threading.Event) -> None:
        super().__init__(name="dgno-slide-writer", daemon=True)
        self.plan, self.stop = plan, stop
        self.error: BaseException | None = None
        self.blender = Blender(plan.grid, blend=plan.network.blend)
        self.where = {rc: (k, pos) for k, batch in enumerate(plan.batches) for pos, rc in enumerate(batch)}
        self.is_restored = np.zeros(plan.grid.shape, bool)
        for rc in plan.restored:
            self.is_restored[rc] = True
        self.cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self.written = 0  # output tiles handed to tifffile, of every level (read by the caller's progress bar)

    def run(self) -> None:
        p = self.plan
        try:
            p.work.levels.mkdir(parents=True, exist_ok=True)
            write_pyramid(p.work.output, p.layout, self.tile, scratch=p.work.levels, compression=p.compression, key=p.key, workers=p.workers, written=self._count)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            self.error = exc

    def _count(self) -> None:
        self.written += 1

    def _batch(self, k: int) -> np.ndarray:
        if k not in self.cache:
            self.plan.work.wait_for(k, self.stop)
            self.cache[k] = self.plan.work.load_chunk(k)
            while len(self.cache) > CHUNKS_KEPT:
                self.cache.popitem(last=False)
        self.cache.move_to_end(k)
        return self.cache[k]

    def tile(self, plane: int, i: int, j: int) -> np.ndarray:
        """Output tile (i, j) of one plane at level 0: the input, with the restorations blended in."""
        p = self.plan
        y0, x0 = i * OUT_TILE, j * OUT_TILE
        h, w = min(OUT_TILE, p.layout.height - y0), min(OUT_TILE, p.layout.width - x0)
        chans = p.layout.planes[plane]
        x = p.slide.read(p.level, y0, x0, h, w, chans)
        through = [(pi, p.channels.index(ch)) for pi, ch in enumerate(chans) if ch in p.channels]
        if not through:
            return x
        rows, cols = p.grid.rows_touching(y0, y0 + h), p.grid.cols_touching(x0, x0 + w)
        hits = [(r, c) for r in rows for c in cols if self.is_restored[r, c]]
        if not hits:
            return x
        restored = [(r, c, self._batch(self.where[(r, c)][0])[self.where[(r, c)][1]]) for r, c in hits]
        plane_idx, net_idx = [a for a, _ in through], [b for _, b in through]
        out = x.copy()
        out[..., plane_idx] = self.blender.apply(x[..., plane_idx], y0, x0, [(r, c, f[..., net_idx]) for r, c, f in restored])
        return out


def _read_batch(plan: RunPlan, k: int) -> np.ndarray:
    """The input tiles of batch k, (n, th, tw, C) in the slide's dtype."""
    g = plan.grid
    return np.stack([plan.slide.read(plan.level, *g.box(r, c), plan.channels) for r, c in plan.batches[k]])


def _finish_writing(plan: RunPlan, writer: _Writer, signalled: Signalled) -> None:
    """Wait for the writer's tail (the rest of level 0 and the reduced levels, after the network is done),
    with the progress of the output tiles written; a signal stops the wait with :class:`SlideInterrupted`."""
    total = tile_count(plan.layout)
    shown = min(writer.written, total)
    with progress.bar(total=total, initial=shown, unit="tile", desc=f"write {plan.slide.info.path.name}", enabled=plan.progress) as bar:
        while writer.is_alive():
            writer.join(timeout=0.2)
            now = min(writer.written, total)
            bar.update(now - shown)
            shown = now
            if signalled.is_set():
                raise SlideInterrupted(f"stopped by a signal ({signalled.name()}) while writing, after all {len(plan.restored)} tiles were restored", signalled.signum)


def run_restoration(plan: RunPlan) -> dict:
    """Restore the planned tiles and write the output into the work folder; seconds and tile counts.

    Raises :class:`SlideInterrupted` on SIGTERM/SIGINT, and any error of the reader, the network or
    the writer (the other threads are stopped first).
    """
    batches = plan.batches
    reused = plan.work.start_run({"key": plan.key, "batches": len(batches)}, len(batches))
    stop, signalled = threading.Event(), Signalled()
    writer = _Writer(plan, stop)
    network_seconds = [0.0]
    done_tiles = sum(len(b) for k, b in enumerate(batches) if plan.work.is_done(k))
    bar = progress.bar(total=len(plan.restored), initial=done_tiles, unit="tile", desc=f"restore {plan.slide.info.path.name}", enabled=plan.progress, smoothing=0.1)

    def compute(k: int, tiles: np.ndarray) -> np.ndarray:
        if signalled.is_set():
            raise SlideInterrupted(STOPPED)  # counted below, once the batches in flight are saved
        if writer.error is not None:
            raise writer.error
        t0 = time.perf_counter()
        out = restore_batch(plan.network, tiles, plan.scaling, where=f"{plan.slide.info.path} batch {k}")
        network_seconds[0] += time.perf_counter() - t0
        return out

    def finish(k: int, out: np.ndarray) -> None:
        plan.work.save_chunk(k, out)
        bar.update(len(batches[k]))

    t0 = time.perf_counter()
    writer.start()
    try:
        with stop_on_signals(signalled):
            pending = [k for k in range(len(batches)) if not plan.work.is_done(k)]
            run_pipeline(pending, lambda k: _read_batch(plan, k), compute, finish, overlap=True)
            missing = [k for k in range(len(batches)) if not plan.work.is_done(k)]
            if missing:  # the writer would wait for them forever
                raise RuntimeError(f"batches {missing[:5]} were not restored")
            bar.close()
            _finish_writing(plan, writer, signalled)
    except SlideInterrupted as exc:
        if str(exc) != STOPPED:
            raise
        saved = sum(len(b) for k, b in enumerate(batches) if plan.work.is_done(k))
        raise SlideInterrupted(f"stopped by a signal ({signalled.name()}) after {saved} of {len(plan.restored)} tiles", signalled.signum) from None
    finally:
        stop.set()
        writer.join()
        bar.close()
    if writer.error is not None and not isinstance(writer.error, Aborted):
        raise writer.error
    return {"seconds": time.perf_counter() - t0, "network_seconds": network_seconds[0], "tiles_computed": len(plan.restored) - done_tiles, "batches_reused": reused, "tiles_reused": done_tiles}
