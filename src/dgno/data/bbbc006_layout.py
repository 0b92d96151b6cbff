"""What the DGNO authors' BBBC006 archive holds and how its files pair: names, counts, fields.

The archive (:mod:`dgno.data.bbbc006_authors`) unpacks to ``BBBC006/{train,test}/{GT,blur}/*.tif``:
GT holds the in-focus plane z16, blur the planes z02, z06 and z10 of each field. The authors' test
script keeps one channel by the first two characters of the last ``_``-separated part of a file name
(``w1``/``w2``), sorts the blur files and pairs them with the sorted GT files, each repeated three
times. That rule assumes what nobody checks: that the sorted lists line up field by field and that
every field has exactly three blur files. :func:`pair_split` pairs by the field each name names
(plate, well, site, channel), checks both assumptions, records whether the authors' sorted pairing
agrees, and stops naming the field when a file is missing or extra.

Files that are never images (macOS AppleDouble ``._*`` forks, ``.DS_Store``, ``__MACOSX/``, any
dot-file: :func:`dgno.io.is_hidden`) are skipped and counted, never paired: an archive packed on a
Mac holds them beside every image, and unpacking it again recreates them. ``.tif`` and ``.tiff`` in
any letter case are images; the folders below ``GT/`` and ``blur/`` may be nested.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dgno.data import bbbc006
from dgno.io import InputError, visible_files

ARCHIVE = "BBBC006.tar.gz"
UNPACK_DIR = "authors"  # raw_root/authors/BBBC006: where the archive is unpacked
SPLITS = ("train", "test")
FOLDERS = ("GT", "blur")
PLANES = bbbc006.TRAIN_PLANES  # (2, 6, 10): most to least blurred, the order of a sorted triple under rule "position"
PER_GT = len(PLANES)
TIFF_SUFFIXES = (".tif", ".tiff")

# <plate>_<well>_s<site>_w<1|2><rest>: the Broad name, with anything before the plate or after the channel.
FIELD_RE = re.compile(r"(?P<plate>[A-Za-z0-9-]+)_(?P<well>[a-p]\d{2})_s(?P<site>\d+)_(?P<channel>w[12])(?P<rest>.*)$", re.IGNORECASE)
PLANE_AFTER_RE = re.compile(r"z_?(\d{1,2})(?!\d)", re.IGNORECASE)  # in <rest>: a UUID's hex digits hold no 'z'
PLANE_BEFORE_RE = re.compile(r"(?:z|plane)?[_-]?(\d{1,2})", re.IGNORECASE)  # the whole prefix, separators stripped
PLANE_FOLDER_RE = re.compile(r"(?:z|plane)[_-]?(\d{1,2})", re.IGNORECASE)  # a folder below blur/ named for its plane


@dataclass(frozen=True)
class Field:
    """A BBBC006 field of view of one channel, as a file name names it."""

    plate: str
    well: str
    site: int
    channel: str

    @property
    def id(self) -> str:
        return bbbc006.image_id(self.well, self.site)


@dataclass
class Pair:
    """One GT file of the archive and its three blur files: ``triple`` in sorted order, ``blur`` by plane."""

    split: str
    id: str
    field: Field | None
    gt: Path
    triple: tuple[Path, ...]
    blur: dict[int, Path] = field(default_factory=dict)


@dataclass
class SplitPairs:
    """What :func:`pair_split` found in one split and channel."""

    pairs: list[Pair]
    authors_order_agrees: bool  # the authors' sorted pairing puts every blur file with its own field's GT
    hidden: int  # files skipped as never images (dgno.io.is_hidden) in this split's GT/ and blur/


# ------------------------------------------------------------------------------------------- names


def authors_channel(name: str | Path) -> str:
    """The channel the authors' scripts read from a file name: first two characters of its last ``_`` part."""
    return Path(name).name.split("_")[-1][:2]


def parse_field(name: str | Path) -> Field | None:
    """The field of view a file name names, or None for a name that does not name one."""
    m = FIELD_RE.search(Path(name).stem)
    if m is None:
        return None
    return Field(m.group("plate").lower(), m.group("well").lower(), int(m.group("site")), m.group("channel").lower())


def plane_from_name(name: str | Path) -> int | None:
    """The z-plane a blur file name carries (``..._w1<UUID>-z02.tif``, ``z02_mcf-...``, ``02_mcf-...``), else None."""
    stem = Path(name).stem
    m = FIELD_RE.search(stem)
    if m is None:
        return None
    after = PLANE_AFTER_RE.search(m.group("rest"))
    if after is not None:
        return int(after.group(1))
    before = PLANE_BEFORE_RE.fullmatch(stem[: m.start()].strip("_- "))
    return int(before.group(1)) if before is not None else None


