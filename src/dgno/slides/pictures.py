"""The pictures written beside a restored slide: the focus map and a before/after view of one restored tile.

* ``<name>.focus.png``: the slide's thumbnail, the tissue outline (cyan), the restored tiles shaded red,
  and in the title how many tiles were restored of how many tissue tiles, and by which rule.
* ``<name>.before_after.png``: the restored tile that scored most blurred, before and after, at full
  resolution (a thumbnail cannot show a defocus), with the restored channel's contrast stretched for
  fluorescence; with no tile restored, the tissue tile that scored most blurred, unchanged, so that
  every run has the same files (the workflow's rule declares them).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from dgno.io import atomic_path  # noqa: E402
from dgno.slides.focus import LABELS, MEASURES, Decisions, Thumbnail, logit  # noqa: E402
from dgno.slides.grid import TileGrid  # noqa: E402


def display(image: np.ndarray, *, photometric: str, channel: int, dtype: np.dtype, limits: tuple[float, float] | None = None) -> np.ndarray:
    """(h, w, C) slide values → an RGB or grey picture in [0, 1]: RGB by the dtype's range, else the
    channel stretched between ``limits`` (default: its own 1st and 99.5th percentiles)."""
    if photometric in ("rgb", "rgba"):
        top = float(np.iinfo(dtype).max) if np.dtype(dtype).kind in "ui" else 1.0
        return np.clip(image[..., :3].astype(np.float32) / top, 0.0, 1.0)
    v = image[..., channel].astype(np.float32)
    lo, hi = limits if limits is not None else stretch(image, channel)
    return np.clip((v - lo) / (hi - lo), 0.0, 1.0) if hi > lo else np.zeros_like(v)


def stretch(image: np.ndarray, channel: int) -> tuple[float, float]:
    """The 1st and 99.5th percentiles of one channel: the contrast a fluorescence picture is shown with."""
    lo, hi = np.percentile(image[..., channel].astype(np.float32), [1.0, 99.5])
    return float(lo), float(hi)


def _figure(width_px: int, height_px: int, panels: int = 1):
    scale = 10.0 / max(width_px * panels, height_px)
    return plt.subplots(1, panels, figsize=(max(3.0, width_px * panels * scale), max(2.5, height_px * scale + 0.6)), squeeze=False)


MAX_PICTURE_SIDE = 1200


def focus_map(path: Path, thumb: Thumbnail, mask: np.ndarray, grid: TileGrid, decisions: Decisions, *, picture: np.ndarray, title: str) -> None:
    """Write the focus map (module docstring) to ``path``; a thumbnail longer than 1200 px is shown every k-th pixel."""
    k = max(1, -(-max(picture.shape[:2]) // MAX_PICTURE_SIDE))
    picture, mask = picture[::k, ::k], mask[::k, ::k]
    h, w = picture.shape[:2]
    overlay = np.zeros((h, w, 4), np.float32)
    sy, sx = thumb.scale[0] * k, thumb.scale[1] * k
    for r, c in zip(*np.nonzero(decisions.restored)):
        y, x = grid.ys[r], grid.xs[c]
        overlay[int(y / sy) : int(np.ceil((y + grid.th) / sy)), int(x / sx) : int(np.ceil((x + grid.tw) / sx))] = (1.0, 0.1, 0.1, 0.35)
    fig, axes = _figure(w, h)
    ax = axes[0, 0]
    ax.imshow(picture, cmap=None if picture.ndim == 3 else "gray", interpolation="nearest")
    ax.imshow(overlay, interpolation="nearest")
    if mask.any() and not mask.all():
        ax.contour(mask.astype(np.float32), levels=[0.5], colors="cyan", linewidths=0.8)
    ax.set_title(title, fontsize=8)
    ax.set_axis_off()
    _save(fig, path)


CHECK_COLOURS = {"restored, truly defocused": (1.0, 0.1, 0.1, 0.40), "restored, in focus": (1.0, 0.65, 0.0, 0.55), "defocused, not restored": (0.1, 0.3, 1.0, 0.55)}


def focus_check_map(path: Path, thumb: Thumbnail, mask: np.ndarray, grid: TileGrid, decisions: Decisions, truth: np.ndarray, *, picture: np.ndarray, title: str,
                    regions: np.ndarray | None = None, truth_shares: np.ndarray | None = None) -> None:  # fmt: skip
    """Write the focus map of a slide whose defocused tiles are known (``truth``, (rows, cols) bool): the
    tiles it got right (red), restored in focus (orange, a false alarm) and defocused but missed (blue),
    each shaded over its own part of the slide (up to the middle of the overlaps, so neighbours do not
    mix). ``regions`` (bool, the picture's shape): the defocused regions, outlined in yellow;
    ``truth_shares`` ((rows, cols)): each tissue tile is labelled "decided share / true share"."""
    k = max(1, -(-max(picture.shape[:2]) // MAX_PICTURE_SIDE))
    picture, mask = picture[::k, ::k], mask[::k, ::k]
    h, w = picture.shape[:2]
    overlay = np.zeros((h, w, 4), np.float32)
    sy, sx = thumb.scale[0] * k, thumb.scale[1] * k
    kinds = {(True, True): "restored, truly defocused", (True, False): "restored, in focus", (False, True): "defocused, not restored"}
    ys, xs = _own_parts(grid.ys, grid.th, grid.height), _own_parts(grid.xs, grid.tw, grid.width)
    fig, axes = _figure(w, h)
    ax = axes[0, 0]
    for r, (y0, y1) in enumerate(ys):
        for c, (x0, x1) in enumerate(xs):
            kind = kinds.get((bool(decisions.restored[r, c]), bool(truth[r, c])))
            if kind:
                overlay[int(y0 / sy) : int(np.ceil(y1 / sy)), int(x0 / sx) : int(np.ceil(x1 / sx))] = CHECK_COLOURS[kind]
            if truth_shares is not None and decisions.labels[r, c] != LABELS[0]:
                ax.text((x0 + x1) / 2 / sx, (y0 + y1) / 2 / sy, f"{decisions.shares[r, c]:.2f}\n{truth_shares[r, c]:.2f}", ha="center", va="center", fontsize=7,
                        color="black", bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.7, "linewidth": 0})  # fmt: skip
    ax.imshow(picture, interpolation="nearest")
    ax.imshow(overlay, interpolation="nearest")
    for y0, _ in ys[1:]:
        ax.axhline(y0 / sy - 0.5, color="0.5", linewidth=0.4)
    for x0, _ in xs[1:]:
        ax.axvline(x0 / sx - 0.5, color="0.5", linewidth=0.4)
    if mask.any() and not mask.all():
        ax.contour(mask.astype(np.float32), levels=[0.5], colors="cyan", linewidths=0.8)
    if regions is not None and regions.any():
        ax.contour(regions[::k, ::k].astype(np.float32), levels=[0.5], colors="yellow", linewidths=1.2)
    counts = {name: sum(kinds.get((bool(a), bool(b))) == name for a, b in zip(decisions.restored.ravel(), truth.ravel())) for name in CHECK_COLOURS}
    handles = [plt.Rectangle((0, 0), 1, 1, color=CHECK_COLOURS[n]) for n in CHECK_COLOURS]
    labels = [f"{n}: {counts[n]}" for n in CHECK_COLOURS]
    if regions is not None:
        handles.append(plt.Line2D([0], [0], color="yellow"))
        labels.append("defocused on purpose")
    ax.legend(handles, labels, loc="lower left", fontsize=7, framealpha=0.8)
    ax.set_title(title, fontsize=8)
    ax.set_axis_off()
    _save(fig, path)


def _own_parts(starts: tuple[int, ...], size: int, total: int) -> list[tuple[int, int]]:
    """Each tile's own stretch along one axis: from the middle of its overlap with the one before to the
    middle of its overlap with the one after (the whole axis once, without overlaps)."""
    cuts = [0, *((a + size + b) // 2 for a, b in zip(starts[:-1], starts[1:])), total]
    return [(cuts[i], cuts[i + 1]) for i in range(len(starts))]


def focus_report(path: Path, decisions: Decisions, *, title: str) -> None:
    """Write the focus report: left, every tile's share of blurred area (the tile's score) on the slide's
    grid, the tiles at or above the share that makes a tile blurry framed; right, the histogram of all cell
    scores with the slide's in-focus reference and the cell threshold."""
    d = decisions
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [1.3, 1]})
    shares = np.ma.masked_invalid(np.where(d.labels != LABELS[0], d.shares, np.nan))
    im = left.imshow(shares, cmap="magma", vmin=0.0, vmax=1.0, interpolation="nearest")
    for r, c in zip(*np.nonzero(d.restored)):
        left.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="cyan", linewidth=1.2))
    fig.colorbar(im, ax=left, fraction=0.04, label=f"share of the tile's area blurred (blurry from {d.tile_share:.2f}, framed: restored)")
    left.set_xlabel("tile column")
    left.set_ylabel("tile row")
    values = d.blocks[d.labels != LABELS[0]].astype(np.float32)
    values = values[np.isfinite(values)]
    learned = d.measure == MEASURES[0]  # its probabilities pile up at 0 and 1: shown as logits
    scale = (lambda v: float(logit(v))) if learned else float
    right.hist(logit(values) if learned else values, bins=60, range=(-12.0, 12.0) if learned else (0.0, 1.0), color="0.45")
    for value, colour, name in ((d.reference, "green", "in-focus reference"), (d.threshold, "red", "cell threshold")):
        if value is not None:
            right.axvline(scale(value), color=colour, label=f"{name} {scale(value):.2f}" if learned else f"{name} {value:.3f}")
    right.set_xlabel("cell defocus logit of the learned measure (< 0 sharp … > 0 blurred)" if learned else "cell focus score (0 sharp … 1 blurred)")
    right.set_ylabel("tissue cells")
    right.legend(fontsize=8)
    fig.suptitle(title, fontsize=8)
    _save(fig, path)


def before_after(path: Path, before: np.ndarray, after: np.ndarray, *, title: str) -> None:
    """Write two pictures in [0, 1] side by side to ``path``."""
    h, w = before.shape[:2]
    fig, axes = _figure(w, h, panels=2)
    for ax, img, name in zip(axes[0], (before, after), ("before", "after")):
        ax.imshow(img, cmap=None if img.ndim == 3 else "gray", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_title(name, fontsize=9)
        ax.set_axis_off()
    fig.suptitle(title, fontsize=8)
    _save(fig, path)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
