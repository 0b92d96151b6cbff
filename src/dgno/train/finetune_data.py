"""A lab's own focal planes → the dataset folder fine-tuning trains on, with a record of every decision.

Inputs (:class:`Inputs`), read with the readers ``dgno deblur`` and ``dgno deblur-slide`` use:

* ``stacks``: z-stack files (ImageJ or OME TIFF with a Z axis, or a plain multi-page TIFF; an OME-TIFF
  holding several images holds several fields), or folders that hold one image per plane (the planes in
  name order). One field per stack.
* ``pairs``: two folders, blurred and sharp images matched by file name (without the suffix). One field per pair.
* ``slides``: whole slides that store focal planes (an OME-TIFF with a Z axis), cut into squares of
  ``field_size`` px on tissue (the tissue rule of ``dgno deblur-slide``); each square is a stack.

Every field goes through :mod:`dgno.data.zstacks`: its in-focus plane (measured, or given), its input planes
at the chosen distances, their alignment; then each plane is scaled to [0, 1] as ``dgno deblur`` scales
it (the starting network's normalisation: each plane by its own minimum and maximum, or by the data's
bit depth) and written as float32. One pair per (field, input plane): ``gt/<pair>.tif`` (the in-focus
plane, linked, not copied, for a field's other pairs) and ``blur/pair/<pair>.tif``, all at one level
``pair``, so fields that reach different distances train together. ``pairs.csv`` says which field and
distance each pair is; ``fields.csv`` records each field's source, planes, sharpness, chosen plane,
shifts and split; ``split.csv`` splits by field (by slide when there are three slides or more), never
by pair or patch. The folder is written whole or not at all, and kept while the inputs and settings are
the same (``manifest.json``'s ``inputs``), so a resumed run trains on the very same files.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import tifffile

from dgno.choices import check_choice
from dgno.data import zstacks
from dgno.inference import normalisation
from dgno.inference.axes import check_axes_option, resolve_layout, to_planes
from dgno.inference.image_files import read_image_file
from dgno.io import InputError, atomic_dir, read_json, visible_files, write_json, write_tiff
from dgno.progress import bar as progress_bar
from dgno.slides.focus import thumbnail, tissue_mask, tissue_rule
from dgno.slides.reader import TiffSlide, open_slide

LEVEL = "pair"  # the one blur level of a prepared folder (module docstring)
SLIDE_SPLIT_FROM = 3  # slides split by slide from this many on, else by field


@dataclass(frozen=True)
class Inputs:
    """What a lab gives: exactly one of stack files/folders, a (blurred, sharp) pair of folders, or slides."""

    stacks: tuple[str, ...] = ()
    pairs: tuple[str, str] | None = None
    slides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        given = [k for k, v in (("stacks", self.stacks), ("pairs", self.pairs), ("slides", self.slides)) if v]
        if len(given) != 1:
            raise InputError(f"fine-tuning inputs: {' and '.join(given) or 'none'} given. Fix: give exactly one of z-stacks, a pair of folders (blurred, sharp) or slides")

    @property
    def kind(self) -> str:
        return "stacks" if self.stacks else "pairs" if self.pairs else "slides"

    def paths(self) -> list[str]:
        return list(self.stacks or self.pairs or self.slides)


@dataclass(frozen=True)
class Preparation:
    """How fields become pairs (module docstring of :mod:`dgno.data.zstacks` for each choice)."""

    normalise: str
    in_channels: int = 1
    distances: tuple[int, ...] | None = None  # planes from focus; None: every plane
    focus_plane: int | None = None  # the in-focus plane of every stack, instead of measuring it
    focus_planes: dict[str, int] = field(default_factory=dict)  # per field or file name
    channel: int | None = None
    axes: str | None = None
    max_shift: float = 5.0
    val_fraction: float = 0.2
    test_fraction: float = 0.2
    seed: int = 0
    field_size: int = 512  # slides: side of a field
    max_fields: int = 64  # slides: fields per slide at most
    min_tissue: float = 0.5  # slides: share of a field that must be tissue
    min_side: int = 32  # smallest plane side training can use
    network: str = "the starting network"  # named when the data's channels do not fit it

    def __post_init__(self) -> None:
        check_choice("normalisation", self.normalise, normalisation.NORMALISATIONS)
        for name in ("val_fraction", "test_fraction"):
            if not 0 < getattr(self, name) < 1:
                raise InputError(f"{name}={getattr(self, name)!r}: give a share between 0 and 1. Fix: e.g. 0.2")
        if self.distances is not None and (not self.distances or min(self.distances) < 1):
            raise InputError(f"distances {list(self.distances)}: give whole numbers of planes >= 1. Fix: e.g. 1 2 3")
        check_axes_option(self.axes)


@dataclass
class Field:
    """One field's planes in stored values, (H, W) or (H, W, C); ``target`` is fixed for a pair of folders."""

    id: str
    source: str
    unit: str
    planes: list[np.ndarray]
    target: int | None = None
    bits: int | None = None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _layout_planes(path: Path, data: np.ndarray, axes: str, names: tuple[str, ...], prep: Preparation, *, stack: bool) -> np.ndarray:
    """(N, H, W[, C]) planes of one stored image; a stack must have exactly one plane axis, a plane none."""
    layout = resolve_layout(path, data.shape, prep.axes or axes, in_channels=prep.in_channels, strict_channels=True, channel=prep.channel, channel_names=names, model_name=prep.network)
    planes, _ = to_planes(data, layout)
    plane_axes = layout.plane_axes()
    if stack and len(plane_axes) != 1:
        problem = "one plane, not a z-stack" if not plane_axes else f"planes along several axes ({plane_axes})"
        raise InputError(f"{path}: {problem} (axes {prep.axes or axes}, shape {data.shape}). Fix: give stacks of two or more focal planes (e.g. --axes ZYX when the file's own axes are wrong), one z-stack per file")
    if stack and plane_axes == "T":
        raise InputError(f"{path}: a time series (axis T), not a z-stack. Fix: --axes ZYX if its planes are focal planes")
    if not stack and plane_axes:
        raise InputError(f"{path}: holds {len(planes)} planes ({plane_axes}); a pair needs one image each. Fix: export one plane")
    return planes


