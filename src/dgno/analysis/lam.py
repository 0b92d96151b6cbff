"""Local attribution maps (LAM, Gu & Dong, CVPR 2021) of restoration networks: the paper's figure "fig:e4".

LAM asks which input pixels a network draws on to restore one small window of its output.  Three
choices define it, all kept from the LAM paper:

* the local feature of the output y in a window W is its edge content, D(y) = Σ_{p∈W} |∇y(p)|
  (``local_feature``): structure is what a deblurring network has to put back into the window;
* the baseline path is progressive blurring, γ(α) = G_{σ(α)} ∗ x with σ(α) = (1 − α)·σ_max, from a copy
  of the input whose structure is blurred away (α = 0) to the input itself (α = 1) (``blur_path``).
  Unlike a black-image baseline, it adds the input's structure gradually, so the attribution says where
  the network takes structure from rather than where the image is bright;
* the attribution is the path-integrated gradient LAM(p) = ∫₀¹ ∂D(F(γ(α)))/∂γ(α)_p · ∂γ(α)_p/∂α dα,
  summed over channels (``local_attribution_map``), by a Riemann sum over the path's steps.

Two numbers summarise a map: the diffusion index DI = (1 − Gini) · 100 of |LAM| (``diffusion_index``:
0 when a single pixel carries all the attribution, 100 when every pixel carries the same), and r₅₀, the
radius about the window centre that holds half of the attribution (``attribution_radius``), in pixels,
which says directly how local the network is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from dgno.checkpoint import load_trained, pick_device
from dgno.data.paired import from_tensor_image, load_pairs, read_split, to_tensor_image
from dgno.io import InputError, read_image
from dgno.metrics import psnr
from dgno.models.outputs import as_outputs


def gaussian_blur(x: Tensor, sigma: float) -> Tensor:
    """Separable Gaussian blur of (B, C, H, W) with reflected borders; σ ≤ 0 returns x.

    The kernel reaches 3σ (clipped to the image, so a wide blur of a small image stays defined)."""
    if sigma <= 0:
        return x
    h, w = x.shape[-2:]
    radius = max(1, min(math.ceil(3 * sigma), h - 1, w - 1))
    t = torch.arange(-radius, radius + 1, dtype=x.dtype, device=x.device)
    k = torch.exp(-(t * t) / (2 * sigma * sigma))
    k = k / k.sum()
    c = x.shape[1]
    y = F.conv2d(F.pad(x, (radius, radius, 0, 0), mode="reflect"), k.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    return F.conv2d(F.pad(y, (0, 0, radius, radius), mode="reflect"), k.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)


def blur_path(x: Tensor, *, sigma_max: float, steps: int) -> Tensor:
    """γ(α_k) = G_{(1−α_k) σ_max} ∗ x at α_k = k/steps, k = 0 … steps: (steps+1, C, H, W) from x (1, C, H, W)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps!r}")
    if not sigma_max > 0:
        raise ValueError(f"sigma_max must be > 0 px, got {sigma_max!r}")
    return torch.cat([gaussian_blur(x, sigma_max * (1 - k / steps)) for k in range(steps + 1)])


def local_feature(y: Tensor, window: tuple[int, int, int]) -> Tensor:
    """D(y) = Σ over the window (y0, x0, size) of the gradient magnitude, summed over channels: (B, C, H, W) → (B,).

    Forward differences, with a small floor under the square root so the gradient of D is defined on flat
    patches."""
    y0, x0, size = window
    patch = y[:, :, y0 : y0 + size + 1, x0 : x0 + size + 1]  # one extra row/column for the differences
    gy = patch[:, :, 1:, :-1] - patch[:, :, :-1, :-1]
    gx = patch[:, :, :-1, 1:] - patch[:, :, :-1, :-1]
    return torch.sqrt(gx * gx + gy * gy + 1e-12).flatten(1).sum(1)


