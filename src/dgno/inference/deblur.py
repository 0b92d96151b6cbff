"""Apply a trained model to a microscopist's own images (``dgno deblur``): a batch that never dies on one file.

Before the first image, everything that does not depend on one image is checked (options, device,
output folder: ``dgno.inference.preflight``), the model is loaded and only then the output folder
created; the inputs are expanded into files and their output names (``dgno.inference.batch_files``). Then each file is read with its
layout and metadata (``dgno.inference.image_files``), cut into the 2-D planes the network restores
(``dgno.inference.axes``: z-stacks, time series, channels, channel-first colour), each plane scaled to
[0, 1] as the network was trained (``dgno.inference.normalisation``, recorded in the model file),
restored by tiles that fit the memory budget (``dgno.inference.memory``), mapped back to the plane's own
range and dtype, and written with the input's name, container and metadata. Any failure of one file,
reading, restoring or writing, becomes that file's one-line error and the batch goes on; the caller
gets a :class:`BatchSummary` (restored, skipped, failed, time). Details for users: docs/own_images.md.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from dgno import progress
from dgno.checkpoint import load_trained
from dgno.inference import memory, normalisation, preflight
from dgno.inference.axes import Layout, check_plane_size, from_planes, resolve_layout, to_planes
from dgno.inference.batch_files import Ignored, expand_inputs, output_paths, written_before
from dgno.inference.cuda_graphs import capturable
from dgno.inference.engine_names import ENGINES
from dgno.inference.evaluate import default_tile_batch, model_restorer
from dgno.inference.image_files import (
    PartOfAnotherImage,
    imagej_axes,
    output_name,
    read_image_file,
    write_like,
)
from dgno.inference.tiling import BLENDS, pass_count
from dgno.interrupts import signal_name
from dgno.io import InputError

MIN_SIDE = 8  # below 8 px a plane holds less than one DG element of the paper's networks, and nothing to deblur
PROGRESS_DELAY_S = 2.0  # bars appear only for work that takes longer: no flicker over a batch of small images
Report = Callable[[str], None]


def report_to_stderr(line: str) -> None:
    """One console line (errors and notes), printed above any progress bar."""
    tqdm.write(line, file=sys.stderr)


@dataclass(frozen=True)
class DeblurOptions:
    """How ``dgno deblur`` restores (its command-line options; docs/own_images.md).

    ``tile`` None: one pass per plane when it fits the memory budget. ``normalise`` None: as the model
    file records. ``strict_channels``: a 1-channel model refuses several channels unless ``channel``
    picks one (the authors' networks). ``axes``: tifffile letters replacing the file's own.
    """

    tile: int | None = 512
    overlap: int = preflight.DEFAULT_OVERLAP
    blend: str = "ramp"
    tile_batch: int | None = None
    cuda_graphs: bool = False
    bf16: bool = False
    engine: str = "auto"
    normalise: str | None = None
    strict_channels: bool = False
    channel: int | None = None
    axes: str | None = None
    threads: int | None = None
    max_memory_gb: float | None = None
    skip_existing: bool = False
    model_name: str | None = None
    progress: bool = True


@dataclass
class BatchSummary:
    """What a batch did: files restored, skipped (output already there), failed with their one-line errors.

    ``interrupted``: what stopped the batch (Ctrl-C's ``KeyboardInterrupt``, SIGTERM's
    :class:`~dgno.interrupts.Terminated`), None when it ran to its end; ``unfinished``: the file it was
    restoring then, which was not written.
    """

    output_dir: Path
    restored: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)
    parts: list[Path] = field(default_factory=list)  # files holding planes of another file's image (restored with it)
    ignored: Ignored = field(default_factory=Ignored)
    seconds: float = 0.0
    interrupted: KeyboardInterrupt | None = None
    unfinished: Path | None = None

    @property
    def total(self) -> int:
        return len(self.restored) + len(self.skipped) + len(self.failed) + len(self.parts)

    def line(self) -> str:
        notes = [text for text in (self.ignored.text(), f"{len(self.parts)} file(s) read as part of another image" if self.parts else "") if text]
        stop = f", interrupted ({signal_name(self.interrupted)})" if self.interrupted else ""
        return (
            f"deblur: {len(self.restored)} restored, {len(self.skipped)} skipped (output already there), "
            f"{len(self.failed)} failed in {self.seconds:.1f} s{stop}; outputs in {self.output_dir}{''.join(f'; {n}' for n in notes)}"
        )

    def resume_line(self, *, skip_existing: bool) -> str:
        """What a stopped batch leaves and how to go on: which outputs are complete, which file was not written, the rerun."""
        names = ", ".join(p.name for p in self.restored[:5]) + (f" and {len(self.restored) - 5} more" if len(self.restored) > 5 else "")
        done = f"{len(self.restored)} file(s) restored by this run are complete ({names})" if self.restored else "no file was restored by this run"
        left = f"; {self.unfinished} was not finished and nothing of it was written" if self.unfinished else ""
        again = "run the same command again" + ("" if skip_existing else " with --skip-existing")
        return (
            f"stopped by {signal_name(self.interrupted)}: {done}{left}. Every file in {self.output_dir} is whole (outputs are written whole or not at all). "
            f"To go on, {again}: it restores only the inputs whose output is not there yet"
        )


def check_options(options: DeblurOptions) -> DeblurOptions:
    """Every option checked before the first image (InputError naming the option); threads and axes resolved."""
    threads, axes = preflight.check_image_options(tile=options.tile, overlap=options.overlap, tile_batch=options.tile_batch, threads=options.threads,
                                                  max_memory_gb=options.max_memory_gb, channel=options.channel, axes=options.axes)  # fmt: skip
    if options.engine not in ENGINES:
        raise InputError(f"--engine {options.engine}: allowed: {', '.join(ENGINES)}. Fix: leave it out for the fastest that runs here")
    if options.blend not in BLENDS:
        raise InputError(f"--blend {options.blend}: allowed: {', '.join(BLENDS)}. Fix: leave it out for the default")
    if options.normalise is not None and options.normalise not in normalisation.NORMALISATIONS:
        raise InputError(f"--normalise {options.normalise}: allowed: {', '.join(normalisation.NORMALISATIONS)}. Fix: leave it out to use the model's own")
    return replace(options, threads=threads, axes=axes)


def failure_line(path: Path, target: Path, exc: BaseException) -> str:
    """One line for any failure of one file: the file, the problem, the fix."""
    if isinstance(exc, InputError):
        message = str(exc)
        return message if str(path) in message else f"{path}: {message}"
    if memory.is_out_of_memory(exc):
        return f"{path}: out of memory even with the smallest tiles. Fix: --tile-batch 1, a smaller --max-memory, or close other programs"
    if isinstance(exc, OSError) and exc.errno in preflight.DISK_FULL:
        return f"{path}: cannot write {target}: disk full ({exc.strerror}). Fix: free space on the disk of {target.parent} (or choose another --output), then rerun with --skip-existing"
    if isinstance(exc, OSError):  # reading errors are InputErrors: an OSError here is the write (or its rename)
        return f"{path}: cannot write {target} ({exc.strerror or exc}). Fix: check the permissions of and free space on {target.parent}, and that {target.name} is not a folder"
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{path}: restoration failed ({type(exc).__name__}: {first}). Fix: check the image opens in Fiji; report the error if it does"


class PlaneRestorer:
    """The network as (plane in [0, 1]) → restored plane, with tiles capped to the memory budget and a retry
    at half the tile after running out of memory (the smaller tile is kept for the rest of the batch)."""

    def __init__(self, model: torch.nn.Module, device: torch.device, in_channels: int, options: DeblurOptions, report: Report):
        self.model, self.device, self.in_channels, self.options, self.report = model, device, in_channels, options, report
        self.tile = options.tile
        self.tile_batch = default_tile_batch(device, options.tile_batch)
        self.budget = memory.memory_budget(device, options.max_memory_gb)
        self._bytes_per_pixel: float | None = None
        self._restorers: dict[int | None, Callable] = {}
        self._said: set[str] = set()

    def _say_once(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            self.report(line)

    def bytes_per_pixel(self) -> float:
        if self._bytes_per_pixel is None:
            self._bytes_per_pixel = memory.activation_bytes_per_pixel(self.model, self.device, self.in_channels)
        return self._bytes_per_pixel

    def tile_for(self, height: int, width: int) -> int | None:
        """The tile side for planes of height × width: the wanted one, capped so one pass fits the budget."""
        wanted, overlap = self.tile, self.options.overlap
        one_pass = wanted is None or (wanted >= height and wanted >= width)
        buffers = memory.image_buffer_bytes(height * width, self.in_channels, self.in_channels)
        batch = 1 if one_pass else self.tile_batch
        pixels = height * width if one_pass else wanted * wanted
        if pixels * batch * self.bytes_per_pixel() + buffers <= self.budget:
            return wanted
        cap = max(memory.tile_cap(self.bytes_per_pixel(), self.budget, tile_batch=self.tile_batch, buffers=buffers), -(-(overlap + 1) // memory.TILE_MULTIPLE) * memory.TILE_MULTIPLE)
        asked = f"one pass over {height}×{width} px" if one_pass else f"{wanted}-px tiles ({self.tile_batch} per pass)"
        self._say_once(f"note: {asked} would need about {(pixels * batch * self.bytes_per_pixel() + buffers) / 2**30:.3g} GiB, more than the budget of {self.budget / 2**30:.3g} GiB; using {cap}-px tiles (--max-memory sets the budget)")
        return cap

    def _restorer(self, tile: int | None) -> Callable:
        if tile not in self._restorers:
            o = self.options
            restorer = model_restorer(self.model, self.device, tile=tile, overlap=o.overlap, blend=o.blend, tile_batch=self.tile_batch, cuda_graphs=o.cuda_graphs, bf16=o.bf16, engine=o.engine)
            if restorer.engine_note:
                self._say_once(f"note: {restorer.engine_note}; using engine {restorer.engine}")
            self._restorers[tile] = restorer
        return self._restorers[tile]

    def passes(self, height: int, width: int, tile: int | None) -> int:
        return pass_count(height, width, tile=tile, overlap=self.options.overlap, batch=self.tile_batch)

    def __call__(self, unit: np.ndarray, tile: int | None, *, label: str, progress: Callable | None = None) -> tuple[np.ndarray, int | None]:
        """(restored plane, the tile it was restored with)."""
        while True:
            try:
                return self._restorer(tile)(unit, progress=progress), tile
            except Exception as exc:
                if not memory.is_out_of_memory(exc):
                    raise
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                smaller = memory.smaller_tile(tile or max(unit.shape[:2]), self.options.overlap)
                if smaller is None:
                    raise
                self.report(f"{label}: out of memory with {'one pass' if tile is None else f'{tile}-px tiles'}; retrying with {smaller}-px tiles (kept for the rest of the batch)")
                tile = self.tile = smaller


@dataclass
class _Run:
    """One batch's settled state: options, model, how planes are scaled, and where lines go."""

    options: DeblurOptions
    restorer: PlaneRestorer
    in_channels: int
    normalise: str
    min_side: int
    report: Report


def _tile_bar(run: _Run, path: Path, total: int):
    """The passes of one file's network: a bar on a terminal, a line now and then in a log (``dgno.progress``)."""
    return progress.bar(total=total, desc=path.name, unit="pass", enabled=run.options.progress and total > 1, leave=False, delay=PROGRESS_DELAY_S)


def _restore_planes(run: _Run, path: Path, planes: np.ndarray, layout: Layout, significant_bits: int | None) -> np.ndarray:
    """Every plane scaled to [0, 1], restored, and mapped back to its own range and dtype."""
    height, width = planes.shape[1:3]
    tile = run.restorer.tile_for(height, width)
    samples = planes.shape[-1] if layout.per_sample else 1
    restored = np.empty_like(planes)
    fallback = ""
    with _tile_bar(run, path, len(planes) * samples * run.restorer.passes(height, width, tile)) as bar:

        def advance(groups):
            for group in groups:
                yield group
                bar.update(1)

        def restore(unit: np.ndarray) -> np.ndarray:
            nonlocal tile
            if unit.ndim == 3 and unit.shape[-1] == 1:  # grey beside its alpha sample: the network's (H, W)
                return restore(unit[..., 0])[..., None]
            out, tile = run.restorer(unit, tile, label=str(path), progress=advance)
            if run.restorer.passes(height, width, tile) == 1:  # one pass: the tiler reports no progress
                bar.update(1)
            return out

        if run.normalise == "dtype":  # one bit depth for the whole file
            significant_bits = significant_bits or normalisation.data_bits(planes)
        for i, plane in enumerate(planes):
            try:
                unit, scaling = normalisation.normalise(plane, run.normalise, significant_bits=significant_bits)
            except ValueError as exc:
                fix = "export the image without NaN/Inf values" if "NaN" in str(exc) else "save it as integers of up to 32 bits, or as floats"
                raise InputError(f"{path}: plane {i}: {exc}. Fix: {fix}") from None
            fallback = fallback or scaling.fallback
            out = np.stack([restore(unit[..., k]) for k in range(samples)], axis=-1) if layout.per_sample else restore(unit)
            restored[i] = normalisation.from_unit(out, scaling)
    if fallback:
        run.report(f"note: {path}: {fallback}: each plane scaled by its own minimum and maximum instead of the model's dtype scaling")
    return restored


def restore_file(run: _Run, path: Path, target: Path) -> Path:
    """Read, restore and write one file; return the path written (the input's name, or .tif for a dtype PNG/JPEG cannot hold)."""
    data, source = read_image_file(path)
    for note in source.notes:
        run.report(f"note: {note}")
    o = run.options
    axes = o.axes or source.axes
    layout = resolve_layout(
        path, data.shape, axes, in_channels=run.in_channels, strict_channels=o.strict_channels, channel=o.channel,
        channel_names=source.channel_names, model_name=o.model_name or "this model",
    )  # fmt: skip
    check_plane_size(path, data.shape, axes, run.min_side)
    planes, alpha = to_planes(data, layout)
    restored = _restore_planes(run, path, planes, layout, source.significant_bits)
    out = from_planes(restored, alpha, layout, data.shape)
    if source.imagej is not None and imagej_axes(layout.output_axes) is None:
        run.report(f"note: {path}: ImageJ cannot store the axes {layout.output_axes} (it needs them in the order TZCYX); the output keeps the resolution and the axes, not the ImageJ unit, spacing, ranges or LUTs")
    written = target.with_name(output_name(source, out.dtype))
    write_like(written, out, source, axes=layout.output_axes, channel=layout.pick[1] if layout.pick else None)
    return written


def _settle(checkpoint: str | Path, options: DeblurOptions, device: torch.device, report: Report) -> _Run:
    """Load the model and settle its normalisation, minimum plane size and restorer."""
    model, blob = load_trained(checkpoint, device)
    in_channels = int(model.hparams.get("in_channels", 1))
    if options.cuda_graphs:
        ok, why = capturable(model, device)
        if not ok:
            raise InputError(f"--cuda-graphs: {why}. Fix: leave out --cuda-graphs, or run on a GPU with the triton or mamba_ssm scan")
    try:
        recorded = None if options.normalise else normalisation.recorded(blob)  # --normalise overrides whatever is recorded
    except ValueError as exc:
        raise InputError(f"{checkpoint}: {exc}. Fix: pass --normalise minmax or dtype") from None
    kind = options.normalise or recorded
    if kind is None:
        kind = normalisation.UNRECORDED
        report(f"note: {checkpoint} records no input normalisation; scaling by the data's full scale (dtype). Pass --normalise minmax if it was trained on per-image min-max data")
    element = int(model.hparams.get("operator_kwargs", {}).get("element_size", 1))
    restorer = PlaneRestorer(model, device, in_channels, options, report)
    return _Run(options, restorer, in_channels, kind, max(MIN_SIDE, element), report)


def _pending(inputs: Sequence[str | Path], output_dir: Path, options: DeblurOptions, summary: BatchSummary, report: Report) -> dict[Path, Path]:
    """{input: output} still to restore; missing inputs, clashes and (with skip_existing) finished ones are counted."""
    files, failures, summary.ignored, notes = expand_inputs(inputs)
    for note in notes:
        report(note)
    targets, refusals = output_paths(files, output_dir)
    for path, message in failures + refusals:
        summary.failed.append((path, message))
        report(f"error: {message}")
    if options.skip_existing:
        summary.skipped = [p for p, out in targets.items() if written_before(p, out)]
        targets = {p: out for p, out in targets.items() if p not in summary.skipped}
    return targets


def deblur_batch(inputs: Sequence[str | Path], output_dir: str | Path, *, checkpoint: str | Path, device: str = "auto", options: DeblurOptions = DeblurOptions(), report: Report = report_to_stderr) -> BatchSummary:
    """Restore every input (files and folders) into ``output_dir``; one file's failure never stops the rest.

    Raises InputError only before the first image (options, device, output folder, model file); the
    output folder is created only once the model has loaded, so a model that fails leaves nothing behind.
    Ctrl-C, or SIGTERM under ``dgno`` (``dgno.interrupts``), stops the batch at once; the file being
    restored is not written (outputs are written whole or not at all) and the summary says what stopped
    it and which file was left (:meth:`BatchSummary.resume_line`).
    """
    start = time.perf_counter()
    options = check_options(options)
    dev = preflight.check_device(device)
    output_dir = preflight.check_output_dir(output_dir)
    threads_before = torch.get_num_threads()
    preflight.use_threads(options.threads)
    summary = BatchSummary(output_dir)
    try:
        run = _settle(checkpoint, options, dev, report)
        preflight.prepare_output_dir(output_dir)
        targets = _pending(inputs, output_dir, options, summary, report)
        images = progress.bar(targets.items(), desc="deblur", unit="image", enabled=options.progress and len(targets) > 1, delay=PROGRESS_DELAY_S)
        for path, target in images:
            summary.unfinished = path
            try:
                summary.restored.append(restore_file(run, path, target))
            except PartOfAnotherImage as exc:
                summary.parts.append(path)
                report(f"note: {exc}")
            except Exception as exc:  # noqa: BLE001 - any failure of one file is that file's error line
                summary.failed.append((path, failure_line(path, target, exc)))
                report(f"error: {summary.failed[-1][1]}")
            summary.unfinished = None
    except KeyboardInterrupt as exc:
        summary.interrupted = exc
    finally:
        torch.set_num_threads(threads_before)
        summary.seconds = time.perf_counter() - start
    return summary


def deblur_files(inputs: Sequence[str | Path], output_dir: str | Path, *, checkpoint: str | Path, device: str = "auto", report: Report = report_to_stderr, **options) -> list[tuple[Path, str]]:
    """:func:`deblur_batch` with the options as keywords (those of :class:`DeblurOptions`); returns [(path, error)] of failures."""
    return deblur_batch(inputs, output_dir, checkpoint=checkpoint, device=device, options=DeblurOptions(**options), report=report).failed
