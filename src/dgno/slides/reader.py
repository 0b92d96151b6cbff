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

import math
import os
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
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


def _tiff_kind(path: Path) -> str | None:
    """"tifffile" for a TIFF only tifffile reads faithfully, "openslide-ok" for an 8-bit RGB one, None if not a TIFF."""
    try:
        with tifffile.TiffFile(path) as tf:
            series = tf.series[0]
            page = series.keyframe
            if tf.is_ome or page.dtype != np.uint8 or series.axes[-1:] != "S" or page.samplesperpixel != 3:
                return "tifffile"
            return "openslide-ok"
    except (tifffile.TiffFileError, IndexError, ValueError, OSError):
        return None


def open_slide(path: str | Path) -> Slide:
    """Open ``path`` with the reader that keeps its data (module docstring)."""
    path = Path(path)
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
        with tifffile.TiffFile(path) as tf:
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

    def read(self, level: int, y: int, x: int, h: int, w: int, channels: tuple[int, ...] | None = None) -> np.ndarray:
        ds = self._osr.level_downsamples[level]
        try:
            rgba = np.asarray(self._osr.read_region((int(round(x * ds)), int(round(y * ds))), level, (w, h)))
        except openslide.OpenSlideError as exc:
            raise _fail(self.info.path, f"the region at level {level}, x {x}, y {y} ({w}×{h} px) cannot be decoded ({exc})", "copy the slide again; it is damaged there") from exc
        alpha = rgba[..., 3:4].astype(np.uint16)
        rgb = rgba[..., :3]
        if alpha.min() < 255:  # outside the scanned area: OpenSlide's transparent pixels are the glass's colour
            rgb = ((rgb * alpha + self._background * (255 - alpha) + 127) // 255).astype(np.uint8)
        return rgb if channels is None else rgb[..., list(channels)]

    def close(self) -> None:
        self._osr.close()


# --- tifffile -------------------------------------------------------------------------------------


def _ome_mpp(tf: tifffile.TiffFile) -> tuple[float, float] | None:
    """PhysicalSizeX/Y of the first OME image in µm, None when absent."""
    try:
        pixels = tifffile.xml2dict(tf.ome_metadata)["OME"]["Image"]
        pixels = (pixels[0] if isinstance(pixels, list) else pixels)["Pixels"]
        to_um = {"µm": 1.0, "um": 1.0, "nm": 1e-3, "mm": 1e3, "cm": 1e4, "m": 1e6}
        sizes = [float(pixels[f"PhysicalSize{a}"]) * to_um[pixels.get(f"PhysicalSize{a}Unit", "µm")] for a in "XY"]
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    return (sizes[0], sizes[1]) if all(0 < v < 1e3 for v in sizes) else None


def _tag_mpp(page) -> tuple[float, float] | None:
    """µm per pixel from the TIFF resolution tags (centimetre or inch), None for none or the 1-per-unit default."""
    unit = {2: 25400.0, 3: 1e4}.get(int(page.resolutionunit))
    res = page.resolution
    if unit is None or min(res) <= 1.0:
        return None
    mpp = (unit / res[0], unit / res[1])
    return mpp if all(0 < v < 1e3 for v in mpp) else None


def _ome_channel_names(tf: tifffile.TiffFile, n: int) -> tuple[str, ...] | None:
    try:
        image = tifffile.xml2dict(tf.ome_metadata)["OME"]["Image"]
        chans = (image[0] if isinstance(image, list) else image)["Pixels"]["Channel"]
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


class TiffSlide(Slide):
    """A TIFF or OME-TIFF read through tifffile, tile by tile, in its own dtype and channels."""

    def __init__(self, path: Path) -> None:
        check_tiff_complete(path)
        self._tf = tifffile.TiffFile(path)
        try:
            self._open(path)
        except BaseException:
            self._tf.close()
            raise
        self._fd = os.open(path, os.O_RDONLY)
        self._cache: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def _open(self, path: Path) -> None:
        series = self._tf.series[0]
        axes, shape = series.axes, series.shape
        extra = [a for a, n in zip(axes, shape) if a not in "YX" + _CHANNEL_AXES and n > 1]
        if extra or axes.count("Y") != 1 or sum(a in _CHANNEL_AXES for a in axes) > 1:
            raise _fail(path, f"holds a {axes} image of shape {shape} (a Z-stack, time series or several channel axes)", "export one plane (the best-focus one) with its channels as an OME-TIFF")
        key = series.keyframe
        if int(getattr(key, "imagedepth", 1)) > 1:
            raise _fail(path, "holds volumetric tiles", "export one plane as a 2-D OME-TIFF")
        self._levels = [level for level in series.levels if level.axes == axes]
        n = 1 if axes in ("YX",) else shape[[i for i, a in enumerate(axes) if a in _CHANNEL_AXES][0]]
        pages_per_level = len(series.levels[0].pages)
        self._map = [(c, 0) for c in range(n)] if pages_per_level == n and n > 1 else [(0, s) for s in range(n)]
        photometric = "grey" if n == 1 else "channels"
        if axes.endswith("S") and key.photometric in (tifffile.PHOTOMETRIC.RGB, tifffile.PHOTOMETRIC.YCBCR) and n in (3, 4):
            photometric = "rgb" if n == 3 else "rgba"
        names = ("R", "G", "B", "A")[:n] if photometric.startswith("rgb") else (_ome_channel_names(self._tf, n) if self._tf.is_ome else None)
        levels = tuple((int(lv.shape[axes.index("Y")]), int(lv.shape[axes.index("X")])) for lv in self._levels)
        mpp = (_ome_mpp(self._tf) if self._tf.is_ome else None) or _tag_mpp(key)
        vendor = "ome-tiff" if self._tf.is_ome else "tiff"
        self.info = SlideInfo(path, "tifffile", vendor, levels, np.dtype(key.dtype), names or tuple(f"channel {i}" for i in range(n)), photometric, mpp)

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