def path_integrated_gradients(
    net: Callable[[Tensor], Tensor],
    x: Tensor,
    window: tuple[int, int, int],
    *,
    sigma_max: float = 8.0,
    steps: int = 32,
    batch: int = 4,
) -> Tensor:
    """Σ_k ∂D(F(γ))/∂γ at γ(α_k), times γ(α_{k+1}) − γ(α_k): (C, H, W) float64, signed.

    net: image → restored image of the same size; x: (1, C, H, W); window: (y0, x0, size) of the output.
    The gradient at each step is taken at the step's start (a left Riemann sum), `batch` path images at a
    time to bound memory.  Summed over pixels and channels it tends to D(F(x)) − D(F(γ(0))) as the steps
    get finer: the path integral's fundamental theorem, which the tests use to check it.
    """
    h, w = x.shape[-2:]
    y0, x0, size = window
    if size < 1 or y0 < 0 or x0 < 0 or y0 + size >= h or x0 + size >= w:
        raise ValueError(f"window (y0, x0, size) = {window} does not fit inside the {h}×{w} image with one pixel to spare")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch!r}")
    path = blur_path(x.detach(), sigma_max=sigma_max, steps=steps)  # (S+1, C, H, W)
    deltas = path[1:] - path[:-1]  # (S, C, H, W)
    total = torch.zeros(x.shape[1:], dtype=torch.float64, device=x.device)  # (C, H, W)
    for s in range(0, steps, batch):
        points = path[s : min(s + batch, steps)].clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(local_feature(net(points), window).sum(), points)
        total += (grad * deltas[s : s + points.shape[0]]).sum(0).double()
    return total


def local_attribution_map(
    net: Callable[[Tensor], Tensor],
    x: Tensor,
    window: tuple[int, int, int],
    *,
    sigma_max: float = 8.0,
    steps: int = 32,
    batch: int = 4,
) -> np.ndarray:
    """LAM of `net` for input x (1, C, H, W) and output window (y0, x0, size): (H, W) float64, the absolute
    value of the channel sum of ``path_integrated_gradients`` (arguments as there)."""
    pig = path_integrated_gradients(net, x, window, sigma_max=sigma_max, steps=steps, batch=batch)
    return pig.sum(0).abs().cpu().numpy()


def gini(values: np.ndarray) -> float:
    """Gini coefficient of non-negative values: 0 for equal values, → 1 when one value holds everything."""
    a = np.sort(np.asarray(values, dtype=np.float64).ravel())
    n, total = a.size, a.sum()
    if n == 0 or total <= 0:
        raise ValueError("gini needs at least one positive value")
    ranks = np.arange(1, n + 1)
    return float(((2 * ranks - n - 1) * a).sum() / (n * total))


def diffusion_index(attribution: np.ndarray) -> float:
    """DI = (1 − Gini(|LAM|)) · 100: the share of the image the network draws on (LAM paper's definition)."""
    return (1.0 - gini(np.abs(attribution))) * 100.0


def attribution_radius(attribution: np.ndarray, window: tuple[int, int, int], fraction: float = 0.5) -> float:
    """Smallest radius r (px) about the window centre such that the pixels within r hold `fraction` of Σ|LAM|."""
    y0, x0, size = window
    a = np.abs(np.asarray(attribution, dtype=np.float64))
    yy, xx = np.indices(a.shape)
    dist = np.hypot(yy - (y0 + (size - 1) / 2), xx - (x0 + (size - 1) / 2)).ravel()
    order = np.argsort(dist, kind="stable")
    mass = np.cumsum(a.ravel()[order])
    if mass[-1] <= 0:
        raise ValueError("attribution is zero everywhere")
    return float(dist[order][np.searchsorted(mass, fraction * mass[-1])])


