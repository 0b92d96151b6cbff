"""Reading whole-slide images one region at a time: OpenSlide's formats and (OME-)TIFF through tifffile.

Which reader a file gets (:func:`open_slide`):

* an OME-TIFF, a TIFF that is not 8-bit RGB (16-bit, multi-channel, grey, RGBA with its alpha), or a
  TIFF OpenSlide does not take (strips, a single untiled page) → tifffile, which keeps every bit and
  channel: OpenSlide would hand 16-bit data back as 8-bit RGBA and reads no SubIFD level;
* any other file OpenSlide recognises (Aperio SVS, 3DHistech MRXS, Hamamatsu NDPI/VMS, Leica SCN,
  Philips TIFF, Ventana BIF, Sakura, Trestle, DICOM, generic tiled RGB TIFF) → openslide-python, with
  its own library from the ``openslide-bin`` wheel;
* anything else is refused, naming the formats that are read.

Level 0 is never read whole: :meth:`Slide.read` returns one region of one level in the file's dtype,
``(h, w, channels)``. The tifffile reader decodes only the tiles (or strips) a region touches, keeps
the last few in a small cache (a count, not a share of the slide, so memory does not grow with it),
and reads uncompressed strips row by row. OpenSlide's RGBA is composited onto the slide's background
colour, so regions outside the scanned area come back as the empty glass the scanner would show.

Every failure a user can meet (missing, truncated or unsupported file, a tile that does not decode)
is an :class:`~dgno.io.InputError` that names the file, the tile and the fix.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openslide
import tifffile

from dgno.io import InputError

FORMATS = "OME-TIFF, tiled or plain TIFF, and OpenSlide's: Aperio .svs, 3DHistech .mrxs, Hamamatsu .ndpi/.vms, Leica .scn, Philips .tiff, Ventana .bif, DICOM"
MAX_SEGMENT_BYTES = 256 * 2**20  # one strip or tile larger than this is refused: it would hold most of a level
SEGMENT_CACHE = 48  # decoded tiles/strips kept (a few rows of network tiles re-read them)
_CHANNEL_AXES = "CSIQ"


@dataclass(frozen=True)
class SlideInfo:
    """What a slide holds. ``levels``: (height, width) per level, finest first; ``mpp``: µm per pixel of
    level 0 as (x, y), None when the file does not say; ``photometric``: "rgb", "rgba", "grey" or "channels"."""

    path: Path
    reader: str
    vendor: str
    levels: tuple[tuple[int, int], ...]
    dtype: np.dtype
    channel_names: tuple[str, ...]
    photometric: str
    mpp: tuple[float, float] | None
    planes: int = 1  # focal planes (a Z axis); a TiffSlide opened with ``plane`` reads one of them

    @property
    def channels(self) -> int:
        return len(self.channel_names)

    def downsample(self, level: int) -> float:
        """How many level-0 pixels one pixel of ``level`` spans (from the widths)."""
        return self.levels[0][1] / self.levels[level][1]

    def level_mpp(self, level: int) -> tuple[float, float] | None:
        if self.mpp is None:
            return None
        dy, dx = self.levels[0][0] / self.levels[level][0], self.downsample(level)
        return (self.mpp[0] * dx, self.mpp[1] * dy)


class Slide(ABC):
    """A slide opened for reading regions (module docstring); use as a context manager."""

    info: SlideInfo

    @abstractmethod
    def read(self, level: int, y: int, x: int, h: int, w: int, channels: tuple[int, ...] | None = None) -> np.ndarray:
        """Pixels [y, y+h) × [x, x+w) of ``level`` (inside the level), (h, w, len(channels)) in the file's dtype."""

    @abstractmethod
    def close(self) -> None:
        """Release the file."""

    def __enter__(self) -> Slide:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fail(path: Path, problem: str, fix: str) -> InputError:
    return InputError(f"{path}: {problem}. Fix: {fix}")


@contextlib.contextmanager
def _quiet_tifffile() -> Iterator[None]:
    """tifffile's own warnings off: a damaged file gets this module's one-line error, not log lines before it."""
    logger = logging.getLogger("tifffile")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def main_series(tf: tifffile.TiffFile) -> int:
    """The index of the slide's image among a TIFF's series: the largest (a label or macro image may come first)."""
    def area(k: int) -> int:
        series = tf.series[k]
        return int(series.shape[series.axes.index("Y")]) * int(series.shape[series.axes.index("X")]) if "Y" in series.axes and "X" in series.axes else 0

    return max(range(len(tf.series)), key=lambda k: (area(k), -k))


