"""BBBC006 (Broad Bioimage Benchmark Collection, human U2OS cells imaged through focus): fetch and prepare.

Protocol of the paper (after MPT): plane z16 is in focus and is the ground truth; planes z02, z06, z10
are the blurred training inputs; z01, z05, z13 the generalisation planes of the defocus-level tables.
Channels w1 (Hoechst, nuclei) and w2 (phalloidin, actin) are separate datasets. The split is 4:1
train/test *by well* (both sites of a well, in every plane, fall on the same side, so no field of
view is seen in training and testing), seeded and written to ``split.csv``. Intensities stay as the
original 16-bit camera values on disk; the per-image min-max normalisation of the paper is applied at
read time (manifest ``normalise: minmax`` → :func:`dgno.io.read_image`).

Raw layout under ``raw_root`` (what :func:`fetch` writes; hand-unpacked archives work too)::

    archives/BBBC006_v1_images_z_16.zip        downloaded archive (+ .zip.json: url, sha256, size)
    z16/ ... mcf-z-stacks-03212011_<well>_s<site>_w<1|2><UUID>.tif   (any depth; or BBBC006_v1_images_z_16/)
    labels/ ... mcf-z-stacks-03212011_<well>_s<site>.png             (or BBBC006_v1_labels/)

The z-plane is not part of the file names, only of the archive name, so each archive is unpacked
into its own plane folder.

Prepared layout (docs/CONVENTIONS.md), ids ``<well>_s<site>`` (e.g. ``a01_s1``)::

    manifest.json, split.csv (id,split with split in train/val/test), gt/<id>.tif (z16, original
    uint16 file), blur/z02/<id>.tif ..., labels/<id>.tif (uint16 instance masks from the PNGs)
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import numpy as np
import tifffile

import dgno
from dgno.data.download import fetch_zip, sha256_file, unpack_zip
from dgno.io import InputError, atomic_dir, read_json, read_raw_image, visible_files, write_json
from dgno.progress import bar as progress_bar

BASE_URL = "https://data.broadinstitute.org/bbbc/BBBC006/"
N_PLANES = 34  # z00 .. z33
GT_PLANE = 16
TRAIN_PLANES = (2, 6, 10)
EXTRA_PLANES = (1, 5, 13)
CHANNELS = ("w1", "w2")
CHANNEL_STAIN = {"w1": "Hoechst 33342 (nuclei)", "w2": "phalloidin (actin)"}
N_WELLS, N_SITES = 384, 2
IMAGES_PER_CHANNEL = N_WELLS * N_SITES  # 768 per channel per plane
IMAGE_SHAPE = (520, 696)  # (H, W) of every BBBC006 image
LABELS_ARCHIVE = "BBBC006_v1_labels.zip"
N_LABELS = 768
PREFIX = "mcf-z-stacks-03212011"

Channel = Literal["w1", "w2"]

# The part after the channel (a UUID in the real data) varies between files: accept anything there.
IMAGE_NAME_RE = re.compile(rf"^{PREFIX}_([a-p]\d{{2}})_s(\d+)_(w[12])(.*)\.tiff?$", re.IGNORECASE)
LABEL_NAME_RE = re.compile(rf"^{PREFIX}_([a-p]\d{{2}})_s(\d+)\.png$", re.IGNORECASE)


# ------------------------------------------------------------------------------------------- names


def plane_archive(z: int) -> str:
    """File name of the archive of plane `z` (two digits, as on the server)."""
    _check_plane(z)
    return f"BBBC006_v1_images_z_{z:02d}.zip"


def plane_url(z: int, base: str = BASE_URL) -> str:
    """Download URL of plane `z`; `base` is configurable so tests can point at a loopback server."""
    return base.rstrip("/") + "/" + plane_archive(z)


def labels_url(base: str = BASE_URL) -> str:
    return base.rstrip("/") + "/" + LABELS_ARCHIVE


def level_name(z: int) -> str:
    """Blur-level folder of plane `z` in a prepared dataset (``z02``), matching the config's level names."""
    return f"z{z:02d}"


def image_id(well: str, site: int) -> str:
    return f"{well}_s{site}"


