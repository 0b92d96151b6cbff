"""The network's tiles over a slide, and how their restorations are blended into the copied input.

Tiles are the network's own (the authors' networks: 512 px, 32 px overlap), placed as
``dgno.inference.tiling`` places them on an image (the last row and column flush with the border).
Only some tiles are restored; the others are copied. The output is the blend that a whole-image run
of ``tiled_apply`` would give if every copied tile's "restoration" were its own input:

    out(p) = Σ_t w_t(p) f_t(p) / Σ_t w_t(p),      f_t = network(tile t) if t is restored, else the input

written as input + blended residual, out = x + Σ_{t restored} w_t (f_t − x) / Σ_t w_t, so that

* a pixel no restored tile covers is the input, bit for bit (the residual sum is exactly 0);
* where a restored tile meets a copied one the restoration fades into the input across their overlap
  (the authors' linear cross-fade, or the project's ramp), so no seam shows;
* the weights are separable, w_t(y, x) = a_r(y) b_c(x) on a full grid of rows × columns, so the
  denominator is A(y) B(x): computed for any output tile without visiting the tiles that are copied.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgno.choices import check_choice
from dgno.inference.tiling import BLENDS, crossfade_weights, edge_weight, tile_starts


@dataclass(frozen=True)
class TileGrid:
    """Network tiles over a ``height`` × ``width`` level: row starts ``ys``, column starts ``xs``, tile size (th, tw)."""

    height: int
    width: int
    tile: int
    overlap: int
    ys: tuple[int, ...]
    xs: tuple[int, ...]

    @classmethod
    def over(cls, height: int, width: int, *, tile: int, overlap: int) -> TileGrid:
        if tile < 8 or not 0 <= overlap < tile:
            raise ValueError(f"tile={tile}, overlap={overlap}; allowed: tile >= 8 and 0 <= overlap < tile")
        return cls(height, width, tile, overlap, tuple(tile_starts(height, tile, overlap)), tuple(tile_starts(width, tile, overlap)))

    @property
    def th(self) -> int:
        return min(self.tile, self.height)

    @property
    def tw(self) -> int:
        return min(self.tile, self.width)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.ys), len(self.xs)

    def box(self, r: int, c: int) -> tuple[int, int, int, int]:
        """(y, x, h, w) of tile (r, c)."""
        return self.ys[r], self.xs[c], self.th, self.tw

    def rows_touching(self, y0: int, y1: int) -> range:
        """Tile rows whose span meets [y0, y1)."""
        return _touching(self.ys, self.th, y0, y1)

    def cols_touching(self, x0: int, x1: int) -> range:
        return _touching(self.xs, self.tw, x0, x1)


def _touching(starts: tuple[int, ...], size: int, a: int, b: int) -> range:
    first = next((k for k, s in enumerate(starts) if s + size > a), len(starts))
    last = next((k for k in range(len(starts) - 1, -1, -1) if starts[k] < b), -1)
    return range(first, last + 1)


def _axis_weights(starts: tuple[int, ...], size: int, length: int, overlap: int, blend: str) -> tuple[list[np.ndarray], np.ndarray]:
    """1-D weights of the tiles along one axis and their sum over the axis (the denominator's factor)."""
    if blend == "crossfade":
        weights = [w.numpy().astype(np.float32) for w in crossfade_weights(list(starts), size)]
    else:
        last = len(starts) - 1
        weights = [edge_weight(size, overlap, ramp_start=k > 0, ramp_end=k < last).numpy().astype(np.float32) for k in range(len(starts))]
    total = np.zeros(length, np.float32)
    for s, w in zip(starts, weights):
        total[s : s + size] += w
    return weights, total


class Blender:
    """out = x + Σ_{restored} w_t (f_t − x) / Σ_all w_t on any window of the level (module docstring)."""

    def __init__(self, grid: TileGrid, *, blend: str) -> None:
        check_choice("blend", blend, BLENDS)
        self.grid = grid
        self.wy, self.ay = _axis_weights(grid.ys, grid.th, grid.height, grid.overlap, blend)
        self.wx, self.bx = _axis_weights(grid.xs, grid.tw, grid.width, grid.overlap, blend)

    def apply(self, x: np.ndarray, y0: int, x0: int, restored: list[tuple[int, int, np.ndarray]]) -> np.ndarray:
        """The window ``x`` ((h, w, C), the input at (y0, x0)) with the restored tiles [(r, c, f (th, tw, C))] blended in.

        Returns ``x`` itself when no restored tile is given; otherwise a new array of x's dtype, rounded
        to nearest and clipped to the dtype's range for integers.
        """
        if not restored:
            return x
        h, w = x.shape[:2]
        exact = np.float64 if x.dtype.itemsize >= 4 else np.float32  # every value of x exactly representable
        acc = np.zeros(x.shape, exact)
        g = self.grid
        for r, c, f in restored:
            ty, tx = g.ys[r], g.xs[c]
            ya, yb, xa, xb = max(y0, ty), min(y0 + h, ty + g.th), max(x0, tx), min(x0 + w, tx + g.tw)
            if ya >= yb or xa >= xb:
                continue
            win = (slice(ya - y0, yb - y0), slice(xa - x0, xb - x0))
            weight = self.wy[r][ya - ty : yb - ty, None] * self.wx[c][None, xa - tx : xb - tx]
            acc[win] += weight[..., None] * (f[ya - ty : yb - ty, xa - tx : xb - tx].astype(exact) - x[win].astype(exact))
        acc /= (self.ay[y0 : y0 + h, None] * self.bx[None, x0 : x0 + w])[..., None]
        out = x.astype(exact) + acc
        return to_dtype(out, x.dtype)


def to_dtype(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float values to ``dtype``: rounded to nearest and clipped to its range for integers, unchanged for floats."""
    if np.dtype(dtype).kind in "ui":
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    return values.astype(dtype)