def _tiff_kind(path: Path) -> str | None:
    """"tifffile" for a TIFF only tifffile reads faithfully, "openslide-ok" for an 8-bit RGB one, None if not a TIFF."""
    try:
        with _quiet_tifffile(), tifffile.TiffFile(path) as tf:
            series = tf.series[main_series(tf)]
            page = series.keyframe
            if tf.is_ome or page.dtype != np.uint8 or series.axes[-1:] != "S" or page.samplesperpixel != 3:
                return "tifffile"
            return "openslide-ok"
    except (tifffile.TiffFileError, IndexError, ValueError, OSError):
        return None


def open_slide(path: str | Path) -> Slide:
    """Open ``path`` with the reader that keeps its data (module docstring)."""
    path = Path(path)
    if path.is_dir():
        raise _fail(path, "is a folder, not a slide file", "pass the slide file itself (for a 3DHistech slide, the .mrxs file beside its data folder)")
    if not path.is_file():
        raise _fail(path, "slide does not exist", "check the path")
    if path.stat().st_size == 0:
        raise _fail(path, "file is empty (0 bytes)", "copy the slide again")
    kind = _tiff_kind(path)
    try:
        vendor = openslide.OpenSlide.detect_format(str(path))
    except openslide.OpenSlideError:
        vendor = None
    if kind == "tifffile" or (kind == "openslide-ok" and vendor is None):
        return TiffSlide(path)
    if vendor is not None:
        if kind is not None:
            check_tiff_complete(path)  # a truncated TIFF-based slide fails here, before any work
        return OpenSlideSlide(path, vendor)
    raise _fail(path, "not a slide format this reads (neither a TIFF nor a format OpenSlide recognises)", f"convert it to OME-TIFF; read formats: {FORMATS}")


def check_tiff_complete(path: Path) -> None:
    """Refuse a TIFF whose tiles lie past its end (a copy cut short), naming the first missing page."""
    size = path.stat().st_size
    try:
        with _quiet_tifffile(), tifffile.TiffFile(path) as tf:
            for i, page in enumerate(tf.pages):
                offsets, counts = np.asarray(page.dataoffsets, np.int64), np.asarray(page.databytecounts, np.int64)
                if offsets.size and int((offsets + counts).max()) > size:
                    raise _fail(path, f"file is truncated: page {i} needs {int((offsets + counts).max())} bytes, the file has {size}", "copy the slide again (the copy was cut short)")
    except tifffile.TiffFileError as exc:
        raise _fail(path, f"cannot be read as a TIFF ({exc})", "copy the slide again; it is truncated or damaged") from exc


# --- OpenSlide ------------------------------------------------------------------------------------


def _openslide_mpp(props) -> tuple[float, float] | None:
    try:
        mpp = float(props[openslide.PROPERTY_NAME_MPP_X]), float(props[openslide.PROPERTY_NAME_MPP_Y])
    except (KeyError, ValueError):
        return None
    return mpp if all(0 < v < 1e3 for v in mpp) else None


