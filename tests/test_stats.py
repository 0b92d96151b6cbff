"""Uncertainty of stated differences (dgno.stats): intervals that cover the truth, a highlight that
does not pick a winner out of noise, verdicts on the right side, and the under-trained flag."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dgno import stats


def _scores(
    rng: np.random.Generator, n: int, shift: float, *, levels=("z02",), noise: float = 0.3, seeds=None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-image PSNR of two methods on the same images: shared image difficulty, a true lead `shift`."""
    rows_a, rows_b = [], []
    difficulty = rng.normal(30.0, 3.0, n)  # far larger than the lead: only pairing can see it
    for s in seeds or [None]:
        for lvl in levels:
            for i in range(n):
                extra = {} if s is None else {"seed": s}
                rows_a.append({"id": f"img{i:03d}", "level": lvl, "psnr": difficulty[i] + shift + rng.normal(0, noise), **extra})
                rows_b.append({"id": f"img{i:03d}", "level": lvl, "psnr": difficulty[i] + rng.normal(0, noise), **extra})
    return pd.DataFrame(rows_a), pd.DataFrame(rows_b)


@pytest.mark.slow
def test_paired_interval_covers_the_true_difference():
    """≥ 90 % of 200 seeded repetitions cover the known lead (nominal 95 %)."""
    truth, covered = 0.2, 0
    for rep in range(200):
        a, b = _scores(np.random.default_rng(rep), 40, truth)
        iv = stats.mean_difference_interval(stats.paired_differences(a, b, "psnr"), n_resamples=2000, seed=rep)
        covered += iv.low <= truth <= iv.high
    assert covered >= 180, covered


@pytest.mark.parametrize("method", ["bca", "percentile"])
def test_interval_on_skewed_differences_covers_the_mean(method):
    """Skewed per-image differences (a few images carry the gain): both methods still cover."""
    covered = 0
    for rep in range(200):
        d = np.random.default_rng(1000 + rep).gamma(2.0, 1.0, 50) - 1.5  # mean 0.5, skewness 1.4
        iv = stats.bootstrap_interval(d, n_resamples=2000, seed=rep, method=method)
        covered += iv.low <= 0.5 <= iv.high
    assert covered >= 180, covered


def test_paired_interval_is_pairing_then_interval():
    a, b = _scores(np.random.default_rng(9), 20, 0.5)
    direct = stats.paired_interval(a, b, "psnr", n_resamples=500, seed=3)
    steps = stats.mean_difference_interval(stats.paired_differences(a, b, "psnr"), n_resamples=500, seed=3)
    assert direct == steps and direct.low > 0


def test_zero_difference_gives_an_interval_containing_zero():
    a, b = _scores(np.random.default_rng(7), 30, 0.0)
    iv = stats.mean_difference_interval(stats.paired_differences(a, b, "psnr"), seed=1)
    assert iv.low < 0 < iv.high
    assert stats.verdict(iv, "greater") == "not resolved"
    # identical scores: a degenerate interval [0, 0] that resolves nothing
    same = stats.mean_difference_interval(stats.paired_differences(a, a, "psnr"))
    assert (same.low, same.high) == (0.0, 0.0) and stats.verdict(same, "greater") == "not resolved"


def test_too_few_images_give_no_interval():
    """Five differences all positive happen 1 time in 16 without any true difference: no verdict."""
    iv = stats.bootstrap_interval(np.array([0.1, 0.2, 0.15, 0.3, 0.05]))
    assert np.isnan(iv.low) and iv.method == "none (fewer than 6 images)" and stats.verdict(iv, "greater") == "not resolved"
    six = stats.bootstrap_interval(np.array([0.1, 0.2, 0.15, 0.3, 0.05, 0.12]))
    assert six.low > 0


