"""Uncertainty of the differences the report states: paired per-image differences, bootstrap intervals,
seed replicates, the best-value highlight rule, claim verdicts and the under-trained flag.

Why per image and paired: two methods scored on the same test images share each image's difficulty,
so the difference per image varies far less than either score. A table of means hides that; the
paired difference and its interval say whether a lead of a few hundredths of a dB is a lead at all.

Why the bootstrap: per-image PSNR differences are not normal (a few hard images dominate), the
statistics of interest are not always means (pooled edge-band PSNR, pooled StarDist AP are ratios of
sums), and a resampling interval needs no formula for each. The resampling unit is the test image:
it is what a new user would draw more of. Everything here is numpy and pure functions, seeded, so a
report is reproducible to the digit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Literal

import numpy as np
import pandas as pd

Direction = Literal["greater", "less"]
VerdictWord = Literal["supported", "contradicted", "not resolved"]
# statistic(*resampled arrays) -> one value per resample; see bootstrap_interval / crossed_bootstrap_interval
Statistic = Callable[..., np.ndarray]

CONFIDENCE = 0.95
N_RESAMPLES = 10_000
# A bootstrap interval never reaches past the data: when all n per-image differences share a sign it
# excludes 0, and with no true difference that happens with probability 2^(1-n). From 6 images on
# that is under 5 %; below it, no interval is given (and no verdict can rest on one).
MIN_IMAGES = 6
_CHUNK_ELEMENTS = 4_000_000  # resampled values held at once: bounds memory for 18 909-image test sets
_STD_NORMAL = NormalDist()


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap interval [low, high] at `confidence`.

    low/high are NaN where no interval exists (fewer than MIN_IMAGES images); `method` names how it was made
    (e.g. "BCa", "percentile", "percentile, images x seeds"), so a report can say so beside it.
    """

    estimate: float
    low: float
    high: float
    confidence: float
    method: str
    n_images: int
    n_seeds: int = 1
    n_resamples: int = 0

    def side(self, null: float = 0.0) -> int:
        """+1 if the whole interval lies above `null`, -1 if below, 0 if it contains it (or is undefined)."""
        if not (np.isfinite(self.low) and np.isfinite(self.high)):
            return 0
        if self.low > null:
            return 1
        if self.high < null:
            return -1
        return 0

    def excludes(self, null: float = 0.0) -> bool:
        return self.side(null) != 0


# --------------------------------------------------------------------------------------- pairing


def paired_differences(
    a: pd.DataFrame,
    b: pd.DataFrame,
    metric: str,
    *,
    keys: Sequence[str] = ("id", "level", "seed"),
    names: tuple[str, str] = ("a", "b"),
) -> pd.DataFrame:
    """Per-image ``a − b`` of `metric`, aligned on those of `keys` the frames have (id, level, seed).

    Seed replicates pair by seed number: two methods trained with one seed saw the same crops in
    the same order, so pairing them removes that shared part of the training noise.

    Refuses (ValueError naming the ids) when the two sets of images differ or an image appears twice:
    a difference of means over different images mixes method and image difficulty, which is exactly
    what pairing is there to remove. Returns the keys plus columns ``a``, ``b`` and ``diff``.
    A frame without a ``seed`` column beside one with seeds (the blurred input, a deconvolution,
    the authors' weights: nothing retrained) is the same for every seed and is paired with each.
    """
    keys = [k for k in keys if k in a.columns or k in b.columns]
    if "seed" in keys and ("seed" in a.columns) != ("seed" in b.columns):
        seeds = (a if "seed" in a.columns else b)["seed"].unique()
        a, b = (x if "seed" in x.columns else pd.concat([x.assign(seed=s) for s in seeds], ignore_index=True) for x in (a, b))
    for frame, name in ((a, names[0]), (b, names[1])):
        missing = [c for c in (*keys, metric) if c not in frame.columns]
        if missing:
            raise ValueError(f"{name}: per-image scores lack column(s) {missing}; have {list(frame.columns)}")
        dup = frame[frame.duplicated(keys, keep=False)]
        if not dup.empty:
            raise ValueError(f"{name}: image(s) scored more than once: {_describe(dup, keys)}")
        bad = frame[~np.isfinite(frame[metric].astype(float))]
        if not bad.empty:
            raise ValueError(f"{name}: non-finite {metric} for {_describe(bad, keys)}")
    ka = set(map(tuple, a[keys].astype(str).to_numpy()))
    kb = set(map(tuple, b[keys].astype(str).to_numpy()))
    if ka != kb:
        only_a, only_b = sorted(ka - kb), sorted(kb - ka)
        raise ValueError(
            f"{names[0]} and {names[1]} were scored on different images: only in {names[0]}: {_first(only_a)}; "
            f"only in {names[1]}: {_first(only_b)}. Fix: evaluate both methods on the same test split and levels"
        )
    left = a[list(keys) + [metric]].astype(dict.fromkeys(keys, str)).rename(columns={metric: "a"})
    right = b[list(keys) + [metric]].astype(dict.fromkeys(keys, str)).rename(columns={metric: "b"})
    out = left.merge(right, on=list(keys), how="inner", validate="one_to_one").sort_values(list(keys), kind="stable")
    out["diff"] = out["a"].astype(float) - out["b"].astype(float)
    return out.reset_index(drop=True)


