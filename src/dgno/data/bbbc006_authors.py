"""BBBC006 as the DGNO authors prepared it: their archive and train/test split, verified, in this project's layout.

Why: the paper's BBBC006 numbers were measured on the authors' own split, published as
``BBBC006.tar.gz`` (about 3.2 GB, both channels) in the Hugging Face repository ``Duane245/DGNO``;
this project's own split (:mod:`dgno.data.bbbc006`, seeded, by well) tests on other images. The
archive unpacks to ``BBBC006/{train,test}/{GT,blur}/*.tif`` (GT z16; blur z02, z06, z10). Its files
are paired by field and compared with the authors' test script's pairing, and each blur file's plane
is known file by file (from its name, from the Broad listing of the planes' archives, else by
sharpness) and checked against the images (:mod:`dgno.data.bbbc006_pairing`). Hidden files (macOS
``._*`` forks, ``.DS_Store``) are skipped and counted.

The unseen defocus levels z01, z05, z13 exist only in the Broad planes, so :func:`map_to_broad` maps
the archive's fields to the Broad file names (same well, site, channel) and takes those planes and
the nucleus label masks from the Broad raw folders (:mod:`dgno.data.bbbc006`). If no archive name
names a Broad field, the mapping reports status ``no_names`` and the dataset is written without
them; the manifest says so, and the workflow falls back to the by-well split for those tables.

Raw layout under ``raw_root`` (what :func:`fetch` writes; a hand-unpacked ``raw_root/BBBC006`` works)::

    archives/BBBC006.tar.gz (+ .json: url, sha256, size)     authors/BBBC006/{train,test}/{GT,blur}/*.tif

Prepared layout (docs/CONVENTIONS.md), ids ``<well>_s<site>`` as in :mod:`dgno.data.bbbc006`:
manifest.json, split.csv (train/val/test), gt/<id>.tif, blur/z02/<id>.tif ..., labels/<id>.tif.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import tifffile

import dgno
from dgno.data import bbbc006
from dgno.data.bbbc006_layout import ARCHIVE, PER_GT, PLANES, SPLITS, UNPACK_DIR, Pair, check_layout
from dgno.data.bbbc006_pairing import ArchiveIndex, PlaneCheck, PlaneRule, index_archive, planes_record
from dgno.data.download import DownloadError, part_path, sha256_file
from dgno.data.paired_sets import Report
from dgno.data.targz import fetch_targz, unpack_tar
from dgno.io import InputError, atomic_dir, is_hidden, read_json, write_json
from dgno.progress import bar as progress_bar

log = logging.getLogger(__name__)

HF_REPO = "Duane245/DGNO"
DEFAULT_URL = f"https://huggingface.co/{HF_REPO}/resolve/main/{ARCHIVE}"

# ------------------------------------------------------------------------------------------- fetch


SEARCH_DEPTH = 3  # how deep below authors/ a folder holding train/ and test/ is looked for


def find_root(raw_root: str | Path) -> Path | None:
    """The unpacked ``BBBC006`` folder under `raw_root`: ``authors/BBBC006``, ``BBBC006``, raw_root itself, or
    the first folder (sorted, breadth first, hidden folders skipped) at most three levels into ``authors/``
    that holds train/ and test/: an archive whose top folder has another name, none, or one more level."""
    raw_root = Path(raw_root)
    unpacked = raw_root / UNPACK_DIR
    for folder in (unpacked / "BBBC006", raw_root / "BBBC006", raw_root, *_folders_below(unpacked, SEARCH_DEPTH)):
        if all((folder / split).is_dir() for split in SPLITS):
            return folder
    return None


def _folders_below(top: Path, depth: int) -> list[Path]:
    """`top` and its visible folders down to `depth` levels, breadth first, each level sorted."""
    level, found = [top] if top.is_dir() else [], []
    for _ in range(depth + 1):
        found += level
        level = sorted(p for folder in level for p in folder.iterdir() if p.is_dir() and not is_hidden(p.name))
    return found


def _not_the_archive(archive: Path, raw_root: Path, url: str) -> InputError:
    """The error for an unpacked archive with no train/ and test/: says what it holds instead."""
    splitless = [f for f in _folders_below(raw_root / UNPACK_DIR, SEARCH_DEPTH) if all((f / sub).is_dir() for sub in ("GT", "blur"))]
    held = (
        f"it holds {splitless[0]} with GT/ and blur/ but no train/ and test/ folders, and the authors' split is those folders, so the paper's "
        f"test set cannot be known from it"
        if splitless
        else "no folder in it holds train/ and test/"
    )
    return InputError(f"{archive}: unpacked to {raw_root / UNPACK_DIR}, but {held}. Fix: this is not the authors' archive; {manual_steps(raw_root, url)}")


def manual_steps(raw_root: str | Path, url: str = DEFAULT_URL) -> str:
    """How to place the archive by hand, for the error of a failed download and for the data check."""
    archives = Path(raw_root) / "archives"
    return (
        f"download {url} by hand (browser, or `curl -fL -C - -o {archives / ARCHIVE} '{url}'`), or with the Hugging Face "
        f"client: `huggingface-cli download {HF_REPO} {ARCHIVE} --local-dir {archives}`; then re-run (the archive is "
        f"verified and unpacked to {Path(raw_root) / UNPACK_DIR}). An already unpacked copy works too: place its "
        f"BBBC006/ folder at {Path(raw_root) / 'BBBC006'}"
    )


def fetch(
    raw_root: str | Path,
    *,
    url: str = DEFAULT_URL,
    sha256: str | None = None,
    size: int | None = None,
    retries: int = 4,
    backoff: float = 1.0,
    timeout: float = 60,
    progress: bool = True,
) -> Path:
    """Download (resumably), verify and unpack the authors' archive once; return its ``BBBC006`` folder.

    An unpacked folder already there is checked (:func:`check_layout`) and returned without a
    download. The unpack is atomic, so a folder there is a complete one.
    """
    raw_root = Path(raw_root)
    root = find_root(raw_root)
    if root is None:
        archive = raw_root / "archives" / ARCHIVE
        try:
            fetch_targz(url, archive, sha256=sha256, size=size, retries=retries, backoff=backoff, timeout=timeout, progress=progress)
        except DownloadError as exc:
            raise DownloadError(f"{exc}\nOr place the archive by hand: {manual_steps(raw_root, url)}") from None
        unpack_tar(archive, raw_root / UNPACK_DIR, progress=progress)
        write_json(archive.with_name(ARCHIVE + ".json"), {"file": ARCHIVE, "url": url, "sha256": sha256_file(archive), "size": archive.stat().st_size})
        root = find_root(raw_root)
        if root is None:
            raise _not_the_archive(archive, raw_root, url)
    check_layout(root)
    return root


def fetch_record(raw_root: str | Path, record: str | Path, **fetch_kw) -> dict:
    """:func:`fetch`, then write `record` (JSON): the unpacked folder, its counts and where it came from.

    The workflow's download rule writes this small file as its output rather than the unpacked
    folder: an archive placed by hand, or a folder unpacked by hand, satisfies it just the same.
    """
    raw_root = Path(raw_root)
    root = fetch(raw_root, **fetch_kw)
    sidecar = raw_root / "archives" / (ARCHIVE + ".json")
    out = {
        "root": str(root),
        "counts": check_layout(root),
        "archive": read_json(sidecar) if sidecar.is_file() else {"file": ARCHIVE, "note": "unpacked by hand: checksum unknown"},
    }
    write_json(record, out)
    return out


# --------------------------------------------------------------------------- split and Broad mapping


def carve_validation(pairs: list[Pair], *, n_val_wells: int, seed: int) -> dict[str, str]:
    """{id: 'train'|'val'|'test'}: the archive's split, with the train fields of `n_val_wells` wells moved to val.

    The wells are those with a train field, ordered by :func:`dgno.data.bbbc006.well_rank` (SHA-256 of
    seed and well, as the by-well split orders them), so validation depends on the seed and the well
    names only. Test stays exactly the authors'. Fields whose names carry no well are their own unit.
    """
    unit = {p.id: (p.field.well if p.field else p.id) for p in pairs}
    train_units = sorted({unit[p.id] for p in pairs if p.split == "train"})
    if not 0 <= n_val_wells < len(train_units):
        raise ValueError(f"n_val_wells={n_val_wells!r}: the archive's train split has {len(train_units)} well(s); expected 0 <= n_val_wells < that")
    val = set(sorted(train_units, key=lambda u: bbbc006.well_rank(seed, u))[:n_val_wells])
    return {p.id: "val" if p.split == "train" and unit[p.id] in val else p.split for p in pairs}


@dataclass
class BroadMap:
    """The Broad files of the archive's fields: blur planes the archive lacks and label masks, by id."""

    status: Literal["mapped", "no_names", "not_requested"]
    planes: tuple[int, ...] = ()
    blur: dict[str, dict[int, Path]] = field(default_factory=dict)
    labels: dict[str, Path] = field(default_factory=dict)
    gt_identical: list[int] | None = None  # [identical, compared] archive GT vs Broad z16, when z16 is there


