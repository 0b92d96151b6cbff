"""A microscope image file in and out with its layout and metadata: TIFF (ImageJ, OME, plain), PNG, JPEG.

A restored file should be usable wherever its input was: same name, same container, same pixel type,
same axes, and the metadata that measurements depend on. :func:`read_image_file` returns the pixels of
the file's first image series as stored (tifffile's ``series[0]``, level 0) with an :class:`ImageSource`
describing how it was stored; :func:`write_like` writes an array of the same layout back the same way:

* ImageJ TIFF: the ImageJ metadata (unit, z spacing, frame interval, display ranges, LUTs, labels, info,
  properties) through tifffile's ImageJ writer, and the resolution tags (the pixel size).
* OME-TIFF: the input's OME-XML itself (pixel sizes and units, channel names and colours, plane
  positions, instrument, annotations), with only what describes the file's layout rewritten: the
  ``TiffData`` (one block of planes in this file), a fresh ``UUID``, other images of a multi-image file
  dropped, and the channels when one is chosen. Non-ASCII characters (µm) become XML character references,
  since TIFF strings are 7-bit.
* Other TIFFs: resolution tags, photometric (RGB or grey), planar layout, the ImageDescription text,
  tifffile's own shape record; lossless zlib compression when the input was compressed at all.
* PNG stays PNG (8/16-bit); JPEG stays JPEG (8-bit, quality 95, one more lossy encoding); another pixel type
  (never read from such files, but an array may carry one) goes to a TIFF named ``<stem>.tif``.
  PNG and JPEG carry no microscope metadata worth keeping.
"""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dgno.io import InputError, atomic_path

TIFF_SUFFIXES = (".tif", ".tiff")
PNG_SUFFIXES = (".png",)
JPEG_SUFFIXES = (".jpg", ".jpeg")
PNG_PALETTE = 3  # the colour type byte of a PNG's IHDR chunk for an indexed-colour image
JPEG_QUALITY = 95
PHOTOMETRIC_MINISWHITE, PHOTOMETRIC_RGB, PHOTOMETRIC_PALETTE, PHOTOMETRIC_YCBCR = 0, 2, 3, 6  # TIFF tag 262 values
# Keys tifffile's ImageJ writer derives from the array and its axes: passed on, they would contradict it.
_IMAGEJ_DERIVED = frozenset({"ImageJ", "images", "channels", "slices", "frames", "hyperstack", "axes", "shape"})
# ImageJ keys that list one value per channel (Ranges: a (min, max) pair per channel).
_IMAGEJ_PER_CHANNEL = ("LUTs", "Ranges")


@dataclass(frozen=True)
class ImageSource:
    """How one image file stored its pixels: what :func:`write_like` needs to write a restoration alike.

    ``axes``: tifffile's letters for ``shape`` (Y, X rows/columns; S colour samples; C channels; Z, T
    planes; Q, I unknown: a tifffile shape record or a plain page sequence).
    """

    path: Path
    kind: str  # "tiff", "png" or "jpeg"
    axes: str
    shape: tuple[int, ...]
    dtype: str
    imagej: dict[str, Any] | None = None
    ome: str | None = None
    shaped: bool = False  # tifffile's JSON shape record (its axes are Q unless it names them)
    description: str | None = None  # a plain TIFF's ImageDescription
    resolution: tuple[float, float] | None = None
    resolution_unit: int | None = None
    photometric: int | None = None
    planar_separate: bool = False
    compressed: bool = False
    extrasamples: tuple[int, ...] = ()
    significant_bits: int | None = None
    channel_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())


def _fail(path: Path, problem: str, fix: str) -> InputError:
    return InputError(f"{path}: {problem}. Fix: {fix}")


def _ome_details(xml: str) -> tuple[int | None, tuple[str, ...]]:
    """(SignificantBits, channel names) of the first image of an OME-XML document."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return None, ()
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    pixels = root.find(f"{ns}Image/{ns}Pixels")
    if pixels is None:
        return None, ()
    bits = pixels.get("SignificantBits")
    names = tuple(c.get("Name", "") for c in pixels.findall(f"{ns}Channel"))
    return (int(bits) if bits and bits.isdigit() else None), (names if any(names) else ())


class PartOfAnotherImage(InputError):
    """A file that holds planes of another file's image (an OME ``BinaryOnly`` file): not an image of its own."""


