"""Pair and verify the files of the DGNO authors' BBBC006 archive: names, pairs, planes, blur order.

The archive (:mod:`dgno.data.bbbc006_authors`) unpacks to ``BBBC006/{train,test}/{GT,blur}/*.tif``:
GT holds the in-focus plane z16, blur the planes z02, z06 and z10 of each field. The authors' test
script keeps one channel by the first two characters of the last ``_``-separated part of a file name
(``w1``/``w2``), sorts the blur files and pairs them with the sorted GT files, each repeated three
times. That rule assumes what nobody checks: that the sorted lists line up field by field and that
every field has exactly three blur files. :func:`pair_split` pairs the same way and then verifies
both from the names (plate, well, site, channel), and stops naming the files when they disagree.

Which blur file is which plane: from the name where it carries one (``-z02``, ``_z_02``, a ``02_``
prefix), else from its position in the sorted triple (rule "position"). Either way it is checked
against the images (:func:`check_blur_order`): defocus blur must decrease from z02 to z10 (14, 10
and 6 planes from focus) by :func:`sharpness`. A share of fields out of order above
``max_out_of_order`` stops. Rule "sharpness" assigns the planes by that measure instead (the check is
then no longer independent, which the record says). Real Broad file names carry a different
UUID-like suffix per plane, so if the archive kept them, their sorted order is not the planes'.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from scipy import ndimage
from tqdm import tqdm

from dgno.data import bbbc006
from dgno.io import InputError

ARCHIVE = "BBBC006.tar.gz"
SPLITS = ("train", "test")
FOLDERS = ("GT", "blur")
PLANES = bbbc006.TRAIN_PLANES  # (2, 6, 10): most to least blurred, the order of a sorted triple under rule "position"
PER_GT = len(PLANES)
PlaneRule = Literal["auto", "name", "position", "sharpness"]
PLANE_RULES = ("auto", "name", "position", "sharpness")
SHARPNESS_SIGMA = 4.0  # px, Gaussian smoothing of the sharpness measure
SHARPNESS_MEASURE = f"variance of the Laplacian of Gaussian (sigma {SHARPNESS_SIGMA:g} px, scipy.ndimage.gaussian_laplace) of the raw intensities"

# <plate>_<well>_s<site>_w<1|2><rest>: the Broad name, with anything before the plate or after the channel.
FIELD_RE = re.compile(r"(?P<plate>[A-Za-z0-9-]+)_(?P<well>[a-p]\d{2})_s(?P<site>\d+)_(?P<channel>w[12])(?P<rest>.*)$", re.IGNORECASE)
PLANE_AFTER_RE = re.compile(r"z_?(\d{1,2})(?!\d)", re.IGNORECASE)  # in <rest>: a UUID's hex digits hold no 'z'
PLANE_BEFORE_RE = re.compile(r"(?:z|plane)?[_-]?(\d{1,2})", re.IGNORECASE)  # the whole prefix, separators stripped


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
class ArchiveIndex:
    """What :func:`index_archive` found and checked for one channel."""

    channel: str
    pairs: list[Pair]
    plane_rule: str  # the rule used: name | position | sharpness
    plane_check: dict
    names_carry_fields: bool
    ignored: int  # .tif files the authors' channel rule keeps for neither channel


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


def _safe_id(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem)


def _show(paths: Iterable[Path], limit: int = 4) -> str:
    paths = [p.name for p in paths]
    return ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _tifs(folder: Path) -> list[Path]:
    """The .tif files under `folder`, sorted as the authors' script sorts them (``sorted(rglob('*.tif'))``)."""
    return sorted(p for p in folder.rglob("*.tif") if p.is_file())