def test_bca_agrees_with_the_percentile_interval_on_symmetric_data():
    d = np.random.default_rng(3).normal(1.0, 1.0, 200)
    bca, pct = stats.bootstrap_interval(d, seed=0), stats.bootstrap_interval(d, seed=0, method="percentile")
    assert bca.method == "BCa" and pct.method == "percentile"
    assert abs(bca.low - pct.low) < 0.03 and abs(bca.high - pct.high) < 0.03
    # and the width matches the normal theory for a mean: 2 * 1.96 * sd / sqrt(n)
    assert (bca.high - bca.low) == pytest.approx(2 * 1.96 * d.std(ddof=1) / np.sqrt(d.size), rel=0.1)


def test_pooled_statistic_resamples_images_jointly():
    """A ratio-of-sums statistic (pooled edge-band PSNR gain) through the generic bootstrap."""
    rng = np.random.default_rng(0)
    sse_b = rng.gamma(5.0, 1.0, 60)
    sse_a = sse_b * 10 ** (-0.5 / 10) * rng.lognormal(0, 0.05, 60)  # a is 0.5 dB better on every image

    def gain(a, b):
        return 10 * np.log10(b.sum(axis=1) / a.sum(axis=1))

    iv = stats.bootstrap_interval([sse_a, sse_b], gain, seed=0)
    assert iv.low < 0.5 < iv.high and iv.low > 0.3


def test_paired_differences_refuse_different_image_sets():
    a, b = _scores(np.random.default_rng(0), 5, 0.1)
    with pytest.raises(ValueError, match=r"only in a: img004/z02; only in b: none"):
        stats.paired_differences(a, b.iloc[:-1], "psnr")
    with pytest.raises(ValueError, match="more than once: img000/z02"):
        stats.paired_differences(pd.concat([a, a.iloc[:1]]), b, "psnr")


def test_an_untrained_reference_pairs_with_every_seed():
    trained, _ = _scores(np.random.default_rng(0), 6, 0.3, seeds=[0, 1])
    reference = trained[trained["seed"] == 0].drop(columns="seed").assign(psnr=25.0)
    diffs = stats.paired_differences(trained, reference, "psnr")
    assert len(diffs) == 12 and sorted(diffs["seed"].unique()) == ["0", "1"]


def test_levels_of_one_image_are_one_resampling_unit():
    a, b = _scores(np.random.default_rng(0), 8, 0.1, levels=("z02", "z06", "z10"))
    diffs = stats.paired_differences(a, b, "psnr")
    matrix, ids, seeds = stats.image_by_seed(diffs)
    assert matrix.shape == (8, 1) and len(ids) == 8
    iv = stats.mean_difference_interval(diffs)
    assert iv.n_images == 8 and iv.estimate == pytest.approx(diffs["diff"].mean())


def test_seed_replicates_widen_the_interval_and_report_their_spread():
    """A seed that trained well lifts every image: the crossed interval includes that spread."""
    rng = np.random.default_rng(5)
    a, b = _scores(rng, 40, 0.2, seeds=[0, 1, 2], noise=0.05)
    seed_effect = {0: -0.4, 1: 0.0, 2: 0.4}
    a["psnr"] += a["seed"].map(seed_effect)
    diffs = stats.paired_differences(a, b, "psnr")
    crossed = stats.mean_difference_interval(diffs, seed=0)
    assert crossed.n_seeds == 3 and crossed.method.startswith("percentile, images × seeds")
    averaged = stats.bootstrap_interval(stats.image_by_seed(diffs)[0].mean(axis=1), seed=0)
    assert (crossed.high - crossed.low) > 5 * (averaged.high - averaged.low)
    spread = stats.seed_spread(diffs, "diff")
    assert spread.n_seeds == 3 and spread.mean == pytest.approx(0.2, abs=0.05) and spread.sd == pytest.approx(0.4, abs=0.05)
    with pytest.raises(ValueError, match="incomplete: no diff for img000 \\(seed 2\\)"):
        stats.mean_difference_interval(diffs[~((diffs["id"] == "img000") & (diffs["seed"] == "2"))])