def _first(items: Sequence[tuple], n: int = 10) -> str:
    shown = ", ".join("/".join(t) for t in items[:n])
    return (shown + f" … ({len(items)} in all)") if len(items) > n else (shown or "none")


def _describe(frame: pd.DataFrame, keys: Sequence[str]) -> str:
    return _first(sorted({tuple(map(str, r)) for r in frame[list(keys)].to_numpy()}))


def image_by_seed(diffs: pd.DataFrame, value: str = "diff", *, unit: str = "id", seed: str = "seed") -> tuple[np.ndarray, list, list]:
    """(matrix [image, seed] of `value` averaged over the other keys (levels), image ids, seeds).

    Levels of one image are averaged first because they are the same scene: resampling them
    separately would count one hard scene as several independent ones. Every image must have every
    seed (a missing replicate is refused, naming it), since a hole would bias the seed average.
    """
    frame = diffs if seed in diffs.columns else diffs.assign(**{seed: 0})
    table = frame.groupby([unit, seed], sort=True)[value].mean().unstack(seed)
    holes = table[table.isna().any(axis=1)]
    if not holes.empty:
        missing = [f"{i} (seed {s})" for i, row in holes.iterrows() for s, v in row.items() if pd.isna(v)]
        raise ValueError(
            f"seed replicates are incomplete: no {value} for {', '.join(missing[:10])}. Fix: evaluate every seed on every image"
        )
    return table.to_numpy(dtype=float), list(table.index), list(table.columns)


# ------------------------------------------------------------------------------------- bootstrap


def mean_statistic(values: np.ndarray) -> np.ndarray:
    """Mean over the image axis (and the seed axis, for the crossed bootstrap): the default statistic."""
    return values.reshape(values.shape[0], -1).mean(axis=1)


def bootstrap_interval(
    arrays: np.ndarray | Sequence[np.ndarray],
    statistic: Statistic = mean_statistic,
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    method: Literal["bca", "percentile"] = "bca",
) -> Interval:
    """Bootstrap interval of `statistic` over images: rows of every array are resampled together.

    arrays: one array or several of equal length n (axis 0 = image), e.g. per-image differences, or
    per-image squared-error sums of two methods for a pooled PSNR. statistic(*resampled) receives each
    array with shape (B, n, ...) and returns B values; it is also called on the original data (B = 1).

    Method: BCa (bias-corrected and accelerated, Efron 1987) by default. The test sets are small (6
    images in the demo, 50 to 153 in the claims runs) and per-image PSNR differences are skewed; the
    percentile interval's coverage then errs at first order in the skewness, while BCa corrects for
    bias and skew (second-order accurate) for one jackknife pass (n evaluations of the statistic).
    Where BCa is undefined (every resample on one side of the estimate, or a constant jackknife) the
    percentile interval is returned and `method` says so. ``method="percentile"`` forces it.
    """
    arrays = _as_arrays(arrays)
    n = arrays[0].shape[0]
    estimate = float(statistic(*(x[None] for x in arrays))[0])
    if n < MIN_IMAGES:
        return Interval(estimate, float("nan"), float("nan"), confidence, f"none (fewer than {MIN_IMAGES} images)", n)
    rng = np.random.default_rng(seed)
    boot = _resampled_statistic(arrays, statistic, n_resamples, lambda b: (rng.integers(0, n, size=(b, n)),))
    alpha = (1.0 - confidence) / 2
    if np.ptp(boot) == 0:
        return Interval(estimate, estimate, estimate, confidence, "constant (every resample equal)", n, 1, n_resamples)
    if method == "bca":
        levels, why = _bca_levels(boot, estimate, _jackknife(arrays, statistic), alpha)
        if levels is not None:
            lo, hi = np.quantile(boot, levels)
            return Interval(estimate, float(lo), float(hi), confidence, "BCa", n, 1, n_resamples)
        label = f"percentile (BCa undefined: {why})"
    elif method == "percentile":
        label = "percentile"
    else:
        raise ValueError(f"method={method!r}; allowed: 'bca', 'percentile'")
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    return Interval(estimate, float(lo), float(hi), confidence, label, n, 1, n_resamples)


