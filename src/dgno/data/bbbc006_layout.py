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
RECORD = "authors.json"  # raw_root/authors.json: the download rule's output (the workflow reruns that rule only without it)
SPLITS = ("train", "test")
FOLDERS = ("GT", "blur")
PLANES = bbbc006.TRAIN_PLANES  # (2, 6, 10): most to least blurred, the order of a sorted triple under rule "position"
PER_GT = len(PLANES)
TIFF_SUFFIXES = (".tif", ".tiff")

# <well>_s<site>_w<1|2><rest>, after the start of the name or a "_": the Broad name's core. What comes
# before it holds the plate (the Broad plate name wherever it stands, else the last token that is not a
# plane) and may hold a plane token (``z02_<plate>_...``, ``<plate>_z02_...``).
FIELD_RE = re.compile(r"(?:^|_)(?P<well>[a-p]\d{2})_s(?P<site>\d+)_(?P<channel>w[12])(?P<rest>.*)$", re.IGNORECASE)
BROAD_PLATE_RE = re.compile(re.escape(bbbc006.PREFIX), re.IGNORECASE)
PLANE_AFTER_RE = re.compile(r"z_?(\d{1,2})(?!\d)", re.IGNORECASE)  # in <rest>: a UUID's hex digits hold no 'z'
PLANE_TOKEN_RE = re.compile(r"(?:z|plane)?[_-]?(\d{1,2})", re.IGNORECASE)  # a prefix token that names a plane
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
    authors_rule_drops: int = 0  # files of this channel whose channel the authors' rule misreads (their script drops them)


# ------------------------------------------------------------------------------------------- names


def authors_channel(name: str | Path) -> str:
    """The channel the authors' scripts read from a file name: first two characters of its last ``_`` part."""
    return Path(name).name.split("_")[-1][:2]


def file_channel(name: str | Path) -> str:
    """The channel of a file: the one its field names (``..._w1<UUID>_z02.tif`` is w1), else the authors' rule.

    The authors' rule reads ``z0`` from a name that carries a plane after the channel; their script
    would drop such a file, this project pairs it (and records that the rule disagrees).
    """
    found = parse_field(name)
    return found.channel if found is not None else authors_channel(name)


def _split_name(stem: str) -> tuple[re.Match, str, str] | None:
    """(core match, plate, what else stands before the core) of a file stem, or None."""
    m = FIELD_RE.search(stem)
    if m is None:
        return None
    prefix = stem[: m.start()]
    broad = BROAD_PLATE_RE.search(prefix)
    if broad is not None:
        return m, broad.group(0).lower(), (prefix[: broad.start()] + "_" + prefix[broad.end() :]).strip("_- ")
    tokens = [t for t in prefix.split("_") if t]
    plates = [t for t in tokens if PLANE_TOKEN_RE.fullmatch(t) is None]
    plate = plates[-1] if plates else ""
    return m, plate.lower(), "_".join(t for t in tokens if t != plate)


def parse_field(name: str | Path) -> Field | None:
    """The field of view a file name names, or None for a name that does not name one."""
    found = _split_name(Path(name).stem)
    if found is None:
        return None
    m, plate, _ = found
    return Field(plate, m.group("well").lower(), int(m.group("site")), m.group("channel").lower())


def plane_from_name(name: str | Path) -> int | None:
    """The z-plane a blur file name carries (``..._w1<UUID>-z02.tif``, ``z02_mcf-...``, ``mcf-..._z02_a01...``, ``02_mcf-...``), else None."""
    found = _split_name(Path(name).stem)
    if found is None:
        return None
    m, _, before = found
    after = PLANE_AFTER_RE.search(m.group("rest"))
    if after is not None:
        return int(after.group(1))
    token = PLANE_TOKEN_RE.fullmatch(before.strip("_- "))
    return int(token.group(1)) if token is not None else None


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
    """(TIFF files under `folder`, sorted as the authors' ``sorted(rglob('*.tif'))`` sorts them; every hidden file skipped there).

    The skipped list holds all hidden files, not only hidden TIFFs (``.DS_Store`` and ``__MACOSX/``
    contents too): the manifest counts what was there and not read.
    """
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
    archive, unpacked = archive_path(root), unpack_folder(root)
    record = unpacked.parent / RECORD
    return (
        f"check the archive first: `gzip -t {archive} && tar -tzf {archive} > /dev/null` (or `python -c \"from dgno.data.targz "
        f"import verify_targz; verify_targz('{archive}')\"`). If that fails, the download is damaged: delete {archive}, {unpacked}/ and {record}, "
        f"then rerun the workflow (rule bbbc006_authors_archive downloads it again), or `python -c \"from dgno.data.bbbc006_authors import fetch; "
        f"fetch('{unpacked.parent}')\"`. If it passes, the unpack is bad: delete the unpacked folder {unpacked}/ and rerun (it is unpacked again from "
        f"the archive). If both are clean, the archive itself holds the problem: report it to the authors"
    )


