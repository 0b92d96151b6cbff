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

**Alignment** (:func:`align`): a stage that creeps while focusing moves each plane by about the same
amount per plane, so the lateral drift is measured as one vector per plane of distance, v, and plane d
is taken to be shifted by v·d. Each input plane's shift against the in-focus plane is measured by
cross-correlation (:func:`plane_shift`: scikit-image, upsampled to 0.05 px) of both planes band-passed
(difference of Gaussians, σ 1 and 12 px, so illumination does not pull the peak), tapered to the edges (a
Tukey window: the image borders, which never move, would otherwise hold the peak at zero), with the
in-focus plane blurred first by the Gaussian that makes it most like the other plane (a sharp plane
against a blurred one gives a flat, easily misplaced peak); v is the median of the measured shifts over
their distances. One plane's measurement can be off by several pixels on a small, heavily aberrated
field (generated Seidel stacks of 48 px, no drift: up to 4 px at d = 3), the median of several is not
(within 1.5 px at d = 3). A shift v·d of at least :data:`CORRECT_FROM_PX` is corrected (the input plane
is moved, never the target, and every plane of the field cropped by the largest correction); smaller ones
are within the estimate's error and left; one above ``max_shift`` is refused with the field and the
plane named, since a stack that far out of register is not a stack of one field. A drift that jumps
between planes instead of creeping is not modelled.

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
BAND_PX = (1.0, 12.0)  # the difference of Gaussians the shift is measured on
MATCH_SIGMAS = (0.0, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # blurs of the in-focus plane tried against an input plane
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


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float((a * b).sum() / max(np.sqrt((a * a).sum() * (b * b).sum()), 1e-30))


def plane_shift(reference: np.ndarray, moving: np.ndarray) -> tuple[float, float]:
    """(dy, dx) px that move ``moving`` onto ``reference``, the reference blurred to match it first (module docstring)."""
    target = _band(moving)
    ref = _gray(reference)
    candidates = [_band(ndimage.gaussian_filter(ref, s) if s else ref) for s in MATCH_SIGMAS]
    best = max(candidates, key=lambda c: _correlation(c, target))
    shift, _, _ = phase_cross_correlation(best, target, upsample_factor=20, normalization=None)
    return float(shift[0]), float(shift[1])


def drift_per_plane(shifts: dict[int, tuple[float, float]]) -> tuple[float, float]:
    """The median over planes of each measured shift divided by its signed distance d: the drift v of one plane."""
    ratios = np.array([(dy / d, dx / d) for d, (dy, dx) in shifts.items() if d])
    return (float(np.median(ratios[:, 0])), float(np.median(ratios[:, 1]))) if len(ratios) else (0.0, 0.0)


def apply_shift(plane: np.ndarray, shift: tuple[float, float]) -> np.ndarray:
    """``plane`` moved by ``shift`` (cubic spline, edges continued); channels move together."""
    arr = np.asarray(plane, dtype=np.float32)
    full = tuple(shift) + (0.0,) * (arr.ndim - 2)
    return ndimage.shift(arr, full, order=3, mode="nearest").astype(np.float32)


@dataclass(frozen=True)
class Alignment:
    """Per level: the measured shift (dy, dx), the one taken (v·d) and whether it was corrected; ``drift``: v;
    ``crop``: px cut from every side."""

    measured: dict[str, tuple[float, float]]
    shifts: dict[str, tuple[float, float]]
    corrected: dict[str, bool]
    drift: tuple[float, float]
    crop: int


def align(name: str, focus: np.ndarray, inputs: dict[str, tuple[int, np.ndarray]], *, max_shift: float) -> tuple[dict[str, np.ndarray], Alignment]:
    """The input planes (``{level: (signed distance, plane)}``) moved onto the in-focus one where needed, and the
    record; refuses a shift above ``max_shift``. ``name`` is the field as the user knows it, for the error."""
    measured = {level: plane_shift(focus, plane) for level, (_, plane) in inputs.items()}
    drift = drift_per_plane({inputs[level][0]: s for level, s in measured.items()})
    shifts, corrected, out = {}, {}, {}
    for level, (d, plane) in inputs.items():
        dy, dx = drift[0] * d, drift[1] * d
        if math.hypot(dy, dx) > max_shift:
            raise InputError(
                f"{name}: plane {level} is shifted by ({dy:.1f}, {dx:.1f}) px against the in-focus plane, more than the "
                f"{max_shift:g} px that are corrected. Fix: register the stack first (e.g. Fiji's StackReg), check its axes, or raise the maximum shift"
            )
        shifts[level], corrected[level] = (round(dy, 2), round(dx, 2)), math.hypot(dy, dx) >= CORRECT_FROM_PX
        out[level] = apply_shift(plane, (dy, dx)) if corrected[level] else np.asarray(plane, dtype=np.float32)
    crop = max([math.ceil(max(abs(s[0]), abs(s[1]))) for lv, s in shifts.items() if corrected[lv]], default=0)
    rounded = {lv: (round(s[0], 2), round(s[1], 2)) for lv, s in measured.items()}
    return out, Alignment(rounded, shifts, corrected, (round(drift[0], 3), round(drift[1], 3)), crop)


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