def plane_from_path(path: Path, blur_dir: Path) -> int | None:
    """The plane a blur file's name carries, else the plane a folder between ``blur/`` and it is named for (``z02/``)."""
    plane = plane_from_name(path)
    if plane is not None:
        return plane
    for part in reversed(path.relative_to(blur_dir).parts[:-1]):
        m = PLANE_FOLDER_RE.fullmatch(part)
        if m is not None:
            return int(m.group(1))
    return None


def safe_id(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem)


def show(paths: Iterable[Path | str], limit: int = 4) -> str:
    names = [Path(p).name for p in paths]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def show_ids(ids: Iterable[str], limit: int = 5) -> str:
    ids = sorted(set(ids))
    return ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def tiffs(folder: Path) -> tuple[list[Path], list[Path]]:
    """(TIFF files under `folder`, sorted as the authors' ``sorted(rglob('*.tif'))`` sorts them; hidden files skipped)."""
    return visible_files(folder, TIFF_SUFFIXES, recursive=True) if folder.is_dir() else ([], [])


# ------------------------------------------------------------------------------------------ fixes


def unpack_folder(root: Path) -> Path:
    """The folder to delete for a clean unpack: ``<raw>/authors`` when the archive was unpacked there, else `root`."""
    return root.parent if root.parent.name == UNPACK_DIR else root


def archive_path(root: Path) -> Path:
    """Where the downloaded archive of the unpacked folder `root` lives (``<raw>/archives/BBBC006.tar.gz``)."""
    return unpack_folder(root).parent / "archives" / ARCHIVE


def refetch_fix(root: Path) -> str:
    """How to tell a damaged download from a bad unpack, and what to do in each case."""
    archive = archive_path(root)
    return (
        f"check the archive first: `gzip -t {archive} && tar -tzf {archive} > /dev/null` (or `python -c \"from dgno.data.download "
        f"import verify_targz; verify_targz('{archive}')\"`). If that fails, the download is damaged: delete {archive} and fetch it again "
        f"(rerun the workflow, rule bbbc006_authors_archive, or `python -c \"from dgno.data.bbbc006_authors import fetch; fetch('{unpack_folder(root).parent}')\"`). "
        f"If it passes, the unpack is bad: delete the unpacked folder {unpack_folder(root)}/ and rerun (it is unpacked again from the archive). "
        f"If both are clean, the archive itself lacks the file: report it to the authors"
    )


# ------------------------------------------------------------------------------------------ layout


def _count(files: list[Path]) -> dict[str, int]:
    chans = [authors_channel(p) for p in files]
    return {ch: chans.count(ch) for ch in bbbc006.CHANNELS} | {"other": sum(c not in bbbc006.CHANNELS for c in chans)}


def check_layout(root: str | Path) -> dict:
    """Check ``root/{train,test}/{GT,blur}`` and the counts: per split and channel, three blur files per GT.

    Returns ``{split: {folder: {"w1": n, "w2": n, "other": n, "hidden": n}}}`` (channels by the authors'
    rule; ``hidden``: files skipped as never images). A count that is off is refused naming the fields.
    """
    root = Path(root)
    counts: dict = {}
    for split in SPLITS:
        counts[split], others = {}, []
        for sub in FOLDERS:
            files, hidden = tiffs(root / split / sub)
            if not files:
                raise InputError(f"{root / split / sub}: missing or holds no .tif files. Fix: {refetch_fix(root)}")
            counts[split][sub] = _count(files) | {"hidden": len(hidden)}
            others += [p for p in files if authors_channel(p) not in bbbc006.CHANNELS]
        for ch in bbbc006.CHANNELS:
            n_gt, n_blur = counts[split]["GT"][ch], counts[split]["blur"][ch]
            if n_blur != PER_GT * n_gt:
                pair_split(root, split, ch)  # names the fields, where the names carry them
                stray = f"; {len(others)} file(s) keep no channel by the authors' rule ({show(others)})" if others else ""
                raise InputError(f"{root / split}: {n_blur} {ch} blur files for {n_gt} {ch} GT files, expected {PER_GT} per GT{stray}. Fix: {refetch_fix(root)}")
    return counts


# ----------------------------------------------------------------------------------------- pairing