def check_layout(root: str | Path) -> dict:
    """Check ``root/{train,test}/{GT,blur}`` and the counts: per split and channel, three blur files per GT.

    Returns ``{split: {folder: {"w1": n, "w2": n, "other": n}}}`` (channels by the authors' rule).
    """
    root = Path(root)
    counts: dict = {}
    for split in SPLITS:
        counts[split], others = {}, []
        for sub in FOLDERS:
            folder = root / split / sub
            files = _tifs(folder) if folder.is_dir() else []
            if not files:
                raise InputError(f"{folder}: missing or holds no .tif files. Fix: delete {root} and unpack {ARCHIVE} again, whole (dgno.data.bbbc006_authors.fetch)")
            chans = [authors_channel(p) for p in files]
            counts[split][sub] = {ch: chans.count(ch) for ch in bbbc006.CHANNELS} | {"other": sum(c not in bbbc006.CHANNELS for c in chans)}
            others += [p for p, c in zip(files, chans) if c not in bbbc006.CHANNELS]
        for ch in bbbc006.CHANNELS:
            n_gt, n_blur = counts[split]["GT"][ch], counts[split]["blur"][ch]
            if n_blur != PER_GT * n_gt:
                pair_split(root, split, ch)  # names the files, where the names carry fields
                stray = f"; {len(others)} file(s) keep no channel by the authors' rule ({_show(others)})" if others else ""
                raise InputError(
                    f"{root / split}: {n_blur} {ch} blur files for {n_gt} {ch} GT files, expected {PER_GT} per GT{stray}. "
                    f"Fix: the archive was only partly unpacked or is not the authors' one; delete {root} and unpack {ARCHIVE} again"
                )
    return counts


# ----------------------------------------------------------------------------------------- pairing


def _fields(files: list[Path], what: str) -> list[Field | None]:
    fields = [parse_field(p) for p in files]
    unnamed = [p for p, f in zip(files, fields) if f is None]
    if unnamed and len(unnamed) < len(files):
        raise InputError(
            f"{unnamed[0].parent}: {len(unnamed)} {what} file(s) do not name a BBBC006 field (<plate>_<well>_s<site>_w<1|2>...) "
            f"while the others do: {_show(unnamed)}. Fix: remove the stray files, or unpack {ARCHIVE} again"
        )
    return fields


def _check_fields(folder: Path, channel: str, gts: list[Path], gt_fields: list[Field], blurs: list[Path], blur_fields: list[Field]) -> None:
    """Every GT field has exactly three blur files and every blur file a GT: else stop, naming the files."""
    by_field: dict[Field, list[Path]] = defaultdict(list)
    for p, f in zip(blurs, blur_fields):
        by_field[f].append(p)
    seen: dict[Field, Path] = {}
    for p, f in zip(gts, gt_fields):
        if f in seen:
            raise InputError(f"{folder}: two {channel} GT files of field {f.id}: {seen[f].name} and {p.name}. Fix: unpack {ARCHIVE} again")
        seen[f] = p
    orphans = [p for f, ps in by_field.items() if f not in seen for p in ps]
    if orphans:
        raise InputError(f"{folder / 'blur'}: {len(orphans)} {channel} blur file(s) without a GT file of their field: {_show(orphans)}. Fix: the GT is missing from {folder / 'GT'}; unpack {ARCHIVE} again")
    wrong = {f: by_field.get(f, []) for f in seen if len(by_field.get(f, [])) != PER_GT}
    if wrong:
        f, ps = next(iter(sorted(wrong.items(), key=lambda kv: kv[0].id)))
        raise InputError(
            f"{folder}: {len(wrong)} {channel} field(s) without exactly {PER_GT} blur files; e.g. {seen[f].name} has {len(ps)}"
            f"{': ' + _show(ps, 6) if ps else ''}. Fix: an extra or missing blur file; unpack {ARCHIVE} again"
        )


