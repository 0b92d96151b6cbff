"""``dgno data check NAME``: what of a dataset is present, what is missing, and how to get it.

One entry point, :func:`data_check`, for every dataset the pipeline uses, returning ``(ok, text)``
so the command line can print the text and exit non-zero when something is missing. The checks
only look at the disk (no network): they count files and read the first few, so they are fast
enough to run before every job. If `root` is an already prepared dataset (it has a
``manifest.json``) the prepared layout of docs/CONVENTIONS.md is checked instead of the raw files.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dgno.data import bbbc006, paired_sets
from dgno.data.bbbc006_authors import check_authors
from dgno.data.download import part_path
from dgno.data.paired import read_split
from dgno.data.paired_sets import Report
from dgno.io import InputError, read_json, visible_files

NAMES = ("bbbc006", "bbbc006-authors", *paired_sets.SOURCES, "demo")
# Where the data go when no --root is given (relative to the repository root, where Snakemake runs):
# the workflow's default downloads.raw_dir, so the check looks where the rules read and write.
DEFAULT_ROOTS = {
    "bbbc006": "resources/bbbc006",
    "bbbc006-authors": "resources/bbbc006",  # the authors' archive goes beside the Broad planes (archives/, authors/)
    **{source: f"resources/{source}" for source in paired_sets.SOURCES},
    "demo": "results/data",
}


def data_check(name: str, root: str | Path | None = None, **kw) -> tuple[bool, str]:
    """Check dataset `name` under `root` (default :data:`DEFAULT_ROOTS`); return (ok, report text).

    Keyword arguments go to the dataset's check: bbbc006 → :func:`check_bbbc006` (planes, labels,
    base_url, per_channel, n_labels); bbbc006-authors → the authors' archive and split
    (:func:`dgno.data.bbbc006_authors.check_authors`: url); a paired set (paired_sets.SOURCES) → :func:`dgno.data.paired_sets.check`
    (counts, n_sample); demo → :func:`check_demo` (datasets).
    """
    if name not in NAMES:
        raise ValueError(f"dataset {name!r}; allowed: {', '.join(map(repr, NAMES))}")
    root = Path(root if root is not None else DEFAULT_ROOTS[name])
    if name == "demo":
        report = check_demo(root, **kw)
    elif (root / "manifest.json").is_file():
        report = check_prepared(root, name=name)
    elif name == "bbbc006":
        report = check_bbbc006(root, **kw)
    elif name == "bbbc006-authors":
        report = check_authors(root, **kw)
    else:
        report = paired_sets.check(name, root, **kw)
    return report.ok, report.text()


# --------------------------------------------------------------------------------------- BBBC006


def _plane_role(z: int) -> str:
    if z == bbbc006.GT_PLANE:
        return "in-focus ground truth"
    if z in bbbc006.TRAIN_PLANES:
        return "training input"
    if z in bbbc006.EXTRA_PLANES:
        return "defocus-level tables"
    return "extra plane"


def _count_channels(folder: Path) -> dict[str, int]:
    counts = dict.fromkeys(bbbc006.CHANNELS, 0)
    for path in visible_files(folder, (".tif", ".tiff"), recursive=True)[0]:
        m = bbbc006.IMAGE_NAME_RE.match(path.name)
        if m is not None:
            counts[m.group(3).lower()] += 1
    return counts


def _archive_state(root: Path, archive: str) -> str:
    """A note on a downloaded-but-not-unpacked or interrupted archive, for the 'missing' line."""
    path = root / "archives" / archive
    if path.is_file():
        return f"; {path} is downloaded but not unpacked"
    part = part_path(path)
    if part.is_file():
        return f"; interrupted download {part} ({part.stat().st_size} bytes) resumes when re-run"
    return ""


def _bbbc006_steps(root: Path, todo: list[tuple[int | None, str, str, Path]], *, base_url: str, per_channel: int, n_labels: int) -> list[str]:
    """How to get what ``check_bbbc006`` found missing: ``todo`` = (plane or None for the labels, archive, url, unpack folder)."""
    fetch_planes = [z for z, *_ in todo if z is not None]
    need_labels = any(z is None for z, *_ in todo)
    base_arg = "" if base_url == bbbc006.BASE_URL else f", base_url='{base_url}'"
    return [
        "Download, verify and unpack what is missing (resumable, retried): "
        f"`python -c \"from dgno.data.bbbc006 import fetch; fetch('{root}', planes={fetch_planes}, labels={need_labels}{base_arg})\"`",
        "Or by hand, one archive at a time (curl -C - resumes; a plane's folder must hold only that plane):\n"
        + "\n".join(
            f"       curl -fL -C - --create-dirs -o {root / 'archives' / a} '{u}' && unzip -q -o {root / 'archives' / a} -d {d}"
            for _, a, u, d in todo
        ),
        f"Files: {bbbc006.BASE_URL} (Broad Bioimage Benchmark Collection); each plane archive holds {per_channel} w1 + "
        f"{per_channel} w2 images, the labels archive {n_labels} masks.",
        f"Check again: `dgno data check bbbc006 --root {root}`; then prepare a channel with "
        f"`python -c \"from dgno.data.bbbc006 import prepare_dataset; prepare_dataset('{root}', 'results/data/bbbc006_w1', channel='w1', seed=0)\"`.",
    ]


def check_bbbc006(
    root: str | Path,
    *,
    planes: Iterable[int] = (bbbc006.GT_PLANE, *bbbc006.TRAIN_PLANES, *bbbc006.EXTRA_PLANES),
    labels: bool = True,
    base_url: str = bbbc006.BASE_URL,
    per_channel: int = bbbc006.IMAGES_PER_CHANNEL,
    n_labels: int = bbbc006.N_LABELS,
) -> Report:
    """Check the raw BBBC006 planes (and label masks) under `root`, laid out as :mod:`dgno.data.bbbc006` describes.

    `per_channel` / `n_labels` are the expected counts (768 each in the real data; smaller in tests).
    """
    root = Path(root)
    planes = sorted({int(z) for z in planes})
    report = Report(name="bbbc006", root=root)
    todo: list[tuple[int | None, str, str, Path]] = []  # (plane or None for labels, archive, url, unpack folder)
    for z in planes:
        archive, url = bbbc006.plane_archive(z), bbbc006.plane_url(z, base_url)
        folder = bbbc006.plane_dir(root, z)
        if folder is None:
            report.missing.append(f"z{z:02d} ({_plane_role(z)}): no folder {root / bbbc006.level_name(z)}{_archive_state(root, archive)}")
            todo.append((z, archive, url, root / bbbc006.level_name(z)))
            continue
        counts = _count_channels(folder)
        line = f"z{z:02d} ({_plane_role(z)}): " + " + ".join(f"{counts[ch]} {ch}" for ch in bbbc006.CHANNELS)
        report.present.append(f"{line} images in {folder} (expected {per_channel} each)")
        if any(counts[ch] != per_channel for ch in bbbc006.CHANNELS):
            report.problems.append(f"{folder}: {line}, expected {per_channel} per channel; the archive was only partly unpacked")
            todo.append((z, archive, url, folder))
    if labels:
        archive, url = bbbc006.LABELS_ARCHIVE, bbbc006.labels_url(base_url)
        folder = bbbc006.labels_dir(root)
        if folder is None:
            report.missing.append(f"label masks (StarDist ground truth): no folder {root / 'labels'}{_archive_state(root, archive)}")
            todo.append((None, archive, url, root / "labels"))
        else:
            n = sum(1 for p in visible_files(folder, (".png",), recursive=True)[0] if bbbc006.LABEL_NAME_RE.match(p.name))
            report.present.append(f"label masks: {n} in {folder} (expected {n_labels})")
            if n != n_labels:
                report.problems.append(f"{folder}: {n} label masks, expected {n_labels}; the archive was only partly unpacked")
                todo.append((None, archive, url, folder))
    report.ok = not report.missing and not report.problems
    if todo:
        report.steps = _bbbc006_steps(root, todo, base_url=base_url, per_channel=per_channel, n_labels=n_labels)
    return report


# ----------------------------------------------------------------------------- prepared datasets


def _stems(folder: Path) -> set[str]:
    return {p.stem for p in folder.iterdir() if p.suffix.lower() in (".tif", ".tiff")} if folder.is_dir() else set()


def check_prepared(data_dir: str | Path, *, name: str | None = None, fix: str | None = None) -> Report:
    """Check a dataset in the shared layout: manifest, split, and gt/blur/labels files for every id."""
    data_dir = Path(data_dir)
    report = Report(name=name or data_dir.name, root=data_dir)
    report.steps = [fix or f"Re-run the rule (or the prepare function) that writes {data_dir}; it rebuilds the folder atomically."]
    try:
        manifest = read_json(data_dir / "manifest.json")
        split = read_split(data_dir)
    except InputError as exc:
        report.missing.append(str(exc))
        return report
    ids = [i for members in split.values() for i in members]
    report.present.append(f"{manifest.get('source', 'dataset')}: " + " / ".join(f"{len(v)} {k}" for k, v in split.items()) + " images in split.csv")
    folders = {"gt": data_dir / "gt"}
    levels = sorted(p.name for p in (data_dir / "blur").iterdir() if p.is_dir()) if (data_dir / "blur").is_dir() else []
    folders.update({f"blur/{lvl}": data_dir / "blur" / lvl for lvl in levels})
    if manifest.get("labels") or (data_dir / "labels").is_dir():
        folders["labels"] = data_dir / "labels"
    expected_levels = set(manifest.get("levels") or {})
    for lvl in sorted(expected_levels - set(levels)):
        report.missing.append(f"blur/{lvl}: listed in manifest.json but not on disk")
    if not levels and not expected_levels:
        report.missing.append("blur/: no blur level")
    for rel, folder in folders.items():
        have, want = _stems(folder), _expected_ids(data_dir, manifest, rel, ids)
        lacking = [i for i in want if i not in have]
        report.present.append(f"{rel}: {len(want) - len(lacking)} of {len(want)} images")
        if lacking:
            shown = ", ".join(lacking[:5]) + (f" and {len(lacking) - 5} more" if len(lacking) > 5 else "")
            report.missing.append(f"{rel}: {len(lacking)} image(s) of split.csv missing ({shown})")
    report.ok = not report.missing and not report.problems
    return report


def _expected_ids(data_dir: Path, manifest: dict, rel: str, ids: list[str]) -> list[str]:
    """The ids a folder must hold: split.csv's, except for the levels with their own test set (manifest ``test_sets``,
    the by-well fallback of the authors' BBBC006), whose ids the ground truth (and labels) hold as well."""
    sets = manifest.get("test_sets", {})
    extra = {lvl: read_split(data_dir, rec["file"]).get("test", []) for lvl, rec in sets.items()}
    level = rel.removeprefix("blur/")
    if level in extra:
        return extra[level]
    fallback = list(dict.fromkeys(i for members in extra.values() for i in members))
    if rel == "gt":
        return ids + fallback
    if rel == "labels" and not manifest.get("labels"):
        return fallback
    return ids