def _check_ome_files(path: Path, xml: str) -> None:
    """A multi-file OME-TIFF: refuse a file that only holds pixels of another, and one whose companions are missing.

    Why: tifffile fills the planes of a missing companion file with zeros, which would be restored and
    written as if they were data.
    """
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return
    ns = _ns(root)
    binary_only = root.find(f"{ns}BinaryOnly")
    if binary_only is not None:
        owner = binary_only.get("MetadataFile", "the file that holds the metadata")
        raise PartOfAnotherImage(f"{path}: holds only pixels of the multi-file OME-TIFF {owner}, and is restored with it")
    named = {u.get("FileName") for u in root.iter(f"{ns}UUID") if u.get("FileName")}
    missing = sorted(n for n in named if not (path.parent / n).is_file())
    if missing:
        raise _fail(path, f"a multi-file OME-TIFF whose companion file(s) {', '.join(missing)} are not in {path.parent}", "copy the whole set of files into one folder")


def _read_tiff(path: Path) -> tuple[np.ndarray, ImageSource]:
    import tifffile

    with tifffile.TiffFile(path) as tif:
        if tif.is_ome:
            _check_ome_files(path, tif.ome_metadata)
        series = tif.series[0]
        data = series.asarray()
        page = series.keyframe
        ome = tif.ome_metadata if tif.is_ome else None
        imagej = dict(tif.imagej_metadata) if tif.is_imagej and tif.imagej_metadata else None
        bits, names = _ome_details(ome) if ome else (None, ())
        if imagej and not names and isinstance(imagej.get("Labels"), list) and "C" in series.axes:
            labels = imagej["Labels"]
            names = tuple(map(str, labels)) if len(labels) == series.shape[series.axes.index("C")] else ()
        if int(page.photometric) == PHOTOMETRIC_PALETTE:
            raise _fail(path, "an indexed-colour (palette) image: its values are colour numbers, not intensities", "save it as grey or RGB")
        plain = not (ome or imagej or tif.is_shaped)
        notes = (f"{path}: holds {len(tif.series)} image series; only the first ({series.axes} {tuple(series.shape)}) is restored",) if len(tif.series) > 1 else ()
        source = ImageSource(
            path, "tiff", series.axes, tuple(series.shape), data.dtype.str,
            imagej=imagej, ome=ome, shaped=bool(tif.is_shaped and not (ome or imagej)),
            description=(page.description or None) if plain else None,
            resolution=tuple(page.resolution) if "XResolution" in page.tags else None,
            resolution_unit=int(page.resolutionunit) if "ResolutionUnit" in page.tags else None,
            photometric=int(page.photometric), planar_separate=int(page.planarconfig) == 2,
            compressed=int(page.compression) != 1, extrasamples=tuple(int(e) for e in page.extrasamples),
            significant_bits=bits, channel_names=names, notes=notes,
        )  # fmt: skip
    return data, source


def _read_png_jpeg(path: Path, kind: str) -> tuple[np.ndarray, ImageSource]:
    import imagecodecs

    raw = path.read_bytes()
    if kind == "png" and raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) > 25 and raw[25] == PNG_PALETTE:
        raise _fail(path, "an indexed-colour (palette) image: its values are colour numbers, not intensities", "save it as grey or RGB")
    data = np.asarray((imagecodecs.png_decode if kind == "png" else imagecodecs.jpeg8_decode)(raw))
    if kind == "jpeg" and data.ndim == 3 and data.shape[-1] == 4:
        raise _fail(path, "a CMYK JPEG (4 ink channels, not light intensities)", "save it as RGB or grey")
    axes = "YX" if data.ndim == 2 else "YXS"
    return data, ImageSource(path, kind, axes, tuple(data.shape), data.dtype.str)


def read_image_file(path: str | Path) -> tuple[np.ndarray, ImageSource]:
    """The pixels of an image file as stored (dtype and values untouched) and how they were stored.

    Raises :class:`InputError` (file, problem, fix) for a missing, empty, unsupported or undecodable file.
    """
    path = Path(path)
    if path.is_dir():
        raise _fail(path, "is a folder", "pass image files, or the folder itself as an input to restore the images in it")
    if not path.exists():
        raise _fail(path, "file does not exist", "check the path")
    if path.stat().st_size == 0:
        raise _fail(path, "file is empty (0 bytes)", "copy the image again")
    suffix = path.suffix.lower()
    kinds = {**dict.fromkeys(TIFF_SUFFIXES, "tiff"), **dict.fromkeys(PNG_SUFFIXES, "png"), **dict.fromkeys(JPEG_SUFFIXES, "jpeg")}
    if suffix not in kinds:
        raise _fail(path, f"unsupported image type {suffix or '(no suffix)'!r}", f"pass TIFF, PNG or JPEG files ({', '.join(kinds)})")
    try:
        data, source = _read_tiff(path) if kinds[suffix] == "tiff" else _read_png_jpeg(path, kinds[suffix])
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - every decoder failure means the same thing to the user
        raise _fail(path, f"cannot be decoded as an image ({type(exc).__name__}: {exc})", "the file is truncated or not an image; copy or export it again") from exc
    if data.size == 0:
        raise _fail(path, "holds no pixels", "export the image again")
    return data, source