def test_highlight_marks_a_tie_as_a_tie_and_a_clear_winner_as_best():
    rng = np.random.default_rng(11)
    base, close = _scores(rng, 30, 0.01, noise=0.3)  # lead 0.01 dB under 0.3 dB noise: a tie
    tie = stats.highlight({"GG": base.assign(psnr=close["psnr"]), "DGNO": base}, "psnr")
    assert tie.best is None and sorted(tie.leaders) == ["DGNO", "GG"]
    winner, loser = _scores(rng, 30, 1.0, noise=0.3)
    clear = stats.highlight({"GG": loser, "DGNO": winner, "LG": loser.assign(psnr=loser["psnr"] - 0.5)}, "psnr")
    assert clear.best == "DGNO" and clear.leaders == [] and clear.leads["GG"].low > 0
    # lower is better (LPIPS): the smallest value leads
    lp = stats.highlight({"a": winner.assign(lpips=0.1), "b": winner.assign(lpips=0.3)}, "lpips", higher_is_better=False)
    assert lp.best == "a"


def test_highlight_ties_with_a_noisy_third_row():
    """The runner-up is clearly behind, but a noisy third row is not: no highlight."""
    rng = np.random.default_rng(2)
    lead, runner = _scores(rng, 30, 0.5, noise=0.05)
    noisy = lead.assign(psnr=lead["psnr"] - 0.45 + rng.normal(0, 2.0, len(lead)))
    h = stats.highlight({"A": lead, "B": runner, "C": noisy}, "psnr")
    assert h.best is None and h.leaders == ["A", "C"]


@pytest.mark.parametrize(
    ("low", "high", "direction", "expected"),
    [
        (0.1, 0.5, "greater", "supported"),
        (-0.5, -0.1, "greater", "contradicted"),
        (-0.1, 0.5, "greater", "not resolved"),
        (-0.5, -0.1, "less", "supported"),
        (0.1, 0.5, "less", "contradicted"),
        (float("nan"), float("nan"), "greater", "not resolved"),
    ],
)
def test_verdict_sides(low, high, direction, expected):
    iv = stats.Interval(0.0, low, high, 0.95, "test", 10)
    assert stats.verdict(iv, direction) == expected


def test_verdict_of_a_ratio_against_one():
    iv = stats.Interval(0.4, 0.4, 0.4, 0.95, "single measurement", 1)
    assert stats.verdict(iv, "less", null=1.0) == "supported"
    assert stats.verdict(iv, "greater", null=1.0) == "contradicted"
    with pytest.raises(ValueError, match="direction='up'"):
        stats.verdict(iv, "up")


def test_training_trend_flags_a_curve_still_rising():
    it = np.arange(0, 10_001, 500)
    rising = 20 + 5 * (1 - np.exp(-it / 8000))  # still gaining ~0.4 dB over the last 2 000 iterations
    flat = 20 + 5 * (1 - np.exp(-it / 800))  # converged long before the end
    assert stats.training_trend(it, rising).under_trained is True
    trend = stats.training_trend(it, flat)
    assert trend.under_trained is False and abs(trend.rise_db) < 0.01 and trend.window == (8000.0, 10000.0)
    # noisy but flat: one high last point does not flag it
    noisy = 25 + np.random.default_rng(0).normal(0, 0.03, it.size)
    noisy[-1] += 0.1
    assert stats.training_trend(it, noisy).under_trained is False
    # a threshold is a threshold
    assert stats.training_trend(it, rising, threshold_db=5.0).under_trained is False


def test_training_trend_with_sparse_validation():
    """One validation point inside the tail window: the one before it makes the line."""
    t = stats.training_trend([150, 250], [21.5, 22.2])  # window [200, 250]: 0.7 dB per 100 iterations
    assert t.n_points == 2 and t.rise_db == pytest.approx(0.35) and t.under_trained is True
    one = stats.training_trend([250], [22.0])
    assert one.rise_db is None and one.under_trained is None
    nan_rows = stats.training_trend([25, 50, 75, 100], [np.nan, 20.0, np.nan, 20.0])
    assert nan_rows.under_trained is False