def crossed_bootstrap_interval(
    arrays: np.ndarray | Sequence[np.ndarray],
    statistic: Statistic = mean_statistic,
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Percentile interval over images and training seeds: images and seeds are resampled independently.

    arrays: shape (n_images, n_seeds, ...), e.g. from :func:`image_by_seed`; statistic receives
    (B, n_images, n_seeds, ...) arrays. Why both axes: a trained network's quality depends on its seed
    as a whole, and a seed that trained well lifts every test image at once. Averaging each image over
    seeds and resampling images only would treat the seeds at hand as the only possible ones, and give
    an interval too narrow whenever seeds disagree; resampling seeds as well adds that spread. The
    crossed (two-way) bootstrap is known to count the image × seed interaction twice (McCullagh 2000),
    so it errs on the wide side, the safe side for a claim. With 2 or 3 seeds the seed part is coarse,
    and with 1 seed this is the percentile image bootstrap. Percentile, not BCa: the acceleration has
    no accepted two-way jackknife form, and with few seeds the seed resampling dominates skew.
    """
    arrays = _as_arrays(arrays)
    n, k = arrays[0].shape[:2]
    estimate = float(statistic(*(x[None] for x in arrays))[0])
    if n < MIN_IMAGES:
        return Interval(estimate, float("nan"), float("nan"), confidence, f"none (fewer than {MIN_IMAGES} images)", n, k)
    rng = np.random.default_rng(seed)

    def draw(b: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.integers(0, n, size=(b, n, 1)), rng.integers(0, k, size=(b, 1, k))

    boot = _resampled_statistic(arrays, statistic, n_resamples, draw, per_resample=n * k)
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    label = "percentile, images × seeds" if k > 1 else "percentile"
    return Interval(estimate, float(lo), float(hi), confidence, label, n, k, n_resamples)


def mean_difference_interval(
    diffs: pd.DataFrame,
    *,
    value: str = "diff",
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Interval of the mean paired difference (output of :func:`paired_differences`), by image.

    Levels are averaged within an image first (the same scene, see :func:`image_by_seed`). With one
    seed (no ``seed`` column, or one value in it): BCa over images. With several: the crossed
    images × seeds bootstrap. The estimate is the mean over images (and seeds) in both cases.
    """
    matrix, _, seeds = image_by_seed(diffs, value)
    if len(seeds) > 1:
        return crossed_bootstrap_interval(matrix, confidence=confidence, n_resamples=n_resamples, seed=seed)
    return bootstrap_interval(matrix[:, 0], confidence=confidence, n_resamples=n_resamples, seed=seed)


def paired_interval(
    a: pd.DataFrame,
    b: pd.DataFrame,
    metric: str,
    *,
    names: tuple[str, str] = ("a", "b"),
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Interval of the mean of ``a − b`` over the same images: :func:`paired_differences` then
    :func:`mean_difference_interval`, the one call a results table needs per stated difference."""
    diffs = paired_differences(a, b, metric, names=names)
    return mean_difference_interval(diffs, confidence=confidence, n_resamples=n_resamples, seed=seed)


def _as_arrays(arrays: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    out = [np.asarray(arrays, dtype=float)] if isinstance(arrays, np.ndarray) else [np.asarray(x, dtype=float) for x in arrays]
    if not out or any(x.ndim == 0 for x in out):
        raise ValueError("bootstrap needs at least one array with an image axis")
    if len({x.shape[0] for x in out}) != 1:
        raise ValueError(f"arrays differ in their number of images: {[x.shape[0] for x in out]}")
    return out


def _resampled_statistic(
    arrays: list[np.ndarray],
    statistic: Statistic,
    n_resamples: int,
    draw: Callable[[int], tuple[np.ndarray, ...]],
    per_resample: int | None = None,
) -> np.ndarray:
    """statistic over n_resamples draws of indices, computed in chunks that bound memory."""
    width = max(int(np.prod(x.shape[1:], dtype=int)) for x in arrays) * (per_resample or arrays[0].shape[0])
    chunk = max(1, _CHUNK_ELEMENTS // max(width, 1))
    out = []
    for start in range(0, n_resamples, chunk):
        index = draw(min(chunk, n_resamples - start))
        out.append(np.asarray(statistic(*(x[index] for x in arrays)), dtype=float))
    return np.concatenate(out)


def _jackknife(arrays: list[np.ndarray], statistic: Statistic) -> np.ndarray:
    """Leave-one-image-out values of the statistic (for the BCa acceleration), in chunks."""
    n = arrays[0].shape[0]
    chunk = max(1, _CHUNK_ELEMENTS // max(n * max(int(np.prod(x.shape[1:], dtype=int)) for x in arrays), 1))
    out = []
    for start in range(0, n, chunk):
        rows = np.arange(start, min(n, start + chunk))
        keep = np.arange(n - 1)[None, :] + (np.arange(n - 1)[None, :] >= rows[:, None])
        out.append(np.asarray(statistic(*(x[keep] for x in arrays)), dtype=float))
    return np.concatenate(out)


def _bca_levels(boot: np.ndarray, estimate: float, jack: np.ndarray, alpha: float) -> tuple[np.ndarray | None, str]:
    below = (np.sum(boot < estimate) + 0.5 * np.sum(boot == estimate)) / boot.size
    if not 0.0 < below < 1.0:
        return None, "every resample on one side of the estimate"
    z0 = _STD_NORMAL.inv_cdf(below)
    spread = jack.mean() - jack
    denom = 6.0 * np.sum(spread**2) ** 1.5
    if denom == 0:
        return None, "constant jackknife"
    a = float(np.sum(spread**3) / denom)
    levels = []
    for q in (alpha, 1 - alpha):
        z = _STD_NORMAL.inv_cdf(q)
        levels.append(_STD_NORMAL.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))))
    return np.array(levels), ""


# ------------------------------------------------------------------------------------------ seeds


@dataclass(frozen=True)
class SeedSpread:
    """A quantity's mean and standard deviation (ddof 1) over training seeds; sd is NaN with one seed."""

    mean: float
    sd: float
    n_seeds: int
    per_seed: dict = field(default_factory=dict)


def seed_spread(frame: pd.DataFrame, value: str, *, seed: str = "seed") -> SeedSpread:
    """Mean ± sd over seeds of the per-seed mean of `value` (per-seed mean over images and levels).

    This is the spread a reader sees when retraining: it says how much a table cell moves with the
    seed alone, beside the per-image interval, which says how much it moves with the test images.
    """
    if seed not in frame.columns:
        per = {0: float(frame[value].mean())}
    else:
        per = {s: float(v) for s, v in frame.groupby(seed, sort=True)[value].mean().items()}
    vals = np.array(list(per.values()))
    sd = float(vals.std(ddof=1)) if vals.size > 1 else float("nan")
    return SeedSpread(float(vals.mean()), sd, int(vals.size), per)


# ------------------------------------------------------------------------------ highlight, verdict


@dataclass(frozen=True)
class Highlight:
    """Which row of a column is highlighted as best, or which rows tie for the lead.

    best: the highlighted row, or None when the leader's lead is not resolved; leaders: the rows
    that tie for first (the leader first), empty when `best` is set; leads: the interval of the
    leader minus each other row (in the metric's own sign), keyed by that row.
    """

    best: str | None
    leader: str
    leaders: list[str]
    leads: dict[str, Interval]


def highlight(
    scores: Mapping[str, pd.DataFrame],
    metric: str,
    *,
    higher_is_better: bool = True,
    keys: Sequence[str] = ("id", "level", "seed"),
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Highlight:
    """The best-value highlight rule: a row is highlighted only if its lead is resolved.

    scores: {row name: per-image scores with `keys` columns (those present) and `metric`}. The leader
    is the row with the best mean. It is highlighted only if the interval of its paired lead over the
    runner-up excludes 0 — and, so that a noisier third row cannot hide behind the runner-up, over
    every other row. Otherwise the leaders are a tie: the leader and every row whose difference from
    it has an interval containing 0. No multiplicity correction: the highlight is a reading aid that
    must not pick a winner out of noise, not a family of tests.
    """
    if len(scores) < 2:
        only = next(iter(scores), None)
        return Highlight(best=only, leader=only, leaders=[], leads={})
    sign = 1.0 if higher_is_better else -1.0
    means = {name: float(frame[metric].mean()) for name, frame in scores.items()}
    leader = max(means, key=lambda name: sign * means[name])
    leads = {}
    for name, frame in scores.items():
        if name == leader:
            continue
        diffs = paired_differences(scores[leader], frame, metric, keys=keys, names=(leader, name))
        leads[name] = mean_difference_interval(diffs, confidence=confidence, n_resamples=n_resamples, seed=seed)
    tied = [name for name, iv in sorted(leads.items(), key=lambda kv: -sign * means[kv[0]]) if iv.side() != int(sign)]
    if not tied:
        return Highlight(best=leader, leader=leader, leaders=[], leads=leads)
    return Highlight(best=None, leader=leader, leaders=[leader, *tied], leads=leads)


def verdict(interval: Interval, direction: Direction, null: float = 0.0) -> VerdictWord:
    """supported: the interval excludes `null` on the paper's side; contradicted: on the other side;
    not resolved: it contains `null` (or there is no interval).

    direction: the side the paper claims, "greater" (measured > null) or "less" (measured < null).
    `null` is 0 for a difference and 1 for a ratio.
    """
    if direction not in ("greater", "less"):
        raise ValueError(f"direction={direction!r}; allowed: 'greater', 'less'")
    side = interval.side(null)
    if side == 0:
        return "not resolved"
    return "supported" if side == (1 if direction == "greater" else -1) else "contradicted"


# --------------------------------------------------------------------------------- training curves


UNDERTRAINED_RISE_DB = 0.1
TAIL_FRACTION = 0.2


@dataclass(frozen=True)
class TrainingTrend:
    """How much validation PSNR still rose over the last `tail_fraction` of a run's iterations.

    rise_db: median slope of validation PSNR over the tail window times the window's length
    (None when fewer than 2 validation points reach it); under_trained: rise_db > threshold_db
    (None when unknown).
    """

    rise_db: float | None
    window: tuple[float, float]
    n_points: int
    threshold_db: float
    under_trained: bool | None


def training_trend(
    iterations: Sequence[float],
    val_psnr: Sequence[float],
    *,
    tail_fraction: float = TAIL_FRACTION,
    threshold_db: float = UNDERTRAINED_RISE_DB,
    total: float | None = None,
) -> TrainingTrend:
    """Flag a model still improving at the end of its training (validation PSNR rising > threshold_db).

    A verdict between two networks says little if one of them was still climbing when training
    stopped: more iterations could reverse it. The tail window is [end − tail_fraction·end, end], end =
    `total` or the last iteration. The rise is the Theil–Sen slope (median of the pairwise slopes) of
    the validation points in the window — plus the last one before it when the window holds only
    one — times the window's length. Validation on a few fixed crops is noisy; the median slope is
    moved little by one lucky point, where an end-minus-start difference or a least-squares line
    would follow it.
    """
    it = np.asarray(iterations, dtype=float)
    val = np.asarray(val_psnr, dtype=float)
    ok = np.isfinite(it) & np.isfinite(val)
    it, val = it[ok], val[ok]
    order = np.argsort(it, kind="stable")
    it, val = it[order], val[order]
    end = float(total if total is not None else (it[-1] if it.size else 0.0))
    start = end - tail_fraction * end
    inside = it >= start
    before = np.flatnonzero(~inside)
    if inside.sum() < 2 and before.size:
        inside[before[-1]] = True  # the anchor: last validation before the window, so two points suffice
    x, y = it[inside], val[inside]
    if x.size < 2 or np.ptp(x) == 0:
        return TrainingTrend(None, (start, end), int(x.size), threshold_db, None)
    i, j = np.triu_indices(x.size, k=1)
    keep = x[j] != x[i]
    slope = float(np.median((y[j] - y[i])[keep] / (x[j] - x[i])[keep]))
    rise = slope * (end - start)
    return TrainingTrend(rise, (start, end), int(x.size), threshold_db, rise > threshold_db)
