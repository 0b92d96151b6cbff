"""Image-quality metrics, as pure functions on numpy arrays (the latents' effective rank: dgno.analysis.rank).

Images are float arrays in [0, 1], ``(H, W)`` or ``(H, W, C)``. Every image metric compares a
prediction with a ground truth of the same shape and follows the paper's convention: data range 1.

The prediction is clipped to [0, 1] before scoring, because a restored image is stored and viewed
as an image in that range (evaluation clips network outputs the same way), and clipping can only
move a prediction closer to a ground truth that lies in [0, 1]. The ground truth must already lie in
[0, 1] (a tolerance of 1e-6 absorbs float rounding); anything else is a data bug and raises.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage
from skimage.color import rgb2gray
from skimage.feature import canny
from skimage.metrics import structural_similarity

_GT_TOLERANCE = 1e-6


def _pair(pred: np.ndarray, gt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate a (pred, gt) pair; return float64 copies with pred clipped and gt checked to [0, 1]."""
    p = np.asarray(pred, dtype=np.float64)
    g = np.asarray(gt, dtype=np.float64)
    if p.shape != g.shape:
        raise ValueError(f"pred shape {p.shape} != gt shape {g.shape}")
    if p.ndim not in (2, 3):
        raise ValueError(f"image shape {p.shape} is not (H, W) or (H, W, C)")
    for name, arr in (("pred", p), ("gt", g)):
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} holds {int((~np.isfinite(arr)).sum())} non-finite values")
    if g.min() < -_GT_TOLERANCE or g.max() > 1 + _GT_TOLERANCE:
        raise ValueError(f"gt range [{g.min():.6g}, {g.max():.6g}] is outside [0, 1]")
    return np.clip(p, 0.0, 1.0), np.clip(g, 0.0, 1.0)


def psnr_from_mse(mse: float) -> float:
    """10·log10(1 / MSE) for data range 1; +inf for a perfect prediction. Every PSNR of the package ends here."""
    return math.inf if mse == 0 else 10.0 * math.log10(1.0 / mse)


def psnr(pred: np.ndarray, gt: np.ndarray) -> float:
    """PSNR in dB = 10·log10(1 / MSE) over all pixels and channels, data range 1, pred clipped to [0, 1]."""
    p, g = _pair(pred, gt)
    return psnr_from_mse(float(np.mean((p - g) ** 2)))


def luma8(img: np.ndarray) -> np.ndarray:
    """8-bit BT.601 luma of an RGB image in [0, 1], as the authors' 3DHistech test computes it.

    x·255 truncated to uint8 (numpy ``astype``, not rounded), then OpenCV's RGB→GRAY for 8-bit data:
    Y = (4899 R + 9617 G + 1868 B + 2¹³) >> 14, the fixed-point form of 0.299 R + 0.587 G + 0.114 B.
    """
    rgb = (np.asarray(img, dtype=np.float32) * np.float32(255.0)).astype(np.uint8).astype(np.int64)
    y = (4899 * rgb[..., 0] + 9617 * rgb[..., 1] + 1868 * rgb[..., 2] + (1 << 13)) >> 14
    return y.astype(np.uint8)


def psnr_luma8(pred: np.ndarray, gt: np.ndarray) -> float:
    """PSNR (dB, data range 255) between the 8-bit luma images of two RGB images: the authors' 3DHistech PSNR.

    It differs from :func:`psnr` on the float RGB images by the uint8 truncation and by scoring one
    luma channel; the paper's 3DHistech column was computed this way.
    """
    p, g = _pair(pred, gt)
    if p.ndim != 3 or p.shape[-1] != 3:
        raise ValueError(f"psnr_luma8 needs (H, W, 3) RGB images, got {p.shape}")
    diff = (luma8(p).astype(np.float64) - luma8(g).astype(np.float64)) / 255.0  # 8-bit levels → data range 1
    return psnr_from_mse(float(np.mean(diff**2)))