def _check_plane(z: int) -> None:
    if not isinstance(z, (int, np.integer)) or not 0 <= int(z) < N_PLANES:
        raise ValueError(f"plane z={z!r}: BBBC006 has planes 0..{N_PLANES - 1}")


def _check_channel(channel: str) -> None:
    if channel not in CHANNELS:
        raise ValueError(f"channel={channel!r}; allowed: {', '.join(map(repr, CHANNELS))}")


# ------------------------------------------------------------------------------------------- fetch


def plane_dir(root: str | Path, z: int) -> Path | None:
    """The unpacked folder of plane `z` under `root` (``z16`` or the archive's own ``BBBC006_v1_images_z_16``)."""
    root = Path(root)
    for name in (level_name(z), Path(plane_archive(z)).stem):
        if (root / name).is_dir():
            return root / name
    return None


def labels_dir(root: str | Path) -> Path | None:
    root = Path(root)
    for name in ("labels", Path(LABELS_ARCHIVE).stem):
        if (root / name).is_dir():
            return root / name
    return None


def _fetch_archive(url: str, raw_root: Path, archive_name: str, out_name: str, *, sha256, size, **kw) -> Path:
    """Download + verify + unpack one archive and record url/sha256/size beside it for the manifest."""
    archive = raw_root / "archives" / archive_name
    fetch_zip(url, archive, sha256=sha256, size=size, **kw)
    out = unpack_zip(archive, raw_root / out_name)
    write_json(archive.with_name(archive.name + ".json"), {"file": archive_name, "url": url, "sha256": sha256_file(archive), "size": archive.stat().st_size})
    return out


def fetch_plane(
    z: int, raw_root: str | Path, *, base_url: str = BASE_URL, sha256: str | None = None, size: int | None = None,
    retries: int = 4, backoff: float = 1.0, timeout: float = 60, progress: bool = True,
) -> Path:
    """Download, verify and unpack plane `z` into ``raw_root/zNN``; returns that folder.

    The archive is kept under ``raw_root/archives`` (a re-run verifies it instead of downloading
    again). The server publishes no checksums; pass `sha256` to pin one you recorded.
    """
    _check_plane(z)
    kw = dict(retries=retries, backoff=backoff, timeout=timeout, progress=progress)
    return _fetch_archive(plane_url(z, base_url), Path(raw_root), plane_archive(z), level_name(z), sha256=sha256, size=size, **kw)


def fetch_labels(
    raw_root: str | Path, *, base_url: str = BASE_URL, sha256: str | None = None, size: int | None = None,
    retries: int = 4, backoff: float = 1.0, timeout: float = 60, progress: bool = True,
) -> Path:
    """Download, verify and unpack the nucleus label masks into ``raw_root/labels``; returns that folder."""
    kw = dict(retries=retries, backoff=backoff, timeout=timeout, progress=progress)
    return _fetch_archive(labels_url(base_url), Path(raw_root), LABELS_ARCHIVE, "labels", sha256=sha256, size=size, **kw)


def fetch(
    raw_root: str | Path,
    *,
    planes: Iterable[int] = (GT_PLANE, *TRAIN_PLANES, *EXTRA_PLANES),
    labels: bool = True,
    base_url: str = BASE_URL,
    checksums: dict[str, str] | None = None,
    retries: int = 4,
    backoff: float = 1.0,
    timeout: float = 60,
    progress: bool = True,
) -> list[Path]:
    """Fetch every plane the protocol needs (and the labels); `checksums` maps archive names to SHA-256."""
    checksums = checksums or {}
    kw = dict(base_url=base_url, retries=retries, backoff=backoff, timeout=timeout, progress=progress)
    out = [fetch_plane(z, raw_root, sha256=checksums.get(plane_archive(z)), **kw) for z in sorted(set(planes))]
    if labels:
        out.append(fetch_labels(raw_root, sha256=checksums.get(LABELS_ARCHIVE), **kw))
    return out


# ----------------------------------------------------------------------------------------- pairing


def _fix_for(root: Path) -> str:
    return f"download and unpack the missing archives: `dgno data check bbbc006 --root {root}` prints the commands"