def map_to_broad(pairs: list[Pair], broad_root: str | Path, channel: bbbc006.Channel, *, planes: Iterable[int] = bbbc006.EXTRA_PLANES, labels: bool = True) -> BroadMap:
    """Map the archive's fields to the Broad file names (same plate, well, site, channel) in the raw folders.

    Status ``no_names`` when no archive name names a Broad field (nothing can be mapped: the
    workflow falls back to the by-well split for these levels); a field that cannot be mapped while
    others can, or that a Broad plane or the labels lack, stops, naming it. When the Broad z16 plane
    is present, the archive's GT files are compared with it pixel for pixel (recorded, not enforced).
    """
    broad_root, planes = Path(broad_root), tuple(sorted({int(z) for z in planes}))
    mappable = [p for p in pairs if p.field is not None and p.field.plate == bbbc006.PREFIX.lower()]
    if not mappable:
        return BroadMap("no_names", planes)
    if len(mappable) < len(pairs):
        odd = sorted(p.gt.name for p in pairs if p not in mappable)
        raise InputError(f"{len(odd)} GT file(s) of the authors' archive name no Broad BBBC006 field ({bbbc006.PREFIX}_<well>_s<site>_w<1|2>): {', '.join(odd[:5])}. Fix: unpack {ARCHIVE} again")
    keyed = {(p.field.well, p.field.site): p for p in pairs}
    out = BroadMap("mapped", planes)
    for z in planes:
        found = bbbc006.index_plane(broad_root, z, channel)
        _refuse_missing(keyed.keys() - found.keys(), bbbc006.plane_dir(broad_root, z), f"Broad plane z{z:02d} has no {channel} image", bbbc006.plane_archive(z))
        for key, pair in keyed.items():
            out.blur.setdefault(pair.id, {})[z] = found[key]
    if labels:
        found = bbbc006.index_labels(broad_root)
        _refuse_missing(keyed.keys() - found.keys(), bbbc006.labels_dir(broad_root), "no label mask", bbbc006.LABELS_ARCHIVE)
        out.labels = {pair.id: found[key] for key, pair in keyed.items()}
    if bbbc006.plane_dir(broad_root, bbbc006.GT_PLANE) is not None:
        z16 = bbbc006.index_plane(broad_root, bbbc006.GT_PLANE, channel)
        same = sum(key in z16 and np.array_equal(bbbc006.read_uint16(p.gt), bbbc006.read_uint16(z16[key])) for key, p in keyed.items())
        out.gt_identical = [same, len(keyed)]
    return out


