"""A miniature of the DGNO authors' ``BBBC006.tar.gz`` and of the Broad raw folders its fields map to.

Import it in a test module (``from bbbc006_replica import ...``); the workflow test can serve
:func:`targz_bytes` through ``fixtures_http`` (add it to ``bbbc006_server.archives``).

The replica has the archive's structure, ``BBBC006/{train,test}/{GT,blur}/*.tif``, both channels,
six wells with two sites each, and a test split that is not by well (well h03 has a site on each
side). GT files carry the Broad z16 names; each field's blur files are Gaussian-blurred renderings of
the same synthetic nuclei scene, with sigma decreasing z02 → z06 → z10 so the sharpness check holds.
Blur file names, by ``naming``:

* ``"plane_suffix"``: the GT's name with ``-zNN`` before the extension (the plane is in the name);
* ``"sorted"``: Broad-like names whose UUIDs sort in plane order (rule "position" is right);
* ``"broad"``: the Broad names of the three planes, whose random UUIDs do not sort by plane;
* ``"opaque"``: names without any field (``img003_w1.tif``, blur ``img003_w1a.tif`` ...).

Faults for the refusal tests: ``drop_gt``, ``extra_blur`` and ``swap`` name a (well, site, channel).

Variations of how the archive really is: ``mac`` adds what an archive packed on a Mac holds (an
AppleDouble ``._<name>`` beside every image in GT/ and blur/, ``.DS_Store`` in every folder, a
``__MACOSX/`` tree); ``suffix`` (``.tif``, ``.tiff``, ``.TIF`` ...); ``nest`` puts the files in
sub-folders (``"well"``: ``GT/a01/...``; ``"plane"``: ``blur/z02/...``, the plane in the folder name).
:func:`targz_bytes` with ``shuffle`` writes the members in a seeded random order, each with pax
extended headers.
"""

from __future__ import annotations

import functools
import hashlib
import io
import random
import tarfile
import uuid
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import tifffile
from scipy.ndimage import gaussian_filter

from dgno.data.synth import render_nuclei

PREFIX = "mcf-z-stacks-03212011"
WELLS = ("a01", "b07", "c12", "d05", "h03", "p24")
SITES = (1, 2)
CHANNELS = ("w1", "w2")
TEST_FIELDS = frozenset({("c12", 1), ("c12", 2), ("p24", 1), ("h03", 2)})
SHAPE = (48, 64)  # (H, W)
SIGMAS = {1: 3.4, 2: 3.0, 5: 2.1, 6: 1.8, 10: 0.9, 13: 0.5, 16: 0.0}  # Gaussian stand-in for each plane's defocus
ARCHIVE_PLANES = (2, 6, 10)


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:4], "little")


def field_uuid(well: str, site: int, channel: str, z: int) -> str:
    return str(uuid.UUID(bytes=hashlib.md5(f"{well}{site}{channel}{z}".encode()).digest()))


def broad_name(well: str, site: int, channel: str, z: int) -> str:
    """The Broad file name of a field in plane z (a different UUID-like suffix per plane, as in the real data)."""
    return f"{PREFIX}_{well}_s{site}_{channel}{field_uuid(well, site, channel, z)}.tif"


def fields(split: str | None = None) -> list[tuple[str, int]]:
    out = [(w, s) for w in WELLS for s in SITES]
    return [f for f in out if split is None or (f in TEST_FIELDS) == (split == "test")]


@functools.cache
def scene(well: str, site: int, channel: str) -> tuple[np.ndarray, np.ndarray]:
    """(in-focus float image, uint16 labels) of a field: synthetic nuclei, the same in every plane."""
    return render_nuclei(SHAPE, n_nuclei=5, seed=_seed(well, site, channel), noise=False)