def _check_sizes(names: list[str], planes: list[np.ndarray]) -> None:
    sizes = {p.shape[:2] for p in planes}
    if len(sizes) > 1:
        first = planes[0].shape[:2]
        k = next(i for i, p in enumerate(planes) if p.shape[:2] != first)
        raise InputError(f"{names[k]}: planes of different sizes, {planes[k].shape[0]}×{planes[k].shape[1]} px here, {first[0]}×{first[1]} px in {names[0]}. Fix: export every plane of a field at the same size")


def _bits(planes: list[np.ndarray], prep: Preparation) -> int | None:
    return normalisation.data_bits(np.stack(planes)) if prep.normalise == "dtype" else None


def _stack_file(path: Path, prep: Preparation) -> Iterator[Field]:
    """The fields of one stack file: one, or one per image of a multi-image OME-TIFF with a Z axis."""
    if path.suffix.lower() in (".tif", ".tiff"):
        with tifffile.TiffFile(path) as tif:
            series = [s for s in tif.series if "Z" in s.axes]
            several = len(series) > 1 and tif.is_ome
            if not series and len({s.shape for s in tif.series}) > 1:
                shapes = ", ".join("×".join(map(str, s.shape)) for s in tif.series[:3])
                raise InputError(f"{path}: planes of different sizes ({shapes}). Fix: export every plane of a field at the same size")
            if several:
                for k, s in enumerate(series):
                    planes = list(_layout_planes(path, s.asarray(), s.axes, (), prep, stack=True))
                    yield Field(_safe(f"{path.stem}_s{k}"), f"{path}#{k}", _safe(f"{path.stem}_s{k}"), planes, bits=_bits(planes, prep))
                return
    data, source = read_image_file(path)
    planes = list(_layout_planes(path, data, source.axes, source.channel_names, prep, stack=True))
    bits = source.significant_bits or _bits(planes, prep)
    yield Field(_safe(path.stem), str(path), _safe(path.stem), planes, bits=bits)