def index_plane(root: str | Path, z: int, channel: Channel) -> dict[tuple[str, int], Path]:
    """{(well, site): file} of one channel in plane `z`; files that are not BBBC006 images are ignored."""
    _check_plane(z)
    _check_channel(channel)
    root = Path(root)
    folder = plane_dir(root, z)
    if folder is None:
        raise InputError(
            f"{root}: plane z{z:02d} not found (looked for {root / level_name(z)} and {root / Path(plane_archive(z)).stem}). "
            f"Fix: {_fix_for(root)}"
        )
    found: dict[tuple[str, int], Path] = {}
    for path in visible_files(folder, (".tif", ".tiff"), recursive=True)[0]:  # hidden files (macOS '._' forks) are never images
        m = IMAGE_NAME_RE.match(path.name)
        if m is None:
            continue  # TIFFs that are not BBBC006 images
        well, site, ch = m.group(1).lower(), int(m.group(2)), m.group(3).lower()
        if ch != channel:
            continue
        if (well, site) in found:
            raise InputError(
                f"{path}: a second {channel} image of well {well} site {site} in plane z{z:02d} (first: {found[well, site]}). "
                f"Fix: {folder} must hold exactly one unpacked archive; delete it and unpack BBBC006_v1_images_z_{z:02d}.zip again"
            )
        found[well, site] = path
    if not found:
        raise InputError(f"{folder}: no {channel} images of plane z{z:02d}. Fix: {_fix_for(root)}")
    return found


def hidden_files(root: str | Path, planes: Iterable[int]) -> dict[str, int]:
    """{plane level: files skipped as never images (dgno.io.is_hidden)} in the unpacked plane folders, for the manifest."""
    folders = {level_name(z): plane_dir(root, z) for z in sorted(set(planes))}
    return {lvl: len(visible_files(f, (".tif", ".tiff"), recursive=True)[1]) for lvl, f in folders.items() if f is not None}


def describe_fields(keys: Iterable[tuple[str, int]], limit: int = 5) -> str:
    keys = sorted(keys)
    shown = ", ".join(image_id(w, s) for w, s in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def pair_planes(
    root: str | Path,
    *,
    gt_plane: int = GT_PLANE,
    blur_planes: Iterable[int],
    channel: Channel,
) -> list[tuple[str, int, Path, dict[int, Path]]]:
    """[(well, site, gt_file, {z: blur_file})] for one channel, sorted by (well, site).

    Pairs by (well, site, channel) across the plane folders. Every plane must hold exactly the same
    fields of view as the GT plane: a field missing from any plane (or present only in a blur plane)
    means a damaged or partial unpack, which is reported rather than silently shrinking the dataset.
    """
    root = Path(root)
    blur_planes = sorted({int(z) for z in blur_planes})
    if not blur_planes:
        raise ValueError("blur_planes is empty: give at least one defocused plane, e.g. (2, 6, 10)")
    if gt_plane in blur_planes:
        raise ValueError(f"gt_plane={gt_plane} is also in blur_planes={blur_planes}: a plane cannot be its own ground truth")
    gt = index_plane(root, gt_plane, channel)
    blurs = {z: index_plane(root, z, channel) for z in blur_planes}
    for z, found in blurs.items():
        missing, extra = gt.keys() - found.keys(), found.keys() - gt.keys()
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"lacks {len(missing)} {channel} image(s) that z{gt_plane:02d} has ({describe_fields(missing)})")
            if extra:
                parts.append(f"has {len(extra)} {channel} image(s) missing from z{gt_plane:02d} ({describe_fields(extra)})")
            raise InputError(
                f"{plane_dir(root, z)}: plane z{z:02d} " + " and ".join(parts) + ". "
                "Fix: an archive was only partly unpacked; delete the plane folders named here and unpack their archives again"
            )
    return [(well, site, gt[well, site], {z: blurs[z][well, site] for z in blur_planes}) for well, site in sorted(gt)]