def plane_image(well: str, site: int, channel: str, z: int) -> np.ndarray:
    """uint16 image of a field in plane z: the scene blurred by SIGMAS[z], plus a little seeded noise."""
    img = scene(well, site, channel)[0]
    if SIGMAS[z]:
        img = gaussian_filter(img, SIGMAS[z])
    img = img + np.random.default_rng(_seed(well, site, channel, z)).normal(0, 2e-3, SHAPE)
    return (np.clip(img, 0, 1) * 60000 + 300).astype(np.uint16)


def blur_name(well: str, site: int, channel: str, z: int, naming: str, index: int = 0) -> str:
    if naming == "plane_suffix":
        return broad_name(well, site, channel, 16)[: -len(".tif")] + f"-z{z:02d}.tif"
    if naming == "sorted":
        u = field_uuid(well, site, channel, z)
        return f"{PREFIX}_{well}_s{site}_{channel}{ARCHIVE_PLANES.index(z)}{u[1:]}.tif"
    if naming == "broad":
        return broad_name(well, site, channel, z)
    if naming == "opaque":
        return f"img{index:03d}_{channel}{'abc'[ARCHIVE_PLANES.index(z)]}.tif"
    raise ValueError(f"naming={naming!r}")


def _tiff(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, arr, photometric="minisblack", metadata=None)
    return buf.getvalue()


APPLEDOUBLE = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        \x00\x02" + bytes(64)  # an AppleDouble header: not a TIFF


def _folder(split: str, sub: str, well: str, z: int, nest: str | None) -> str:
    if nest == "well":
        return f"BBBC006/{split}/{sub}/{well}"
    if nest == "plane" and sub == "blur":
        return f"BBBC006/{split}/{sub}/z{z:02d}"
    return f"BBBC006/{split}/{sub}"


def _with_mac_leftovers(members: dict[str, bytes]) -> dict[str, bytes]:
    """What macOS adds when it packs the folder: ._<name> beside every file, .DS_Store per folder, a __MACOSX/ tree."""
    out = dict(members)
    for name in members:
        folder, _, base = name.rpartition("/")
        out[f"{folder}/._{base}"] = APPLEDOUBLE
        out[f"{folder}/.DS_Store"] = b"Bud1" + bytes(60)
        out[f"__MACOSX/{folder}/._{base}"] = APPLEDOUBLE
    return out


def archive_members(
    naming: str = "plane_suffix", *, drop_gt=None, extra_blur=None, swap=None, mac: bool = False, suffix: str = ".tif", nest: str | None = None
) -> dict[str, bytes]:
    """{member name: bytes} of the replica archive (see the module docstring for the arguments)."""
    members = {"BBBC006/README.txt": b"not an image: the authors' rglob('*.tif') skips it\n"}

    def name(base: str) -> str:
        return base[: -len(".tif")] + suffix

    for i, (well, site) in enumerate(fields()):
        split = "test" if (well, site) in TEST_FIELDS else "train"
        for ch in CHANNELS:
            key = (well, site, ch)
            gt = broad_name(well, site, ch, 16) if naming != "opaque" else f"img{i:03d}_{ch}.tif"
            if key != drop_gt:
                members[f"{_folder(split, 'GT', well, 16, nest)}/{name(gt)}"] = _tiff(plane_image(well, site, ch, 16))
            planes = dict(zip(ARCHIVE_PLANES, ARCHIVE_PLANES[::-1])) if key == swap else {z: z for z in ARCHIVE_PLANES}
            for z, content in planes.items():
                members[f"{_folder(split, 'blur', well, z, nest)}/{name(blur_name(well, site, ch, z, naming, i))}"] = _tiff(plane_image(well, site, ch, content))
            if key == extra_blur:
                extra = blur_name(well, site, ch, 6, naming, i)[:-4] + "b.tif"
                members[f"{_folder(split, 'blur', well, 6, nest)}/{name(extra)}"] = _tiff(plane_image(well, site, ch, 6))
    return _with_mac_leftovers(members) if mac else members