def _stack_folder(folder: Path, prep: Preparation) -> Field:
    """A folder of single-plane images, in name order, as one stack."""
    files, _ = visible_files(folder)
    planes = [_layout_planes(f, *_read(f), prep, stack=False)[0] for f in files]
    if len(planes) < 2:
        raise InputError(f"{folder}: {len(planes)} image(s); a stack folder holds one image per focal plane, at least two. Fix: put the field's planes in the folder")
    _check_sizes([str(f) for f in files], planes)
    return Field(_safe(folder.name), str(folder), _safe(folder.name), planes, bits=_bits(planes, prep))


def _read(path: Path) -> tuple[np.ndarray, str, tuple[str, ...]]:
    data, source = read_image_file(path)
    return data, source.axes, source.channel_names


def stack_fields(paths: list[str], prep: Preparation) -> Iterator[Field]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files, _ = visible_files(path)
            if any(f.suffix.lower() in (".tif", ".tiff") and _is_stack(f) for f in files):  # a folder of stack files (each must be one)
                for f in files:
                    yield from _stack_file(f, prep)
            else:  # a folder of planes
                yield _stack_folder(path, prep)
        else:
            yield from _stack_file(path, prep)


def _is_stack(path: Path) -> bool:
    """Whether a TIFF holds several planes (then a folder of such files is a folder of stacks)."""
    try:
        with tifffile.TiffFile(path) as tif:
            return len(tif.pages) > 1
    except (tifffile.TiffFileError, OSError, ValueError):
        return False


def pair_fields(blurred: str, sharp: str, prep: Preparation) -> Iterator[Field]:
    """One field per blurred image, with the sharp image of the same name (suffix aside)."""
    found = {}
    for folder in (blurred, sharp):
        if not Path(folder).is_dir():
            raise InputError(f"{folder}: not a folder. Fix: give two folders, the blurred images and the sharp images, with matching file names")
        files, _ = visible_files(folder)
        found[folder] = {f.stem: f for f in files}
    a, b = found[blurred], found[sharp]
    for names, here, there in ((sorted(set(a) - set(b)), a, sharp), (sorted(set(b) - set(a)), b, blurred)):
        if names:
            raise InputError(f"{here[names[0]]}: no image of that name in {there} ({len(a)} blurred, {len(b)} sharp images; {len(names)} unmatched). Fix: give both folders the same file names")
    for name in sorted(a):
        planes = [_layout_planes(p, *_read(p), prep, stack=False)[0] for p in (a[name], b[name])]
        _check_sizes([str(a[name]), str(b[name])], planes)
        yield Field(_safe(name), str(a[name]), _safe(name), planes, target=1, bits=_bits(planes, prep))


def _slide_planes(path: Path) -> int:
    """How many focal planes a slide holds (a TIFF's Z axis); other formats are read one plane only."""
    try:
        with TiffSlide(path, plane=0) as slide:
            planes = slide.info.planes
    except InputError:
        raise
    except (tifffile.TiffFileError, OSError, ValueError, IndexError):
        with open_slide(path) as slide:  # a missing or damaged file fails here, with its own message
            raise InputError(f"{path}: a {slide.info.vendor} slide, whose reader gives one focal plane. Fix: export its focal planes as an OME-TIFF with a Z axis") from None
    if planes < 2:
        raise InputError(f"{path}: holds one focal plane, not a stack of them. Fix: scan (or export) the slide with several focal planes, as an OME-TIFF with a Z axis")
    return planes