def edge_window(gt: np.ndarray, size: int) -> tuple[int, int, int]:
    """(y0, x0, size) of the size×size window of the sharp image with the most edge content (Σ|∇|), one
    pixel inside the border: a window where restoring structure matters, picked the same way for every
    method and without looking at any network's output."""
    g = np.asarray(gt, dtype=np.float64)
    g = g.mean(-1) if g.ndim == 3 else g
    h, w = g.shape
    if size < 1 or size + 2 > min(h, w):
        raise ValueError(f"window size {size} does not fit a {h}×{w} image (needs size + 2 <= {min(h, w)})")
    mag = np.zeros_like(g)
    mag[:-1, :-1] = np.hypot(g[1:, :-1] - g[:-1, :-1], g[:-1, 1:] - g[:-1, :-1])
    c = np.pad(mag.cumsum(0).cumsum(1), ((1, 0), (1, 0)))  # summed-area table
    sums = c[size:, size:] - c[:-size, size:] - c[size:, :-size] + c[:-size, :-size]  # (H−size+1, W−size+1)
    sums = sums[1 : h - size, 1 : w - size]  # keep one pixel to every border (differences need the next pixel)
    iy, ix = np.unravel_index(int(np.argmax(sums)), sums.shape)
    return int(iy) + 1, int(ix) + 1, int(size)


@dataclass
class LamView:
    """One method's panel of the LAM figure (images cropped to the analysed region)."""

    label: str
    window: tuple[int, int, int]  # (y0, x0, size) in the crop
    blurred: np.ndarray  # (h, w) or (h, w, C) network input
    sharp: np.ndarray | None  # ground truth, when there is one
    restored: np.ndarray  # network output, clipped to [0, 1]
    attribution: np.ndarray  # (h, w) |LAM|
    di: float
    r50_px: float
    psnr: float | None  # of the restored crop, when there is a ground truth


