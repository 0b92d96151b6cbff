"""From a field's focal planes to (blurred, sharp) training pairs: the in-focus plane, the input planes, alignment, the split.

The paper's pairs are focal planes of one field (BBBC006: plane 16 is the target, planes 2, 6 and 10 the
inputs; 3DHistech: multi-focal scans). A lab's own stacks become pairs the same way, and this module holds
the decisions, on arrays (the files are read in ``dgno.train.finetune_data``):

**In-focus plane** (:func:`focus_plane`): the plane of highest :func:`sharpness`, the mean squared gradient
of the plane lightly smoothed (σ = 1 px, so camera noise does not count as detail) over its squared mean
intensity: the camera's gain cancels, and a defocus lowers it at every distance. (Dividing by the plane's
variance instead fails on sparse noisy fields, where noise is most of the variance: on generated stacks of
64 px with two nuclei it picked a far plane; this measure found the right one in every one of 100 stacks.)
Chosen per field, because focus drifts between fields; a user may give the plane instead (reported as given).

**Input planes** (:func:`input_planes`): the planes at the chosen distances d (in planes) above and below
focus, one level each, named ``z+d`` / ``z-d``. A side the stack does not reach is left out for that field.

**Alignment** (:func:`plane_shift`): the lateral shift of each input plane against the in-focus plane, by
cross-correlation (scikit-image, upsampled to 0.05 px) of both planes band-passed (difference of Gaussians,
σ 2 and 12 px, so the blur difference and the illumination do not pull the peak) and tapered to the edges (a
Tukey window: the image borders, which never move, would otherwise hold the peak at zero). On generated
stacks it finds a known drift within about 0.5 px. A shift of at least :data:`CORRECT_FROM_PX` is corrected
(the input plane is moved, never the target, and every plane of the field cropped by the largest correction);
smaller ones are within the estimate's error and left; one above ``max_shift`` is refused with the field and
the plane named, since a stack that far out of register is not a stack of one field.

**Split** (:func:`split_units`): by field, or by slide for slides, never by patch, seeded, with at least one
unit for training, one for validation (early stopping) and one held out (the report's numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import ndimage
from skimage.filters import window
from skimage.registration import phase_cross_correlation

from dgno.io import InputError

SMOOTH_PX = 1.0  # smoothing before the sharpness measure: pixel noise is not focus
BAND_PX = (2.0, 12.0)  # the difference of Gaussians the shift is measured on
CORRECT_FROM_PX = 1.0  # shifts below this are inside the estimate's error (about 0.5 px): left alone
TAPER = 0.3  # share of each side of the Tukey window that tapers
MIN_UNITS = 3  # train, validation, held out


def _gray(plane: np.ndarray) -> np.ndarray:
    """(H, W) float64 of a (H, W) or (H, W, C) plane: the mean over channels."""
    arr = np.asarray(plane, dtype=np.float64)
    return arr.mean(axis=-1) if arr.ndim == 3 else arr


def sharpness(plane: np.ndarray) -> float:
    """Mean squared gradient of the smoothed plane over its squared mean (module docstring); 0 for a dark plane."""
    smooth = ndimage.gaussian_filter(_gray(plane), SMOOTH_PX)
    mean = float(np.abs(smooth).mean())
    if mean <= 0:
        return 0.0
    grad = ndimage.sobel(smooth, 0) ** 2 + ndimage.sobel(smooth, 1) ** 2
    return float(grad.mean() / mean**2)


def focus_plane(planes: Sequence[np.ndarray]) -> tuple[int, list[float]]:
    """(index of the sharpest plane, the sharpness of every plane)."""
    scores = [sharpness(p) for p in planes]
    return int(np.argmax(scores)), scores


def level_name(distance: int) -> str:
    """``z+2`` for two planes above focus (higher plane index), ``z-2`` below."""
    return f"z{distance:+d}"


def level_distance(level: str) -> int:
    """|d| of a level named by :func:`level_name` (the report groups both sides of focus)."""
    return abs(int(level[1:]))


def input_planes(n_planes: int, focus: int, distances: Sequence[int] | None) -> dict[str, int]:
    """{level: plane index} of the planes at ``distances`` from ``focus`` on both sides, where the stack has
    them; ``None``: every plane but the in-focus one."""
    wanted = range(1, n_planes) if distances is None else sorted({int(d) for d in distances})
    out = {}
    for d in wanted:
        for signed in (-d, d):
            if 0 <= focus + signed < n_planes:
                out[level_name(signed)] = focus + signed
    return out


def _band(plane: np.ndarray) -> np.ndarray:
    g = _gray(plane)
    band = ndimage.gaussian_filter(g, BAND_PX[0]) - ndimage.gaussian_filter(g, BAND_PX[1])
    return band * window(("tukey", TAPER), band.shape)


def plane_shift(reference: np.ndarray, moving: np.ndarray) -> tuple[float, float]:
    """(dy, dx) px that move ``moving`` onto ``reference`` (module docstring)."""
    shift, _, _ = phase_cross_correlation(_band(reference), _band(moving), upsample_factor=20, normalization=None)
    return float(shift[0]), float(shift[1])


def apply_shift(plane: np.ndarray, shift: tuple[float, float]) -> np.ndarray:
    """``plane`` moved by ``shift`` (cubic spline, edges continued); channels move together."""
    arr = np.asarray(plane, dtype=np.float32)
    full = tuple(shift) + (0.0,) * (arr.ndim - 2)
    return ndimage.shift(arr, full, order=3, mode="nearest").astype(np.float32)


@dataclass(frozen=True)
class Alignment:
    """Per level: the measured shift (dy, dx) and whether it was corrected; ``crop``: px cut from every side."""

    shifts: dict[str, tuple[float, float]]
    corrected: dict[str, bool]
    crop: int


def align(name: str, focus: np.ndarray, inputs: dict[str, np.ndarray], *, max_shift: float) -> tuple[dict[str, np.ndarray], Alignment]:
    """The input planes moved onto the in-focus one where needed, and the record; refuses a shift above ``max_shift``.

    ``name`` is the field as the user knows it (a file, a slide region), for the error.
    """
    shifts, corrected, out = {}, {}, {}
    for level, plane in inputs.items():
        dy, dx = plane_shift(focus, plane)
        size = math.hypot(dy, dx)
        if size > max_shift:
            raise InputError(
                f"{name}: plane {level} is shifted by ({dy:.1f}, {dx:.1f}) px against the in-focus plane, more than the "
                f"{max_shift:g} px that are corrected. Fix: register the stack first (e.g. Fiji's StackReg), check its axes, or raise the maximum shift"
            )
        shifts[level], corrected[level] = (round(dy, 2), round(dx, 2)), size >= CORRECT_FROM_PX
        out[level] = apply_shift(plane, (dy, dx)) if corrected[level] else np.asarray(plane, dtype=np.float32)
    crop = max([math.ceil(max(abs(s[0]), abs(s[1]))) for lv, s in shifts.items() if corrected[lv]], default=0)
    return out, Alignment(shifts, corrected, crop)


def crop_border(plane: np.ndarray, crop: int) -> np.ndarray:
    """``plane`` without ``crop`` px on each side (where a corrected shift brought in made-up pixels)."""
    return plane[crop : plane.shape[0] - crop, crop : plane.shape[1] - crop] if crop else plane


def split_units(units: Sequence[str], *, val_fraction: float, test_fraction: float, seed: int, what: str, where: str) -> dict[str, str]:
    """{unit: "train" | "val" | "test"}: a seeded shuffle, at least one unit per split.

    ``what`` names the units in the error (fields, slides), ``where`` the input they come from.
    """
    units = sorted(units)
    if len(units) < MIN_UNITS:
        shown = ", ".join(units) or "none"
        raise InputError(
            f"{where}: {len(units)} {what} ({shown}); fine-tuning needs at least {MIN_UNITS}: one to train on, one to stop "
            f"training on (validation) and one held out for the report. Fix: add more {what} (10 or more give intervals in the report)"
        )
    rng = np.random.default_rng(seed)
    order = [units[i] for i in rng.permutation(len(units))]
    n = len(units)
    n_test = min(max(1, round(test_fraction * n)), n - 2)
    n_val = min(max(1, round(val_fraction * n)), n - 1 - n_test)
    return {u: "test" if i < n_test else "val" if i < n_test + n_val else "train" for i, u in enumerate(order)}


def tissue_blocks(mask: np.ndarray, *, block: int, scale: tuple[float, float], min_tissue: float) -> list[tuple[int, int, float]]:
    """(y, x, tissue share) of the ``block``-px squares of a slide level whose tissue share (from ``mask``, a
    thumbnail of ``scale`` level pixels per mask pixel) is at least ``min_tissue``; the squares tile the level."""
    sy, sx = scale
    height, width = int(mask.shape[0] * sy), int(mask.shape[1] * sx)
    out = []
    for y in range(0, height - block + 1, block):
        for x in range(0, width - block + 1, block):
            part = mask[int(y / sy) : max(int(y / sy) + 1, math.ceil((y + block) / sy)), int(x / sx) : max(int(x / sx) + 1, math.ceil((x + block) / sx))]
            share = float(part.mean()) if part.size else 0.0
            if share >= min_tissue:
                out.append((y, x, share))
    return out