def targz_bytes(members: dict[str, bytes], *, shuffle: int | None = None) -> bytes:
    """The members as a gzipped pax tar, byte-for-byte reproducible (fixed times and owners).

    `shuffle`: a seed; the members then come in that random order, each with pax extended headers
    (a fractional mtime and a comment), as archivers other than this sorted one write them.
    """
    items = sorted(members.items())
    if shuffle is not None:
        random.Random(shuffle).shuffle(items)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in items:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            if shuffle is not None:
                info.mtime = 1_300_000_000.25
                info.pax_headers = {"comment": "packed elsewhere", "LIBARCHIVE.xattr.com.apple.quarantine": "MDA4MTs="}
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_archive(path: Path, naming: str = "plane_suffix", *, shuffle: int | None = None, **options) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(targz_bytes(archive_members(naming, **options), shuffle=shuffle))
    return path


def unpack_replica(raw_root: Path, naming: str = "plane_suffix", **options) -> Path:
    """The replica unpacked by hand at ``raw_root/BBBC006`` (no tar round trip; ``__MACOSX/`` beside it): returns raw_root."""
    for name, data in archive_members(naming, **options).items():
        (raw_root / name).parent.mkdir(parents=True, exist_ok=True)
        (raw_root / name).write_bytes(data)
    return raw_root


def write_broad(root: Path, planes=(1, 5, 13, 16), *, labels: bool = True, skip=()) -> Path:
    """The Broad raw folders (``zNN/`` of plane images, ``labels/`` of PNG masks) for the replica's fields.

    `skip`: (well, site) fields left out of every folder, to test the refusal of unmappable fields.
    """
    for z in planes:
        for well, site in fields():
            for ch in CHANNELS:
                if (well, site) not in skip:
                    (root / f"z{z:02d}").mkdir(parents=True, exist_ok=True)
                    tifffile.imwrite(root / f"z{z:02d}" / broad_name(well, site, ch, z), plane_image(well, site, ch, z), photometric="minisblack", metadata=None)
    if labels:
        (root / "labels").mkdir(parents=True, exist_ok=True)
        for well, site in fields():
            if (well, site) not in skip:
                iio.imwrite(root / "labels" / f"{PREFIX}_{well}_s{site}.png", scene(well, site, "w1")[1])
    return root


def broad_zips(planes=(1, 5, 13, 16), *, labels: bool = True, listed: tuple[int, ...] = ()) -> dict[str, bytes]:
    """{archive name: zip bytes}: the Broad archives (``BBBC006_v1_images_z_NN.zip``, ``BBBC006_v1_labels.zip``) of the
    replica's fields, as the Broad server names and lays them out, for the workflow to download beside the archive.

    `listed`: more planes (z02/z06/z10) whose archives are served only to be listed (their central
    directory read over HTTP Range): padded with incompressible bytes, so that reading a whole one
    would show in the bytes served.
    """
    from fixtures_http import zip_bytes

    out = {}
    for z in planes:
        top = f"BBBC006_v1_images_z_{z:02d}"
        out[f"{top}.zip"] = zip_bytes({f"{top}/{broad_name(w, s, ch, z)}": _tiff(plane_image(w, s, ch, z)) for w, s in fields() for ch in CHANNELS})
    for z in listed:
        top = f"BBBC006_v1_images_z_{z:02d}"
        pad = random.Random(z).randbytes(20_000)
        out[f"{top}.zip"] = zip_bytes({f"{top}/{broad_name(w, s, ch, z)}": _tiff(plane_image(w, s, ch, z)) + pad for w, s in fields() for ch in CHANNELS})
    if labels:
        pngs = {f"BBBC006_v1_labels/{PREFIX}_{w}_s{s}.png": iio.imwrite("<bytes>", scene(w, s, "w1")[1], extension=".png") for w, s in fields()}
        out["BBBC006_v1_labels.zip"] = zip_bytes(pngs)
    return out
