"""Restore one whole slide: :func:`restore_slide`, what ``dgno deblur-slide`` and the workflow call.

    slide ──► thumbnail ─► tissue mask ─┐
          └─► focus score per tissue tile ┴► decisions (tiles.csv, focus map) ─► network on the chosen
              tiles, blended into the copied input ─► pyramidal OME-TIFF + before/after + summary.json

Files written into ``output_dir`` for a slide ``<name>.<ext>`` (:func:`output_files`):

* ``<name>.ome.tif``: the restored slide (``dgno.slides.pyramid``), renamed into place only when whole;
* ``<name>.tiles.csv``: one row per network tile: position, tissue share, focus score, label, restored;
* ``<name>.focus.png`` and ``<name>.before_after.png`` (``dgno.slides.pictures``);
* ``<name>.summary.json``: counts, rule and threshold, network, device, times, tiles/s, peak memory;
* ``.<name>.work/`` while the run is unfinished (``dgno.slides.work``), removed at the end.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openslide

from dgno import provenance
from dgno.choices import check_choice
from dgno.inference.normalisation import Scaling
from dgno.inference.preflight import DISK_FULL
from dgno.io import InputError, write_csv, write_json
from dgno.progress import bar as progress_bar
from dgno.slides import focus as fm
from dgno.slides.grid import TileGrid
from dgno.slides.inputs import slide_name
from dgno.slides.network import SlideNetwork, network_channels, restore_batch, slide_scaling
from dgno.slides.options import check_numbers
from dgno.slides.pictures import before_after, display, focus_map, focus_report, stretch
from dgno.slides.pyramid import COMPRESSIONS, OutputLayout
from dgno.slides.reader import Slide, SlideInfo, TiffSlide, open_slide
from dgno.slides.run import RunPlan, run_restoration
from dgno.slides.work import WorkFolder

ANALYSIS_VERSION = 6


@dataclass(frozen=True)
class OutputFiles:
    """Where one slide's results go (module docstring)."""

    slide: Path
    tiles: Path
    focus_map: Path
    before_after: Path
    summary: Path
    work: Path
    focus_report: Path


def output_files(path: Path, output_dir: Path) -> OutputFiles:
    n = slide_name(path)
    return OutputFiles(*(output_dir / f"{n}{s}" for s in (".ome.tif", ".tiles.csv", ".focus.png", ".before_after.png", ".summary.json")), output_dir / f".{n}.work",
                       output_dir / f"{n}.focus_report.png")  # fmt: skip


def choose_level(info: SlideInfo, *, level: int | None, mpp: float | None) -> int:
    """``level`` as given, else the level whose µm/px is nearest ``mpp`` (log scale, a positive ``mpp``: :func:`check_numbers`), else 0."""
    if level is not None and mpp is not None:
        raise InputError(f"{info.path}: both --level and --mpp given. Fix: pass only one of them")
    if level is not None:
        if not 0 <= level < len(info.levels):
            raise InputError(f"{info.path}: no level {level}; the slide has levels 0–{len(info.levels) - 1} ({', '.join(f'{w}×{h}' for h, w in info.levels)}). Fix: pass --level 0 to {len(info.levels) - 1}")
        return level
    if mpp is None:
        return 0
    if info.mpp is None:
        raise InputError(f"{info.path}: the slide does not record its pixel size, so --mpp {mpp} cannot pick a level. Fix: pass --level N instead")
    return min(range(len(info.levels)), key=lambda k: abs(math.log(info.level_mpp(k)[0] / mpp)))


