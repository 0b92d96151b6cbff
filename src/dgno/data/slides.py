"""Synthetic whole slides: tissue with regions blurred on purpose, written in the layouts scanners write.

Why: no real slide can be shipped or downloaded here, and a restoration that is only run where the
focus failed needs slides whose blurred regions are known. :func:`brightfield_tissue` renders an
H&E-like section (haematoxylin nuclei and eosin stroma mixed in optical density, Beer–Lambert, on a
white glass background); :func:`fluorescence_tissue` a two-channel 16-bit section (nuclei, and the
cytoplasm around them, on a dark background). :func:`blur_regions` blurs rectangles with a Gaussian of
known σ (a defocus the scanner's focus map missed), and :func:`write_slide` writes one of three
layouts:

* ``generic-tiff``: a tiled pyramidal RGB TIFF with JPEG tiles, reduced levels as top-level pages with
  NewSubfileType 1 (what OpenSlide reads as vendor ``generic-tiff``, like an SVS without Aperio's header);
* ``ome-tiff``: a tiled pyramidal OME-TIFF, levels in SubIFDs, lossless (16-bit multi-channel allowed);
* ``single-level``: one plain TIFF page in strips, no pyramid (a stitched export).

:func:`synthetic_slide` puts them together for the workflow (``slides.synthetic`` of the config, the
demo's slide): a section of one kind, a few square regions defocused on purpose and centred on tissue,
written in the layout a scanner of that kind writes, with a manifest of what was blurred where.

Everything is deterministic for a seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import tifffile
from scipy import ndimage

from dgno.choices import check_choice
from dgno.io import atomic_path

Layout = Literal["generic-tiff", "ome-tiff", "single-level"]
LAYOUTS = ("generic-tiff", "ome-tiff", "single-level")
Kind = Literal["fluorescence", "brightfield"]
KINDS = ("fluorescence", "brightfield")
# What each kind of synthetic slide is written as: the scanner's layout, µm per pixel, channel names.
KIND_LAYOUT: dict[str, tuple[Layout, float, tuple[str, ...]]] = {
    "fluorescence": ("ome-tiff", 0.65, ("DAPI", "Actin")),  # a 20× fluorescence scan: 16-bit, two channels
    "brightfield": ("generic-tiff", 0.25, ()),  # a 40× brightfield scan: 8-bit RGB, JPEG tiles (SVS-like)
}

# Ruifrok & Johnston's stain vectors (optical density per unit stain, R, G, B).
HAEMATOXYLIN = np.array([0.65, 0.70, 0.29])
EOSIN = np.array([0.07, 0.99, 0.11])


@dataclass(frozen=True)
class BlurRegion:
    """A rectangle [y0, y1) × [x0, x1) (pixels of level 0) blurred by a Gaussian of ``sigma`` pixels."""

    y0: int
    x0: int
    y1: int
    x1: int
    sigma: float


def _smooth_field(rng: np.random.Generator, shape: tuple[int, int], scale: float) -> np.ndarray:
    """Smooth float32 noise in [0, 1] whose blobs are about ``scale`` pixels across (coarse noise, upsampled)."""
    h, w = shape
    coarse = rng.standard_normal((max(2, int(h / scale) + 3), max(2, int(w / scale) + 3)))
    coarse = ndimage.gaussian_filter(coarse, 1.0).astype(np.float32)
    field = ndimage.zoom(coarse, (h / (coarse.shape[0] - 2), w / (coarse.shape[1] - 2)), order=1)[:h, :w]
    return (field - field.min()) / max(float(np.ptp(field)), 1e-9)


def tissue_mask(shape: tuple[int, int], *, seed: int, coverage: float = 0.6) -> np.ndarray:
    """Where the section lies: smooth blobs covering about ``coverage`` of the glass."""
    field = _smooth_field(np.random.default_rng([seed, 1]), shape, max(shape) / 4)
    return field > np.quantile(field[::4, ::4], 1.0 - coverage)


def _nuclei(rng: np.random.Generator, inside: np.ndarray, *, area_per_nucleus: int = 700) -> np.ndarray:
    """A float map with one textured disk (radius 3–7 px, density 0.6–1) per nucleus, centred in tissue."""
    h, w = inside.shape
    out = np.zeros((h, w), np.float32)
    ys, xs = np.nonzero(inside[::4, ::4])
    n = len(ys) * 16 // area_per_nucleus
    if n == 0:
        return out
    pick = rng.integers(0, len(ys), n)
    disks = {r: (np.hypot(*np.mgrid[-r : r + 1, -r : r + 1]) <= r + 0.25).astype(np.float32) for r in range(3, 8)}
    for y, x, r, d in zip(ys[pick] * 4 + rng.integers(0, 4, n), xs[pick] * 4 + rng.integers(0, 4, n), rng.integers(3, 8, n), rng.uniform(0.6, 1.0, n)):
        y0, x0 = max(0, y - r), max(0, x - r)
        patch = disks[int(r)][y0 - y + r : min(h, y + r + 1) - y + r, x0 - x + r : min(w, x + r + 1) - x + r]
        view = out[y0 : y0 + patch.shape[0], x0 : x0 + patch.shape[1]]
        np.maximum(view, patch * d, out=view)
    texture = 0.8 + 0.2 * rng.random((h, w), dtype=np.float32)
    return out * texture


def brightfield_tissue(shape: tuple[int, int], *, seed: int, regions: Sequence[BlurRegion] = ()) -> np.ndarray:
    """An H&E-like RGB uint8 section (H, W, 3) on white glass, defocused in ``regions``.

    Stain densities are mixed in optical density, ``I = 245 · 10^(−OD)``: eosin stroma with a fibrous
    texture, haematoxylin nuclei, a slight optical blur (σ 0.7 px, an in-focus scanner's PSF), the
    defocus of ``regions``, then sensor noise (σ 1.5 grey levels, after the optics as in a camera).
    """
    rng = np.random.default_rng([seed, 2])
    inside = tissue_mask(shape, seed=seed)
    fibres = ndimage.gaussian_filter(rng.standard_normal(shape, dtype=np.float32), (1.0, 3.0))
    eosin = np.where(inside, np.clip(0.25 + 0.12 * fibres / max(float(fibres.std()), 1e-6), 0.05, 0.6), 0.0).astype(np.float32)
    haem = _nuclei(rng, inside)
    rgb = np.empty((*shape, 3), np.float32)
    for k in range(3):
        rgb[..., k] = ndimage.gaussian_filter(245.0 * np.power(np.float32(10.0), -(haem * HAEMATOXYLIN[k] + eosin * EOSIN[k])), 0.7)
    rgb = blur_regions(rgb, regions, channel_axis=-1)
    rgb += 1.5 * rng.standard_normal(rgb.shape, dtype=np.float32)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def fluorescence_tissue(shape: tuple[int, int], *, seed: int, regions: Sequence[BlurRegion] = ()) -> np.ndarray:
    """A two-channel uint16 section (2, H, W): nuclei (a DNA stain) and the cytoplasm around them, dark glass,
    defocused in ``regions`` before the camera's noise."""
    rng = np.random.default_rng([seed, 3])
    inside = tissue_mask(shape, seed=seed)
    nuclei = _nuclei(rng, inside, area_per_nucleus=500)
    cyto = ndimage.gaussian_filter(nuclei, 5.0) * 6.0 * (0.7 + 0.3 * _smooth_field(rng, shape, 40))
    stack = np.stack([600 + 40000 * nuclei, 400 + 20000 * np.clip(cyto, 0, 1)]).astype(np.float32)
    stack = ndimage.gaussian_filter(stack, (0, 0.8, 0.8))
    stack = blur_regions(stack, regions, channel_axis=0) + 150.0 * rng.standard_normal(stack.shape, dtype=np.float32)
    return np.clip(np.rint(stack), 0, 65535).astype(np.uint16)


def blur_regions(image: np.ndarray, regions: Sequence[BlurRegion], *, channel_axis: int | None) -> np.ndarray:
    """A copy of ``image`` whose ``regions`` are Gaussian-blurred (computed with a margin, so no edge effect inside)."""
    out = image.copy()
    yx = [a for a in range(image.ndim) if a != (channel_axis % image.ndim if channel_axis is not None else None)]
    h, w = image.shape[yx[0]], image.shape[yx[1]]
    for r in regions:
        m = int(4 * r.sigma) + 1
        y0, y1, x0, x1 = max(0, r.y0 - m), min(h, r.y1 + m), max(0, r.x0 - m), min(w, r.x1 + m)
        crop = _window(image, yx, slice(y0, y1), slice(x0, x1)).astype(np.float32)
        sigma = [r.sigma if a in yx else 0.0 for a in range(image.ndim)]
        blurred = ndimage.gaussian_filter(crop, sigma)
        keep = _window(blurred, yx, slice(r.y0 - y0, r.y1 - y0), slice(r.x0 - x0, r.x1 - x0))
        info = np.iinfo(image.dtype) if image.dtype.kind in "ui" else None
        keep = np.clip(np.rint(keep), info.min, info.max) if info else keep
        _window(out, yx, slice(r.y0, r.y1), slice(r.x0, r.x1))[...] = keep.astype(image.dtype)
    return out


def _window(a: np.ndarray, yx: list[int], ys: slice, xs: slice) -> np.ndarray:
    index = [slice(None)] * a.ndim
    index[yx[0]], index[yx[1]] = ys, xs
    return a[tuple(index)]


def _levels(image: np.ndarray, yx: tuple[int, int], min_side: int) -> list[np.ndarray]:
    """The image and its 2× reductions (every second pixel: a test slide needs no better) down to ``min_side``."""
    out = [image]
    while max(out[-1].shape[yx[0]], out[-1].shape[yx[1]]) > min_side:
        index = [slice(None)] * image.ndim
        index[yx[0]] = index[yx[1]] = slice(None, None, 2)
        out.append(np.ascontiguousarray(out[-1][tuple(index)]))
    return out


def write_slide(
    path: str | Path,
    image: np.ndarray,
    *,
    layout: Layout,
    mpp: float | None = 0.25,
    tile: int = 256,
    channel_names: Sequence[str] | None = None,
    jpeg_quality: int = 90,
) -> Path:
    """Write ``image`` ((H, W, 3|4) RGB(A) uint8, (H, W) or (C, H, W)) as a slide of ``layout`` (module docstring).

    ``mpp``: µm per pixel of level 0, stored as TIFF resolution (and OME PhysicalSize); None stores none.
    """
    check_choice("layout", layout, LAYOUTS)
    path = Path(path)
    rgb = image.ndim == 3 and image.shape[-1] in (3, 4) and image.dtype == np.uint8
    yx = (0, 1) if rgb or image.ndim == 2 else (1, 2)
    res = {"resolution": (1e4 / mpp, 1e4 / mpp), "resolutionunit": "CENTIMETER"} if mpp else {}
    colour = {"photometric": "rgb", "extrasamples": ("unassalpha",) if rgb and image.shape[-1] == 4 else None} if rgb else {"photometric": "minisblack"}
    with atomic_path(path) as tmp, tifffile.TiffWriter(tmp, bigtiff=image.nbytes > 2**31, ome=layout == "ome-tiff") as tw:
        if layout == "single-level":
            tw.write(image, rowsperstrip=64, compression="zlib", metadata=None, **colour, **res)
            return path
        levels = _levels(image, yx, tile)
        if layout == "generic-tiff":
            jpeg = {"compression": "jpeg", "compressionargs": {"level": jpeg_quality}} if rgb and image.shape[-1] == 3 else {"compression": "zlib"}
            for k, level in enumerate(levels):
                scaled = {"resolution": (res["resolution"][0] / 2**k, res["resolution"][1] / 2**k), "resolutionunit": "CENTIMETER"} if mpp else {}
                tw.write(level, tile=(tile, tile), subfiletype=1 if k else 0, metadata=None, **jpeg, **colour, **scaled)
            return path
        meta: dict = {"axes": "YXS" if rgb else ("YX" if image.ndim == 2 else "CYX")}
        if mpp:
            meta.update(PhysicalSizeX=mpp, PhysicalSizeXUnit="µm", PhysicalSizeY=mpp, PhysicalSizeYUnit="µm")
        if channel_names:
            meta["Channel"] = {"Name": list(channel_names)}
        tw.write(levels[0], tile=(tile, tile), subifds=len(levels) - 1, compression="zlib", metadata=meta, **colour, **res)
        for k, level in enumerate(levels[1:], 1):
            scaled = {"resolution": (res["resolution"][0] / 2**k, res["resolution"][1] / 2**k), "resolutionunit": "CENTIMETER"} if mpp else {}
            tw.write(level, tile=(tile, tile), subfiletype=1, compression="zlib", metadata=None, **colour, **scaled)
    return path


def blurred_share(regions: Sequence[BlurRegion], box: tuple[int, int, int, int]) -> float:
    """The share of a tile box ``(y, x, height, width)`` (pixels of level 0) that lies in the defocused ``regions``.

    A tile is "truly blurred" for the focus map's precision and recall when at least half of it is: the rule
    the tests, the threshold study and the report's check of a generated slide share.
    """
    y, x, h, w = box
    inside = np.zeros((h, w), bool)
    for r in regions:
        inside[max(0, r.y0 - y) : max(0, r.y1 - y), max(0, r.x0 - x) : max(0, r.x1 - x)] = True
    return float(inside.mean())


def defocused_regions(shape: tuple[int, int], *, count: int, sigma: float, seed: int) -> list[BlurRegion]:
    """``count`` squares of side min(H, W) / 4, each centred on a tissue pixel of :func:`tissue_mask` (so that
    there is tissue to find out of focus), clipped to the slide; deterministic for ``seed``."""
    rng = np.random.default_rng([seed, 5])
    step = 8
    ys, xs = np.nonzero(tissue_mask(shape, seed=seed)[::step, ::step])
    if count == 0 or len(ys) == 0:
        return []
    half = min(shape) // 8
    picks = rng.choice(len(ys), size=count, replace=count > len(ys))
    centres = [(int(np.clip(ys[k] * step, half, shape[0] - half)), int(np.clip(xs[k] * step, half, shape[1] - half))) for k in picks]  # whole squares
    return [BlurRegion(y - half, x - half, y + half, x + half, float(sigma)) for y, x in centres]


def synthetic_slide(path: str | Path, *, kind: Kind, shape: tuple[int, int], seed: int, regions: int, sigma: float) -> dict:
    """Write a synthetic slide of ``kind`` (module docstring) with ``regions`` squares defocused by a Gaussian
    of ``sigma`` px; return its manifest (kind, size, seed, layout, µm/px, channels and the regions)."""
    check_choice("kind", kind, KINDS)
    shape = (int(shape[0]), int(shape[1]))
    blurred = defocused_regions(shape, count=regions, sigma=sigma, seed=seed)
    layout, mpp, channels = KIND_LAYOUT[kind]
    image = fluorescence_tissue(shape, seed=seed, regions=blurred) if kind == "fluorescence" else brightfield_tissue(shape, seed=seed, regions=blurred)
    write_slide(path, image, layout=layout, mpp=mpp, channel_names=list(channels) or None)
    return {
        "kind": kind, "size": list(shape), "seed": seed, "layout": layout, "mpp": mpp, "dtype": str(image.dtype),
        "channels": list(channels) or ["R", "G", "B"], "regions": [asdict(r) for r in blurred],
    }  # fmt: skip