def index_labels(root: str | Path) -> dict[tuple[str, int], Path]:
    """{(well, site): PNG mask} from the unpacked labels archive under `root`."""
    root = Path(root)
    folder = labels_dir(root)
    if folder is None:
        raise InputError(
            f"{root}: label masks not found (looked for {root / 'labels'} and {root / Path(LABELS_ARCHIVE).stem}). "
            f"Fix: {_fix_for(root)}, or pass labels=False to prepare without them"
        )
    found = {}
    for path in visible_files(folder, (".png",), recursive=True)[0]:  # hidden files (macOS '._' forks) are never masks
        m = LABEL_NAME_RE.match(path.name)
        if m is not None:
            found[m.group(1).lower(), int(m.group(2))] = path
    if not found:
        raise InputError(f"{folder}: no BBBC006 label masks ({PREFIX}_<well>_s<site>.png). Fix: {_fix_for(root)}")
    return found


def label_mask(path: str | Path) -> np.ndarray:
    """Read a label PNG as a uint16 instance mask (0 = background).

    Instance-id images are kept as they are; a binary mask (one foreground value) is split into
    connected components; a colour-coded mask gets one id per colour. StarDist AP needs instances.
    """
    arr = read_raw_image(path)
    if arr.ndim == 3:
        arr = arr[..., :3]
        if np.all(arr == arr[..., :1]):
            arr = arr[..., 0]
        else:  # one id per distinct colour, black = background
            flat = arr.reshape(-1, 3).astype(np.uint64)
            code = (flat[:, 0] << 32) | (flat[:, 1] << 16) | flat[:, 2]
            colours, ids = np.unique(code, return_inverse=True)  # colours ascending: black (0), if any, gets id 0
            arr = ids.reshape(arr.shape[:2]) + (0 if colours[0] == 0 else 1)
    if arr.dtype.kind not in "uib":
        raise InputError(f"{path}: label mask has pixel type {arr.dtype}, expected integers. Fix: use the masks of {LABELS_ARCHIVE}")
    values = np.unique(arr)
    if values.size <= 2:
        from skimage.measure import label as connected_components

        arr = connected_components(arr > 0, connectivity=1)
    if arr.min() < 0 or arr.max() > np.iinfo(np.uint16).max:
        raise InputError(f"{path}: label ids outside 0..65535. Fix: use the masks of {LABELS_ARCHIVE}")
    return arr.astype(np.uint16)


# ------------------------------------------------------------------------------------------- split


def well_rank(seed: int, well: str) -> bytes:
    return hashlib.sha256(f"bbbc006-split:{seed}:{well}".encode()).digest()


def split_by_well(wells: Iterable[str], *, test_fraction: float = 0.2, seed: int, n_val: int = 0) -> dict[str, str]:
    """{well: 'train'|'val'|'test'}: a seeded permutation of the sorted unique wells.

    The permutation orders wells by SHA-256 of (seed, well), so it depends on nothing but the seed and
    the well names (not on numpy's generator or the order `wells` came in). The first
    round(n · test_fraction) wells (at least one) are test, the next `n_val` are validation (carved
    from what would be training wells), the rest train. Both channels have the same wells, so w1
    and w2 get the same split.
    """
    unique = sorted(set(wells))
    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction={test_fraction!r}: expected a fraction in (0, 1), e.g. 0.2 for the 4:1 split")
    if n_val < 0:
        raise ValueError(f"n_val={n_val!r}: expected >= 0 wells")
    n = len(unique)
    n_test = max(1, int(round(n * float(test_fraction))))
    if n_test + n_val >= n:
        raise ValueError(f"{n} well(s) cannot give {n_test} test + {n_val} validation wells and still leave a training well")
    order = sorted(unique, key=lambda w: well_rank(seed, w))
    out = dict.fromkeys(unique, "train")
    out.update(dict.fromkeys(order[:n_test], "test"))
    out.update(dict.fromkeys(order[n_test:n_test + n_val], "val"))
    return out


# ----------------------------------------------------------------------------------------- prepare