def check_demo(root: str | Path, *, datasets: Iterable[str] | None = None) -> Report:
    """Check the generated demo datasets under `root` (default ``results/data``), each in the shared layout.

    `datasets`: the names to require (e.g. the config's ``datasets``); None checks every dataset
    found and requires at least one.
    """
    root = Path(root)
    report = Report(name="demo", root=root)
    report.steps = [
        "Generate the demo data (offline, minutes, from config.yaml): `snakemake --cores all` builds everything; "
        "one dataset alone: `snakemake --cores all results/data/<dataset>/manifest.json results/data/<dataset>/blur/<level>`.",
        f"Check again: `dgno data check demo --root {root}`.",
    ]
    if (root / "manifest.json").is_file():
        found = [root]
    elif root.is_dir():
        found = sorted(p for p in root.iterdir() if (p / "manifest.json").is_file())
    else:
        found = []
    names = list(datasets) if datasets is not None else [p.name for p in found]
    if not names:
        report.missing.append(f"{root}: no generated dataset (no <dataset>/manifest.json)")
        return report
    for name in names:
        data_dir = root if root.name == name and (root / "manifest.json").is_file() else root / name
        if not (data_dir / "manifest.json").is_file():
            report.missing.append(f"{name}: {data_dir} has not been generated")
            continue
        sub = check_prepared(data_dir, name=name)
        report.present += [f"{name}: {line}" for line in sub.present]
        report.missing += [f"{name}: {line}" for line in sub.missing]
        report.problems += [f"{name}: {line}" for line in sub.problems]
    report.ok = not report.missing and not report.problems
    return report