def output_name(source: ImageSource, dtype: np.dtype) -> str:
    """The restored file's name: the input's, unless its container cannot hold ``dtype`` (then :func:`converted_name`)."""
    dtype = np.dtype(dtype)
    fits = {"tiff": True, "png": dtype in (np.uint8, np.uint16), "jpeg": dtype == np.uint8}[source.kind]
    return source.path.name if fits else converted_name(source.path)


def converted_name(path: Path) -> str:
    """The name of a restored PNG/JPEG written as TIFF: the whole input name plus ``.tif`` (``x.jpg`` → ``x.jpg.tif``).

    Why not ``x.tif``: a folder may hold both ``x.jpg`` and ``x.tif``; their outputs must not meet. The
    name is known before the file is read, so clashes and ``--skip-existing`` are settled up front.
    """
    return f"{path.name}.tif"


def may_convert(path: Path) -> bool:
    """Whether the output of ``path`` may be written under :func:`converted_name` (a PNG or JPEG input)."""
    return path.suffix.lower() in PNG_SUFFIXES + JPEG_SUFFIXES


def _ns(root: ET.Element) -> str:
    return root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""


def _select_ome_channel(pixels: ET.Element, ns: str, channel: int) -> None:
    """Keep one channel in an OME Pixels element: its Channel, its Planes (renumbered TheC = 0), SizeC = 1."""
    for k, element in enumerate(pixels.findall(f"{ns}Channel")):
        if k != channel:
            pixels.remove(element)
    for plane in pixels.findall(f"{ns}Plane"):
        if int(plane.get("TheC", "0")) != channel:
            pixels.remove(plane)
        else:
            plane.set("TheC", "0")
    pixels.set("SizeC", "1")


def ome_for_output(xml: str, *, planes: int, channel: int | None = None) -> str:
    """The input's OME-XML describing the restored file (module docstring): ASCII, one image, one TiffData."""
    root = ET.fromstring(xml)
    ns = _ns(root)
    ET.register_namespace("", ns.strip("{}"))
    ET.register_namespace("xsi", "http://www.w3.org/2001/XMLSchema-instance")
    for image in root.findall(f"{ns}Image")[1:]:
        root.remove(image)
    pixels = root.find(f"{ns}Image/{ns}Pixels")
    if pixels is None:
        raise ValueError("OME-XML without Image/Pixels")
    for element in [e for e in pixels if e.tag in (f"{ns}TiffData", f"{ns}BinData", f"{ns}MetadataOnly")]:
        pixels.remove(element)
    if channel is not None:
        _select_ome_channel(pixels, ns, channel)
    pixels.attrib.pop("BigEndian", None)  # tifffile writes the machine's byte order
    after = [k for k, e in enumerate(pixels) if e.tag == f"{ns}Channel"]
    pixels.insert(after[-1] + 1 if after else 0, ET.Element(f"{ns}TiffData", {"IFD": "0", "PlaneCount": str(planes)}))
    root.set("UUID", f"urn:uuid:{uuid.uuid4()}")
    return ET.tostring(root, encoding="us-ascii", xml_declaration=True).decode("ascii")


def _ome_or_none(xml: str, axes: str, shape: tuple[int, ...], channel: int | None) -> str | None:
    """:func:`ome_for_output`, or None for OME-XML that does not parse (the file is then written with its axes only)."""
    planes = int(np.prod([n for a, n in zip(axes, shape) if a not in "YXS"], dtype=np.int64))
    try:
        return ome_for_output(xml, planes=planes, channel=channel)
    except (ET.ParseError, ValueError):
        return None