def _analysis(slide: Slide, level: int, grid: TileGrid, work: WorkFolder, *, channel: int, focus_downsample: int, workers: int, progress: bool) -> tuple[np.ndarray, np.ndarray, fm.Thumbnail, np.ndarray]:
    """(tissue shares, focus scores, thumbnail, tissue mask); the per-tile arrays reused from an earlier run when valid."""
    info = slide.info
    stat = info.path.stat()
    key = {"version": ANALYSIS_VERSION, "slide": str(info.path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "level": level,
           "tile": grid.tile, "overlap": grid.overlap, "channel": channel, "focus_downsample": focus_downsample}  # fmt: skip
    thumb, rule, mask, tissue = fm.find_tissue(slide, level, grid, channel=channel)
    saved = work.load_analysis(key)
    if saved is not None:
        return saved["tissue"], saved["scores"], thumb, mask
    n = int((tissue > 0).sum())
    bar = (lambda it: progress_bar(it, total=n, unit="tile", desc=f"focus {info.path.name}")) if progress else None
    scores = fm.focus_scores(slide, level, grid, tissue > 0, channel=channel, rule=rule, downsample=focus_downsample, workers=workers, progress=bar)
    work.save_analysis(key, {"tissue": tissue, "scores": scores})
    return tissue, scores, thumb, mask


def _layout(info: SlideInfo, level: int) -> OutputLayout:
    h, w = info.levels[level]
    return OutputLayout(h, w, info.dtype, info.photometric, info.channel_names, info.level_mpp(level))


def peak_memory_mb() -> float:
    """Peak resident memory of this process in MB: Linux's VmHWM, else ru_maxrss.

    Why not ru_maxrss alone: on Linux it survives exec, so a process started by a large parent
    (a test runner, a notebook) reports the parent's size at the fork instead of its own.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _tile_seconds(slide: Slide, level: int, grid: TileGrid, network: SlideNetwork, channels: tuple[int, ...], scaling: Scaling, tile: tuple[int, int]) -> float:
    """Seconds per tile of the network on this machine: one untimed batch (warm-up), then one timed."""
    pixels = slide.read(level, *grid.box(*tile), channels)
    batch = np.stack([pixels] * network.batch)
    restore_batch(network, batch, scaling, where=str(slide.info.path))
    t0 = time.perf_counter()
    restore_batch(network, batch, scaling, where=str(slide.info.path))
    return (time.perf_counter() - t0) / network.batch


def _before_after(files: OutputFiles, slide: Slide, level: int, grid: TileGrid, d: fm.Decisions, channel: int) -> None:
    """Write the before/after picture of the most blurred restored tile; with no tile restored, of the most
    blurred tissue tile (or the first tile of a slide without tissue), as written: unchanged."""
    restored = bool(d.restored.any())
    pool = d.restored if restored else (d.labels != fm.LABELS[0])
    scores = np.where(pool if pool.any() else True, np.nan_to_num(d.scores, nan=-1.0), -np.inf)
    r, c = np.unravel_index(int(np.argmax(scores)), scores.shape)
    box = grid.box(int(r), int(c))
    info = slide.info
    with TiffSlide(files.slide) as out:
        after = out.read(0, *box)
    before = slide.read(level, *box)
    show = dict(photometric=info.photometric, channel=channel, dtype=info.dtype, limits=stretch(before, channel))  # one contrast for both
    score = f"focus score {d.scores[r, c]:.3f}" if np.isfinite(d.scores[r, c]) else "no tissue"
    what = "" if restored else "no tile restored, unchanged: "
    title = f"{info.path.name}: {what}tile ({r}, {c}) at y {box[0]}, x {box[1]}, {score}"
    before_after(files.before_after, display(before, **show), display(after, **show), title=title)


def _title(info: SlideInfo, d: fm.Decisions, network: SlideNetwork) -> str:
    tissue = int((d.labels != fm.LABELS[0]).sum())
    return f"{info.path.name}: {int(d.restored.sum())} of {tissue} tissue tiles restored by {network.name} ({d.rule})"


def restore_slide(
    path: str | Path,
    output_dir: str | Path,
    *,
    network: SlideNetwork,
    level: int | None = None,
    mpp: float | None = None,
    channel: str | None = None,
    restore: str = "blurry",
    threshold: float | None = None,
    margin: float = fm.FOCUS_MARGIN,
    min_tissue: float = fm.MIN_TISSUE,
    focus_downsample: int = 1,
    compression: str = "zlib",
    overwrite: bool = False,
    dry_run: bool = False,
    focus_report: bool = False,
    workers: int = 2,
    progress: bool = True,
) -> dict:
    """Restore the blurry (or all) tissue of one slide into ``output_dir``; return the summary (also written as JSON).

    ``level`` / ``mpp``: which level to restore (default 0). ``channel``: the fluorescence channel a
    one-channel network restores (name or index). ``restore``: "blurry" (``dgno.slides.focus``'s rule,
    ``margin`` over the slide's in-focus reference, or an absolute ``threshold``) or "all" tissue.
    ``compression``: "zlib" (lossless, default), "lzw", "none", or "jpeg" (8-bit RGB). ``dry_run``:
    measure and decide, write tiles.csv, the focus map and a summary with the time estimate, no slide.
    ``focus_report``: also write ``<name>.focus_report.png`` (``dgno.slides.pictures.focus_report``).
    A stopped run resumes when called again with the same arguments (``dgno.slides.run``).
    Errors about the input are :class:`~dgno.io.InputError` naming the file and the fix.
    """
    check_choice("compression", compression, COMPRESSIONS)
    check_choice("restore", restore, fm.RESTORE_MODES)
    check_numbers(margin=margin, min_tissue=min_tissue, focus_downsample=focus_downsample, threshold=threshold, mpp=mpp)
    path, output_dir = Path(path), Path(output_dir)
    files = output_files(path, output_dir)
    if files.slide.exists() and not overwrite:  # a dry run too: its tiles.csv, focus map and summary would contradict the slide
        raise InputError(f"{path}: the output {files.slide} exists already. Fix: pass --overwrite to replace it, or choose another --output")
    if files.slide.resolve() == path.resolve():
        raise InputError(f"{path}: its output would overwrite the slide itself. Fix: choose another --output folder")
    try:
        with open_slide(path) as slide:
            opts = dict(level=level, mpp=mpp, channel=channel, restore=restore, threshold=threshold, margin=margin, min_tissue=min_tissue,
                        focus_downsample=focus_downsample, compression=compression, dry_run=dry_run, focus_report=focus_report, workers=workers, progress=progress)  # fmt: skip
            return _restore(slide, files, network, opts)
    except OSError as exc:
        if exc.errno in DISK_FULL:
            raise InputError(f"{path}: disk full (no space left on the disk of {output_dir}: {exc.strerror}). Fix: free space (the output needs about as much as the slide, and its work folder as much again) or choose another --output; finished tiles are kept in {files.work} and a rerun resumes") from exc
        raise


@dataclass
class _Decided:
    """The analysis of one slide and what it decided: the level, its tiles, the channels and the scale."""

    level: int
    grid: TileGrid
    channels: tuple[int, ...]
    scaling: Scaling
    decisions: fm.Decisions
    seconds: float

    @property
    def restored(self) -> list[tuple[int, int]]:
        return [(int(r), int(c)) for r, c in zip(*np.nonzero(self.decisions.restored))]


def _decide(slide: Slide, files: OutputFiles, network: SlideNetwork, work: WorkFolder, opts: dict) -> _Decided:
    """Measure the slide (or reuse the measurement), decide every tile, write tiles.csv and the focus map."""
    t0 = time.perf_counter()
    info = slide.info
    lv = choose_level(info, level=opts["level"], mpp=opts["mpp"])
    channels = network_channels(network, info, opts["channel"])
    grid = TileGrid.over(*info.levels[lv], tile=network.tile, overlap=network.overlap)
    tissue, scores, thumb, mask = _analysis(slide, lv, grid, work, channel=channels[0], focus_downsample=opts["focus_downsample"], workers=opts["workers"], progress=opts["progress"])
    d = fm.decide(tissue, scores, restore=opts["restore"], min_tissue=opts["min_tissue"], threshold=opts["threshold"], margin=opts["margin"],
                  measure=fm.measure_for(info.photometric, opts["focus_downsample"]))  # fmt: skip
    scaling = slide_scaling(network, info, thumb.image[..., list(channels)])
    write_csv(files.tiles, fm.decisions_frame(grid, d))
    picture = display(thumb.image, photometric=info.photometric, channel=channels[0], dtype=info.dtype)
    focus_map(files.focus_map, thumb, mask, grid, d, picture=picture, title=_title(info, d, network))
    if opts["focus_report"]:
        focus_report(files.focus_report, d, title=f"{info.path.name}: {d.rule}")
    return _Decided(lv, grid, channels, scaling, d, time.perf_counter() - t0)


def _restored_area(grid: TileGrid, restored: np.ndarray) -> int:
    """Pixels of the restored tiles without their overlaps (each tile counted up to the next one's start)."""
    ys, xs = (*grid.ys, grid.height), (*grid.xs, grid.width)
    return int(sum((ys[r + 1] - ys[r]) * (xs[c + 1] - xs[c]) for r, c in zip(*np.nonzero(restored))))


def _summary_base(info: SlideInfo, files: OutputFiles, network: SlideNetwork, dc: _Decided, opts: dict) -> dict:
    d = dc.decisions
    tissue = int((d.labels != fm.LABELS[0]).sum())
    mpp = info.level_mpp(dc.level)
    return {
        "slide": str(info.path), "reader": info.reader, "vendor": info.vendor, "level": dc.level, "level_size": list(info.levels[dc.level]),
        "dtype": str(info.dtype), "channels": list(info.channel_names), "restored_channels": [info.channel_names[c] for c in dc.channels],
        "mpp": list(mpp) if mpp else None, "network": network.name, "engine": network.engine, "device": str(network.device), "tile": network.tile,
        "overlap": network.overlap, "blend": network.blend, "batch": network.batch,
        "normalisation": {"kind": dc.scaling.kind, "lo": dc.scaling.lo, "hi": dc.scaling.hi, "fallback": dc.scaling.fallback},
        "restore": opts["restore"], "min_tissue": opts["min_tissue"],
        "focus": {"measure": d.measure, "measure_is": fm.MEASURE_DESCRIPTIONS[d.measure],
                  "cells_per_tile_side": int(d.blocks.shape[-1]), "window_cells": fm.WINDOW if d.measure == fm.MEASURES[1] else None, "blurred_share": d.tile_share,
                  "downsample": opts["focus_downsample"], "reference": d.reference, "margin": opts["margin"], "threshold": d.threshold, "rule": d.rule},
        "tiles": {"total": int(d.labels.size), "tissue": tissue, "blurry": int((d.labels == fm.LABELS[2]).sum()), "restored": int(d.restored.sum())},
        "tissue_restored_fraction": int(d.restored.sum()) / tissue if tissue else 0.0,
        "restored_megapixels": _restored_area(dc.grid, d.restored) / 1e6,
        "files": {"slide": str(files.slide), "tiles": str(files.tiles), "focus_map": str(files.focus_map), "before_after": None, "summary": str(files.summary),
                  "focus_report": str(files.focus_report) if opts["focus_report"] else None},
        "provenance": {**provenance.collect(network.device), "openslide": openslide.__library_version__, "openslide_python": openslide.__version__},
    }  # fmt: skip


def _dry_run(slide: Slide, network: SlideNetwork, dc: _Decided, base: dict, files: OutputFiles) -> dict:
    """The counts and a time estimate from the network's measured speed here; nothing restored."""
    restored = dc.restored
    d = dc.decisions
    any_tissue = restored[:1] or [(int(r), int(c)) for r, c in zip(*np.nonzero(d.labels != fm.LABELS[0]))][:1] or [(0, 0)]
    per_tile = _tile_seconds(slide, dc.level, dc.grid, network, dc.channels, dc.scaling, any_tissue[0])
    estimate = len(restored) * per_tile
    summary = {**base, "dry_run": True, "seconds_analysis": dc.seconds, "seconds_per_tile": per_tile, "estimated_seconds": estimate,
               "estimated_seconds_per_megapixel": estimate / base["restored_megapixels"] if base["restored_megapixels"] else None}  # fmt: skip
    write_json(files.summary, summary)
    return summary


def _run_key(base: dict, network: SlideNetwork, dc: _Decided, compression: str) -> str:
    """What the finished batches and the output bytes depend on: same key, same file."""
    parts = {"slide": base["slide"], "level": dc.level, "size": base["level_size"], "network": network.identity or network.name,
             "batch": network.batch, "blend": network.blend, "tile": network.tile, "overlap": network.overlap, "scaling": [dc.scaling.kind, dc.scaling.lo, dc.scaling.hi],
             "channels": list(dc.channels), "restored": dc.restored, "compression": compression}  # fmt: skip
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _check_fit(info: SlideInfo, network: SlideNetwork, opts: dict) -> None:
    """What can be refused from the slide's header alone, before a work folder exists: level, channels, compression."""
    choose_level(info, level=opts["level"], mpp=opts["mpp"])
    network_channels(network, info, opts["channel"])
    if opts["compression"] == "jpeg" and not (info.photometric == "rgb" and info.dtype == np.uint8):
        raise InputError(f"{info.path}: --compression jpeg needs an 8-bit RGB slide, this one is {info.photometric} {info.dtype}. Fix: use the default lossless --compression zlib")


def _restore(slide: Slide, files: OutputFiles, network: SlideNetwork, opts: dict) -> dict:
    _check_fit(slide.info, network, opts)
    work = WorkFolder(files.work)
    with work.locked(slide.info.path):
        t0 = time.perf_counter()
        dc = _decide(slide, files, network, work, opts)
        base = _summary_base(slide.info, files, network, dc, opts)
        if opts["dry_run"]:
            return _dry_run(slide, network, dc, base, files)
        plan = RunPlan(slide, dc.level, dc.grid, network, dc.channels, dc.scaling, dc.restored, _layout(slide.info, dc.level), work,
                       opts["compression"], _run_key(base, network, dc, opts["compression"]), workers=opts["workers"], progress=opts["progress"])  # fmt: skip
        stats = run_restoration(plan)
        os.replace(work.output, files.slide)
        _before_after(files, slide, dc.level, dc.grid, dc.decisions, dc.channels[0])
        work.remove()
    seconds = time.perf_counter() - t0
    computed, net = stats["tiles_computed"], stats["network_seconds"]
    summary = {**base, "dry_run": False, "seconds": seconds, "seconds_analysis": dc.seconds, "seconds_network": net,
               "share_outside_network": 1.0 - net / seconds if seconds > 0 else None,
               "tiles_per_second": computed / stats["seconds"] if computed else None,
               "seconds_per_megapixel": seconds / base["restored_megapixels"] if base["restored_megapixels"] else None,
               "tiles_computed": computed, "tiles_reused": stats["tiles_reused"], "peak_memory_mb": peak_memory_mb()}  # fmt: skip
    summary["files"]["before_after"] = str(files.before_after)
    write_json(files.summary, summary)
    return summary
