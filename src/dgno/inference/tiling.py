"""Whole-image inference by overlapping tiles blended without seams.

    out(x) = Σ_t w_t(x) f(tile_t)(x) / Σ_t w_t(x)

Along every tile edge that lies inside the image, w_t is 0 for the outermost m = overlap // 4
pixels (where the tile's prediction suffers from the tile's own border), then rises linearly to
1 across the middle of the overlap; neighbouring tiles' ramps are complementary. Edges on the
image border keep weight 1, so the border is treated exactly as in a single pass.

Exactness condition: if the model's receptive-field radius is at most m = overlap // 4 pixels and
the model is translation-equivariant, the tiled output equals the untiled one (up to float
rounding). Larger receptive fields (global operators) give a close, seamless approximation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

from dgno.choices import check_choice

BlendName = Literal["ramp", "crossfade"]
BLENDS = ("ramp", "crossfade")


def tile_starts(length: int, tile: int, overlap: int) -> list[int]:
    """Start offsets of tiles of size `tile` covering [0, length) with at least `overlap` shared pixels."""
    if tile >= length:
        return [0]
    if not 0 <= overlap < tile:
        raise ValueError(f"overlap={overlap} must be in [0, tile={tile})")
    step = tile - overlap
    starts = list(range(0, length - tile, step))
    starts.append(length - tile)
    return starts


def pass_count(height: int, width: int, *, tile: int | None, overlap: int, batch: int = 1) -> int:
    """Calls of the network :func:`tiled_apply` makes for one (height, width) image: for progress bars."""
    if tile is None or (tile >= height and tile >= width):
        return 1
    tiles = len(tile_starts(height, tile, overlap)) * len(tile_starts(width, tile, overlap))
    return -(-tiles // batch)


def edge_weight(length: int, overlap: int, *, ramp_start: bool, ramp_end: bool) -> torch.Tensor:
    """1-D tile weight: 0 on the outer m = overlap // 4 pixels of an internal edge, a linear ramp
    over the next overlap − 2m pixels, 1 elsewhere. Edges on the image border stay at 1."""
    w = torch.ones(length)
    m = overlap // 4
    n = max(overlap - 2 * m, 1)
    rise = (torch.arange(n, dtype=torch.float32) + 0.5) / n
    profile = torch.cat([torch.zeros(m), rise])[:length]
    if ramp_start:
        w[: len(profile)] = torch.minimum(w[: len(profile)], profile)
    if ramp_end:
        w[length - len(profile) :] = torch.minimum(w[length - len(profile) :], profile.flip(0))
    return w


def crossfade_weights(starts: list[int], tile: int) -> list[torch.Tensor]:
    """1-D weights of the authors' tiling: linear cross-fades over each pair's whole overlap.

    Tile k fades in over its overlap with tile k−1 (``linspace(0, 1, n)``, ends included) and out
    over its overlap with tile k+1 (``linspace(1, 0, n')``); neighbouring weights sum to 1. With two
    tiles on a 520-px side and 512-px tiles, the fade spans 504 px: almost the whole tile.
    """
    weights = []
    for k, s in enumerate(starts):
        w = torch.ones(tile)
        if k > 0:
            n = starts[k - 1] + tile - s
            w[:n] *= torch.linspace(0.0, 1.0, n)
        if k + 1 < len(starts):
            n = s + tile - starts[k + 1]
            w[tile - n :] *= torch.linspace(1.0, 0.0, n)
        weights.append(w)
    return weights


@torch.no_grad()
def tiled_apply(
    fn: Callable[[torch.Tensor], torch.Tensor],
    image: torch.Tensor,
    *,
    tile: int | None,
    overlap: int = 32,
    blend: BlendName = "ramp",
    progress: Callable | None = None,
    batch: int = 1,
) -> torch.Tensor:
    """Apply `fn` ((k, C, h, w) → (k, C', h, w)) to `image` (1, C, H, W) by blended tiles.

    tile=None or a tile at least as large as the image runs one pass.
    blend: "ramp" (module docstring: a ramp inside the overlap, tile borders dropped) or
    "crossfade" (the authors' BBBC006 test: linear cross-fades over each pair's whole overlap).
    batch: tiles per call of `fn`.  On a GPU one call of 8 tiles costs little more than one of a
    single tile; the last call is filled up with copies of its last tile, so `fn` always sees
    the same shape (one CUDA graph serves every call, see ``dgno.inference.cuda_graphs``).
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    check_choice("blend", blend, BLENDS)
    _, _, h, w = image.shape
    if tile is None or (tile >= h and tile >= w):
        return fn(image)
    ys, xs = tile_starts(h, tile, overlap), tile_starts(w, tile, overlap)
    th, tw = min(tile, h), min(tile, w)
    if blend == "crossfade":
        fy, fx = dict(zip(ys, crossfade_weights(ys, th))), dict(zip(xs, crossfade_weights(xs, tw)))

    def tile_weight(y: int, x: int) -> torch.Tensor:  # (1, 1, th, tw)
        if blend == "crossfade":
            wy, wx = fy[y], fx[x]
        else:
            wy = edge_weight(th, overlap, ramp_start=y > 0, ramp_end=y + th < h)
            wx = edge_weight(tw, overlap, ramp_start=x > 0, ramp_end=x + tw < w)
        return (wy[:, None] * wx[None, :])[None, None].to(image.device)

    out = None
    weight = torch.zeros(1, 1, h, w, device=image.device)
    coords = [(y, x) for y in ys for x in xs]
    groups = [coords[i : i + batch] for i in range(0, len(coords), batch)]
    for group in progress(groups) if progress else groups:
        crops = [image[:, :, y : y + th, x : x + tw] for y, x in group]
        preds = fn(torch.cat(crops + crops[-1:] * (batch - len(crops)), dim=0))  # (batch, C', th, tw)
        if out is None:
            out = torch.zeros(1, preds.shape[1], h, w, device=image.device, dtype=preds.dtype)
        for (y, x), pred in zip(group, preds):
            wt = tile_weight(y, x)
            out[:, :, y : y + th, x : x + tw] += pred * wt
            weight[:, :, y : y + th, x : x + tw] += wt
    return out / weight