def _refuse_missing(missing: set, folder: Path, what: str, archive: str) -> None:
    if missing:
        raise InputError(
            f"{folder}: {what} for {len(missing)} field(s) of the authors' archive ({bbbc006.describe_fields(missing)}). "
            f"Fix: delete the unpacked folder {folder}/ and rerun: the workflow downloads and unpacks {archive} again "
            "(by hand: `dgno data check bbbc006` prints the commands)"
        )


# ----------------------------------------------------------------------------------------- prepare


BY_WELL_PREFIX = "by_well-"
BY_WELL_SPLIT = "split_by_well.csv"
FALLBACK_NOTE = (
    "the authors' archive names no Broad field, so these levels cannot be taken on the authors' test images: they come from "
    "this project's seeded 4:1 by-well split of the Broad planes (its test wells), which the released models may have been trained on"
)


def prepare_dataset(
    raw_root: str | Path, out_dir: str | Path, *, channel: bbbc006.Channel, seed: int,
    broad_root: str | Path | None = None, extra_planes: Iterable[int] = bbbc006.EXTRA_PLANES, labels: bool = True, n_val_wells: int = 8,
    plane_rule: PlaneRule = "auto", max_out_of_order: float = 0.05, plane_check: PlaneCheck = "warn", broad_listing: dict | None = None,
    config_key: str | None = None, fallback: bool = True, url: str = DEFAULT_URL, progress: bool = True,
) -> Path:
    """Write one channel of the authors' BBBC006 split in the shared dataset layout and return out_dir.

    `raw_root` holds the unpacked archive (:func:`fetch`); `broad_root` the Broad raw planes and labels
    (:mod:`dgno.data.bbbc006` layout) for the unseen levels `extra_planes` and the label masks
    (`labels`); without it the dataset has the archive's planes only. Files are decoded, shape-checked
    and hard-linked or copied unchanged (16-bit originals, min-max normalised at read time); built in
    a temporary folder and renamed into place. The manifest records the pairing (hidden files skipped),
    every blur file's plane and the rule that decided it (`broad_listing`: the Broad z02/z06/z10 names,
    :mod:`dgno.data.bbbc006_listing`), the order check (`plane_check` warn | strict), the validation
    wells and the Broad mapping (or why there is none). `config_key`: fixes name config keys.

    When no archive name names a Broad field (status ``no_names``) and `fallback` is set, the unseen
    levels are written from the seeded by-well split of the Broad planes instead (ids ``by_well-<id>``,
    test ids in ``split_by_well.csv``); the manifest's ``test_sets`` tells the evaluation and the
    report's captions which levels that is (:func:`dgno.data.paired.level_test_ids`), decided here: it
    depends on the data, not on the configuration.
    """
    raw_root, out_dir = Path(raw_root), Path(out_dir)
    root = _unpacked_root(raw_root, url, progress=progress)
    if labels and broad_root is None:
        raise ValueError("labels=True needs broad_root: the label masks come from the Broad labels archive (BBBC006_v1_labels.zip); pass broad_root or labels=False")
    if out_dir.exists() and not (out_dir / "manifest.json").is_file() and any(out_dir.iterdir()):
        raise InputError(f"{out_dir}: exists and is not a dataset (no manifest.json). Fix: choose another output folder or empty it")
    index = index_archive(
        root, channel, plane_rule=plane_rule, max_out_of_order=max_out_of_order, plane_check=plane_check, broad_listing=broad_listing, config_key=config_key, progress=progress
    )
    split = carve_validation(index.pairs, n_val_wells=n_val_wells, seed=seed)
    broad = map_to_broad(index.pairs, broad_root, channel, planes=extra_planes, labels=labels) if broad_root is not None else BroadMap("not_requested")
    by_well = broad.status == "no_names" and fallback and bool(broad.planes)
    if broad.status == "no_names":
        log.warning("%s: no file name of the authors' archive names a Broad field; %s", root, "unseen levels from the by-well split" if by_well else "unseen levels and labels left out")
    with atomic_dir(out_dir) as tmp:
        shape = _write_images(tmp, index, broad, progress=progress, desc=f"BBBC006 authors {channel} → {out_dir.name}")
        _write_split(tmp / "split.csv", [(p.id, split[p.id]) for p in index.pairs])
        test_sets = _write_by_well(tmp, Path(broad_root), channel, broad.planes, labels=labels, seed=seed, n_val_wells=n_val_wells, progress=progress) if by_well else {}
        manifest = _manifest(index, split, broad, seed=seed, n_val_wells=n_val_wells, shape=shape, sources=_sources(raw_root, broad_root, broad, url, by_well))
        manifest["planes"] = planes_record(index, broad_listing)
        if test_sets:
            manifest["test_levels"] = sorted({*manifest["test_levels"], *test_sets})
            manifest["test_sets"] = test_sets
        write_json(tmp / "manifest.json", manifest)
    return out_dir