def crop_box(shape: tuple[int, int], window: tuple[int, int, int], side: int | None) -> tuple[int, int, int, int]:
    """(y0, x0, h, w) of a side×side crop centred on the window and kept inside the image (the whole image
    when side is None or larger): bounds the cost of LAM on large fields of view."""
    h, w = shape
    if side is None or (side >= h and side >= w):
        return 0, 0, h, w
    ch, cw = min(side, h), min(side, w)
    wy, wx, size = window
    y0 = min(max(0, wy + size // 2 - ch // 2), h - ch)
    x0 = min(max(0, wx + size // 2 - cw // 2), w - cw)
    return y0, x0, ch, cw


def lam_views(
    checkpoints: dict[str, str],
    labels: dict[str, str],
    blurred: np.ndarray,
    window: tuple[int, int, int],
    *,
    sharp: np.ndarray | None = None,
    sigma_max: float = 8.0,
    steps: int = 32,
    batch: int = 4,
    device: str = "cpu",
) -> list[LamView]:
    """LAM, DI, r₅₀ and the restored image of every checkpoint ({name: model.pt}) on one image (H, W[, C]) in [0, 1].

    window: (y0, x0, size) of the output window in this image.  sharp: the ground truth, for the PSNR."""
    x = to_tensor_image(blurred).to(device)
    views = []
    for name, path in checkpoints.items():
        model, _ = load_trained(path, device)
        expected = int(model.hparams.get("in_channels", 1))
        if x.shape[1] != expected:
            raise InputError(f"{path}: the model takes {expected}-channel images, the image has {x.shape[1]}. Fix: use a model trained on such images")

        def net(t: Tensor, model: torch.nn.Module = model) -> Tensor:
            return as_outputs(model(t))[-1]

        attribution = local_attribution_map(net, x, window, sigma_max=sigma_max, steps=steps, batch=batch)
        with torch.no_grad():
            restored = np.clip(from_tensor_image(net(x)), 0.0, 1.0)
        views.append(
            LamView(
                label=labels.get(name, name),
                window=window,
                blurred=blurred,
                sharp=sharp,
                restored=restored,
                attribution=attribution,
                di=diffusion_index(attribution),
                r50_px=attribution_radius(attribution, window),
                psnr=psnr(restored, sharp) if sharp is not None else None,
            )
        )
    return views


def lam_table(names: list[str], views: list[LamView], **columns: object) -> pd.DataFrame:
    """One row per method: name, label, the shared `columns` (image, window, settings), DI, r₅₀ and PSNR."""
    return pd.DataFrame(
        [{"method": n, "label": v.label, **columns, "di": v.di, "r50_px": v.r50_px, "psnr": v.psnr} for n, v in zip(names, views)]
    )


def dataset_lam(
    checkpoints: dict[str, str],
    labels: dict[str, str],
    *,
    data_dir: str,
    level: str,
    image: int = 0,
    window_size: int = 16,
    crop: int | None = None,
    sigma_max: float = 8.0,
    steps: int = 32,
    batch: int = 4,
    device: str = "cpu",
) -> tuple[list[LamView], pd.DataFrame]:
    """LAM of every checkpoint ({method: model.pt}) on test image number `image` of the split.

    The window is the one with the most edge content in the sharp image (``edge_window``), so every
    method is asked about the same structure; `crop` limits the analysed region to a square about it.
    Returns the figure views and a table (method, label, image, level, window, di, r50_px, psnr, ...).
    """
    ids = read_split(data_dir).get("test", [])
    if not ids:
        raise ValueError(f"{data_dir}: no test images for the local attribution maps")
    if not 0 <= image < len(ids):
        raise ValueError(f"{data_dir}: image {image} is not a test image index (0 … {len(ids) - 1}); set experiments.lam.image")
    (pair,) = load_pairs(data_dir, split="test", levels=[level], ids=[ids[image]])
    full_window = edge_window(pair.gt, window_size)
    y0, x0, ch, cw = crop_box(pair.gt.shape[:2], full_window, crop)
    window = (full_window[0] - y0, full_window[1] - x0, window_size)
    blurred, sharp = pair.blur[y0 : y0 + ch, x0 : x0 + cw], pair.gt[y0 : y0 + ch, x0 : x0 + cw]
    views = lam_views(checkpoints, labels, blurred, window, sharp=sharp, sigma_max=sigma_max, steps=steps, batch=batch, device=device)
    settings = dict(image=pair.id, level=level, window_y0=full_window[0], window_x0=full_window[1], window_size=window_size)
    return views, lam_table(list(checkpoints), views, **settings, crop=f"{ch}x{cw}", sigma_max=sigma_max, steps=steps)


def image_lam(
    path: str,
    checkpoints: dict[str, str],
    *,
    window: tuple[int, int, int] | None = None,
    window_size: int = 16,
    crop: int | None = 256,
    sigma_max: float = 8.0,
    steps: int = 32,
    device: str = "cpu",
) -> tuple[list[LamView], pd.DataFrame]:
    """LAM of every checkpoint ({label: model.pt}) on a user's blurred image file (no ground truth).

    window: (y0, x0, size) in the image; default the window_size-px window with the most edges in the
    image itself (there is no sharp image to choose by).  device: "auto", "cpu" or "cuda".  Errors about the
    image name the file and the fix.
    """
    device = str(pick_device(device))
    img = read_image(path)
    try:
        win = window if window is not None else edge_window(img, window_size)
        y0, x0, ch, cw = crop_box(img.shape[:2], win, crop)
        local = (win[0] - y0, win[1] - x0, win[2])
        views = lam_views(checkpoints, {}, img[y0 : y0 + ch, x0 : x0 + cw], local, sigma_max=sigma_max, steps=steps, device=device)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}. Fix: choose a --window inside the image (or a smaller --window-size)") from exc
    settings = dict(image=str(path), window_y0=win[0], window_x0=win[1], window_size=win[2], crop=f"{ch}x{cw}")
    return views, lam_table(list(checkpoints), views, **settings, sigma_max=sigma_max, steps=steps)


__all__ = [
    "LamView",
    "attribution_radius",
    "blur_path",
    "crop_box",
    "dataset_lam",
    "diffusion_index",
    "edge_window",
    "gaussian_blur",
    "gini",
    "image_lam",
    "lam_table",
    "lam_views",
    "local_attribution_map",
    "local_feature",
    "path_integrated_gradients",
]
