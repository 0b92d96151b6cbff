"""Pair the files of the DGNO authors' BBBC006 archive and know each blur file's plane, then check it on the images.

Pairing and names: :mod:`dgno.data.bbbc006_layout`. Which blur file is which plane (z02, z06, z10),
decided file by file and recorded with the rule that decided it:

- ``name``: the plane the name carries (``-z02``, ``_z_02``, a ``02_`` prefix, a ``z02/`` folder);
- ``broad``: the plane of the Broad archive that lists a file of exactly that name
  (:mod:`dgno.data.bbbc006_listing`; Broad names carry a different UUID-like suffix per plane);
- ``elimination``: the one plane left in a field whose other two files were decided by name or listing;
- ``position``: the place in the field's sorted triple (first z02, then z06, z10);
- ``sharpness``: the most blurred of a field's undecided files is the farthest from focus.

Rule ``auto`` (the default) takes, for each file, the first of name → broad that knows it, the last
file of a field with two known by elimination, and the rest of its field by sharpness. The blur order is then checked on the images
(:func:`check_blur_order`): defocus blur must decrease from z02 to z10 (14, 10 and 6 planes from
focus) by :func:`sharpness`. Fields whose planes were assigned by sharpness are in order by
construction, so the check counts only the others, and the record says whether it is independent.
A share out of order above ``max_out_of_order`` is a warning (manifest, report, per-plane tables
marked), or with ``plane_check='strict'`` a stop naming the fields: the paper's pooled BBBC006 numbers
do not depend on which file is which plane; the per-plane ones do.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from scipy import ndimage

from dgno.data import bbbc006
from dgno.data.bbbc006_layout import (
    ARCHIVE,
    FOLDERS,
    PER_GT,
    PLANES,
    SPLITS,
    Pair,
    authors_channel,
    check_layout,
    pair_split,
    parse_field,
    plane_from_name,
    plane_from_path,
    show,
)
from dgno.data.bbbc006_listing import LISTING, plane_lookup
from dgno.io import InputError
from dgno.progress import bar as progress_bar

__all__ = [
    "ARCHIVE", "PER_GT", "PLANES", "PLANE_CHECKS", "PLANE_RULES", "SPLITS", "ArchiveIndex", "Pair", "PlaneCheck", "PlaneRule",
    "authors_channel", "check_blur_order", "check_layout", "decide_planes", "index_archive", "pair_split", "parse_field",
    "plane_from_name", "sharpness",
]  # fmt: skip

log = logging.getLogger(__name__)

PlaneRule = Literal["auto", "name", "broad", "position", "sharpness"]
PLANE_RULES = ("auto", "name", "broad", "position", "sharpness")
PlaneCheck = Literal["warn", "strict"]
PLANE_CHECKS = ("warn", "strict")
INDEPENDENT_RULES = ("name", "broad", "elimination", "position")  # rules that do not look at the images
SHARPNESS_SIGMA = 4.0  # px, Gaussian smoothing of the sharpness measure
SHARPNESS_MEASURE = f"variance of the Laplacian of Gaussian (sigma {SHARPNESS_SIGMA:g} px, scipy.ndimage.gaussian_laplace) of the raw intensities"
NOT_INDEPENDENT = "assigned by sharpness; the order check is then not independent"


@dataclass
class ArchiveIndex:
    """What :func:`index_archive` found and checked for one channel."""

    channel: str
    pairs: list[Pair]
    plane_rule: str  # the rule that decided every file (name | broad | position | sharpness), or "mixed"
    plane_check: dict
    names_carry_fields: bool
    ignored: int  # .tif files the authors' channel rule keeps for neither channel
    requested_rule: str = "auto"
    decided: dict[Path, str] = field(default_factory=dict)  # blur file -> the rule that decided its plane
    sharp: dict[Path, float] = field(default_factory=dict)
    hidden: dict[str, int] = field(default_factory=dict)  # {"<split>/<folder>": files skipped as never images}
    authors_order_agrees: bool = True
    warnings: list[str] = field(default_factory=list)


def option(name: str, value: str, config_key: str | None) -> str:
    """How a fix names a setting: the config key (``datasets.bbbc006_w1.plane_rule: sharpness``) or the keyword argument."""
    return f"{config_key}.{name}: {value}" if config_key else f"{name}={value!r}"


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


# ----------------------------------------------------------------------------------- which plane


def _known(path: Path, blur_dir: Path, rule: str, lookup: dict[str, int]) -> tuple[int, str] | None:
    """(plane, rule) a file's own name or the Broad listing gives it under `rule`, or None."""
    if rule in ("auto", "name"):
        plane = plane_from_path(path, blur_dir)
        if plane is not None:
            return plane, "name"
    if rule in ("auto", "broad"):
        plane = lookup.get(path.stem.lower())
        if plane is not None:
            return plane, "broad"
    return None


