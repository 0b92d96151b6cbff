"""Where the tissue is and where it is out of focus: a thumbnail, a tissue mask and a focus score per tile.

**Thumbnail.** A low-resolution image of the level being restored, about 16 pixels per network tile
side (at most 4096 px on the long side), read from the coarsest pyramid level fine enough and averaged
down in blocks; a slide without a pyramid is read in blocks, so its level 0 is never held.

**Tissue.** Brightfield (RGB): the mean optical density over R, G, B, thresholded by Otsu's method on
log OD, kept in [0.02, 0.05] OD (white glass's noise … the palest stain: nuclei, stroma and glass make
three populations), the lower bound at least 0.01 OD above the slide's own glass (its brightest percent
of thumbnail pixels); transparent pixels (RGBA) are glass. One channel: Otsu's threshold on log
intensity, on the side away from the glass (the slide's border), the two sides at least
``MIN_SEPARATION`` glass standard deviations apart (camera noise alone gives about 1.7), else the slide
holds no tissue. Both masks are closed by ``SECTION_CLOSING`` thumbnail pixels: fat (its thin walls
vanish in a thumbnail) and the gaps between fluorescent cells are section. A tile is tissue when at
least ``min_tissue`` of its area is; only tissue tiles are ever sent to the network.

**Focus, brightfield (RGB).** Each tissue tile is scored per 16-px cell (32 × 32 cells of a 512-px
tile) by the learned focus measure (``dgno.slides.focus_net``, trained on the project's own defocus of
the dev sources' real tissue): the probability that the cell is defocused, 0 sharp … 1 blurred.

**Focus, one channel (fluorescence).** Cells of about ``CELL_PX`` (16) px; each cell's ratio E½ / E0 is
the share of its gradient energy that survives a Gaussian re-blur of ½ px, and each cell scores the
geometric mean of the ratios of the tissue cells in the ``WINDOW`` × ``WINDOW`` cells about it (80 px;
:func:`block_detail`), 0 sharp … 1 blurred: a defocus removes the finest scale first, and a ratio of
the tissue's own energies does not depend on stain density or contrast. Measured at the resolution
being restored (``focus_downsample`` 1): a reduction removes exactly the scale it measures.

**Decision.** The slide's in-focus reference is the 25th percentile of all its tissue cells' scores.
Learned measure: a cell is blurred when its logit reaches the reference's plus ``LEARNED_MARGIN``, and
at least ``LEARNED_FLOOR`` (:func:`learned_cut`); a tile is blurry when ``LEARNED_BLURRED_SHARE`` of its
area is. One channel: a cell is blurred when its score reaches ``reference ** (1 − margin)``
(:func:`relative_cut`, default margin 0.30); a tile is blurry when ``BLURRED_SHARE`` (half) of its
area is. Both: a cell the mask calls glass but that lies inside the tissue (within the closing of the
scored cells by ``FILL_CELLS`` cells: an adipocyte's interior, gaps of loose stroma) takes the state of
its nearest scored cell; open glass counts as in focus. Relative to the slide, because a scanner's
optics and JPEG set how sharp its in-focus tissue looks (chosen on the dev slides of
benchmarks/cpu/slide_focus_real.py, docs/slides.md). For a slide out of focus nearly everywhere,
``threshold`` sets an absolute cell score instead (or restore all).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import ndimage
from scipy.special import expit
from skimage.filters import threshold_otsu

from dgno.choices import check_choice
from dgno.slides.focus_net import CELL, cell_logits
from dgno.slides.grid import TileGrid
from dgno.slides.reader import Slide

LUMINANCE = np.array([0.2125, 0.7154, 0.0721], np.float32)  # ITU-R BT.709, as scikit-image's rgb2gray
THUMB_PX_PER_TILE = 16
THUMB_MAX_SIDE = 4096
OD_THRESHOLD_RANGE = (0.02, 0.05)
GLASS_MARGIN_OD = 0.01  # the tissue threshold's distance above the slide's own glass
GLASS_PERCENTILE = 99.0  # the thumbnail's brightest pixels: glass, when brighter than the palest tissue
MIN_SEPARATION = 3.0  # fluorescence: tissue-side median minus glass-side median, in glass-side standard deviations
REFERENCE_PERCENTILE = 25.0
FOCUS_MARGIN = 0.30
MIN_TISSUE = 0.05
CELL_PX = 16  # focus is scored on cells of about 16 px (32 × 32 cells of a 512-px tile) ...
WINDOW = 5  # ... each over the window of 5 × 5 cells about it (80 px)
DETAIL_SIGMA = 0.5  # px: the re-blur of the focus score
MIN_CELL_TISSUE = 0.05  # a cell with less tissue takes no part in its windows
MIN_BLOCK_TISSUE = 0.1  # a window with less tissue is not scored
FILL_CELLS = 10  # an unscored cell within this closing (cells, 160 px) of the scored ones takes its nearest scored cell's state
SECTION_CLOSING = {"od": 4, "intensity": 2}  # thumbnail px (a quarter, an eighth of a tile) closing the tissue mask, by its rule's kind
BLURRED_SHARE = 0.50  # a tile is blurry when at least this share of its area (its cells) is
RESTORE_MODES = ("blurry", "all")
MEASURES = ("learned", "detail")  # brightfield: the focus network; one channel: E½ / E0 over windows
MEASURE_DESCRIPTIONS = {"learned": "learned focus measure (dgno.slides.focus_net): each 16-px cell's probability of being defocused, 0 sharp ... 1 blurred",
                        "detail": "fine-detail loss E0.5/E0 (gradient energy surviving a 0.5-px Gaussian re-blur), geometric mean over a window of cells about each cell: 0 sharp ... 1 blurred"}  # fmt: skip
LEARNED_MARGIN = 4.0  # logits above the slide's in-focus reference ...
LEARNED_FLOOR = -1.0  # ... and at least this logit: a cell is blurred (learned measure) ...
LEARNED_BLURRED_SHARE = 0.45  # ... and a tile is blurry when at least this share of its area is
DECISION = (f"brightfield: learned focus measure (dgno.slides.focus_net) per 16-px cell, cell blurred when its logit >= max({LEARNED_FLOOR:g}, the 25th-percentile "
            f"tissue cell's logit + {LEARNED_MARGIN:g}), tile blurry when >= {LEARNED_BLURRED_SHARE:.0%} of its area (cells) is; one channel: fine-detail loss "
            f"E0.5/E0, geometric mean over 80-px windows of 16-px cells, cell blurred above the 25th-percentile reference ** (1 - margin {FOCUS_MARGIN:g}), tile "
            f"blurry when >= {BLURRED_SHARE:.0%} of its area is; both: unscored cells inside the tissue (closing by {FILL_CELLS} cells) take their nearest scored cell's state")
LABELS = ("background", "in focus", "blurry")


@dataclass(frozen=True)
class Thumbnail:
    """``image`` (h, w, C) float32 in the slide's units; ``scale``: pixels of the restored level per thumbnail pixel (y, x)."""

    image: np.ndarray
    scale: tuple[float, float]