def pair_split(root: str | Path, split: str, channel: str) -> list[Pair]:
    """Pair one split and channel as the authors' test script does, then verify the pairs by their names.

    Sorted blur files are paired with the sorted GT files each repeated three times; every pair must
    name the same field (plate, well, site, channel). Names that carry no field at all cannot be
    verified: the pairs are then the authors' as they are (``Pair.field`` None, id = GT file stem).
    """
    folder = Path(root) / split
    gts = [p for p in _tifs(folder / "GT") if authors_channel(p) == channel]
    blurs = [p for p in _tifs(folder / "blur") if authors_channel(p) == channel]
    gt_fields, blur_fields = _fields(gts, "GT"), _fields(blurs, "blur")
    named = all(f is not None for f in gt_fields + blur_fields)
    if named:
        _check_fields(folder, channel, gts, gt_fields, blurs, blur_fields)
    elif len(blurs) != PER_GT * len(gts):
        raise InputError(f"{folder}: {len(blurs)} {channel} blur files for {len(gts)} GT files, expected {PER_GT} per GT. Fix: unpack {ARCHIVE} again")
    pairs = []
    for i, (gt, f) in enumerate(zip(gts, gt_fields)):
        triple = tuple(blurs[PER_GT * i : PER_GT * (i + 1)])
        for b in triple:
            if named and parse_field(b) != f:  # cannot happen after _check_fields unless the sort orders differ
                raise InputError(
                    f"{folder}: the authors' sorted pairing puts {b.name} with {gt.name}, another field. Fix: none here: the "
                    "archive's GT and blur names sort differently, so the authors' own pairing is wrong; report it to them"
                )
        pairs.append(Pair(split, f.id, f, gt, triple) if named else Pair(split, _safe_id(gt.stem), None, gt, triple))
    return pairs


# ---------------------------------------------------------------------------------- planes & check


def sharpness(image: np.ndarray, sigma: float = SHARPNESS_SIGMA) -> float:
    """Variance of the Laplacian of Gaussian (`sigma` px) of the raw intensities: higher = sharper.

    Why not the plain variance of the Laplacian of a min-max normalised image: the Laplacian's gain
    is highest at the pixel scale, where camera noise lives, and min-max scaling amplifies the noise
    of a dim, defocused plane, so that measure often ranks a defocused plane as sharper. Smoothing by
    a few pixels suppresses the noise while BBBC006's defocus (blur several to tens of pixels wide at
    6-14 planes from focus) still separates the planes; the raw values are comparable within a field
    because its planes share one exposure.
    """
    return float(ndimage.gaussian_laplace(np.asarray(image, dtype=np.float64), sigma).var())


def _resolve_rule(pairs: list[Pair], rule: str) -> str:
    if rule not in PLANE_RULES:
        raise ValueError(f"plane_rule={rule!r}; allowed: {', '.join(map(repr, PLANE_RULES))}")
    named = [plane_from_name(p) is not None for pair in pairs for p in pair.triple]
    if rule == "auto":
        if any(named) and not all(named):
            without = [p for pair in pairs for p in pair.triple if plane_from_name(p) is None]
            raise InputError(f"{without[0].parent}: some blur names carry their plane and {len(without)} do not ({_show(without)}). Fix: unpack {ARCHIVE} again, or pass plane_rule='position'")
        return "name" if all(named) else "position"
    if rule == "name" and not all(named):
        raise InputError(f"plane_rule='name' but {named.count(False)} blur file names carry no plane. Fix: use plane_rule='auto'")
    return rule


def assign_planes(pairs: list[Pair], rule: str, sharp: dict[Path, float]) -> None:
    """Fill ``Pair.blur`` {plane: file} by the resolved rule (name | position | sharpness)."""
    for pair in pairs:
        if rule == "name":
            planes = [plane_from_name(p) for p in pair.triple]
            if sorted(planes) != sorted(PLANES):
                raise InputError(f"{pair.gt.parent.parent / 'blur'}: the blur files of {pair.id} name planes {planes}, expected {list(PLANES)}: {_show(pair.triple)}. Fix: unpack {ARCHIVE} again")
            pair.blur = dict(sorted(zip(planes, pair.triple)))
        elif rule == "position":
            pair.blur = dict(zip(PLANES, pair.triple))
        else:  # sharpness: the most blurred is the farthest plane from focus
            pair.blur = dict(zip(PLANES, sorted(pair.triple, key=lambda p: sharp[p])))


