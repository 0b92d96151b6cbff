"""Slides of real tissue defocused on purpose where it is known: the real-tissue focus benchmark's slides.

Each :class:`BenchSlide` is built from the sharp images of ``dgno.data.tissue_sources`` and is the same
for the same spec, whatever the machine:

1. **Fragments.** Pieces of one or more sources (turned by a multiple of 90°, mirrored, optionally
   reduced 2× to a 20× scan's scale) laid on white glass with an irregular outline, as sections lie on
   a slide; the CMU Aperio region is laid whole (it has its own glass).
2. **Hard tissue.** Optionally a *pale* area (the stain's optical density scaled by 0.3–0.45: thin or
   weakly stained stroma), a *fat* area (adipocytes: large empty cells with thin eosin membranes, drawn
   over the tissue) and *pen* strokes (green, blue or black ink across tissue and glass, as a
   pathologist marks a slide; slightly soft, as ink on the coverslip is).
3. **Defocus.** Regions of several shapes (rectangle, ellipse, blob, band) and sizes, each convolved
   with a PSF of ``dgno.optics.defocus`` (Gaussian, disc, disc then Gaussian, or a Seidel defocus with
   spherical aberration and astigmatism) of RMS spread σ px; what a region covers is where the truth
   says "blurred".
4. **Scanner.** Sensor noise (σ 1.5 grey levels) after the optics, then JPEG tiles when written.

A tile's truth is the share of its tissue inside the defocused regions, and beside it the share of its
whole area (:func:`tile_truth`); it is tissue when at least 5 % of it lies in the fragments' outline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from dgno.choices import check_choice
from dgno.data.slides import _smooth_field
from dgno.data.tissue_sources import load
from dgno.optics.defocus import convolve, disk_psf, gaussian_psf, psf_sigma, seidel_defocus_psf

BLUR_KINDS = ("gaussian", "disk", "disk+gaussian", "seidel")
SHAPES = ("rectangle", "ellipse", "blob", "band")
GLASS = np.array([244.0, 243.0, 241.0], np.float32)
INK_OD = {"green": (0.85, 0.15, 0.70), "blue": (0.80, 0.45, 0.10), "black": (0.90, 0.90, 0.85)}  # optical density per channel
EOSIN = np.array([0.07, 0.99, 0.11], np.float32)
FAT_CELL_UM = 70.0  # an adipocyte's diameter


@dataclass(frozen=True)
class Blur:
    """A defocus PSF of ``kind`` whose RMS spread along one axis is ``sigma`` px."""

    kind: str
    sigma: float

    def psf(self) -> np.ndarray:
        check_choice("blur kind", self.kind, BLUR_KINDS)
        if self.kind == "gaussian":
            return gaussian_psf(self.sigma)
        if self.kind == "disk":
            return disk_psf(2.0 * self.sigma)
        if self.kind == "disk+gaussian":  # half the variance each, as a defocus seen through a soft optic
            return _conv_psf(disk_psf(2.0 * self.sigma / np.sqrt(2.0)), gaussian_psf(self.sigma / np.sqrt(2.0)))
        lo, hi = 0.0, 3.0  # W020 waves whose PSF (with spherical 0.2·W020, astigmatism 0.3·W020 at field 0.6, 0.3) has this spread
        for _ in range(25):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if psf_sigma(_seidel(mid)) < self.sigma else (lo, mid)
        return _seidel(0.5 * (lo + hi))


def _seidel(w020: float) -> np.ndarray:
    return seidel_defocus_psf(w020, w040=0.2 * w020, w222=0.3 * w020, field=(0.6, 0.3))


def _conv_psf(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    from scipy.signal import convolve2d

    k = convolve2d(a, b)
    return k / k.sum()


@dataclass(frozen=True)
class Area:
    """A ``shape`` inside the box [y0, y1) × [x0, x1) of the slide; ``seed`` draws a blob's outline."""

    shape: str
    y0: int
    x0: int
    y1: int
    x1: int
    seed: int = 0

    def mask(self) -> np.ndarray:
        """Boolean (y1 − y0, x1 − x0): the pixels of the box inside the shape."""
        check_choice("shape", self.shape, SHAPES)
        h, w = self.y1 - self.y0, self.x1 - self.x0
        if self.shape in ("rectangle", "band"):
            return np.ones((h, w), bool)
        yy, xx = np.mgrid[0:h, 0:w]
        ellipse = ((yy + 0.5 - h / 2) / (h / 2)) ** 2 + ((xx + 0.5 - w / 2) / (w / 2)) ** 2 <= 1.0
        if self.shape == "ellipse":
            return ellipse
        wobble = _smooth_field(np.random.default_rng([self.seed, 11]), (h, w), max(h, w) / 3)
        return ((yy + 0.5 - h / 2) / (h / 2)) ** 2 + ((xx + 0.5 - w / 2) / (w / 2)) ** 2 <= 0.55 + 0.6 * wobble