def _refuse_unknown(rule: str, unknown: list[Path], listing_status: str, config_key: str | None) -> None:
    if rule == "name":
        raise InputError(f"{unknown[0].parent}: plane_rule 'name' but {len(unknown)} blur file name(s) carry no plane ({show(unknown)}). Fix: set {option('plane_rule', 'auto', config_key)}")
    raise InputError(
        f"{unknown[0].parent}: plane_rule 'broad' but {len(unknown)} blur file(s) are not named in the Broad listing of z02/z06/z10 "
        f"(listing: {listing_status}; e.g. {show(unknown)}). Fix: set {option('plane_rule', 'auto', config_key)} (undecided files by sharpness), "
        f"or, if the listing is unavailable, delete the cached listing (<downloads.raw_dir>/bbbc006/{LISTING}) and rerun with the network"
    )


def decide_planes(
    pairs: list[Pair], rule: str, sharp: dict[Path, float], *, root: Path, lookup: dict[str, int], listing_status: str = "not requested", config_key: str | None = None,
) -> dict[Path, str]:
    """Fill ``Pair.blur`` {plane: file} and return {blur file: the rule that decided it} (module docstring).

    `root`: the unpacked ``BBBC006`` folder (a plane token may be a folder below ``<split>/blur``);
    `lookup`: {lower-case file stem: plane} of the Broad listing (:func:`dgno.data.bbbc006_listing.plane_lookup`).
    """
    if rule not in PLANE_RULES:
        raise ValueError(f"plane_rule={rule!r}; allowed: {', '.join(map(repr, PLANE_RULES))}")
    decided: dict[Path, str] = {}
    unknown: list[Path] = []
    for pair in pairs:
        blur_dir = root / pair.split / "blur"
        known = {p: k for p in pair.triple if (k := _known(p, blur_dir, rule, lookup))}
        if rule in ("name", "broad"):
            unknown += [p for p in pair.triple if p not in known]
        planes = [z for z, _ in known.values()]
        if len(set(planes)) != len(planes) or not set(planes) <= set(PLANES):
            raise InputError(
                f"{pair.triple[0].parent}: the blur files of field {pair.id} are given planes {sorted(planes)} "
                f"({', '.join(f'{p.name}: z{z:02d} by {r}' for p, (z, r) in known.items())}); expected one each of {', '.join(f'z{z:02d}' for z in PLANES)}. "
                f"Fix: set {option('plane_rule', 'sharpness', config_key)} to assign them by the images"
            )
        rest = [p for p in pair.triple if p not in known]
        left = [z for z in PLANES if z not in planes]
        if rule in ("auto", "name", "broad") and len(rest) == 1:  # two planes known: the third is the one left
            known[rest[0]] = (left[0], "elimination")
            unknown = [p for p in unknown if p != rest[0]]
            rest, left = [], []
        if rule == "position":
            pair.blur = dict(zip(PLANES, pair.triple))
            decided |= dict.fromkeys(pair.triple, "position")
            continue
        # the most blurred undecided file takes the farthest plane from focus still free
        by_sharpness = dict(zip(left, sorted(rest, key=lambda p: sharp[p])))
        pair.blur = dict(sorted({**{z: p for p, (z, _) in known.items()}, **by_sharpness}.items()))
        decided |= {p: r for p, (_, r) in known.items()} | dict.fromkeys(rest, "sharpness")
    if unknown:
        _refuse_unknown(rule, unknown, listing_status, config_key)
    return decided


# ---------------------------------------------------------------------------------------- check


def _fix(rules: set[str], config_key: str | None) -> str:
    if rules == {"position"}:
        why = "the sorted names do not order the planes"
    elif "broad" in rules:
        why = "the Broad listing names these files' planes and the images disagree: the archive's blur files may not be the Broad planes they are named for"
    else:
        why = "the planes the names carry disagree with the images: the archive may be mislabelled"
    return (
        f"{why}; set {option('plane_rule', 'sharpness', config_key)} to assign the planes by the images (recorded as not independent), "
        f"or {option('plane_check', 'warn', config_key)} to go on with a warning (the pooled z02+z06+z10 numbers do not depend on the planes)"
    )