def _check_slide_channels(path: Path, channels: int, photometric: str, prep: Preparation) -> None:
    """A one-channel network takes one fluorescence channel; a colour network a slide of as many channels."""
    rgb = photometric in ("rgb", "rgba")
    if prep.in_channels == 1 and rgb:
        raise InputError(f"{path}: an RGB slide, but {prep.network} restores one channel. Fix: start from a 3-channel network (DGNO_3DHistech_Cell / _Face)")
    if prep.in_channels > 1 and (channels - (photometric == "rgba")) != prep.in_channels:
        raise InputError(f"{path}: {channels} channel(s), but {prep.network} restores {prep.in_channels}-channel images. Fix: start from a one-channel network and pass --channel N")
    if prep.in_channels == 1 and prep.channel is not None and not 0 <= prep.channel < channels:
        raise InputError(f"{path}: --channel {prep.channel}, but the slide has {channels} channel(s). Fix: --channel 0 … {channels - 1}")


def slide_fields(paths: list[str], prep: Preparation) -> Iterator[Field]:
    """Squares of ``field_size`` px on tissue of each slide (up to ``max_fields`` per slide, spread by a seeded draw)."""
    by_slide = len(paths) >= SLIDE_SPLIT_FROM
    for raw in paths:
        path = Path(raw)
        n = _slide_planes(path)
        slides = [TiffSlide(path, plane=k) for k in range(n)]
        try:
            info = slides[0].info
            _check_slide_channels(path, info.channels, info.photometric, prep)
            channel = prep.channel or 0
            channels = tuple(range(prep.in_channels)) if prep.in_channels > 1 else (channel,)
            thumb = thumbnail(slides[n // 2], 0, tile=prep.field_size)
            rule = tissue_rule(thumb, photometric=info.photometric, channel=channel, dtype=info.dtype)
            blocks = zstacks.tissue_blocks(tissue_mask(thumb, rule, photometric=info.photometric), block=prep.field_size, scale=thumb.scale, min_tissue=prep.min_tissue)
            if not blocks:
                raise InputError(f"{path}: no {prep.field_size}-px square that is at least {prep.min_tissue:.0%} tissue. Fix: lower the field size or the tissue share")
            rng = np.random.default_rng([prep.seed, len(blocks)])
            keep = sorted(rng.choice(len(blocks), size=min(prep.max_fields, len(blocks)), replace=False))
            stem = _safe(path.name.split(".")[0])
            for y, x, _ in (blocks[i] for i in keep):
                planes = [s.read(0, y, x, prep.field_size, prep.field_size, channels) for s in slides]
                planes = [p[..., 0] if p.shape[-1] == 1 else p for p in planes]
                ident = f"{stem}_y{y}_x{x}"
                yield Field(ident, f"{path}@y{y},x{x}", stem if by_slide else ident, planes, bits=_bits(planes, prep))
        finally:
            for s in slides:
                s.close()


def _unit(raw: np.ndarray, processed: np.ndarray, prep: Preparation, bits: int | None, name: str) -> np.ndarray:
    """``processed`` (a plane after alignment and cropping) in [0, 1] as ``dgno deblur`` scales ``raw``: by the
    plane's own range, or by the data's full scale (the map taken from the stored plane)."""
    try:
        scaling = normalisation.scaling_for(processed if prep.normalise == "minmax" else raw, prep.normalise, significant_bits=bits)
    except ValueError as exc:
        raise InputError(f"{name}: {exc}. Fix: export the planes as integers or as floats without NaN/Inf") from None
    return normalisation.to_unit(processed, scaling)


def _focus(fld: Field, prep: Preparation) -> tuple[int, list[float], bool]:
    """(in-focus plane, every plane's sharpness, whether the plane was given rather than measured)."""
    scores = [zstacks.sharpness(p) for p in fld.planes]
    given = prep.focus_planes.get(fld.id, prep.focus_planes.get(Path(fld.source.split("#")[0]).name, prep.focus_plane))
    if given is None:
        return int(np.argmax(scores)), scores, False
    if not 0 <= int(given) < len(fld.planes):
        raise InputError(f"{fld.source}: in-focus plane {given} given, but the stack has planes 0 … {len(fld.planes) - 1}. Fix: give a plane of the stack (counted from 0)")
    return int(given), scores, True


def field_pairs(fld: Field, prep: Preparation) -> tuple[list[tuple[str, str, np.ndarray, np.ndarray]], dict]:
    """([(pair id, level, blurred in [0, 1], sharp in [0, 1])], the field's record for fields.csv)."""
    if fld.target is not None:
        focus, scores, given = fld.target, [zstacks.sharpness(p) for p in fld.planes], True
        levels = {"pair": 1 - fld.target}  # the blurred image, taken as one plane from focus
    else:
        focus, scores, given = _focus(fld, prep)
        levels = zstacks.input_planes(len(fld.planes), focus, prep.distances)
        if not levels:
            raise InputError(f"{fld.source}: no plane at distance(s) {list(prep.distances or [])} from its in-focus plane {focus} (planes 0 … {len(fld.planes) - 1}). Fix: choose distances the stack reaches")
    sharp = fld.planes[focus]
    inputs = {lv: (k - focus if fld.target is None else 1, fld.planes[k].astype(np.float32)) for lv, k in levels.items()}
    aligned, alignment = zstacks.align(fld.source, sharp.astype(np.float32), inputs, max_shift=prep.max_shift)
    gt = _unit(sharp, zstacks.crop_border(sharp.astype(np.float32), alignment.crop), prep, fld.bits, fld.source)
    if min(gt.shape[:2]) < prep.min_side:
        raise InputError(f"{fld.source}: planes of {gt.shape[0]}×{gt.shape[1]} px (after cropping {alignment.crop} px of alignment); training needs at least {prep.min_side}×{prep.min_side}. Fix: give larger fields")
    pairs = [(f"{fld.id}__{lv}", lv, _unit(fld.planes[k], zstacks.crop_border(aligned[lv], alignment.crop), prep, fld.bits, fld.source), gt) for lv, k in levels.items()]
    record = {
        "field": fld.id, "source": fld.source, "unit": fld.unit, "planes": len(fld.planes), "focus_plane": focus,
        "focus": "given" if given else "measured", "sharpness": ";".join(f"{s:.4g}" for s in scores),
        "levels": ";".join(levels), "drift": json.dumps(alignment.drift), "shifts": json.dumps(alignment.shifts), "measured": json.dumps(alignment.measured),
        "corrected": ";".join(lv for lv, c in alignment.corrected.items() if c),
        "crop": alignment.crop, "height": gt.shape[0], "width": gt.shape[1],
    }  # fmt: skip
    return pairs, record


def _fields(inputs: Inputs, prep: Preparation) -> Iterator[Field]:
    if inputs.kind == "stacks":
        return stack_fields(list(inputs.stacks), prep)
    if inputs.kind == "pairs":
        return pair_fields(*inputs.pairs, prep)
    return slide_fields(list(inputs.slides), prep)


def inputs_digest(inputs: Inputs, prep: Preparation) -> str:
    """SHA-256 of the inputs' files (name, size, modification time) and the preparation settings."""
    h = hashlib.sha256(json.dumps({"kind": inputs.kind, "prep": asdict(prep)}, sort_keys=True, default=list).encode())
    for raw in inputs.paths():
        path = Path(raw)
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.is_file():
                st = f.stat()
                h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def _write_pairs(tmp: Path, pairs: list[tuple[str, str, np.ndarray, np.ndarray]]) -> None:
    """blur/pair/<pair>.tif for each pair; gt/<pair>.tif once, hard-linked for the field's other pairs."""
    first = None
    for ident, _, blurred, gt in pairs:
        write_tiff(tmp / "blur" / LEVEL / f"{ident}.tif", blurred)
        target = tmp / "gt" / f"{ident}.tif"
        if first is None:
            write_tiff(target, gt)
            first = target
        else:
            try:
                os.link(first, target)
            except OSError:
                write_tiff(target, gt)


def _write_tables(tmp: Path, records: list[dict], pair_rows: list[dict], split: dict[str, str]) -> None:
    for name, rows in (("fields.csv", [{**r, "split": split[r["unit"]]} for r in records]), ("pairs.csv", pair_rows)):
        with (tmp / name).open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    unit_of = {r["field"]: r["unit"] for r in records}
    with (tmp / "split.csv").open("w", newline="") as fh:
        fh.write("id,split\n" + "".join(f"{p['id']},{split[unit_of[p['field']]]}\n" for p in pair_rows))


def prepare(inputs: Inputs, prep: Preparation, out_dir: str | Path, *, progress: bool = True) -> Path:
    """Write (or keep, when its inputs and settings are unchanged) the prepared folder ``out_dir`` (module docstring)."""
    out_dir = Path(out_dir)
    digest = inputs_digest(inputs, prep)
    if (out_dir / "manifest.json").is_file() and read_json(out_dir / "manifest.json").get("inputs") == digest:
        return out_dir
    with atomic_dir(out_dir) as tmp:
        (tmp / "gt").mkdir(parents=True)
        (tmp / "blur" / LEVEL).mkdir(parents=True)
        records, pair_rows, sources = [], [], {}
        for fld in progress_bar(_fields(inputs, prep), desc="prepare fields", unit="field", enabled=progress):
            if fld.id in sources:
                raise InputError(f"{fld.source}: its field name {fld.id} is that of {sources[fld.id]} too. Fix: rename one of them")
            sources[fld.id] = fld.source
            pairs, record = field_pairs(fld, prep)
            _write_pairs(tmp, pairs)
            records.append(record)
            pair_rows += [{"id": ident, "field": fld.id, "level": lv, "distance": zstacks.level_distance(lv) if lv != "pair" else ""} for ident, lv, _, _ in pairs]
        by_slide = inputs.kind == "slides" and len(inputs.slides) >= SLIDE_SPLIT_FROM
        units = sorted({r["unit"] for r in records})
        where = ", ".join(inputs.paths()[:3]) + (" …" if len(inputs.paths()) > 3 else "")
        split = zstacks.split_units(units, val_fraction=prep.val_fraction, test_fraction=prep.test_fraction, seed=prep.seed, what="slides" if by_slide else "fields", where=where)
        _write_tables(tmp, records, pair_rows, split)
        write_json(tmp / "manifest.json", {
            "source": "fine-tuning inputs", "kind": inputs.kind, "inputs": digest, "paths": inputs.paths(), "normalise": prep.normalise,
            "levels": [LEVEL], "split_by": "slide" if by_slide else "field", "preparation": asdict(prep),
            "fields": {s: sum(split[r["unit"]] == s for r in records) for s in ("train", "val", "test")}, "pairs": len(pair_rows),
        })  # fmt: skip
    return out_dir


def read_focus_planes(path: str | Path) -> dict[str, int]:
    """{field or file name: in-focus plane} from a CSV with columns ``field,plane`` (planes counted from 0)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: focus-plane file does not exist. Fix: check the path (a CSV with columns field,plane)")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or not {"field", "plane"} <= set(reader.fieldnames):
            raise InputError(f"{path}: expected columns field,plane, got {reader.fieldnames}. Fix: write a header line 'field,plane'")
        out = {}
        for i, row in enumerate(reader, start=2):
            try:
                out[row["field"].strip()] = int(row["plane"])
            except (TypeError, ValueError):
                raise InputError(f"{path}: line {i}: plane {row['plane']!r} is not a whole number. Fix: give the in-focus plane's index, counted from 0") from None
    return out