def _imagej_for_output(metadata: dict[str, Any], *, axes: str, channel: int | None, same_planes: bool) -> dict[str, Any]:
    """The input's ImageJ metadata for the restored array: derived keys dropped, per-channel lists cut."""
    kept = {k: v for k, v in metadata.items() if k not in _IMAGEJ_DERIVED}
    if channel is not None:
        if isinstance(kept.get("LUTs"), list) and channel < len(kept["LUTs"]):
            kept["LUTs"] = [kept["LUTs"][channel]]
        if isinstance(kept.get("Ranges"), (list, tuple)) and 2 * channel + 1 < len(kept["Ranges"]):
            kept["Ranges"] = tuple(kept["Ranges"][2 * channel : 2 * channel + 2])
        kept.pop("mode", None)  # composite/colour need several channels
    if not same_planes:
        kept.pop("Labels", None)  # one label per plane of the input
    return {**kept, "axes": axes}


def _layout_options(source: ImageSource, axes: str, shape: tuple[int, ...]) -> dict[str, Any]:
    """Photometric, planar layout and extra samples (alpha) of an array of ``axes`` stored like ``source``."""
    samples = shape[axes.index("S")] if "S" in axes else 1
    # decoded JPEG tiles are RGB; samples the file did not have (--axes SYX on three grey pages) are colour by the user's word
    colour = samples >= 3 and (source.photometric in (PHOTOMETRIC_RGB, PHOTOMETRIC_YCBCR) or "S" not in source.axes)
    grey = "miniswhite" if source.photometric == PHOTOMETRIC_MINISWHITE else "minisblack"
    options: dict[str, Any] = {"photometric": "rgb" if colour else grey}
    if "S" in axes:
        options["planarconfig"] = "separate" if axes.index("S") < axes.index("Y") else "contig"
        extra = samples - (3 if colour else 1)
        if extra > 0 and len(source.extrasamples) >= extra:
            options["extrasamples"] = source.extrasamples[:extra]
    return options


def imagej_axes(axes: str) -> str | None:
    """``axes`` as ImageJ stores them, or None when it cannot: ImageJ's letters in its order TZCYXS.

    A file ImageJ wrote with ``images=n`` and no ``slices=`` reads as ``IYX``: its planes are slices, so
    ``I`` is written back as ``Z``.
    """
    if "I" in axes and "Z" not in axes:
        axes = axes.replace("I", "Z")
    return axes if "".join(a for a in "TZCYXS" if a in axes) == axes else None


def _tiff_options(source: ImageSource, axes: str, shape: tuple[int, ...], channel: int | None) -> dict[str, Any]:
    """tifffile.imwrite keywords that store an array of ``axes`` like ``source`` stored its own."""
    options = _layout_options(source, axes, shape)
    if source.resolution is not None:
        options["resolution"] = source.resolution
        if source.resolution_unit is not None:
            options["resolutionunit"] = source.resolution_unit
    if source.compressed:
        options["compression"] = "zlib"
    same_planes = tuple(shape) == source.shape
    if source.imagej is not None and (ij_axes := imagej_axes(axes)) is not None:
        options.update(imagej=True, metadata=_imagej_for_output(source.imagej, axes=ij_axes, channel=channel, same_planes=same_planes))
    elif source.ome is not None and (xml := _ome_or_none(source.ome, axes, shape, channel)) is not None:
        options.update(description=xml, metadata=None)
    elif source.shaped or source.ome is not None or set(axes) - set("YXSIQ"):  # tifffile's shape record keeps named axes (a vendor format's Z, C, T)
        options["metadata"] = {"axes": axes} if set(axes) - set("YXSIQ") else {}
    else:
        options.update(metadata=None, description=source.description if source.description and source.description.isascii() else None)
    return options


def write_like(path: str | Path, data: np.ndarray, source: ImageSource, *, axes: str, channel: int | None = None) -> None:
    """Write ``data`` (letters ``axes``, the input's minus any chosen channel) as ``source`` was stored, atomically.

    ``channel``: the index of the channel kept from the input's C (or S) axis, so per-channel metadata follow it.
    """
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.suffix.lower() in PNG_SUFFIXES:
            import imagecodecs

            tmp.write_bytes(imagecodecs.png_encode(np.ascontiguousarray(data)))
        elif path.suffix.lower() in JPEG_SUFFIXES:
            import imagecodecs

            tmp.write_bytes(imagecodecs.jpeg8_encode(np.ascontiguousarray(data), level=JPEG_QUALITY))
        else:
            import tifffile

            options = _tiff_options(source, axes, tuple(data.shape), channel) if source.kind == "tiff" else {"photometric": "rgb" if "S" in axes else "minisblack"}
            tifffile.imwrite(tmp, data, **options)