def check_blur_order(pairs: list[Pair], sharp: dict[Path, float], *, decided: dict[Path, str], max_out_of_order: float, plane_check: str = "warn", config_key: str | None = None) -> dict:
    """Blur must decrease z02 → z06 → z10 in (nearly) every field whose planes the images did not decide; returns the record.

    A field is out of order when its sharpness does not strictly increase along the planes. Only
    fields with no file assigned by sharpness count (the others are in order by construction). More
    than `max_out_of_order` of them out of order is a warning in the record, or a stop with `plane_check`
    ``strict``.
    """
    if plane_check not in PLANE_CHECKS:
        raise ValueError(f"plane_check={plane_check!r}; allowed: {', '.join(map(repr, PLANE_CHECKS))}")
    checked = [p for p in pairs if all(decided[f] in INDEPENDENT_RULES for f in p.triple)]
    bad = [p for p in checked if not all(sharp[p.blur[a]] < sharp[p.blur[b]] for a, b in zip(PLANES, PLANES[1:]))]
    share = len(bad) / len(checked) if checked else None
    failed = share is not None and share > max_out_of_order
    record = {
        "measure": SHARPNESS_MEASURE,
        "expected": " < ".join(f"sharpness(z{z:02d})" for z in PLANES),
        "fields": len(pairs),
        "independent_fields": len(checked),
        "in_order": len(checked) - len(bad),
        "out_of_order": sorted(f"{p.split}/{p.id}" for p in bad),
        "share_out_of_order": share,
        "max_out_of_order": max_out_of_order,
        "median_sharpness": {f"z{z:02d}": float(np.median([sharp[p.blur[z]] for p in pairs])) for z in PLANES} if pairs else {},
        "independent": len(checked) == len(pairs) and bool(pairs),
        "passed": None if share is None else not failed,
        "status": "not independent" if share is None else "failed" if failed else "passed",
        "plane_check": plane_check,
        "note": NOT_INDEPENDENT if len(checked) < len(pairs) else "every plane decided without the images: the check is independent",
    }
    if failed:
        rules = {decided[f] for p in bad for f in p.triple}
        shown = "; ".join(f"{p.split}/{p.id}: " + ", ".join(f"z{z:02d}={p.blur[z].name} ({sharp[p.blur[z]]:.3g})" for z in PLANES) for p in bad[:3])
        text = (
            f"{len(bad)} of {len(checked)} fields ({share:.0%}, more than the {max_out_of_order:.0%} allowed) are out of blur order under plane "
            f"rule {'/'.join(sorted(rules))!r} (expected {record['expected']}, sharpness = {SHARPNESS_MEASURE}): {shown}{' and more' if len(bad) > 3 else ''}"
        )
        if plane_check == "strict":
            raise InputError(f"{text}. Fix: {_fix(rules, config_key)}")
        record["warning"] = f"{text}. Per-plane numbers of these files may be of another plane; the pooled z02+z06+z10 numbers are not affected"
        log.warning("%s", record["warning"])
    return record


def _summary_rule(decided: dict[Path, str]) -> str:
    rules = set(decided.values())
    return rules.pop() if len(rules) == 1 else "mixed"