def _fields(root: Path, files: list[Path], what: str) -> list[Field | None]:
    fields = [parse_field(p) for p in files]
    unnamed = [p for p, f in zip(files, fields) if f is None]
    if unnamed and len(unnamed) < len(files):
        raise InputError(
            f"{unnamed[0].parent}: {len(unnamed)} {what} file(s) do not name a BBBC006 field (<plate>_<well>_s<site>_w<1|2>...) "
            f"while the others do: {show(unnamed)}. Fix: remove the stray files, or {refetch_fix(root)}"
        )
    return fields


def _by_field(root: Path, folder: Path, channel: str, gts: list[Path], gt_fields: list[Field], blurs: list[Path], blur_fields: list[Field]) -> dict[Field, list[Path]]:
    """{GT field: its blur files}; every GT field has exactly three and every blur file a GT, else stop naming the fields."""
    by_field: dict[Field, list[Path]] = defaultdict(list)
    for p, f in zip(blurs, blur_fields):
        by_field[f].append(p)
    seen: dict[Field, Path] = {}
    for p, f in zip(gts, gt_fields):
        if f in seen:
            raise InputError(f"{folder}: field {f.id} has two {channel} GT files, {seen[f].name} and {p.name}. Fix: remove the copy, or {refetch_fix(root)}")
        seen[f] = p
    orphans = {f.id: ps for f, ps in by_field.items() if f not in seen}
    if orphans:
        files = [p for ps in orphans.values() for p in ps]
        raise InputError(
            f"{folder / 'GT'}: no {channel} GT file for field(s) {show_ids(orphans)}, whose {len(files)} blur file(s) are there "
            f"({show(files)}). Fix: the GT file is missing; {refetch_fix(root)}"
        )
    wrong = {f.id: len(by_field.get(f, [])) for f in seen if len(by_field.get(f, [])) != PER_GT}
    if wrong:
        counted = ", ".join(f"{i} ({n})" for i, n in sorted(wrong.items())[:5]) + (f" and {len(wrong) - 5} more" if len(wrong) > 5 else "")
        missing = any(n < PER_GT for n in wrong.values())
        raise InputError(
            f"{folder / 'blur'}: {len(wrong)} {channel} field(s) without exactly {PER_GT} blur files: {counted} (field id (blur files)). "
            f"Fix: {'a blur file is missing' if missing else 'an extra blur file'}; {refetch_fix(root)}"
        )
    return {f: by_field[f] for f in seen}


def pair_split(root: str | Path, split: str, channel: str) -> SplitPairs:
    """Pair one split and channel by field, then compare with the authors' sorted pairing.

    Names that carry fields are paired by field (plate, well, site, channel): each GT with the three
    blur files of its field, sorted. The authors' script pairs the sorted blur files with the sorted GT
    files, each repeated three times; whether that puts every blur file with its own GT is recorded.
    Names that carry no field at all cannot be verified: the pairs are then the authors' as they are
    (``Pair.field`` None, id = GT file stem).
    """
    root = Path(root)
    folder = root / split
    (gt_all, gt_hidden), (blur_all, blur_hidden) = tiffs(folder / "GT"), tiffs(folder / "blur")
    gts = [p for p in gt_all if authors_channel(p) == channel]
    blurs = [p for p in blur_all if authors_channel(p) == channel]
    gt_fields, blur_fields = _fields(root, gts, "GT"), _fields(root, blurs, "blur")
    hidden = len(gt_hidden) + len(blur_hidden)
    if all(f is not None for f in gt_fields + blur_fields):
        grouped = _by_field(root, folder, channel, gts, gt_fields, blurs, blur_fields)
        pairs = [Pair(split, f.id, f, gt, tuple(grouped[f])) for gt, f in zip(gts, gt_fields)]
        authors = [gt for gt in gts for _ in range(PER_GT)]
        agrees = all(parse_field(b) == parse_field(g) for b, g in zip(blurs, authors))
        return SplitPairs(pairs, agrees, hidden)
    if len(blurs) != PER_GT * len(gts):
        raise InputError(f"{folder}: {len(blurs)} {channel} blur files for {len(gts)} GT files, expected {PER_GT} per GT. Fix: {refetch_fix(root)}")
    pairs = [Pair(split, safe_id(gt.stem), None, gt, tuple(blurs[PER_GT * i : PER_GT * (i + 1)])) for i, gt in enumerate(gts)]
    return SplitPairs(pairs, True, hidden)