def read_uint16(path: Path) -> np.ndarray:
    """Decode a BBBC006 image fully (catches truncated files) and check it is a 2-D 16-bit plane."""
    try:
        arr = tifffile.imread(path)
    except Exception as exc:  # noqa: BLE001 - any decoder failure means the same to the user
        raise InputError(f"{path}: cannot be decoded as a TIFF ({type(exc).__name__}: {exc}). Fix: unpack its archive again") from exc
    if arr.ndim != 2 or arr.dtype != np.uint16:
        raise InputError(f"{path}: expected a 2-D uint16 image, got {arr.dtype} {arr.shape}. Fix: use the original BBBC006 TIFFs")
    return arr


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link the original file (saves GBs; dgno never writes a file in place) or copy it."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def source_record(raw_root: Path, archive_name: str, url: str) -> dict:
    """What the manifest says about one archive: the download record, or the archive's hash, or unknown."""
    archive = raw_root / "archives" / archive_name
    sidecar = archive.with_name(archive_name + ".json")
    if sidecar.is_file():
        return read_json(sidecar)
    if archive.is_file():
        return {"file": archive_name, "url": url, "sha256": sha256_file(archive), "size": archive.stat().st_size}
    return {"file": archive_name, "url": url, "sha256": None, "note": "archive not under raw_root/archives (unpacked by hand): checksum unknown"}


