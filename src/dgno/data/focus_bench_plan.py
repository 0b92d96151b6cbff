"""Which slides the real-tissue focus benchmark builds: 17 from the dev sources, 13 from the held-out ones.

Every slide is drawn from its own seed, so a slide does not change when another is added. What each
holds (``dgno.data.focus_bench``):

* tissue: fragments of one laboratory's sources (one scanner per slide, as on a real slide) on glass, at their own scale or reduced 2× (a 40× source seen
  as a 20× scan), or the CMU Aperio region whole, turned and mirrored;
* defocus: up to three regions, rectangle, ellipse, blob or band, 300 to 1800 px, PSF and σ varying
  from slide to slide over σ = 1, 1.5, 2, 2.5, 3, 4 px and the four PSF kinds;
* defocus lies on tissue: a region is laid only where at least ``MIN_REGION_TISSUE`` of it covers the
  tissue's outline (where none fits, the slide has one region fewer), so the truth counts tile area a
  focus measure can see (blurring empty glass changes nothing);
* what makes it hard, by tag: ``pale`` (a pale area with a region inside it), ``fat`` (adipocytes with a
  region across them), ``pen`` (ink strokes, one through a region), ``dense`` (nuclei-rich tumour);
* ``check``: laid out as an independent check of the focus map was: two rectangles of tissue 600-700 px
  across, defocused by a disc then a Gaussian.

:func:`training_slide` draws further slides of the dev sources alike, from seeds of their own, for the
learned focus measure (``dgno.slides.focus_training``): σ log-uniform over 0.7-4.5 px and any PSF kind
per region, so the network sees the mild defocus the benchmark starts at as often as the strong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from dgno.data.focus_bench import BLUR_KINDS, SHAPES, Area, BenchSlide, Blur, Fragment, Region, tissue_footprint, turned
from dgno.data.tissue_sources import source

SIGMAS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
TRAINING_SIGMA = (0.7, 4.5)  # px: the range of a training slide's defocus (log-uniform)
DEV_HE = ("hgsc-nest", "hgsc-stroma")
DEV_IHC = "skimage-ihc"
MIN_REGION_TISSUE = 0.85  # a defocused region covers at least this share of tissue
COARSE = 8  # the tissue outline is checked on every 8th pixel

# name, split, fragments' sources (one "whole:" source: the CMU region laid whole), 2× reduction, tags
PLAN: tuple[tuple[str, str, tuple[str, ...], int, tuple[str, ...]], ...] = (
    ("dev-nest-a", "dev", ("hgsc-nest", "hgsc-nest"), 1, ("dense",)),
    ("dev-nest-b", "dev", ("hgsc-nest", "hgsc-stroma", "hgsc-nest"), 2, ("dense",)),
    ("dev-nest-pen", "dev", ("hgsc-nest", "hgsc-nest"), 1, ("dense", "pen")),
    ("dev-stroma-pale-a", "dev", ("hgsc-stroma", "hgsc-stroma"), 1, ("pale",)),
    ("dev-stroma-pale-b", "dev", ("hgsc-stroma", "hgsc-nest", "hgsc-stroma"), 2, ("pale",)),
    ("dev-stroma-a", "dev", ("hgsc-stroma", "hgsc-nest", "hgsc-stroma"), 1, ()),
    ("dev-fat-a", "dev", ("hgsc-stroma", "hgsc-nest"), 1, ("fat",)),
    ("dev-fat-b", "dev", ("hgsc-nest", "hgsc-stroma", "hgsc-nest"), 2, ("fat",)),
    ("dev-pen-a", "dev", ("hgsc-stroma", "hgsc-nest"), 1, ("pen",)),
    ("dev-pen-b", "dev", ("hgsc-nest", "hgsc-stroma", "hgsc-nest"), 2, ("pen", "pale")),
    ("dev-ihc", "dev", ("skimage-ihc", "skimage-ihc", "skimage-ihc", "skimage-ihc"), 1, ("pen",)),
    ("dev-mixed-a", "dev", ("hgsc-nest", "hgsc-stroma"), 1, ("pale", "fat", "pen")),
    ("dev-mixed-b", "dev", ("hgsc-stroma", "hgsc-nest", "hgsc-stroma"), 2, ("pale", "pen", "dense")),
    ("dev-mixed-c", "dev", ("hgsc-nest", "hgsc-stroma", "hgsc-nest", "hgsc-stroma"), 2, ("fat", "pen")),
    ("held-cmu-a", "held-out", ("whole:cmu-aperio",), 1, ()),
    ("held-cmu-b", "held-out", ("whole:cmu-aperio",), 1, ()),
    ("held-cmu-pale", "held-out", ("whole:cmu-aperio",), 1, ("pale",)),
    ("held-cmu-fat", "held-out", ("whole:cmu-aperio",), 1, ("fat",)),
    ("held-cmu-pen", "held-out", ("whole:cmu-aperio",), 1, ("pen",)),
    ("held-cmu-mixed", "held-out", ("whole:cmu-aperio",), 1, ("pale", "pen")),
    ("held-tia-a", "held-out", ("tia-target", "tia-target", "tia-target"), 1, ("dense",)),
    ("held-tia-b", "held-out", ("tia-target", "tia-target", "tia-target"), 2, ("dense", "pen")),
    ("held-tia-pale", "held-out", ("tia-target", "tia-target", "tia-target", "tia-target"), 1, ("pale", "dense")),
    ("held-tia-fat", "held-out", ("tia-target", "tia-target", "tia-target"), 1, ("fat", "dense")),
    ("dev-check-a", "dev", ("hgsc-nest", "hgsc-stroma", "hgsc-nest", "hgsc-stroma"), 2, ("check",)),
    ("dev-check-b", "dev", ("hgsc-stroma", "hgsc-nest", "hgsc-stroma"), 1, ("check",)),
    ("dev-check-c", "dev", ("hgsc-stroma", "hgsc-nest", "hgsc-nest"), 2, ("check",)),
    ("held-cmu-check-a", "held-out", ("whole:cmu-aperio",), 1, ("check",)),
    ("held-cmu-check-b", "held-out", ("whole:cmu-aperio",), 1, ("check",)),
    ("held-cmu-check-c", "held-out", ("whole:cmu-aperio",), 1, ("check",)),
)  # fmt: skip


def _fragments(rng: np.random.Generator, names: tuple[str, ...], reduce: int) -> tuple[tuple[Fragment, ...], tuple[int, int], list[tuple[int, int, int, int]]]:
    """Fragments side by side (two to a row) with glass between; (fragments, slide size, tissue boxes)."""
    if names[0].startswith("whole:"):
        rot, flip = int(rng.integers(0, 4)), bool(rng.integers(0, 2))
        img = turned(names[0].removeprefix("whole:"), rot=rot, flip=flip, reduce=1)
        h, w = img.shape[:2]
        od = -np.log10(np.clip(img[::32, ::32].mean(axis=-1) / 243.0, 1e-3, 1.0))
        ys, xs = np.nonzero(od > 0.08)
        boxes = [(int(y * 32), int(x * 32), int(y * 32 + 32), int(x * 32 + 32)) for y, x in zip(ys, xs)]
        return (Fragment(names[0].removeprefix("whole:"), (0, 0), (h, w), rot=rot, flip=flip, outline=False),), (h, w), boxes
    frags, boxes, gap = [], [], 120
    y, x, row_h, width = gap, gap, 0, 0
    for k, name in enumerate(names):
        rot, flip = int(rng.integers(0, 4)), bool(rng.integers(0, 2))
        scale = reduce if source(name).mpp < 0.4 else 1  # a 20× source is not reduced further
        img = turned(name, rot=rot, flip=flip, reduce=scale)
        fh, fw = min(img.shape[0], 1400), min(img.shape[1], 1400)
        off = (int(rng.integers(0, img.shape[0] - fh + 1)), int(rng.integers(0, img.shape[1] - fw + 1)))
        frags.append(Fragment(name, (y, x), (fh, fw), off, rot, flip, scale))
        m = 0.15
        boxes.append((y + int(m * fh), x + int(m * fw), y + int((1 - m) * fh), x + int((1 - m) * fw)))
        row_h, x = max(row_h, fh), x + fw + gap
        width = max(width, x)
        if k % 2 == 1:
            y, x, row_h = y + row_h + gap, gap, 0
    return tuple(frags), (y + row_h + gap if row_h else y, width), boxes


def _area(rng: np.random.Generator, size: tuple[int, int], centre: tuple[int, int], shape: str, span: tuple[int, int]) -> Area:
    """An area of ``shape`` whose sides are drawn from ``span`` (a band: long and narrow), centred near ``centre``, inside the slide."""
    lo, hi = span
    if shape == "band":
        a, b = int(rng.integers(300, 460)), int(rng.integers(max(lo, 1000), max(hi, 1000) + 801))
        h, w = (a, b) if rng.random() < 0.5 else (b, a)
    else:
        h, w = int(rng.integers(lo, hi + 1)), int(rng.integers(lo, hi + 1))
    h, w = min(h, size[0]), min(w, size[1])
    y0 = int(np.clip(centre[0] - h // 2, 0, size[0] - h))
    x0 = int(np.clip(centre[1] - w // 2, 0, size[1] - w))
    return Area(shape, y0, x0, y0 + h, x0 + w, int(rng.integers(0, 2**31)))


def _centre(rng: np.random.Generator, boxes: list[tuple[int, int, int, int]]) -> tuple[int, int]:
    y0, x0, y1, x1 = boxes[int(rng.integers(0, len(boxes)))]
    return int(rng.integers(y0, max(y0 + 1, y1))), int(rng.integers(x0, max(x0 + 1, x1)))


def _overlaps(a: Area, others: list[Area], gap: int = 64) -> bool:
    return any(a.y0 < o.y1 + gap and o.y0 < a.y1 + gap and a.x0 < o.x1 + gap and o.x0 < a.x1 + gap for o in others)


def on_tissue(area: Area, footprint: np.ndarray) -> float:
    """The share of ``area`` that covers tissue, on the coarse ``footprint`` (every ``COARSE``-th pixel;
    the area drawn at that scale: a blob's outline scales with its box)."""
    y0, x0 = area.y0 // COARSE, area.x0 // COARSE
    inside = replace(area, y0=y0, x0=x0, y1=max(y0 + 2, area.y1 // COARSE), x1=max(x0 + 2, area.x1 // COARSE)).mask()
    under = footprint[y0 : y0 + inside.shape[0], x0 : x0 + inside.shape[1]]
    inside = inside[: under.shape[0], : under.shape[1]]
    return float(under[inside].mean()) if inside.any() else 0.0


def _on_tissue_area(footprint: np.ndarray, draws: tuple[Callable[[], Area], ...], others: list[Area]) -> Area | None:
    """The first area of up to 200 of each of ``draws`` in turn that keeps clear of ``others`` and lies on
    tissue (None when none does: the slide gets fewer regions)."""
    for draw in draws:
        for _ in range(200):
            a = draw()
            if not _overlaps(a, others) and on_tissue(a, footprint) >= MIN_REGION_TISSUE:
                return a
    return None


def _regions(rng: np.random.Generator, size: tuple[int, int], boxes: list, footprint: np.ndarray, count: int, first: list[Area], index: int, check: bool) -> tuple[Region, ...]:
    """``count`` defocused regions on tissue that do not overlap, the ``first`` areas' included; σ and PSF
    kind vary with ``index`` (a ``check`` slide: rectangles 600-700 px, disc then Gaussian). Where no
    region of the drawn shape fits on tissue, a compact one (rectangle or ellipse, 450-800 px) is drawn."""
    areas = list(first)

    def draw() -> Area:
        if check:
            return _area(rng, size, _centre(rng, boxes), "rectangle", (600, 700))
        return _area(rng, size, _centre(rng, boxes), SHAPES[int(rng.integers(0, 4))], (450, 1100))

    def compact() -> Area:
        return _area(rng, size, _centre(rng, boxes), SHAPES[int(rng.integers(0, 2))], (450, 800))

    while len(areas) < count:
        a = _on_tissue_area(footprint, (draw, compact), areas)
        if a is None:
            break
        areas.append(a)
    kinds = [("disk+gaussian" if check else BLUR_KINDS[(index + k) % len(BLUR_KINDS)]) for k in range(len(areas))]
    return tuple(Region(a, Blur(kind, SIGMAS[(index + 2 * k) % len(SIGMAS)])) for k, (a, kind) in enumerate(zip(areas, kinds)))


def _across(rng: np.random.Generator, size: tuple[int, int], hard: Area) -> Callable[[], Area]:
    """Draws of a 500-800 px rectangle near the middle of ``hard`` (within 250 px of it)."""
    cy, cx = (hard.y0 + hard.y1) // 2, (hard.x0 + hard.x1) // 2

    def draw() -> Area:
        return _area(rng, size, (cy + int(rng.integers(-250, 251)), cx + int(rng.integers(-250, 251))), "rectangle", (500, 800))

    return draw


def _hard_areas(rng: np.random.Generator, size: tuple[int, int], boxes: list, tags: tuple[str, ...]) -> tuple[tuple[Area, ...], tuple[Area, ...]]:
    """(pale, fat): a blob of each that ``tags`` names, centred on the tissue."""
    pale = (_area(rng, size, _centre(rng, boxes), "blob", (900, 1500)),) if "pale" in tags else ()
    fat = (_area(rng, size, _centre(rng, boxes), "blob", (700, 1200)),) if "fat" in tags else ()
    return pale, fat


def _across_hard(rng: np.random.Generator, size: tuple[int, int], footprint: np.ndarray, hard: tuple[Area, ...]) -> list[Area]:
    """A defocused area on tissue across each of the first two ``hard`` areas (fewer where none fits)."""
    first: list[Area] = []
    for area in hard[:2]:
        a = _on_tissue_area(footprint, (_across(rng, size, area),), first)
        first += [a] if a is not None else []
    return first


def benchmark_slides(split: str | None = None) -> list[BenchSlide]:
    """The benchmark's slides (module docstring), those of ``split`` only when given."""
    out = []
    for index, (name, sp, names, reduce, tags) in enumerate(PLAN):
        if split is not None and sp != split:
            continue
        rng = np.random.default_rng([index, 4401])
        frags, size, boxes = _fragments(rng, names, reduce)
        pale, fat = _hard_areas(rng, size, boxes, tags)
        mpp = min(source(f.source).mpp * f.reduce for f in frags)
        base = BenchSlide(name, sp, 4400 + index, size, frags, (), pale, fat, pens=3 if "pen" in tags else 0, mpp=mpp, tags=tags)
        footprint = tissue_footprint(base)[::COARSE, ::COARSE]
        first = _across_hard(rng, size, footprint, (*pale, *fat))
        count = 2 if "check" in tags or max(size) <= 2400 else 3
        regions = _regions(rng, size, boxes, footprint, count, first, index, "check" in tags)
        out.append(replace(base, regions=regions))
    return out


def training_slide(k: int) -> BenchSlide:
    """Training slide ``k`` of the learned focus measure: fragments of the dev sources only (H&E, and one
    slide in eight of IHC), each hard tissue (pale, fat, pen) with odds 0.4, up to three defocused regions
    on tissue with σ drawn log-uniform over ``TRAINING_SIGMA`` and any PSF kind. Seeds apart from the
    benchmark's, so no benchmark slide is a training slide."""
    rng = np.random.default_rng([k, 9901])
    if rng.random() < 0.125:
        names: tuple[str, ...] = (DEV_IHC,) * 4
    else:
        names = tuple(DEV_HE[int(rng.integers(0, 2))] for _ in range(int(rng.integers(2, 5))))
    reduce = int(rng.integers(1, 3))
    tags = tuple(t for t in ("pale", "fat", "pen") if rng.random() < 0.4)
    frags, size, boxes = _fragments(rng, names, reduce)
    pale, fat = _hard_areas(rng, size, boxes, tags)
    mpp = min(source(f.source).mpp * f.reduce for f in frags)
    pens = int(rng.integers(1, 4)) if "pen" in tags else 0
    base = BenchSlide(f"train-{k}", "dev", 90000 + k, size, frags, (), pale, fat, pens=pens, mpp=mpp, tags=tags)
    footprint = tissue_footprint(base)[::COARSE, ::COARSE]
    areas = _across_hard(rng, size, footprint, (*pale, *fat))

    def draw() -> Area:
        return _area(rng, size, _centre(rng, boxes), SHAPES[int(rng.integers(0, 4))], (300, 1100))

    while len(areas) < 3:
        a = _on_tissue_area(footprint, (draw,), areas)
        if a is None:
            break
        areas.append(a)
    lo, hi = np.log(TRAINING_SIGMA)
    blurs = [Blur(BLUR_KINDS[int(rng.integers(0, len(BLUR_KINDS)))], float(np.exp(rng.uniform(lo, hi)))) for _ in areas]
    return replace(base, regions=tuple(Region(a, b) for a, b in zip(areas, blurs)))