def ssim(pred: np.ndarray, gt: np.ndarray) -> float:
    """SSIM by scikit-image with data_range 1 and its defaults (7×7 uniform window); channels averaged for (H, W, C)."""
    p, g = _pair(pred, gt)
    channel_axis = -1 if p.ndim == 3 else None
    return float(structural_similarity(p, g, data_range=1.0, channel_axis=channel_axis))


def lpips(pred: np.ndarray, gt: np.ndarray) -> tuple[float | None, str]:
    """LPIPS (AlexNet, v0.1) and the backbone weight source; ``(None, "unavailable: …")`` when no real weights exist.

    See :mod:`dgno.lpips_offline` for the offline weight policy. Both sides must be at least 32 px.
    Imported lazily so the other metrics do not pay for torchvision's import.
    """
    from dgno.lpips_offline import lpips_distance  # torch: the other metrics run without it (the report's environment)

    p, g = _pair(pred, gt)
    return lpips_distance(p.astype(np.float32), g.astype(np.float32))


def _gray(img: np.ndarray) -> np.ndarray:
    """(H, W) → itself; (H, W, 1) → squeezed; (H, W, 3) → ITU-R BT.709 luminance (scikit-image ``rgb2gray``)."""
    arr = np.asarray(img, dtype=np.float64)
    if arr.ndim == 2:
        return arr
    if arr.ndim == 3 and arr.shape[-1] == 1:
        return arr[..., 0]
    if arr.ndim == 3 and arr.shape[-1] == 3:
        return rgb2gray(arr)
    raise ValueError(f"image shape {arr.shape} is not (H, W), (H, W, 1) or (H, W, 3)")


def edge_band_mask(
    gt: np.ndarray,
    *,
    band_width_px: float,
    canny_sigma: float = 1.0,
    low_threshold: float = 0.1,
    high_threshold: float = 0.2,
) -> np.ndarray:
    """Boolean (H, W) mask of the band around the ground truth's edges; its complement is the "interior".

    Definition (quoted by the report):
      1. edges = Canny edge pixels of the GT (``skimage.feature.canny``: Gaussian smoothing with
         ``canny_sigma`` px, scipy-Sobel gradient magnitude, non-maximum suppression, hysteresis
         between ``low_threshold`` and ``high_threshold`` — absolute magnitudes for a [0, 1] image, the
         scikit-image defaults; with σ = 1 a unit step peaks at ≈ 2.6, so steps of contrast ≳ 0.08 count
         as edges). RGB ground truths are converted to luminance first.
      2. band = every pixel whose Euclidean distance to the nearest edge pixel is ≤ ``band_width_px``,
         i.e. the edge pixels dilated by a disk of that radius. A step between two pixel columns marks
         both columns as edge pixels, so across such an edge the band is 2·band_width_px + 2 pixels wide.

    The edges come from the GT only, so every method is scored on the same pixels. An image without edges
    gives an all-False mask.
    """
    if band_width_px < 0:
        raise ValueError(f"band_width_px={band_width_px!r} must be >= 0")
    if not 0 <= low_threshold <= high_threshold:
        raise ValueError(f"need 0 <= low_threshold ({low_threshold!r}) <= high_threshold ({high_threshold!r})")
    g = _gray(gt)
    edges = canny(g, sigma=canny_sigma, low_threshold=low_threshold, high_threshold=high_threshold)
    if not edges.any():
        return np.zeros(g.shape, dtype=bool)
    distance = ndimage.distance_transform_edt(~edges)  # px to the nearest edge pixel
    return distance <= band_width_px


def error_difference_map(pred_a: np.ndarray, pred_b: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """|e_a| − |e_b| per pixel (float32, shape of gt), with e = clip(pred) − gt.

    With a = GG and b = DG (the paper's figure), positive values mark pixels where DG is closer to the truth.
    """
    a, g = _pair(pred_a, gt)
    b, _ = _pair(pred_b, gt)
    return (np.abs(a - g) - np.abs(b - g)).astype(np.float32)