def prepare_dataset(
    raw_root: str | Path,
    out_dir: str | Path,
    *,
    channel: Channel,
    seed: int,
    train_planes: Iterable[int] = TRAIN_PLANES,
    extra_planes: Iterable[int] = EXTRA_PLANES,
    gt_plane: int = GT_PLANE,
    test_fraction: float = 0.2,
    n_val_wells: int = 8,
    labels: bool = True,
    progress: bool = True,
) -> Path:
    """Write one channel of BBBC006 in the shared dataset layout (module docstring) and return out_dir.

    Files are validated (every image decodes as 2-D uint16, blur planes and masks have the GT's
    shape) and hard-linked or copied unchanged: the 16-bit originals are what the paper normalises
    per image at read time. Built in a temporary folder and renamed into place (``atomic_dir``), so an
    interrupted run leaves no complete-looking dataset. An existing out_dir is replaced only if it
    is a dataset (has manifest.json) or empty.
    """
    _check_channel(channel)
    raw_root, out_dir = Path(raw_root), Path(out_dir)
    train_planes, extra_planes = tuple(sorted(set(train_planes))), tuple(sorted(set(extra_planes)))
    for z in (gt_plane, *train_planes, *extra_planes):
        _check_plane(z)
    if out_dir.exists() and not (out_dir / "manifest.json").is_file() and any(out_dir.iterdir()):
        raise InputError(f"{out_dir}: exists and is not a dataset (no manifest.json). Fix: choose another output folder or empty it")
    blur_planes = sorted(set(train_planes) | set(extra_planes))
    pairs = pair_planes(raw_root, gt_plane=gt_plane, blur_planes=blur_planes, channel=channel)
    split = split_by_well({well for well, *_ in pairs}, test_fraction=test_fraction, seed=seed, n_val=n_val_wells)
    masks = label_files(raw_root, pairs) if labels else {}
    with atomic_dir(out_dir) as tmp:
        shape = write_fields(tmp, pairs, masks, blur_planes, progress=progress, desc=f"BBBC006 {channel} → {out_dir.name}")
        rows = [(image_id(well, site), split[well]) for well, site, *_ in pairs]
        with (tmp / "split.csv").open("w", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(["id", "split"])
            writer.writerows(rows)
        sources = {plane_archive(z): source_record(raw_root, plane_archive(z), plane_url(z)) for z in [gt_plane, *blur_planes]}
        if labels:
            sources[LABELS_ARCHIVE] = source_record(raw_root, LABELS_ARCHIVE, labels_url())
        manifest = _manifest(channel, seed, gt_plane, train_planes, extra_planes, test_fraction, n_val_wells, split, rows, shape, labels, sources)
        manifest["hidden_files_skipped"] = hidden_files(raw_root, [gt_plane, *blur_planes])
        write_json(tmp / "manifest.json", manifest)
    return out_dir


def label_files(raw_root: Path, pairs: list[tuple[str, int, Path, dict[int, Path]]]) -> dict[tuple[str, int], Path]:
    """{(well, site): PNG mask} for every paired field, or stop naming the fields without one."""
    masks = index_labels(raw_root)
    missing = {(w, s) for w, s, *_ in pairs} - masks.keys()
    if missing:
        raise InputError(
            f"{labels_dir(raw_root)}: no label mask for {len(missing)} field(s) of view ({describe_fields(missing)}). "
            f"Fix: unpack {LABELS_ARCHIVE} again, or pass labels=False"
        )
    return masks


def write_fields(
    out: Path, pairs: list[tuple[str, int, Path, dict[int, Path]]], masks: dict, blur_planes: Iterable[int], *, prefix: str = "", progress: bool, desc: str
) -> tuple[int, ...] | None:
    """gt/, blur/zNN/ and (with `masks`) labels/ of paired fields under `out`, ids ``<prefix><well>_s<site>``; returns the image shape.

    Every image is decoded and shape-checked, then hard-linked or copied unchanged.
    """
    for sub in ["gt", *(f"blur/{level_name(z)}" for z in blur_planes), *(["labels"] if masks else [])]:
        (out / sub).mkdir(parents=True, exist_ok=True)
    shape = None
    for well, site, gt_path, blur_paths in progress_bar(pairs, desc=desc, unit="pair", enabled=progress):
        ident = prefix + image_id(well, site)
        gt = read_uint16(gt_path)
        shape = shape or gt.shape
        if gt.shape != shape:
            raise InputError(f"{gt_path}: image is {gt.shape}, the others are {shape}. Fix: use the original BBBC006 TIFFs")
        link_or_copy(gt_path, out / "gt" / f"{ident}.tif")
        for z, path in blur_paths.items():
            blur = read_uint16(path)
            if blur.shape != gt.shape:
                raise InputError(f"{path}: shape {blur.shape} differs from its ground truth {gt_path} {gt.shape}. Fix: unpack the archive again")
            link_or_copy(path, out / "blur" / level_name(z) / f"{ident}.tif")
        if masks:
            mask = label_mask(masks[well, site])
            if mask.shape != gt.shape:
                raise InputError(f"{masks[well, site]}: mask shape {mask.shape} differs from the image's {gt.shape}. Fix: unpack {LABELS_ARCHIVE} again")
            tifffile.imwrite(out / "labels" / f"{ident}.tif", mask, photometric="minisblack", metadata=None)
    return shape


def _manifest(channel, seed, gt_plane, train_planes, extra_planes, test_fraction, n_val_wells, split, rows, shape, labels, sources) -> dict:
    """Everything needed to interpret the prepared files and to re-make them."""
    counts = {s: sum(1 for _, sp in rows if sp == s) for s in ("train", "val", "test")}
    levels = {level_name(z): {"plane": z, "role": "train"} for z in train_planes}
    levels.update({level_name(z): {"plane": z, "role": "generalisation"} for z in extra_planes if z not in train_planes})
    return {
        "source": "BBBC006 v1, Broad Bioimage Benchmark Collection (Ljosa et al. 2012): U2OS cells, 384-well plate, 34 z-planes",
        "generator": "dgno.data.bbbc006.prepare_dataset",
        "channel": channel,
        "stain": CHANNEL_STAIN[channel],
        "gt_plane": gt_plane,
        "gt_level": level_name(gt_plane),
        "levels": levels,
        "train_levels": [level_name(z) for z in train_planes],
        "test_levels": sorted(levels),
        "size": list(shape) if shape else None,
        "dtype": "uint16",
        "normalise": "minmax",
        "intensity_encoding": "original 16-bit camera values, files unchanged; read with per-image min-max to [0, 1] (paper protocol)",
        "id_pattern": "<well>_s<site>",
        "seed": seed,
        "split": {
            "unit": "well (every site and plane of a well on one side)",
            "method": "wells sorted by sha256('bbbc006-split:<seed>:<well>'); first round(n*test_fraction) test, next n_val_wells val",
            "test_fraction": test_fraction,
            "n_val_wells": n_val_wells,
            "wells": {s: sorted(w for w, sp in split.items() if sp == s) for s in ("train", "val", "test")},
        },
        "n_train": counts["train"],
        "n_val": counts["val"],
        "n_test": counts["test"],
        "labels": "labels/<id>.tif: uint16 nucleus instance masks from BBBC006_v1_labels (in-focus annotation)" if labels else None,
        "sources": sources,
        "versions": {"dgno": dgno.__version__, "numpy": np.__version__, "tifffile": tifffile.__version__},
    }