@dataclass(frozen=True)
class Region:
    """An area defocused by ``blur``."""

    area: Area
    blur: Blur


@dataclass(frozen=True)
class Fragment:
    """A piece of ``source`` (turned ``rot`` × 90°, mirrored when ``flip``, reduced ``reduce`` ×) of ``size``
    from ``offset`` of the turned image, laid at ``at`` on the slide; ``outline`` False keeps it rectangular."""

    source: str
    at: tuple[int, int]
    size: tuple[int, int]
    offset: tuple[int, int] = (0, 0)
    rot: int = 0
    flip: bool = False
    reduce: int = 1
    outline: bool = True


@dataclass(frozen=True)
class BenchSlide:
    """One benchmark slide (module docstring); ``tags`` say what makes it hard (pale, fat, pen, dense)."""

    name: str
    split: str
    seed: int
    size: tuple[int, int]
    fragments: tuple[Fragment, ...]
    regions: tuple[Region, ...]
    pale: tuple[Area, ...] = ()
    fat: tuple[Area, ...] = ()
    pens: int = 0
    mpp: float = 0.25
    tags: tuple[str, ...] = field(default=())


def turned(source: str, *, rot: int, flip: bool, reduce: int) -> np.ndarray:
    """A source image turned, mirrored and reduced (block means), float32 (H, W, 3)."""
    img = np.rot90(np.asarray(load(source), np.float32), rot)
    img = img[:, ::-1] if flip else img
    if reduce > 1:
        h, w = img.shape[0] // reduce * reduce, img.shape[1] // reduce * reduce
        img = img[:h, :w].reshape(h // reduce, reduce, w // reduce, reduce, 3).mean(axis=(1, 3))
    return np.ascontiguousarray(img)


def _outline(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """A section's outline inside a fragment's box: most of it, with an irregular edge (soft over ~1 px)."""
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w]
    border = np.minimum(np.minimum(yy, h - 1 - yy) / h, np.minimum(xx, w - 1 - xx) / w)  # 0 at the box's edge, 0.5 at its centre
    wobble = _smooth_field(rng, shape, max(h, w) / 5)
    inside = (border + 0.12 * wobble > 0.09).astype(np.float32)
    return ndimage.gaussian_filter(inside, 1.0)


def _lay_fragments(spec: BenchSlide, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(image, footprint): the fragments on glass, and where tissue lies (the outlines)."""
    h, w = spec.size
    image = np.broadcast_to(GLASS, (h, w, 3)).copy()
    footprint = np.zeros((h, w), np.float32)
    for f in spec.fragments:
        src = turned(f.source, rot=f.rot, flip=f.flip, reduce=f.reduce)
        fh, fw = min(f.size[0], src.shape[0] - f.offset[0], h - f.at[0]), min(f.size[1], src.shape[1] - f.offset[1], w - f.at[1])
        piece = src[f.offset[0] : f.offset[0] + fh, f.offset[1] : f.offset[1] + fw]
        alpha = _outline(rng, (fh, fw)) if f.outline else np.ones((fh, fw), np.float32)
        view = image[f.at[0] : f.at[0] + fh, f.at[1] : f.at[1] + fw]
        view[...] = alpha[..., None] * piece + (1.0 - alpha[..., None]) * view
        np.maximum(footprint[f.at[0] : f.at[0] + fh, f.at[1] : f.at[1] + fw], alpha, out=footprint[f.at[0] : f.at[0] + fh, f.at[1] : f.at[1] + fw])
    if not any(f.outline for f in spec.fragments):  # a whole scanned region: its own glass is not tissue
        od = -np.log10(np.clip(image / GLASS, 1e-3, 1.0)).mean(axis=-1)
        footprint = ndimage.binary_closing(ndimage.gaussian_filter(od, 4.0) > 0.04, iterations=3).astype(np.float32)
    return image, footprint


def _od(image: np.ndarray) -> np.ndarray:
    return -np.log10(np.clip(image / GLASS, 1e-3, 1.0))


def _make_pale(image: np.ndarray, area: Area, rng: np.random.Generator) -> None:
    """Scale the optical density inside ``area`` by 0.3–0.45 (thin or weakly stained tissue)."""
    box = (slice(area.y0, area.y1), slice(area.x0, area.x1))
    inside = ndimage.gaussian_filter(area.mask().astype(np.float32), 8.0)[..., None]
    factor = 1.0 - inside * (1.0 - rng.uniform(0.3, 0.45))
    image[box] = GLASS * np.power(10.0, -_od(image[box]) * factor)


def _make_fat(image: np.ndarray, area: Area, rng: np.random.Generator, cell: float) -> None:
    """Adipocytes inside ``area``: Voronoi cells about ``cell`` px across, empty, with 2–4 px eosin membranes."""
    h, w = area.y1 - area.y0, area.x1 - area.x0
    gy, gx = np.mgrid[0 : h + cell : cell, 0 : w + cell : cell].astype(np.float64)
    seeds = np.column_stack([gy.ravel(), gx.ravel()]) + rng.uniform(-0.3 * cell, 0.3 * cell, (gy.size, 2))  # a jittered grid: cells alike in size
    from scipy.spatial import cKDTree  # only fat needs it

    yy, xx = np.mgrid[0:h, 0:w]
    d, _ = cKDTree(seeds).query(np.column_stack([yy.ravel(), xx.ravel()]), k=2)
    edge = (d[:, 1] - d[:, 0]).reshape(h, w)
    membrane = np.clip(1.0 - edge / rng.uniform(2.0, 4.0), 0.0, 1.0) * (0.25 + 0.15 * _smooth_field(rng, (h, w), 30.0))
    od = membrane[..., None] * EOSIN
    fat = GLASS * np.power(10.0, -ndimage.gaussian_filter(od, (0.8, 0.8, 0)))
    keep = area.mask()[..., None]
    view = image[area.y0 : area.y1, area.x0 : area.x1]
    view[...] = np.where(keep, fat, view)


def _draw_pens(image: np.ndarray, count: int, rng: np.random.Generator) -> None:
    """``count`` pen strokes: smooth curves 14–40 px wide across the slide, ink by Beer–Lambert, soft edges."""
    h, w = image.shape[:2]
    for _ in range(count):
        colour = np.array(INK_OD[rng.choice(list(INK_OD))], np.float32) * rng.uniform(0.6, 1.0)
        t = np.linspace(0.0, 1.0, 400)
        p0, p1 = rng.uniform(0.1, 0.9, 2) * (h, w), rng.uniform(0.1, 0.9, 2) * (h, w)
        bend = rng.normal(0.0, 0.15, 2) * (h, w)
        pts = (1 - t)[:, None] * p0 + t[:, None] * p1 + np.sin(np.pi * t)[:, None] * bend
        width = rng.uniform(14.0, 40.0)
        pad = int(width) + 8
        y0, x0 = max(0, int(pts[:, 0].min()) - pad), max(0, int(pts[:, 1].min()) - pad)
        y1, x1 = min(h, int(pts[:, 0].max()) + pad), min(w, int(pts[:, 1].max()) + pad)
        line = np.ones((y1 - y0, x1 - x0), bool)
        line[np.clip(pts[:, 0].astype(int), y0, y1 - 1) - y0, np.clip(pts[:, 1].astype(int), x0, x1 - 1) - x0] = False
        cover = (ndimage.distance_transform_edt(line) <= width / 2).astype(np.float32)
        cover = ndimage.gaussian_filter(cover, 1.5) * (0.85 + 0.15 * _smooth_field(rng, cover.shape, 25.0))
        view = image[y0:y1, x0:x1]
        view *= np.power(10.0, -cover[..., None] * colour)


def _defocus(image: np.ndarray, regions: tuple[Region, ...]) -> np.ndarray:
    """Convolve each region's box (with a margin, so its inside sees no edge) with its PSF; True where blurred."""
    h, w = image.shape[:2]
    truth = np.zeros((h, w), bool)
    for r in regions:
        a, psf = r.area, r.blur.psf()
        m = psf.shape[0]
        y0, y1, x0, x1 = max(0, a.y0 - m), min(h, a.y1 + m), max(0, a.x0 - m), min(w, a.x1 + m)
        blurred = convolve(image[y0:y1, x0:x1], psf)[a.y0 - y0 : a.y1 - y0, a.x0 - x0 : a.x1 - x0]
        inside = a.mask()[: blurred.shape[0], : blurred.shape[1]]
        view = image[a.y0 : a.y0 + inside.shape[0], a.x0 : a.x0 + inside.shape[1]]
        view[inside] = blurred[inside]
        truth[a.y0 : a.y0 + inside.shape[0], a.x0 : a.x0 + inside.shape[1]] |= inside
    return truth


@dataclass(frozen=True)
class Built:
    """A built slide: ``image`` (H, W, 3) uint8, ``blurred`` (H, W) bool truth, ``tissue`` (H, W) bool outline."""

    image: np.ndarray
    blurred: np.ndarray
    tissue: np.ndarray


def _add_fat_footprint(footprint: np.ndarray, areas: tuple[Area, ...]) -> None:
    for area in areas:
        view = footprint[area.y0 : area.y1, area.x0 : area.x1]
        np.maximum(view, area.mask()[: view.shape[0], : view.shape[1]], out=view)


def tissue_footprint(spec: BenchSlide) -> np.ndarray:
    """Boolean (H, W): where the slide of ``spec`` holds tissue (fragments' outlines and fat), the same as
    :func:`build`'s ``tissue`` without drawing the rest; what a plan needs to lay defocus on tissue."""
    _, footprint = _lay_fragments(spec, np.random.default_rng([spec.seed, 44]))
    _add_fat_footprint(footprint, spec.fat)
    return footprint > 0.5


def build(spec: BenchSlide) -> Built:
    """The slide of ``spec`` (module docstring), deterministic for its seed."""
    rng = np.random.default_rng([spec.seed, 44])
    image, footprint = _lay_fragments(spec, rng)
    for area in spec.pale:
        _make_pale(image, area, rng)
    for area in spec.fat:
        _make_fat(image, area, rng, cell=FAT_CELL_UM / spec.mpp)
    _add_fat_footprint(footprint, spec.fat)
    _draw_pens(image, spec.pens, rng)
    blurred = _defocus(image, spec.regions)
    image += 1.5 * rng.standard_normal(image.shape, dtype=np.float32)
    return Built(np.clip(np.rint(image), 0, 255).astype(np.uint8), blurred, footprint > 0.5)


def tile_truth(built: Built, box: tuple[int, int, int, int]) -> tuple[float, float, float]:
    """Of a tile ``(y, x, h, w)``: (share of its area inside the defocused regions, share of it that is
    tissue, share of its tissue inside the regions). The first is the rule of an independent check of the
    focus map (a tile is blurred when half its area is); the last is what a focus measure can see, as
    defocus changes nothing on empty glass."""
    y, x, h, w = box
    blurred, tissue = built.blurred[y : y + h, x : x + w], built.tissue[y : y + h, x : x + w]
    n = int(tissue.sum())
    return float(blurred.mean()), float(tissue.mean()), float((blurred & tissue).sum() / n) if n else 0.0