def _relative_downsample(slide: Slide, base: int, level: int) -> float:
    return slide.info.downsample(level) / slide.info.downsample(base)


def _block_mean(block: np.ndarray, k: int) -> np.ndarray:
    """(h, w, C) → (ceil(h/k), ceil(w/k), C) block means, partial blocks padded by their edge."""
    if k == 1:
        return block.astype(np.float32)
    h, w = block.shape[:2]
    hp, wp = -(-h // k) * k, -(-w // k) * k
    if (hp, wp) != (h, w):
        block = np.pad(block, ((0, hp - h), (0, wp - w), (0, 0)), mode="edge")
    return block.reshape(hp // k, k, wp // k, k, -1).mean(axis=(1, 3), dtype=np.float64).astype(np.float32)


def thumbnail(slide: Slide, level: int, *, tile: int) -> Thumbnail:
    """The thumbnail of ``level`` (module docstring), read block by block."""
    height, width = slide.info.levels[level]
    target = max(tile / THUMB_PX_PER_TILE, max(height, width) / THUMB_MAX_SIDE, 1.0)
    candidates = [s for s in range(level, len(slide.info.levels)) if _relative_downsample(slide, level, s) <= target * 1.01]
    source = candidates[-1]
    k = max(1, int(target / _relative_downsample(slide, level, source)))
    sh, sw = slide.info.levels[source]
    step = k * max(1, 2048 // k)
    rows = []
    for y in range(0, sh, step):
        blocks = [_block_mean(slide.read(source, y, x, min(step, sh - y), min(step, sw - x)), k) for x in range(0, sw, step)]
        rows.append(np.concatenate(blocks, axis=1))
    image = np.concatenate(rows, axis=0)
    return Thumbnail(image, (height / image.shape[0], width / image.shape[1]))


def _otsu(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    if finite.size == 0 or float(np.ptp(finite)) == 0.0:
        return None
    return float(threshold_otsu(finite))


@dataclass(frozen=True)
class TissueRule:
    """Which pixels are tissue: mean optical density of R, G, B above ``threshold`` ("od"), or the log
    intensity of ``channel`` (minus ``floor``) on the tissue's side of it ("intensity"; ``above``)."""

    kind: str
    threshold: float
    channel: int = 0
    above: bool = True
    top: float = 255.0
    floor: float = 0.0

    def values(self, image: np.ndarray) -> np.ndarray:
        if self.kind == "od":
            return -np.log10(np.clip(image[..., :3].astype(np.float32) / self.top, 1.0 / 255.0, 1.0)).mean(axis=-1)
        return np.log1p(np.maximum(image[..., self.channel].astype(np.float32) - self.floor, 0.0))

    def pixels(self, image: np.ndarray) -> np.ndarray:
        """Boolean (h, w) of an (h, w, C) image holding the slide's channels (or the rule's channel alone at index ``channel``)."""
        v = self.values(image)
        return v > self.threshold if self.above else v < self.threshold


def tissue_rule(thumb: Thumbnail, *, photometric: str, channel: int, dtype: np.dtype) -> TissueRule:
    """The tissue rule of a slide, from its thumbnail (module docstring)."""
    img = thumb.image
    if photometric in ("rgb", "rgba"):
        top = float(np.iinfo(dtype).max) if np.dtype(dtype).kind in "ui" else 1.0
        probe = TissueRule("od", 0.0, top=top)
        od = probe.values(img)
        t = _otsu(np.log(od + 1e-3))
        t = math.exp(t) - 1e-3 if t is not None else OD_THRESHOLD_RANGE[1]
        glass = float(np.percentile(od, 100.0 - GLASS_PERCENTILE))
        low = max(OD_THRESHOLD_RANGE[0], min(glass + GLASS_MARGIN_OD, OD_THRESHOLD_RANGE[1] - 0.005))
        return TissueRule("od", float(np.clip(t, low, OD_THRESHOLD_RANGE[1])), top=top)
    probe = TissueRule("intensity", 0.0, channel=channel, floor=float(img[..., channel].min()))
    v = probe.values(img)
    t = _otsu(v)
    if t is None:
        return TissueRule("intensity", math.inf, channel=channel, floor=probe.floor)  # a blank slide: no tissue
    border = np.concatenate([v[0], v[-1], v[:, 0], v[:, -1]])
    above = float(np.median(border)) <= t
    glass, tissue = (v[v <= t], v[v > t]) if above else (v[v >= t], v[v < t])
    if abs(float(np.median(tissue)) - float(np.median(glass))) < MIN_SEPARATION * (float(glass.std()) + 1e-12):
        return TissueRule("intensity", math.inf, channel=channel, floor=probe.floor)  # noise split in two: no tissue
    return TissueRule("intensity", t, channel=channel, above=above, floor=probe.floor)


def tissue_mask(thumb: Thumbnail, rule: TissueRule, *, photometric: str) -> np.ndarray:
    """Boolean (h, w): where the thumbnail shows tissue; transparent pixels of RGBA are glass. Gaps of
    up to about twice ``SECTION_CLOSING`` pixels are closed: fat, whose walls a thumbnail averages away
    (on the dev slides of benchmarks/cpu/slide_focus_real.py four defocused fat tiles were otherwise
    never scored), and the dark gaps between fluorescent cells are part of the section."""
    mask, r = rule.pixels(thumb.image), SECTION_CLOSING[rule.kind]
    if mask.any():
        mask = ndimage.binary_closing(np.pad(mask, r, mode="edge"), iterations=r)[r:-r, r:-r]
    return mask & (thumb.image[..., 3] >= rule.top / 2) if photometric == "rgba" else mask


def tissue_fractions(mask: np.ndarray, thumb: Thumbnail, grid: TileGrid) -> np.ndarray:
    """(rows, cols): the share of each network tile's area that the mask calls tissue."""
    sy, sx = thumb.scale
    out = np.zeros(grid.shape, np.float32)
    for r, y in enumerate(grid.ys):
        y0, y1 = int(y / sy), max(int(y / sy) + 1, math.ceil((y + grid.th) / sy))
        for c, x in enumerate(grid.xs):
            x0, x1 = int(x / sx), max(int(x / sx) + 1, math.ceil((x + grid.tw) / sx))
            out[r, c] = float(mask[y0:y1, x0:x1].mean()) if mask[y0:y1, x0:x1].size else 0.0
    return out


def _cell_sums(a: np.ndarray, cells: int) -> np.ndarray:
    """(H, W) → (cells, cells): the sums over a grid of nearly equal cells (``np.array_split``'s bounds)."""
    ys = np.array([b[0] for b in np.array_split(np.arange(a.shape[0]), cells) if b.size] or [0])
    xs = np.array([b[0] for b in np.array_split(np.arange(a.shape[1]), cells) if b.size] or [0])
    out = np.zeros((cells, cells), np.float64)
    out[: ys.size, : xs.size] = np.add.reduceat(np.add.reduceat(a.astype(np.float64), ys, axis=0), xs, axis=1)
    return out


def block_detail(gray: np.ndarray, mask: np.ndarray | None, *, blocks: int, window: int = 1) -> np.ndarray:
    """(blocks, blocks) focus scores on a grid of cells of a tile: the geometric mean of the cells' E½ / E0
    over the ``mask`` pixels of a window of ``window`` × ``window`` cells about each cell.

    E0 is a cell's gradient energy Σ|∇I|², E½ the same after a Gaussian re-blur of ``DETAIL_SIGMA``: sharp
    tissue keeps much of its energy in the finest scale, which the re-blur removes (→ small), defocused
    tissue none (→ near 1); a ratio, so stain density and contrast cancel. The cells' log ratios are
    averaged (weighted by tissue), not their energies summed, so the sharp part of a window straddling a
    region's edge does not outweigh the blurred part and move the edge. A cell with under
    ``MIN_CELL_TISSUE`` of its pixels in ``mask`` takes no part; a window with less than
    ``MIN_BLOCK_TISSUE`` scores NaN; ``window`` 1 scores each cell alone."""
    img = np.asarray(gray, np.float32)
    e0 = sum(g * g for g in np.gradient(img))
    e1 = sum(g * g for g in np.gradient(ndimage.gaussian_filter(img, DETAIL_SIGMA)))
    keep = np.zeros(img.shape, bool)
    keep[3:-3, 3:-3] = True  # the re-blur at the border sees the padding
    if mask is not None:
        keep &= mask
    total, fine, kept, pixels = (_cell_sums(a, blocks) for a in (e0 * keep, e1 * keep, keep, np.ones(img.shape, bool)))
    used = (kept >= MIN_CELL_TISSUE * pixels) & (total > 0)
    log_ratio = np.where(used, np.log(np.clip(fine / np.where(used, total, 1.0), 1e-4, 1.0)), 0.0)
    weight = np.where(used, kept, 0.0)
    if window > 1:  # sums over the window about each cell, cut at the tile's edge
        log_ratio, weight, pixels = (ndimage.uniform_filter(a, window, mode="constant") for a in (log_ratio * weight, weight, pixels))
    else:
        log_ratio = log_ratio * weight
    good = (weight >= MIN_BLOCK_TISSUE * pixels) & (weight > 0)
    return np.where(good, np.exp(log_ratio / np.where(good, weight, 1.0)), np.nan).astype(np.float32)


def cells_per_side(tile: int) -> int:
    """How many cells of about ``CELL_PX`` a tile side of ``tile`` px is cut into."""
    return max(1, round(tile / CELL_PX))


def learned_detail(gray: np.ndarray, mask: np.ndarray | None, *, blocks: int) -> np.ndarray:
    """(blocks, blocks): the focus network's probability that a cell is defocused (NaN: under
    ``MIN_CELL_TISSUE`` of it in ``mask``); each cell takes the network's 16-px cell at its centre."""
    logits = cell_logits(gray)
    rows = np.minimum(((np.arange(blocks) + 0.5) * gray.shape[0] / blocks / CELL).astype(int), logits.shape[0] - 1)
    cols = np.minimum(((np.arange(blocks) + 0.5) * gray.shape[1] / blocks / CELL).astype(int), logits.shape[1] - 1)
    score = expit(logits[np.ix_(rows, cols)].astype(np.float64))
    if mask is not None:
        score[_cell_sums(mask, blocks) < MIN_CELL_TISSUE * _cell_sums(np.ones(mask.shape, bool), blocks)] = np.nan
    return score.astype(np.float32)


def measure_for(photometric: str, downsample: int = 1) -> str:
    """Which focus measure a slide gets: the learned one for brightfield (RGB, RGBA) measured at the
    resolution restored, E½ / E0 windows otherwise. The network learned defocus at a scan's own scale: on
    a tile reduced 2× it misses σ ≤ 1.5 px and reduced 4× it finds none (generated slides,
    benchmarks/cpu/slide_focus_threshold.py), where E½ / E0 still does."""
    return MEASURES[0] if photometric in ("rgb", "rgba") and downsample == 1 else MEASURES[1]


def focus_score(pixels: np.ndarray, rule: TissueRule | None, *, rgb: bool, learned: bool | None = None, cells: int | None = None) -> np.ndarray:
    """(n, n) cell focus scores of one tile (0 sharp … 1 blurred; n = :func:`cells_per_side`) over its
    tissue and a 4-px rim around it: with ``learned`` (default: ``rgb``) the learned measure on the
    luminance of RGB (:func:`learned_detail`), else :func:`block_detail` on the luminance or the tile's one
    channel (the rule's channel, read alone). The whole tile when less than 1 % of it is tissue."""
    learned = rgb if learned is None else learned
    if rgb:  # luminance on 0-255 (the network's scale) whatever the slide's dtype; pixels may come averaged, as float
        top = rule.top if rule is not None else 255.0
        gray = pixels[..., :3].astype(np.float32) @ LUMINANCE * np.float32(255.0 / top)
    else:
        gray = pixels[..., 0]
    mask = None
    if rule is not None:
        mask = ndimage.binary_dilation(rule.pixels(pixels) if rgb else replace(rule, channel=0).pixels(pixels), iterations=4)
        mask = mask if mask.mean() >= 0.01 else None
    blocks = cells or cells_per_side(max(gray.shape))
    return learned_detail(gray, mask, blocks=blocks) if learned else block_detail(gray, mask, blocks=blocks, window=WINDOW)


def _focus_pixels(slide: Slide, level: int, box: tuple[int, int, int, int], downsample: int, channels: tuple[int, ...]) -> np.ndarray:
    """A tile at ``downsample`` × coarser than ``level``: from a pyramid level that has it, else averaged down."""
    y, x, h, w = box
    if downsample > 1:
        for s in range(level + 1, len(slide.info.levels)):
            rel = _relative_downsample(slide, level, s)
            if abs(rel - downsample) < 0.02 * downsample:
                sh, sw = slide.info.levels[s]
                y0, x0 = int(y / rel), int(x / rel)
                return slide.read(s, y0, x0, min(max(1, int(h / rel)), sh - y0), min(max(1, int(w / rel)), sw - x0), channels)
    return _block_mean(slide.read(level, y, x, h, w, channels), downsample)


def focus_scores(
    slide: Slide,
    level: int,
    grid: TileGrid,
    tissue: np.ndarray,
    *,
    channel: int,
    rule: TissueRule | None = None,
    downsample: int = 1,
    workers: int = 2,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> np.ndarray:
    """(rows, cols, n, n) cell focus scores (float16: 2 kB per 512-px tile) of the tiles where ``tissue`` is True (NaN elsewhere),
    ``workers`` tiles at a time; n = :func:`cells_per_side` of the tile (at the focus downsample)."""
    if downsample < 1:
        raise ValueError(f"focus downsample={downsample!r}; allowed: an integer >= 1")
    rgb = slide.info.photometric in ("rgb", "rgba")
    channels = (0, 1, 2) if rgb else (channel,)
    learned = measure_for(slide.info.photometric, downsample) == MEASURES[0]
    todo = [(r, c) for r in range(grid.shape[0]) for c in range(grid.shape[1]) if tissue[r, c]]

    n = cells_per_side(-(-grid.tile // downsample))

    def score(rc: tuple[int, int]) -> np.ndarray:
        return focus_score(_focus_pixels(slide, level, grid.box(*rc), downsample, channels), rule, rgb=rgb, learned=learned, cells=n)

    out = np.full((*grid.shape, n, n), np.nan, np.float16)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = pool.map(score, todo)
        for rc, value in zip(todo, progress(results) if progress else results):
            out[rc] = value
    return out


@dataclass(frozen=True)
class Analysis:
    """What the decision needs of one slide: per tile its tissue share and focus score, and the thumbnail,
    tissue mask, tissue rule and focus measure they were measured with."""

    tissue: np.ndarray
    scores: np.ndarray
    thumb: Thumbnail
    mask: np.ndarray
    rule: TissueRule
    measure: str


def find_tissue(slide: Slide, level: int, grid: TileGrid, *, channel: int) -> tuple[Thumbnail, TissueRule, np.ndarray, np.ndarray]:
    """(thumbnail, tissue rule, tissue mask, per-tile tissue share) of ``level``."""
    info = slide.info
    thumb = thumbnail(slide, level, tile=grid.tile)
    rule = tissue_rule(thumb, photometric=info.photometric, channel=channel, dtype=info.dtype)
    mask = tissue_mask(thumb, rule, photometric=info.photometric)
    return thumb, rule, mask, tissue_fractions(mask, thumb, grid)


def analyse(slide: Slide, level: int, grid: TileGrid, *, channel: int, downsample: int = 1, workers: int = 2,
            progress: Callable[[int], Callable[[Iterable], Iterable]] | None = None) -> Analysis:  # fmt: skip
    """Thumbnail, tissue rule and mask, tissue share and focus score of every tile of ``level`` (module
    docstring); ``progress(n)`` wraps the iteration over the n tiles scored."""
    thumb, rule, mask, tissue = find_tissue(slide, level, grid, channel=channel)
    bar = progress(int((tissue > 0).sum())) if progress else None
    scores = focus_scores(slide, level, grid, tissue > 0, channel=channel, rule=rule, downsample=downsample, workers=workers, progress=bar)
    return Analysis(tissue, scores, thumb, mask, rule, measure_for(slide.info.photometric, downsample))


@dataclass(frozen=True)
class Decisions:
    """Per tile: tissue share, focus score (the median of its cells'), the share of its area (its cells,
    glass included) found blurred, label (background / in focus / blurry) and whether it is restored;
    ``blocks``: the cell scores; ``threshold``: the cell score from which a cell is blurred;
    ``reference``: the slide's in-focus cell score."""

    tissue: np.ndarray
    scores: np.ndarray
    blocks: np.ndarray
    shares: np.ndarray
    labels: np.ndarray
    restored: np.ndarray
    threshold: float | None
    reference: float | None
    rule: str
    measure: str = "detail"
    tile_share: float = BLURRED_SHARE


def tile_scores(blocks: np.ndarray) -> np.ndarray:
    """(rows, cols): each tile's median cell score, NaN where no cell is scored."""
    flat = blocks.reshape(*blocks.shape[:2], -1).astype(np.float32)
    scored = np.isfinite(flat).any(axis=-1)
    out = np.full(blocks.shape[:2], np.nan, np.float32)
    out[scored] = np.nanmedian(flat[scored], axis=-1)
    return out


def _filled_states(blurred: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """(n, n) cell states of one tile with its unscored cells filled: an unscored cell within the closing
    of the scored ones by ``FILL_CELLS`` cells (a gap at most about twice that across, or a bay of the
    tissue's outline) takes the state of its nearest scored cell; the rest, open glass, is in focus."""
    if scored.all() or not scored.any():
        return blurred
    r = FILL_CELLS
    cross = ndimage.generate_binary_structure(2, 1)
    closed = ndimage.binary_closing(np.pad(scored, r + 1, mode="edge"), cross, iterations=r)[r + 1 : -r - 1, r + 1 : -r - 1]
    idx = ndimage.distance_transform_edt(~scored, return_distances=False, return_indices=True)
    return np.where(scored, blurred, blurred[idx[0], idx[1]] & closed)


def blurred_shares(blocks: np.ndarray, cut: float | None) -> np.ndarray:
    """(rows, cols): the share of each tile's area (its cells) found blurred (NaN: none scored): a scored
    cell when its score is at least ``cut``; an unscored one (glass to the tissue mask) by
    :func:`_filled_states`: a defocus covers the glass inside the tissue too (adipocytes, gaps of loose
    stroma), and counting it in focus missed defocused fat; open glass stays in focus."""
    flat = blocks.reshape(*blocks.shape[:2], -1).astype(np.float32)
    scored = np.isfinite(flat)
    out = np.full(blocks.shape[:2], np.nan, np.float32)
    if cut is None:
        out[scored.any(axis=-1)] = 0.0
        return out
    for r, c in zip(*np.nonzero(scored.any(axis=-1))):
        cells = blocks[r, c].astype(np.float32)
        ok = np.isfinite(cells)
        out[r, c] = float(_filled_states(ok & (np.nan_to_num(cells, nan=-1.0) >= cut), ok).mean())
    return out


def decide(tissue: np.ndarray, blocks: np.ndarray, *, restore: str, min_tissue: float, threshold: float | None, margin: float,
           measure: str = MEASURES[1]) -> Decisions:  # fmt: skip
    """Label every tile and choose the restored ones (module docstring). ``blocks``: (rows, cols, n, n) cell
    scores of ``measure`` ("learned" or "detail"; ``margin`` is the detail measure's)."""
    check_choice("restore", restore, RESTORE_MODES)
    check_choice("focus measure", measure, MEASURES)
    is_tissue = tissue >= min_tissue
    valid = blocks[is_tissue].astype(np.float32)
    valid = valid[np.isfinite(valid)]
    reference = float(np.percentile(valid, REFERENCE_PERCENTILE)) if valid.size else None
    if threshold is not None:
        cut, rule = float(threshold), f"cell focus score >= {threshold:g} (absolute)"
    elif reference is not None and measure == MEASURES[0]:
        cut = learned_cut(reference)
        rule = (f"cell defocus probability >= {cut:.3g}: logit {logit(cut):.2f}, the in-focus reference's {logit(reference):.2f} "
                f"(25th percentile of tissue cells) + {LEARNED_MARGIN:g}, at least {LEARNED_FLOOR:g}")  # fmt: skip
    elif reference is not None:
        cut = relative_cut(reference, margin)
        rule = f"cell focus score >= {cut:.3f}: the in-focus reference {reference:.3f} (25th percentile of tissue cells) raised by margin {margin:g}"
    else:
        cut, rule = None, "no tissue"
    shares = blurred_shares(blocks, cut)
    tile_share = LEARNED_BLURRED_SHARE if measure == MEASURES[0] else BLURRED_SHARE
    blurry = is_tissue & (np.nan_to_num(shares, nan=0.0) >= tile_share)
    labels = np.where(~is_tissue, LABELS[0], np.where(blurry, LABELS[2], LABELS[1]))
    restored = is_tissue if restore == "all" else blurry
    rule = f"{rule}; a tile is blurry when at least {tile_share:.0%} of its area is" if restore == "blurry" else "all tissue tiles"
    return Decisions(tissue, tile_scores(blocks), blocks, shares, labels, restored, cut, reference, rule, measure, tile_share)


def logit(p: float | np.ndarray) -> float | np.ndarray:
    """log(p / (1 − p)) of a learned score, kept finite (p clipped to [1e-7, 1 − 1e-7])."""
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return np.log(p / (1.0 - p))


def learned_cut(reference: float) -> float:
    """The learned measure's cell score from which a cell is blurred: the probability whose logit is the
    reference's plus ``LEARNED_MARGIN``, at least ``LEARNED_FLOOR``. Relative, because a slide's in-focus
    tissue sets how sure the network is of it (the reference's logit ranges over −10 … −4 by slide on the
    benchmark) and mild defocus lands a few logits above it; the floor keeps a slide in focus, whose
    reference is far below any defocus, from calling its softest tissue blurred."""
    z = max(LEARNED_FLOOR, logit(reference) + LEARNED_MARGIN)
    return float(expit(z))


def relative_cut(reference: float, margin: float) -> float:
    """The cell score from which a cell is blurred: the reference raised to the power 1 − ``margin``.

    On the log scale of the score (−log E½/E0, the fine detail a window holds), a cell is blurred when it
    holds less than 1 − margin of the detail of the slide's in-focus reference. A power, not a sum,
    because a defocus removes a share of the detail whatever the tissue held to begin with.
    """
    return float(reference ** (1.0 - margin))


def decisions_frame(grid: TileGrid, d: Decisions) -> pd.DataFrame:
    """One row per network tile: where it is, its tissue share and focus score, its label and whether it is restored."""
    rows = []
    for r, y in enumerate(grid.ys):
        for c, x in enumerate(grid.xs):
            score, share = d.scores[r, c], d.shares[r, c]
            rows.append({
                "row": r, "col": c, "y": y, "x": x, "height": grid.th, "width": grid.tw,
                "tissue_fraction": round(float(d.tissue[r, c]), 4),
                "focus_score": round(float(score), 5) if np.isfinite(score) else None,
                "blurred_share": round(float(share), 4) if np.isfinite(share) else None,
                "label": str(d.labels[r, c]), "restored": bool(d.restored[r, c]),
            })  # fmt: skip
    return pd.DataFrame(rows)
