"""Real paired defocus datasets (3DHistech, DPDD, RealDOF): how they look on disk, check, obtain, prepare.

These datasets already come as (blurred, sharp) pairs, so unlike BBBC006 there are no planes to pair
and no blur to synthesise. 3DHistech (Geng et al. 2022, cervical cytology refocusing) has no public
download: the user obtains it from the authors and places it by hand, and the check returns
step-by-step instructions. DPDD (Abuolaim & Brown, ECCV 2020) and RealDOF (Lee et al., CVPR 2021)
have download links published by their authors; they are configurable values here
(:data:`DPDD_URL`, :data:`REALDOF_URL`) because such links move, and :func:`download_or_instructions`
falls back to manual placement with the expected layout.

Every check returns a :class:`Report` (what is present, what is missing, how to get it) instead of
raising, so ``dgno data check`` can print it; a rule calls :meth:`Report.raise_if_incomplete`.

Expected layouts (a folder up to three levels below ``root`` is accepted too, so unzipping an
archive that has its own top folder inside ``root`` works)::

    3dhistech: root/{train,val,test}/{blur,sharp}/<name>.png|tif    66 976 / 9 088 / 18 909 pairs, 256×256
    dpdd:      root/{train_c,val_c,test_c}/{source,target}/<name>.png   350 / 74 / 76 pairs, 1680×1120
    realdof:   root/{source,target}/<name>.png                          50 pairs

A blurred image and its sharp counterpart share the file name (stem); folder aliases such as
``gt``/``target`` for ``sharp`` are accepted and reported.

In the workflow, :func:`obtain` (rule ``paired_source``) makes the raw folder complete or fails with
the check's report, and :func:`dgno.data.paired_prepare.prepare` (rule ``paired_prepare``) copies every pair into the shared
layout of docs/CONVENTIONS.md with one blur level (:data:`LEVEL`) and the dataset's *own* split, because
the paper's numbers are on the authors' splits (3DHistech train/val/test, DPDD train_c/val_c/test_c,
RealDOF test only).

Images keep their stored dtype (8- or 16-bit: DPDD's 16-bit colour PNGs become uint16 TIFFs with all
16 bits) and channels; the manifest's ``normalise: dtype`` makes :func:`dgno.io.read_image` divide by
the dtype maximum, and ``channels`` is what training builds the model for (3 for the RGB sets).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, get_args

from dgno.data.download import DownloadError, fetch_zip, part_path, unpack_zip
from dgno.io import IMAGE_SUFFIXES, InputError, is_hidden, read_raw_image, write_json

# Links published by the datasets' authors. They are third-party hosting links that can move:
# verify them on the pages below before a long run; no checksums are published, none are assumed.
DPDD_URL = "https://www.dropbox.com/s/w9urn5m4mzllrwu/DPDD.zip?dl=1"  # mirror listed in the IFAN README (codeslake/IFAN)
DPDD_PAGE = "https://github.com/Abdullah-Abuolaim/defocus-deblurring-dual-pixel"
REALDOF_URL = "https://www.dropbox.com/s/arox1aixvg67fw5/RealDOF.zip?dl=1"  # listed in the IFAN README
REALDOF_PAGE = "https://github.com/codeslake/IFAN"

HISTECH_COUNTS = {"train": 66976, "val": 9088, "test": 18909}
HISTECH_PATCH = 256
HISTECH_CITATION = (
    "X. Geng, X. Liu, S. Cheng, S. Zeng, 'Cervical cytopathology image refocusing via multi-scale attention "
    "features and domain normalization', Medical Image Analysis 81, 102566 (2022)"
)


Source = Literal["3dhistech", "dpdd", "realdof"]
SOURCES: tuple[str, ...] = get_args(Source)
LEVEL = "real"  # the one blur level of a real paired dataset: the camera's own defocus
# Raw split folder -> split name of the prepared layout ('' = the dataset's root folder).
SPLIT_NAMES: dict[str, dict[str, str]] = {
    "3dhistech": {"train": "train", "val": "val", "test": "test"},
    "dpdd": {"train_c": "train", "val_c": "val", "test_c": "test"},
    "realdof": {"": "test"},
}


@dataclass(frozen=True)
class PairedLayout:
    """How a paired (blurred, sharp) dataset is laid out on disk and how much of it there must be."""

    name: str
    title: str
    counts: dict[str, int]  # split folder ('' = root itself) -> number of pairs
    blur_names: tuple[str, ...]  # accepted names of the blurred-image folder, preferred first
    sharp_names: tuple[str, ...]
    shape: tuple[int, int] | None  # (H, W) every image must have, None = any
    url: str | None  # default download URL (None: no public download)
    url_note: str  # where the default URL comes from
    page: str
    citation: str


LAYOUTS: dict[str, PairedLayout] = {
    "3dhistech": PairedLayout(
        name="3dhistech",
        title="3DHistech cervical cytology refocusing patches",
        counts=dict(HISTECH_COUNTS),
        blur_names=("blur", "blurred", "source", "input"),
        sharp_names=("sharp", "gt", "target", "clear"),
        shape=(HISTECH_PATCH, HISTECH_PATCH),
        url=None,
        url_note="no public download",
        page="https://doi.org/10.1016/j.media.2022.102566",
        citation=HISTECH_CITATION,
    ),
    "dpdd": PairedLayout(
        name="dpdd",
        title="DPDD, Dual-Pixel Defocus Deblurring (Canon set, combined view)",
        counts={"train_c": 350, "val_c": 74, "test_c": 76},
        blur_names=("source",),
        sharp_names=("target",),
        shape=(1120, 1680),
        url=DPDD_URL,
        url_note="a mirror listed in the README of github.com/codeslake/IFAN; the DPDD authors' own link "
        "(dd_dp_dataset_canon.zip, a sync.com web page rather than a direct file) is on their page",
        page=DPDD_PAGE,
        citation="A. Abuolaim, M. S. Brown, 'Defocus deblurring using dual-pixel data', ECCV 2020",
    ),
    "realdof": PairedLayout(
        name="realdof",
        title="RealDOF test set",
        counts={"": 50},
        blur_names=("source",),
        sharp_names=("target",),
        shape=None,
        url=REALDOF_URL,
        url_note="the link published in the RealDOF authors' README",
        page=REALDOF_PAGE,
        citation="J. Lee, H. Son, J. Rim, S. Cho, S. Lee, 'Iterative filter adaptive network for single image defocus deblurring', CVPR 2021",
    ),
}


@dataclass
class Report:
    """Outcome of a dataset check: ``ok`` plus human-readable present/missing/problems/steps lines."""

    name: str
    root: Path
    ok: bool = False
    present: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)

    def text(self) -> str:
        status = "OK" if self.ok else "INCOMPLETE"
        lines = [f"{self.name} at {self.root}: {status}"]
        for title, items in (("present", self.present), ("missing", self.missing), ("problems", self.problems)):
            if items:
                lines.append(f"{title}:")
                lines += [f"  - {item}" for item in items]
        if self.steps and not self.ok:
            lines.append("how to get it:")
            lines += [f"  {i}. {step}" for i, step in enumerate(self.steps, 1)]
        return "\n".join(lines)

    def raise_if_incomplete(self) -> None:
        """For rules: stop with the whole report (it names the folder, the problem and the steps)."""
        if not self.ok:
            raise InputError(self.text())


def images_in(folder: Path, *, hidden: bool = False) -> dict[str, Path]:
    """{stem: file} of the image files directly in `folder` (scandir: fast on 67 k files); hidden ones
    (macOS '._' forks, dot-files: :func:`dgno.io.is_hidden`) only, with `hidden`, to count what was skipped."""
    out = {}
    with os.scandir(folder) as it:
        for entry in it:
            if entry.is_file() and is_hidden(entry.name) == hidden and Path(entry.name).suffix.lower() in IMAGE_SUFFIXES:
                out[Path(entry.name).stem] = Path(entry.path)
    return out


def first_dir(base: Path, names: tuple[str, ...]) -> Path | None:
    return next((base / n for n in names if (base / n).is_dir()), None)


def find_layout_root(root: Path, layout: PairedLayout, max_depth: int = 3) -> Path | None:
    """The folder at or below `root` (breadth first, up to `max_depth` levels) holding the layout's folders."""
    frontier = [root]
    for _ in range(max_depth + 1):
        nxt = []
        for cand in frontier:
            if any(first_dir(cand / split, layout.blur_names + layout.sharp_names) for split in layout.counts):
                return cand
            try:
                nxt += sorted(p for p in cand.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
        frontier = nxt
    return None


def check_paired(layout: PairedLayout, root: str | Path, *, counts: dict[str, int] | None = None, n_sample: int = 3) -> Report:
    """Check a paired dataset against `layout`; `counts` overrides the expected pair counts (tests, subsets).

    Counts every split's blurred and sharp images, checks that each blurred image has a sharp one of
    the same name, and decodes the first `n_sample` images of each folder to check their size
    (decoding all 95 k patches would take minutes for a check that runs before every job).
    """
    root = Path(root)
    counts = dict(layout.counts if counts is None else counts)
    report = Report(name=layout.name, root=root, steps=_steps(layout, root))
    archive_part = part_path(root / "archive" / f"{layout.name}.zip")
    if archive_part.exists():
        report.present.append(f"interrupted download {archive_part} ({archive_part.stat().st_size} bytes): re-running the download resumes it")
    base = find_layout_root(root, layout) if root.is_dir() else None
    if base is None:
        where = "does not exist" if not root.exists() else "holds none of the expected folders"
        report.missing.append(f"{root} {where}; expected: {_layout_text(layout, counts)}")
        return report
    if base != root:
        report.present.append(f"dataset folder found at {base}")
    for split, expected in counts.items():
        split_dir = base / split if split else base
        label = split or "."
        blur_dir, sharp_dir = first_dir(split_dir, layout.blur_names), first_dir(split_dir, layout.sharp_names)
        if blur_dir is None or sharp_dir is None:
            absent = [f"{label}/{names[0]}" for d, names in ((blur_dir, layout.blur_names), (sharp_dir, layout.sharp_names)) if d is None]
            report.missing.append(f"{', '.join(absent)} (expected {expected} images; accepted folder names: "
                                  f"blurred {'|'.join(layout.blur_names)}, sharp {'|'.join(layout.sharp_names)})")
            continue
        blur, sharp = images_in(blur_dir), images_in(sharp_dir)
        rel_b, rel_s = blur_dir.relative_to(base), sharp_dir.relative_to(base)
        report.present.append(f"{rel_b}: {len(blur)} images, {rel_s}: {len(sharp)} images (expected {expected} pairs)")
        if len(blur) != expected or len(sharp) != expected:
            report.problems.append(f"{label}: {len(blur)} blurred / {len(sharp)} sharp images, expected {expected} of each; the copy is incomplete or a different split")
        unpaired = sorted(blur.keys() ^ sharp.keys())
        if unpaired:
            shown = ", ".join(unpaired[:5]) + (f" and {len(unpaired) - 5} more" if len(unpaired) > 5 else "")
            report.problems.append(f"{label}: {len(unpaired)} image name(s) without a partner in the other folder ({shown})")
        for files in (blur, sharp):
            for name in sorted(files)[:n_sample]:
                report.problems += _shape_problem(files[name], layout.shape)
    report.ok = not report.missing and not report.problems
    return report


def _shape_problem(path: Path, shape: tuple[int, int] | None) -> list[str]:
    try:
        arr = read_raw_image(path)
    except InputError as exc:
        return [str(exc)]
    if shape is not None and tuple(arr.shape[:2]) != tuple(shape):
        return [f"{path}: image is {arr.shape[0]}×{arr.shape[1]}, expected {shape[0]}×{shape[1]}"]
    return []


def _layout_text(layout: PairedLayout, counts: dict[str, int]) -> str:
    splits = ", ".join(f"{(s + '/') if s else ''}{{{layout.blur_names[0]},{layout.sharp_names[0]}}}/ with {format(n, ',').replace(',', ' ')} images each" for s, n in counts.items())
    size = f", {layout.shape[1]}×{layout.shape[0]} px (W×H)" if layout.shape else ""
    return f"{splits}; blurred and sharp images share file names{size}"


def _steps(layout: PairedLayout, root: Path) -> list[str]:
    """Step-by-step instructions to obtain and place the dataset."""
    check = f"Check: `dgno data check {layout.name} --root {root}`."
    place = f"Place the files so that {root} (or a folder up to three levels below it) holds: {_layout_text(layout, layout.counts)}."
    if layout.name == "3dhistech":
        return [
            f"The 3DHistech refocusing dataset has no public download. It comes from {layout.citation} ({layout.page}); "
            "the DGNO paper follows MPT (Zhang et al. 2024) in using it.",
            "Request it from the authors of that paper (corresponding author's e-mail on its first page), asking for the "
            "256×256 patch split with 66 976 training, 9 088 validation and 18 909 test pairs used by MPT and DGNO.",
            place + " Put each blurred patch in <split>/blur and its in-focus counterpart, with the same file name, in <split>/sharp.",
            "Copies with other counts are reported as incomplete: numbers from another split are not comparable with the paper's table.",
            check,
        ]
    url = layout.url or "<URL>"
    archive = root / "archive" / f"{layout.name}.zip"
    return [
        f"Automatic: `python -c \"from dgno.data.paired_sets import download_or_instructions as d; print(d('{layout.name}', '{root}').text())\"` "
        f"downloads {url} (resumable) and unpacks it into {root / 'extracted'}.",
        f"By hand: `curl -fL -C - --create-dirs -o {archive} '{url}'` then `unzip -q {archive} -d {root / 'extracted'}`.",
        f"The URL is {layout.url_note} ({layout.citation}; page: {layout.page}). Hosting links move: verify it there "
        "first, and pass url=... (or set it in the config) if it changed. No checksum is published.",
        place,
        check,
    ]


def checked_counts(source: str, counts: Mapping[str, int] | None) -> dict[str, int] | None:
    """Config counts → check counts; '.' may stand for the root folder ('' is awkward in YAML)."""
    if counts is None:
        return None
    out = {("" if k == "." else k): int(v) for k, v in counts.items()}
    unknown = sorted(set(out) - set(SPLIT_NAMES[source]))
    if unknown:
        allowed = ", ".join(repr(k or ".") for k in SPLIT_NAMES[source])
        raise ValueError(f"counts for {source}: unknown split folder {unknown[0] or '.'!r}; allowed: {allowed}")
    return out


def layout_for(source: str, *, check_size: bool = True) -> PairedLayout:
    """The layout of `source`; without the paper's image-size check when `check_size` is False (resized copies, test data)."""
    if source not in LAYOUTS:
        raise ValueError(f"dataset {source!r}; allowed: {', '.join(map(repr, LAYOUTS))}")
    layout = LAYOUTS[source]
    return layout if check_size else replace(layout, shape=None)


def check(source: str, root: str | Path, *, counts: Mapping[str, int] | None = None, check_size: bool = True, n_sample: int = 3) -> Report:
    """Disk-only check of the raw folder of `source`; `counts` overrides the expected pair counts ('.' = the root folder)."""
    return check_paired(layout_for(source, check_size=check_size), root, counts=checked_counts(source, counts), n_sample=n_sample)


def check_3dhistech(root: str | Path, *, counts: dict[str, int] | None = None, n_sample: int = 3) -> Report:
    """Check a hand-placed 3DHistech copy: layout ``{train,val,test}/{blur,sharp}``, the paper's counts, 256×256 patches."""
    return check("3dhistech", root, counts=counts, n_sample=n_sample)


def download_or_instructions(
    name: str, root: str | Path, *, url: str | None = None, sha256: str | None = None, size: int | None = None, counts: dict[str, int] | None = None,
    retries: int = 4, backoff: float = 1.0, timeout: float = 60, progress: bool = True, check_size: bool = True,
) -> Report:
    """Make `name` present under `root` if possible and report on it.

    If the check already passes, nothing is downloaded. Otherwise the archive at `url` (None: the
    layout's default; "" : do not download) is fetched with resume/retries/zip check into
    ``root/archive/<name>.zip`` and unpacked into ``root/extracted``. A failed download is not an
    exception here: the returned report carries the error and the manual-placement steps (for a
    dataset such as 3DHistech, pass the private URL the authors gave you, or place it by hand).
    `check_size=False` skips the paper's image-size check (resized copies, miniature test data).
    """
    layout = layout_for(name, check_size=check_size)
    root = Path(root)
    report = check_paired(layout, root, counts=counts)
    url = layout.url if url is None else url
    if report.ok or not url:
        return report
    archive = root / "archive" / f"{name}.zip"
    try:
        fetch_zip(url, archive, sha256=sha256, size=size, retries=retries, backoff=backoff, timeout=timeout, progress=progress)
        unpack_zip(archive, root / "extracted")
    except (DownloadError, InputError) as exc:
        report = check_paired(layout, root, counts=counts)
        report.problems.insert(0, f"automatic download failed: {exc}")
        return report
    report = check_paired(layout, root, counts=counts)
    if not report.ok:
        report.problems.insert(0, f"{url} was downloaded and unpacked into {root / 'extracted'} but does not have the expected layout")
    return report


def obtain(
    source: Source,
    root: str | Path,
    record: str | Path,
    *,
    url: str | None = None,
    counts: Mapping[str, int] | None = None,
    check_size: bool = True,
    retries: int = 4,
    timeout: float = 60,
) -> Path:
    """Make the raw dataset present under `root` (downloading from `url` if it is not), then write `record`.

    `url`: "" or None never downloads (3DHistech has no public download; the user places it). When
    the data are still incomplete, raise :class:`InputError` with the check's whole report, which
    names `root` and lists the steps to place the files by hand.
    """
    root, record = Path(root), Path(record)
    layout = layout_for(source, check_size=check_size)
    counts_ = checked_counts(source, counts)
    if url:
        report = download_or_instructions(source, root, url=url, counts=counts_, retries=retries, timeout=timeout, check_size=check_size)
    else:
        report = check_paired(layout, root, counts=counts_)
    report.raise_if_incomplete()
    base = find_layout_root(root, layout)
    write_json(record, {"source": source, "root": str(root), "layout_root": str(base), "url": url or None, "report": report.text()})
    return record