# ------------------------------------------------------------------------------------------ layout


def _count(files: list[Path]) -> dict[str, int]:
    chans = [file_channel(p) for p in files]
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
            others += [p for p in files if file_channel(p) not in bbbc006.CHANNELS]
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
    orphans = {f: ps for f, ps in by_field.items() if f not in seen}
    if orphans:
        raise InputError(_orphans_message(root, folder, channel, orphans))
    wrong = {f: by_field.get(f, []) for f in seen if len(by_field.get(f, [])) != PER_GT}
    if wrong:
        raise InputError(_miscount_message(root, folder, channel, wrong))
    return {f: by_field[f] for f in seen}


def _orphans_message(root: Path, folder: Path, channel: str, orphans: dict[Field, list[Path]]) -> str:
    """Blur files whose field has no GT in this split: say whether the other split has that GT (a file in the wrong split)."""
    files = [p for ps in orphans.values() for p in ps]
    other = next(s for s in SPLITS if s != folder.name) if folder.name in SPLITS else None
    elsewhere = set()
    if other is not None:
        elsewhere = {f.id for f in map(parse_field, tiffs(root / other / "GT")[0]) if f is not None and f in orphans}
    where = f" The GT of {show_ids(elsewhere)} is in {root / other / 'GT'}: those blur files are in the wrong split." if elsewhere else ""
    return (
        f"{folder / 'GT'}: no {channel} GT file for field(s) {show_ids(f.id for f in orphans)}, whose {len(files)} blur file(s) are there "
        f"({show(files)}).{where} Fix: if these blur files are stray (a copy, or a field the archive does not have), remove them; "
        f"if a GT file is missing, {refetch_fix(root)}"
    )


def _miscount_message(root: Path, folder: Path, channel: str, wrong: dict[Field, list[Path]]) -> str:
    """Fields without exactly three blur files: the missing ones by count, the extra ones with their file names."""
    short = {f.id: len(ps) for f, ps in wrong.items() if len(ps) < PER_GT}
    extra = {f.id: ps for f, ps in wrong.items() if len(ps) > PER_GT}
    parts, fixes = [], []
    if short:
        parts.append("too few in " + ", ".join(f"{i} ({n} of {PER_GT})" for i, n in sorted(short.items())[:5]) + (f" and {len(short) - 5} more" if len(short) > 5 else ""))
        fixes.append(f"a blur file is missing: {refetch_fix(root)}")
    if extra:
        first = sorted(extra)[0]
        parts.append("too many in " + ", ".join(f"{i} ({len(ps)})" for i, ps in sorted(extra.items())[:5]) + f"; {first} holds {show(extra[first], limit=6)}")
        fixes.insert(0, "remove the extra blur file(s) (a copy, or a file that belongs to another field)")
    return f"{folder / 'blur'}: {len(wrong)} {channel} field(s) without exactly {PER_GT} blur files: {'; '.join(parts)}. Fix: {'; '.join(fixes)}"


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
    gts = [p for p in gt_all if file_channel(p) == channel]
    blurs = [p for p in blur_all if file_channel(p) == channel]
    gt_fields, blur_fields = _fields(root, gts, "GT"), _fields(root, blurs, "blur")
    hidden = len(gt_hidden) + len(blur_hidden)
    if all(f is not None for f in gt_fields + blur_fields):
        grouped = _by_field(root, folder, channel, gts, gt_fields, blurs, blur_fields)
        pairs = [Pair(split, f.id, f, gt, tuple(grouped[f])) for gt, f in zip(gts, gt_fields)]
        authors = [gt for gt in gts for _ in range(PER_GT)]
        agrees = all(parse_field(b) == parse_field(g) for b, g in zip(blurs, authors))
        return SplitPairs(pairs, agrees, hidden, sum(authors_channel(p) != channel for p in gts + blurs))
    if len(blurs) != PER_GT * len(gts):
        raise InputError(f"{folder}: {len(blurs)} {channel} blur files for {len(gts)} GT files, expected {PER_GT} per GT. Fix: {refetch_fix(root)}")
    pairs = [Pair(split, safe_id(gt.stem), None, gt, tuple(blurs[PER_GT * i : PER_GT * (i + 1)])) for i, gt in enumerate(gts)]
    return SplitPairs(pairs, True, hidden)