def _unpacked_root(raw_root: Path, url: str, *, progress: bool = True) -> Path:
    """The unpacked folder; unpacked again here from the downloaded archive when it was deleted (the fixes say to delete it)."""
    root = find_root(raw_root)
    archive = raw_root / "archives" / ARCHIVE
    if root is None and archive.is_file():
        log.warning("%s: not unpacked under %s; unpacking it again", archive, raw_root / UNPACK_DIR)
        unpack_tar(archive, raw_root / UNPACK_DIR, progress=progress)
        root = find_root(raw_root)
        if root is None:
            raise _not_the_archive(archive, raw_root, url)
    if root is None:
        raise InputError(
            f"{raw_root}: the authors' BBBC006 archive is not unpacked here (looked for {raw_root / UNPACK_DIR / 'BBBC006'} and "
            f"{raw_root / 'BBBC006'}). Fix: `python -c \"from dgno.data.bbbc006_authors import fetch; fetch('{raw_root}')\"`, or {manual_steps(raw_root, url)}"
        )
    return root


def _write_split(path: Path, rows: Iterable[tuple[str, str]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["id", "split"])
        writer.writerows(rows)


def _sources(raw_root: Path, broad_root: str | Path | None, broad: BroadMap, url: str, by_well: bool) -> dict:
    """The manifest's record of every archive the dataset's files come from."""
    sources = {ARCHIVE: bbbc006.source_record(raw_root, ARCHIVE, url)}
    if broad.status == "mapped" or by_well:
        planes = [*broad.planes, *((bbbc006.GT_PLANE,) if by_well else ())]
        sources |= {bbbc006.plane_archive(z): bbbc006.source_record(Path(broad_root), bbbc006.plane_archive(z), bbbc006.plane_url(z)) for z in planes}
        if broad.labels or (by_well and bbbc006.labels_dir(broad_root) is not None):
            sources[bbbc006.LABELS_ARCHIVE] = bbbc006.source_record(Path(broad_root), bbbc006.LABELS_ARCHIVE, bbbc006.labels_url())
    return sources


def _write_by_well(tmp: Path, broad_root: Path, channel: bbbc006.Channel, planes: Iterable[int], *, labels: bool, seed: int, n_val_wells: int, progress: bool) -> dict:
    """The unseen levels from the by-well split's test fields of the Broad planes (GT z16); returns the manifest's test_sets."""
    pairs = bbbc006.pair_planes(broad_root, blur_planes=planes, channel=channel)
    wells = bbbc006.split_by_well({w for w, *_ in pairs}, seed=seed, n_val=n_val_wells)
    test = [p for p in pairs if wells[p[0]] == "test"]
    masks = bbbc006.label_files(broad_root, test) if labels else {}
    bbbc006.write_fields(tmp, test, masks, planes, prefix=BY_WELL_PREFIX, progress=progress, desc=f"BBBC006 {channel} by-well fallback")
    _write_split(tmp / BY_WELL_SPLIT, [(BY_WELL_PREFIX + bbbc006.image_id(w, s), "test") for w, s, *_ in test])
    record = {
        "split": "by_well",
        "file": BY_WELL_SPLIT,
        "n_test": len(test),
        "test_wells": sorted({w for w, *_ in test}),
        "method": "wells sorted by sha256('bbbc006-split:<seed>:<well>'); the first round(n * 0.2) are test (dgno.data.bbbc006.split_by_well)",
        "note": FALLBACK_NOTE,
    }
    return {bbbc006.level_name(z): record for z in sorted(planes)}


def _write_images(tmp: Path, index: ArchiveIndex, broad: BroadMap, *, progress: bool, desc: str) -> tuple[int, ...] | None:
    """gt/, blur/zNN/ (archive planes, then mapped Broad planes) and labels/ for every field; returns the image shape."""
    levels = [*PLANES, *(broad.planes if broad.blur else ())]
    for sub in ["gt", *(f"blur/{bbbc006.level_name(z)}" for z in levels), *(["labels"] if broad.labels else [])]:
        (tmp / sub).mkdir(parents=True)
    shape = None
    for pair in progress_bar(index.pairs, desc=desc, unit="pair", enabled=progress):
        gt = bbbc006.read_uint16(pair.gt)
        shape = shape or gt.shape
        if gt.shape != shape:
            raise InputError(f"{pair.gt}: image is {gt.shape}, the others are {shape}. Fix: unpack {ARCHIVE} again")
        bbbc006.link_or_copy(pair.gt, tmp / "gt" / f"{pair.id}.tif")
        for z, path in (pair.blur | broad.blur.get(pair.id, {})).items():
            blur = bbbc006.read_uint16(path)
            if blur.shape != gt.shape:
                raise InputError(f"{path}: shape {blur.shape} differs from its ground truth {pair.gt} {gt.shape}. Fix: unpack its archive again")
            bbbc006.link_or_copy(path, tmp / "blur" / bbbc006.level_name(z) / f"{pair.id}.tif")
        if broad.labels:
            mask = bbbc006.label_mask(broad.labels[pair.id])
            if mask.shape != gt.shape:
                raise InputError(f"{broad.labels[pair.id]}: mask shape {mask.shape} differs from the image's {gt.shape}. Fix: unpack {bbbc006.LABELS_ARCHIVE} again")
            tifffile.imwrite(tmp / "labels" / f"{pair.id}.tif", mask, photometric="minisblack", metadata=None)
    return shape


_BROAD_TEXT = {
    "mapped": "unseen levels and label masks from the Broad files of the same plate, well, site and channel",
    "no_names": "no file name of the archive names a Broad field: no label masks for the archive's fields; the unseen levels, if any, come from the by-well split of the Broad planes (see test_sets)",
    "not_requested": "no Broad folder given: only the archive's planes; no label masks",
}


def _manifest(index: ArchiveIndex, split: dict[str, str], broad: BroadMap, *, seed, n_val_wells, shape, sources) -> dict:
    """Everything needed to interpret the prepared files, to re-make them and to judge the checks."""
    channel, pairs = index.channel, index.pairs
    levels = {bbbc006.level_name(z): {"plane": z, "role": "train", "source": ARCHIVE} for z in PLANES}
    if broad.blur:
        levels |= {bbbc006.level_name(z): {"plane": z, "role": "generalisation", "source": bbbc006.plane_archive(z)} for z in broad.planes}
    wells = {s: sorted({p.field.well for p in pairs if p.field and split[p.id] == s}) for s in ("train", "val", "test")}
    counts = {s: sum(1 for p in pairs if split[p.id] == s) for s in ("train", "val", "test")}
    return {
        "source": f"BBBC006 as prepared by the DGNO authors ({ARCHIVE}, Hugging Face {HF_REPO}): their train/test split",
        "generator": "dgno.data.bbbc006_authors.prepare_dataset",
        "channel": channel,
        "stain": bbbc006.CHANNEL_STAIN[channel],
        "gt_plane": bbbc006.GT_PLANE,
        "gt_level": bbbc006.level_name(bbbc006.GT_PLANE),
        "levels": levels,
        "train_levels": [bbbc006.level_name(z) for z in PLANES],
        "test_levels": sorted(levels),
        "size": list(shape) if shape else None,
        "dtype": "uint16",
        "normalise": "minmax",
        "intensity_encoding": "original 16-bit values, files unchanged; read with per-image min-max to [0, 1] (the authors' protocol)",
        "id_pattern": "<well>_s<site>" if index.names_carry_fields else "<GT file stem> (the names carry no field)",
        "seed": seed,
        "split": {
            "unit": "the authors' archive (train/ and test/); validation carved from their train fields by well",
            "method": f"wells with a train field sorted by sha256('bbbc006-split:<seed>:<well>'); the train fields of the first {n_val_wells} become val",
            "n_val_wells": n_val_wells,
            "wells": wells,
            "wells_in_train_and_test": sorted(set(wells["train"] + wells["val"]) & set(wells["test"])),
        },
        "pairing": {
            "rule": "the authors' test script: channel = first two characters of the last '_' part of the name; sorted blur files "
            f"paired with the sorted GT files each repeated {PER_GT} times",
            "verified": "paired by field: every blur file names its GT's field (plate, well, site, channel), exactly 3 per GT" if index.names_carry_fields
            else "not verifiable: the file names carry no field; the pairs are the authors' unverified",
            "fields": len(pairs),
            "files": {"GT": len(pairs), "blur": sum(len(p.triple) for p in pairs)},
            "ignored_files": index.ignored,
            "hidden_files_skipped": index.hidden,
            "authors_order_agrees": index.authors_order_agrees,
        },
        "warnings": index.warnings,
        "broad": {"status": broad.status, "description": _BROAD_TEXT[broad.status], "planes": list(broad.planes) if broad.blur else [], "gt_identical_to_broad_z16": broad.gt_identical},
        "n_train": counts["train"],
        "n_val": counts["val"],
        "n_test": counts["test"],
        "labels": "labels/<id>.tif: uint16 nucleus instance masks from BBBC006_v1_labels (in-focus annotation)" if broad.labels else None,
        "sources": sources,
        "versions": {"dgno": dgno.__version__, "numpy": np.__version__, "tifffile": tifffile.__version__},
    }


# ------------------------------------------------------------------------------------------- check


def check_authors(raw_root: str | Path, *, url: str = DEFAULT_URL) -> Report:
    """What of the authors' archive is under `raw_root`: unpacked folder and counts, or the download's state."""
    raw_root = Path(raw_root)
    report = Report(name="bbbc006-authors", root=raw_root)  # the name of `dgno data check bbbc006-authors`
    root, archive = find_root(raw_root), raw_root / "archives" / ARCHIVE
    if root is None:
        state = ""
        if archive.is_file():
            state = f"; {archive} is downloaded but not unpacked"
        elif part_path(archive).is_file():
            state = f"; interrupted download {part_path(archive)} ({part_path(archive).stat().st_size} bytes) resumes when re-run"
        report.missing.append(f"the authors' BBBC006: no unpacked folder {raw_root / UNPACK_DIR / 'BBBC006'}{state}")
    else:
        try:
            counts = check_layout(root)
        except InputError as exc:
            report.problems.append(str(exc))
        else:
            for split in SPLITS:
                c = counts[split]
                hidden = c["GT"]["hidden"] + c["blur"]["hidden"]
                report.present.append(
                    f"{root / split}: GT {c['GT']['w1']} w1 + {c['GT']['w2']} w2, blur {c['blur']['w1']} w1 + {c['blur']['w2']} w2 (3 per GT)"
                    + (f"; {hidden} hidden file(s) skipped (macOS ._* forks, dot-files: never images)" if hidden else "")
                )
    report.ok = not report.missing and not report.problems
    report.steps = [
        f"Download, verify and unpack (resumable): `python -c \"from dgno.data.bbbc006_authors import fetch; fetch('{raw_root}')\"`",
        f"Or by hand: {manual_steps(raw_root, url)}",
    ]
    return report