def index_archive(
    root: str | Path, channel: bbbc006.Channel, *, plane_rule: PlaneRule = "auto", max_out_of_order: float = 0.05, plane_check: PlaneCheck = "warn",
    broad_listing: dict | None = None, config_key: str | None = None, progress: bool = True,
) -> ArchiveIndex:
    """Pair, verify and assign planes to one channel of the unpacked archive at `root` (both splits).

    `broad_listing`: the Broad planes' names (:func:`dgno.data.bbbc006_listing.broad_listing`) for rules
    ``auto`` and ``broad``; `config_key` (``datasets.bbbc006_w1``) makes the fixes name config keys.
    """
    if channel not in bbbc006.CHANNELS:
        raise ValueError(f"channel={channel!r}; allowed: {', '.join(map(repr, bbbc006.CHANNELS))}")
    if not 0.0 <= max_out_of_order < 1.0:
        raise ValueError(f"max_out_of_order={max_out_of_order!r}: expected a fraction in [0, 1)")
    root = Path(root)
    counts = check_layout(root)
    found = {split: pair_split(root, split, channel) for split in SPLITS}
    pairs = [pair for split in SPLITS for pair in found[split].pairs]
    sides = defaultdict(set)
    for pair in pairs:
        sides[pair.id].add(pair.split)
    both = sorted(i for i, s in sides.items() if len(s) > 1)
    if both:
        raise InputError(f"{root}: {len(both)} {channel} field(s) in both train and test ({', '.join(both[:5])}). Fix: a split must not share fields; unpack {ARCHIVE} again")
    files = [p for pair in pairs for p in pair.triple]
    sharp = {p: sharpness(bbbc006.read_uint16(p)) for p in progress_bar(files, desc=f"blur order {channel}", unit="image", enabled=progress)}
    status = (broad_listing or {}).get("status", "not requested")
    decided = decide_planes(pairs, plane_rule, sharp, root=root, lookup=plane_lookup(broad_listing), listing_status=status, config_key=config_key)
    check = check_blur_order(pairs, sharp, decided=decided, max_out_of_order=max_out_of_order, plane_check=plane_check, config_key=config_key)
    agrees = all(found[s].authors_order_agrees for s in SPLITS)
    warnings = [check["warning"]] if "warning" in check else []
    by_images = sum(r == "sharpness" for r in decided.values())
    if by_images and plane_rule == "auto":
        warnings.append(
            f"{by_images} of {len(decided)} {channel} blur files were assigned their plane by sharpness (Broad listing: {status}), so the order check "
            f"{'is not independent' if by_images == len(decided) else 'covers only the other fields'}; with the network back, delete the cached listing (<downloads.raw_dir>/bbbc006/{LISTING}) and rerun"
        )
    drops = sum(found[s].authors_rule_drops for s in SPLITS)
    if drops:
        warnings.append(
            f"{drops} {channel} file name(s) carry text after the channel, so the authors' channel rule (first two characters of the last '_' part) "
            "reads another channel and their test script would leave those files out; here they are paired by the field their names name"
        )
    if not agrees:
        warnings.append(f"the authors' sorted pairing (sorted blur files beside each sorted GT file three times) puts some {channel} blur files with another field's GT; here they are paired by field")
    return ArchiveIndex(
        channel, pairs, _summary_rule(decided), check, all(p.field is not None for p in pairs), sum(counts[s][f]["other"] for s in SPLITS for f in FOLDERS),
        requested_rule=plane_rule, decided=decided, sharp=sharp, hidden={f"{s}/{f}": counts[s][f]["hidden"] for s in SPLITS for f in FOLDERS},
        authors_order_agrees=agrees, warnings=warnings,
    )


def decided_counts(index: ArchiveIndex) -> dict[str, int]:
    """{rule: blur files it decided}, in the order of the module docstring."""
    counts = Counter(index.decided.values())
    return {r: counts[r] for r in (*INDEPENDENT_RULES, "sharpness") if counts[r]}


RULE_TEXT = {
    "name": "from the blur file name (a z<NN> token after the channel, a <NN>_ prefix, or a z<NN>/ folder)",
    "broad": "from the Broad archive (BBBC006_v1_images_z_02/06/10.zip) that lists a file of exactly that name",
    "elimination": "the one plane left in a field whose other two blur files were decided by name or by the Broad listing",
    "position": f"from the position in the sorted triple of a field's blur files: first z{PLANES[0]:02d}, then z{PLANES[1]:02d}, z{PLANES[2]:02d}",
    "sharpness": f"by sharpness within each field's triple: most blurred = farthest from focus ({NOT_INDEPENDENT})",
    "mixed": "file by file: from the name where it carries the plane, else from the Broad listing, else by sharpness (see decided_by)",
}


def _listing_summary(listing: dict | None) -> dict | None:
    """The Broad listing as the manifest records it: per plane its status, where the names came from and the cost, not the names."""
    if listing is None:
        return None
    planes = {lvl: {k: v for k, v in p.items() if k != "names"} | ({"names": len(p["names"])} if "names" in p else {}) for lvl, p in listing["planes"].items()}
    return {"status": listing["status"], "base_url": listing.get("base_url"), "planes": planes}


def planes_record(index: ArchiveIndex, listing: dict | None) -> dict:
    """The manifest's ``planes``: the rule asked for and the rules that decided, every file's plane and rule, the check, the listing."""
    files = {
        f"{p.split}/{p.id}": {f"z{z:02d}": {"file": path.name, "rule": index.decided[path], "sharpness": index.sharp[path]} for z, path in p.blur.items()}
        for p in index.pairs
    }
    return {
        "requested": index.requested_rule,
        "rule": index.plane_rule,
        "description": RULE_TEXT[index.plane_rule],
        "decided_by": decided_counts(index),
        "check": index.plane_check,
        "broad_listing": _listing_summary(listing),
        "files": files,
    }