class OpenSlideSlide(Slide):
    """A slide read by OpenSlide: 8-bit RGB, alpha composited onto the background colour."""

    def __init__(self, path: Path, vendor: str) -> None:
        try:
            self._osr = openslide.OpenSlide(str(path))
        except (openslide.OpenSlideError, OSError) as exc:
            raise _fail(path, f"OpenSlide cannot open this {vendor} slide ({exc})", "copy the slide again; it is truncated or damaged") from exc
        props = self._osr.properties
        background = props.get(openslide.PROPERTY_NAME_BACKGROUND_COLOR, "FFFFFF")
        self._background = np.array([int(background[i : i + 2], 16) for i in (0, 2, 4)], np.uint16)
        levels = tuple((h, w) for w, h in self._osr.level_dimensions)
        self.info = SlideInfo(path, "openslide", vendor, levels, np.dtype(np.uint8), ("R", "G", "B"), "rgb", _openslide_mpp(props))
        self._pages: Slide | None = None  # the TIFF's own pages, opened when a level OpenSlide would resample is first read
        self._pages_tried = False
        self._pages_lock = threading.Lock()  # regions are read from several threads

    def read(self, level: int, y: int, x: int, h: int, w: int, channels: tuple[int, ...] | None = None) -> np.ndarray:
        ds = self._osr.level_downsamples[level]
        if not float(ds).is_integer() and self._level_pages() is not None:  # OpenSlide would interpolate: read the level's own pixels
            return self._pages.read(level, y, x, h, w, channels)
        try:
            rgba = np.asarray(self._osr.read_region((int(round(x * ds)), int(round(y * ds))), level, (w, h)))
        except openslide.OpenSlideError as exc:
            raise _fail(self.info.path, f"the region at level {level}, x {x}, y {y} ({w}×{h} px) cannot be decoded ({exc})", "copy the slide again; it is damaged there") from exc
        alpha = rgba[..., 3:4].astype(np.uint16)
        rgb = rgba[..., :3]
        if alpha.min() < 255:  # outside the scanned area: OpenSlide's transparent pixels are the glass's colour
            rgb = ((rgb * alpha + self._background * (255 - alpha) + 127) // 255).astype(np.uint8)
        return rgb if channels is None else rgb[..., list(channels)]

    def _level_pages(self) -> Slide | None:
        with self._pages_lock:
            if not self._pages_tried:
                self._pages, self._pages_tried = _same_levels_in_tiff(self.info.path, self.info.levels), True
        return self._pages

    def close(self) -> None:
        self._osr.close()
        if self._pages is not None:
            self._pages.close()


def _same_levels_in_tiff(path: Path, levels: tuple[tuple[int, int], ...]) -> Slide | None:
    """The slide's TIFF pages read directly, when the file is a TIFF whose pyramid is OpenSlide's levels (SVS, generic TIFF).

    Why: OpenSlide takes a region's position in level-0 pixels; at a level whose downsample is not a
    whole number (an SVS level 1 of 2.0011) no level-0 position maps onto a whole pixel of the level,
    and OpenSlide interpolates. The TIFF's own tiles of that level give its pixels exactly.
    """
    try:
        return TiffSlide(path, rgb_levels=levels)
    except (InputError, tifffile.TiffFileError, OSError, ValueError, IndexError):
        return None


# --- tifffile -------------------------------------------------------------------------------------


# OME UnitsLength in µm (the ones a microscope or scanner writes)
UM_PER_UNIT = {"µm": 1.0, "um": 1.0, "micron": 1.0, "microns": 1.0, "\u03bcm": 1.0, "nm": 1e-3, "pm": 1e-6, "Å": 1e-4, "\u212b": 1e-4,
               "\\u00b5m": 1.0, "mm": 1e3, "cm": 1e4, "m": 1e6, "in": 25400.0, "inch": 25400.0, "thou": 25.4, "mil": 25.4}  # fmt: skip


def _ome_image(tf: tifffile.TiffFile, index: int) -> dict:
    images = tifffile.xml2dict(tf.ome_metadata)["OME"]["Image"]
    images = images if isinstance(images, list) else [images]
    return images[index] if index < len(images) else images[0]


def _ome_mpp(tf: tifffile.TiffFile, index: int = 0) -> tuple[float, float] | None:
    """PhysicalSizeX/Y of OME image ``index`` in µm, None when absent or in a unit that is not a length."""
    try:
        pixels = _ome_image(tf, index)["Pixels"]
        sizes = [float(pixels[f"PhysicalSize{a}"]) * UM_PER_UNIT[str(pixels.get(f"PhysicalSize{a}Unit", "µm"))] for a in "XY"]
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    return (sizes[0], sizes[1]) if all(0 < v < 1e3 for v in sizes) else None


def _imagej_mpp(tf: tifffile.TiffFile, page) -> tuple[float, float] | None:
    """µm per pixel of an ImageJ/Fiji TIFF: its resolution tags count pixels per ImageJ ``unit`` (ResolutionUnit NONE)."""
    meta = tf.imagej_metadata if tf.is_imagej else None
    if not meta or str(meta.get("unit", "")).lower() not in {u.lower() for u in UM_PER_UNIT} or "XResolution" not in page.tags:
        return None
    um = {u.lower(): v for u, v in UM_PER_UNIT.items()}[str(meta["unit"]).lower()]
    res = page.resolution
    if min(res) <= 0:
        return None
    mpp = (um / res[0], um / res[1])
    return mpp if all(0 < v < 1e3 for v in mpp) else None


def _imagej_channel_names(tf: tifffile.TiffFile, n: int) -> tuple[str, ...] | None:
    labels = (tf.imagej_metadata or {}).get("Labels") if tf.is_imagej else None
    return tuple(map(str, labels)) if isinstance(labels, list) and len(labels) == n else None


def _tag_mpp(page) -> tuple[float, float] | None:
    """µm per pixel from the TIFF resolution tags (centimetre or inch), None for none or the 1-per-unit default."""
    unit = {2: 25400.0, 3: 1e4}.get(int(page.resolutionunit))
    res = page.resolution
    if unit is None or min(res) <= 1.0:
        return None
    mpp = (unit / res[0], unit / res[1])
    return mpp if all(0 < v < 1e3 for v in mpp) else None


def _ome_channel_names(tf: tifffile.TiffFile, n: int, index: int = 0) -> tuple[str, ...] | None:
    try:
        chans = _ome_image(tf, index)["Pixels"]["Channel"]
        chans = chans if isinstance(chans, list) else [chans]
        names = tuple(str(c.get("Name", f"channel {i}")) for i, c in enumerate(chans))
    except (KeyError, TypeError, IndexError):
        return None
    return names if len(names) == n else None


@dataclass(frozen=True)
class _Geometry:
    """How one page's pixels are cut into segments (tiles or strips)."""

    height: int
    width: int
    seg_h: int
    seg_w: int
    samples: int
    planar: bool

    @property
    def across(self) -> int:
        return math.ceil(self.width / self.seg_w)

    def index(self, plane: int, ty: int, tx: int) -> int:
        per_plane = math.ceil(self.height / self.seg_h) * self.across
        return plane * per_plane + ty * self.across + tx


def _geometry(page) -> _Geometry:
    h, w = int(page.imagelength), int(page.imagewidth)
    sh, sw = (int(page.tilelength), int(page.tilewidth)) if page.is_tiled else (min(int(page.rowsperstrip) or h, h), w)
    samples = int(page.samplesperpixel)
    return _Geometry(h, w, sh, sw, samples, samples > 1 and int(page.planarconfig) == 2)


def focal_planes(series) -> int:  # the length of a tifffile series' Z axis, 1 without one
    return int(series.shape[series.axes.index("Z")]) if "Z" in series.axes else 1


def _plane_pages(axes: str, shape: tuple[int, ...], plane: int, n: int) -> list[tuple[int, int]]:
    """(page, sample) of each of the ``n`` channels at focal plane ``plane`` (pages run over the axes but Y, X, S)."""
    page_axes = [a for a in axes if a not in "YXS"]
    dims = [int(shape[axes.index(a)]) for a in page_axes]

    def page(channel: int) -> int:
        return int(np.ravel_multi_index([plane if a == "Z" else channel if a in _CHANNEL_AXES else 0 for a in page_axes], dims))

    if "S" in axes:
        return [(page(0), s) for s in range(n)]
    return [(page(c), 0) for c in range(n)]


@dataclass(frozen=True)
class _PageLevel:
    """One level as one page (what a series level offers as ``.pages``)."""

    pages: tuple


class TiffSlide(Slide):
    """A TIFF or OME-TIFF read through tifffile, tile by tile, in its own dtype and channels.

    ``rgb_levels``: read the 8-bit RGB tiled pages of exactly these (height, width), one per level,
    whatever the file's series say (how OpenSlide sees an SVS or generic TIFF); an InputError when
    one is missing.
    """

    def __init__(self, path: Path, *, rgb_levels: tuple[tuple[int, int], ...] | None = None, plane: int | None = None) -> None:
        self._plane = plane  # of a slide with focal planes (a Z axis): the one this object reads
        check_tiff_complete(path)
        with _quiet_tifffile():
            self._tf = tifffile.TiffFile(path)
        try:
            with _quiet_tifffile():
                self._open(path) if rgb_levels is None else self._open_rgb_pages(path, rgb_levels)
        except BaseException:
            self._tf.close()
            raise
        self._fd = os.open(path, os.O_RDONLY)
        self._cache: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def _open(self, path: Path) -> None:
        index = main_series(self._tf)
        series = self._tf.series[index]
        axes, shape = series.axes, series.shape
        extra = [a for a, n in zip(axes, shape) if a not in "YX" + _CHANNEL_AXES and n > 1 and not (a == "Z" and self._plane is not None)]
        if extra or axes.count("Y") != 1 or sum(a in _CHANNEL_AXES for a in axes) > 1:
            raise _fail(path, f"holds a {axes} image of shape {shape} (a Z-stack, time series or several channel axes)", "export one plane (the best-focus one) with its channels as an OME-TIFF")
        if self._plane is not None and not 0 <= self._plane < focal_planes(series):
            raise _fail(path, f"has {focal_planes(series)} focal plane(s), no plane {self._plane}", "choose a plane of the slide")
        key = series.keyframe
        if int(getattr(key, "imagedepth", 1)) > 1:
            raise _fail(path, "holds volumetric tiles", "export one plane as a 2-D OME-TIFF")
        self._levels = [level for level in series.levels if level.axes == axes]
        n = shape[[i for i, a in enumerate(axes) if a in _CHANNEL_AXES][0]] if any(a in _CHANNEL_AXES for a in axes) else 1
        pages_per_level = len(series.levels[0].pages)
        self._map = [(c, 0) for c in range(n)] if pages_per_level == n and n > 1 else [(0, s) for s in range(n)]
        if "Z" in axes and self._plane is not None:
            self._map = _plane_pages(axes, shape, self._plane, n)
        photometric = "grey" if n == 1 else "channels"
        if "S" in axes and key.photometric in (tifffile.PHOTOMETRIC.RGB, tifffile.PHOTOMETRIC.YCBCR) and n in (3, 4):  # interleaved or planar
            photometric = "rgb" if n == 3 else "rgba"
        names = ("R", "G", "B", "A")[:n] if photometric.startswith("rgb") else (_ome_channel_names(self._tf, n, index) if self._tf.is_ome else _imagej_channel_names(self._tf, n))
        levels = tuple((int(lv.shape[axes.index("Y")]), int(lv.shape[axes.index("X")])) for lv in self._levels)
        mpp = (_ome_mpp(self._tf, index) if self._tf.is_ome else None) or _imagej_mpp(self._tf, key) or _tag_mpp(key)
        vendor = "ome-tiff" if self._tf.is_ome else "tiff"
        self.info = SlideInfo(path, "tifffile", vendor, levels, np.dtype(key.dtype), names or tuple(f"channel {i}" for i in range(n)), photometric, mpp, focal_planes(series))

    def _open_rgb_pages(self, path: Path, levels: tuple[tuple[int, int], ...]) -> None:
        found: dict[tuple[int, int], object] = {}
        for page in self._tf.pages:
            if page.is_tiled and page.dtype == np.uint8 and int(page.samplesperpixel) == 3 and int(page.photometric) in (2, 6):  # RGB, YCbCr
                found.setdefault((int(page.imagelength), int(page.imagewidth)), page)
        missing = [size for size in levels if size not in found]
        if missing:
            raise _fail(path, f"no 8-bit RGB tiled page of {missing[0][1]}×{missing[0][0]} px", "read it through OpenSlide")
        self._levels = [_PageLevel((found[size],)) for size in levels]
        self._map = [(0, s) for s in range(3)]
        self.info = SlideInfo(path, "tifffile", "tiff", tuple(levels), np.dtype(np.uint8), ("R", "G", "B"), "rgb", None)

    def read(self, level: int, y: int, x: int, h: int, w: int, channels: tuple[int, ...] | None = None) -> np.ndarray:
        channels = tuple(range(self.info.channels)) if channels is None else tuple(channels)
        out = np.empty((h, w, len(channels)), self.info.dtype)
        pages = self._levels[level].pages
        by_page: dict[int, list[tuple[int, int]]] = {}
        for k, c in enumerate(channels):
            page, sample = self._map[c]
            by_page.setdefault(page, []).append((k, sample))
        for page_index, wanted in by_page.items():
            page = pages[page_index]
            geo = _geometry(page.keyframe)
            samples = [s for _, s in wanted]
            region = self._page_region(page, geo, (level, page_index), y, x, h, w, samples)
            for j, (k, _) in enumerate(wanted):
                out[..., k] = region[..., j]
        return out

    def _page_region(self, page, geo: _Geometry, key: tuple, y: int, x: int, h: int, w: int, samples: list[int]) -> np.ndarray:
        """(h, w, len(samples)) from the segments of one page that the region touches."""
        kf = page.keyframe
        if int(kf.compression) == 1 and not kf.is_tiled and not geo.planar and int(kf.fillorder) == 1:
            return self._raw_rows(page, geo, y, x, h, w)[..., samples]
        out = np.empty((h, w, len(samples)), self.info.dtype)
        planes = samples if geo.planar else [0]
        for ty in range(y // geo.seg_h, (y + h - 1) // geo.seg_h + 1):
            for tx in range(x // geo.seg_w, (x + w - 1) // geo.seg_w + 1):
                y0, x0 = ty * geo.seg_h, tx * geo.seg_w
                ys, xs = slice(max(y, y0), min(y + h, y0 + geo.seg_h)), slice(max(x, x0), min(x + w, x0 + geo.seg_w))
                for p, plane in enumerate(planes):
                    seg = self._segment(page, geo, key, geo.index(plane, ty, tx), (ty, tx))
                    part = seg[ys.start - y0 : ys.stop - y0, xs.start - x0 : xs.stop - x0]
                    target = out[ys.start - y : ys.stop - y, xs.start - x : xs.stop - x]
                    if geo.planar:
                        target[..., p] = part[..., 0]
                    else:
                        target[...] = part[..., samples]
        return out

    def _segment(self, page, geo: _Geometry, key: tuple, index: int, where: tuple[int, int]) -> np.ndarray:
        """One decoded tile or strip (seg_h, seg_w, samples in it), through the small cache."""
        with self._lock:
            if (key, index) in self._cache:
                self._cache.move_to_end((key, index))
                return self._cache[(key, index)]
        kf = page.keyframe
        nbytes = geo.seg_h * geo.seg_w * (1 if geo.planar else geo.samples) * kf.dtype.itemsize
        if nbytes > MAX_SEGMENT_BYTES:
            raise _fail(self.info.path, f"stores level {key[0]} in strips of {geo.seg_h} rows ({nbytes / 2**20:.0f} MB each), too large to read in pieces", "convert it to a tiled (pyramidal) TIFF or OME-TIFF, e.g. with tifffile or `vips tiffsave --tile --pyramid`")
        offset, count = int(page.dataoffsets[index]), int(page.databytecounts[index])
        if count == 0:  # a tile the writer left out: tifffile's fill value
            seg = np.zeros((geo.seg_h, geo.seg_w, 1 if geo.planar else geo.samples), kf.dtype)
        else:
            data = os.pread(self._fd, count, offset)
            where_txt = f"level {key[0]}, {'tile' if kf.is_tiled else 'strip'} {index} (pixels y {where[0] * geo.seg_h}, x {where[1] * geo.seg_w})"
            if len(data) < count:
                raise _fail(self.info.path, f"file is truncated at {where_txt}", "copy the slide again (the copy was cut short)")
            try:
                decoded, _, _ = kf.decode(data, index, jpegtables=kf.jpegtables)
            except Exception as exc:  # noqa: BLE001 - every codec has its own error types
                raise _fail(self.info.path, f"{where_txt} cannot be decoded ({type(exc).__name__}: {exc})", "copy the slide again or re-export it; the file is damaged there") from exc
            if decoded is None:
                raise _fail(self.info.path, f"{where_txt} cannot be decoded (no data)", "copy the slide again or re-export it; the file is damaged there")
            seg = decoded.reshape(decoded.shape[-3:])
        with self._lock:
            self._cache[(key, index)] = seg
            while len(self._cache) > SEGMENT_CACHE:
                self._cache.popitem(last=False)
        return seg

    def _raw_rows(self, page, geo: _Geometry, y: int, x: int, h: int, w: int) -> np.ndarray:
        """Rows of an uncompressed striped page read in place: no strip is ever read whole."""
        kf = page.keyframe
        dtype = kf.dtype.newbyteorder(self._tf.byteorder)
        row_bytes, px = geo.width * geo.samples * dtype.itemsize, geo.samples * dtype.itemsize
        out = np.empty((h, w, geo.samples), kf.dtype)
        for r in range(h):
            strip, within = divmod(y + r, geo.seg_h)
            offset = int(page.dataoffsets[strip]) + within * row_bytes + x * px
            data = os.pread(self._fd, w * px, offset)
            if len(data) < w * px:
                raise _fail(self.info.path, f"file is truncated at level 0, row {y + r}", "copy the slide again (the copy was cut short)")
            out[r] = np.frombuffer(data, dtype).reshape(w, geo.samples)
        return out

    def close(self) -> None:
        os.close(self._fd)
        self._tf.close()