def check_blur_order(pairs: list[Pair], sharp: dict[Path, float], *, rule: str, max_out_of_order: float) -> dict:
    """Blur must decrease z02 → z06 → z10 for (nearly) every field; returns the manifest's record or stops.

    A field is out of order when its sharpness does not strictly increase along the planes. More than
    `max_out_of_order` of the fields out of order stops, naming them: the plane rule is wrong.
    """
    bad = [p for p in pairs if not all(sharp[p.blur[a]] < sharp[p.blur[b]] for a, b in zip(PLANES, PLANES[1:]))]
    share = len(bad) / len(pairs) if pairs else 0.0
    record = {
        "measure": SHARPNESS_MEASURE,
        "expected": " < ".join(f"sharpness(z{z:02d})" for z in PLANES),
        "fields": len(pairs),
        "in_order": len(pairs) - len(bad),
        "out_of_order": sorted(f"{p.split}/{p.id}" for p in bad),
        "max_out_of_order": max_out_of_order,
        "median_sharpness": {f"z{z:02d}": float(np.median([sharp[p.blur[z]] for p in pairs])) for z in PLANES} if pairs else {},
        "independent": rule != "sharpness",
        "passed": share <= max_out_of_order,
    }
    if share > max_out_of_order:
        shown = "; ".join(f"{p.split}/{p.id}: " + ", ".join(f"z{z:02d}={p.blur[z].name} ({sharp[p.blur[z]]:.3g})" for z in PLANES) for p in bad[:3])
        fix = {
            "position": "the sorted names do not order the planes; pass plane_rule='sharpness' to assign them by sharpness (recorded in the manifest)",
            "name": "the planes the names carry disagree with the images; the archive is mislabelled, report it and use plane_rule='sharpness'",
        }.get(rule, "raise max_out_of_order only after looking at the fields named")
        raise InputError(
            f"{len(bad)} of {len(pairs)} fields ({share:.0%}, more than the {max_out_of_order:.0%} allowed) are out of blur order "
            f"under plane rule {rule!r} (expected {record['expected']}, sharpness = {SHARPNESS_MEASURE}): {shown}"
            f"{' and more' if len(bad) > 3 else ''}. Fix: {fix}"
        )
    return record


def index_archive(root: str | Path, channel: bbbc006.Channel, *, plane_rule: PlaneRule = "auto", max_out_of_order: float = 0.05, progress: bool = True) -> ArchiveIndex:
    """Pair, verify and assign planes to one channel of the unpacked archive at `root` (both splits)."""
    if channel not in bbbc006.CHANNELS:
        raise ValueError(f"channel={channel!r}; allowed: {', '.join(map(repr, bbbc006.CHANNELS))}")
    if not 0.0 <= max_out_of_order < 1.0:
        raise ValueError(f"max_out_of_order={max_out_of_order!r}: expected a fraction in [0, 1)")
    root = Path(root)
    counts = check_layout(root)
    pairs = [pair for split in SPLITS for pair in pair_split(root, split, channel)]
    sides = defaultdict(set)
    for pair in pairs:
        sides[pair.id].add(pair.split)
    both = sorted(i for i, s in sides.items() if len(s) > 1)
    if both:
        raise InputError(f"{root}: {len(both)} {channel} field(s) in both train and test ({', '.join(both[:5])}). Fix: unpack {ARCHIVE} again; a split must not share fields")
    rule = _resolve_rule(pairs, plane_rule)
    files = [p for pair in pairs for p in pair.triple]
    sharp = {p: sharpness(bbbc006.read_uint16(p)) for p in tqdm(files, desc=f"blur order {channel}", disable=not progress)}
    assign_planes(pairs, rule, sharp)
    check = check_blur_order(pairs, sharp, rule=rule, max_out_of_order=max_out_of_order)
    ignored = sum(counts[s][f]["other"] for s in SPLITS for f in FOLDERS)
    return ArchiveIndex(channel, pairs, rule, check, all(p.field is not None for p in pairs), ignored)
