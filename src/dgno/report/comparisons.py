"""Results tables with their uncertainty: per-row mean ± sd over seeds, each stated difference with a paired
per-image bootstrap interval, and the best-value highlight that only a resolved lead earns.

The table rules (``workflow/scripts/table.py``) call :func:`table_stats` on the per-image scores of the
evaluations a table shows and write ``results/tables/<table>_stats.csv`` beside the table; the report
renders from it. One long-form row per (dataset, metric, row, versus):

- ``versus`` empty: the row's own value — ``estimate`` = mean over seeds of the per-seed mean over images
  and levels, ``seed_sd`` its sd over seeds, ``highlight`` = ``best`` (a lead whose interval excludes 0
  against every other row), ``tie`` (one of the rows that tie for first), or empty;
- ``versus`` = another row: ``estimate`` = mean of the row − that row over the same images (and seeds,
  paired by seed), with its interval [low, high] (``dgno.stats.mean_difference_interval``).

Which differences a table states is :func:`table_spec`, from the experiment's entry in
:mod:`dgno.experiments.catalogue`: every row against the blurred input, and against the first row of each
of the entry's ``versus`` models (GG in the operator and synthetic tables: DG − GG, LG − GG; DGNO-Cell in
Table 1). Reading the scores is :mod:`dgno.report.reading`; rendering is :mod:`dgno.report.render`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dgno import metric_spec, stats
from dgno.experiments import catalogue
from dgno.experiments.catalogue import experiment_seeds, table_levels

STATS_COLUMNS = [
    "dataset", "level", "metric", "method", "versus", "estimate", "low", "high", "interval_method",
    "n_images", "n_seeds", "seed_mean", "seed_sd", "highlight", "confidence",
]  # fmt: skip
ALL_LEVELS = ""  # the `level` of a row pooled over the table's levels
UNTRAINED = ("input", "wiener", "richardson_lucy", "ring")  # rows that are the same for every seed


@dataclass(frozen=True)
class Resampling:
    """How intervals are drawn (config ``stats``): coverage, resamples and the resampling seed."""

    confidence: float = stats.CONFIDENCE
    n_resamples: int = stats.N_RESAMPLES
    seed: int = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Resampling:
        s = config.get("stats", {})
        return cls(s.get("confidence", stats.CONFIDENCE), s.get("n_resamples", stats.N_RESAMPLES), s.get("seed", 0))

    def kwargs(self) -> dict[str, Any]:
        return {"confidence": self.confidence, "n_resamples": self.n_resamples, "seed": self.seed}


# ------------------------------------------------------------------------------------ seed replicates


def is_trained(config: Mapping[str, Any], method: str) -> bool:
    """Whether `method` is a network trained by this workflow (so it has seed replicates)."""
    spec = config["methods"].get(method)
    return spec is not None and "authors_checkpoints" not in spec and method not in UNTRAINED


def row_replicates(config: Mapping[str, Any], name: str, method: str) -> list[int]:
    """Replicates an experiment's table reads for one row: its seeds for a trained method, [0] otherwise."""
    return experiment_seeds(config, name) if is_trained(config, method) else [0]


def select_replicates(frame: pd.DataFrame, config: Mapping[str, Any], name: str) -> pd.DataFrame:
    """The rows of a summaries/scores frame (with `method`, `replicate`) that experiment `name` reads:
    a method trained with more seeds for another experiment must not enter this one's means."""
    if "replicate" not in frame:
        return frame
    keep = np.array([r in row_replicates(config, name, m) for m, r in zip(frame["method"], frame["replicate"])], dtype=bool)
    return frame[keep]


# ------------------------------------------------------------------------------------- what a table says


def _first_of_model(config: Mapping[str, Any], methods: Iterable[str], model: str) -> list[str]:
    hit = [m for m in methods if config["methods"].get(m, {}).get("model") == model and "authors_checkpoints" not in config["methods"][m]]
    return hit[:1]


def table_spec(config: Mapping[str, Any], table: str) -> dict[str, Any]:
    """What one results table shows and which differences it states (plain data, for the table rule).

    table: an experiment name, or ``ablation_<name>`` (dgno.experiments.catalogue). Returns datasets, rows
    (methods, deconvolutions; "input" first where the table has the blurred input), levels per dataset,
    whether levels are pooled (``by_level`` false) or shown one by one (the defocus table), the metrics
    (every metric of dgno.metric_spec), and ``versus``: the rows every row is compared with (the blurred
    input, and the first row of each of the entry's ``versus`` models), each only where the table has it.
    """
    entry = catalogue.by_table(table)
    metrics = metric_spec.metric_names()
    if entry.config_key == "ablations":
        runs = config["ablation_runs"][entry.name]
        datasets = list(dict.fromkeys(r["dataset"] for r in runs))
        rows = [r["method"] for r in runs]
        return {"datasets": datasets, "rows": rows, "levels": {d: table_levels(config, d) for d in datasets}, "by_level": False, "metrics": metrics, "versus": []}
    exp = config["experiments"][entry.name]
    methods = list(exp["methods"]) + list(exp.get("deconvolution", []))
    if entry.table.datasets == "trained_on_and_experiment":
        own = exp["dataset"]
        datasets = [config["datasets"][own]["trained_on"], own]
        levels = {d: list(config["datasets"][own]["test_levels"]) for d in datasets}
    else:
        datasets = catalogue.experiment_datasets(config, entry.name)
        levels = {d: list(exp.get("levels", table_levels(config, d))) for d in datasets}
    versus = ["input"] + [m for model in entry.table.versus for m in _first_of_model(config, methods, model)]
    return {"datasets": datasets, "rows": ["input", *methods], "levels": levels, "by_level": entry.table.by_level, "metrics": metrics, "versus": versus}


# ------------------------------------------------------------------------------------------ statistics


def _row_frame(frame: pd.DataFrame, method: str, metric: str) -> pd.DataFrame:
    """One row's per-image scores with keys id, level (and seed when it has several replicates)."""
    sub = frame[frame["method"] == method][["id", "level", "replicate", metric]]
    sub = sub.rename(columns={"replicate": "seed"})
    return sub if sub["seed"].nunique() > 1 else sub.drop(columns="seed")


def _value_row(scores: pd.DataFrame, metric: str) -> dict[str, Any]:
    spread = stats.seed_spread(scores, metric)
    return {
        "estimate": spread.mean,
        "n_images": int(scores["id"].nunique()),
        "n_seeds": spread.n_seeds,
        "seed_mean": spread.mean if spread.n_seeds > 1 else np.nan,
        "seed_sd": spread.sd,
    }


def _difference_row(a: pd.DataFrame, b: pd.DataFrame, metric: str, names: tuple[str, str], opts: Resampling) -> dict[str, Any]:
    diffs = stats.paired_differences(a, b, metric, names=names)
    iv = stats.mean_difference_interval(diffs, **opts.kwargs())
    spread = stats.seed_spread(diffs, "diff") if "seed" in diffs else None
    return {
        "estimate": iv.estimate,
        "low": iv.low,
        "high": iv.high,
        "interval_method": iv.method,
        "n_images": iv.n_images,
        "n_seeds": iv.n_seeds,
        "seed_mean": spread.mean if spread is not None and spread.n_seeds > 1 else np.nan,
        "seed_sd": spread.sd if spread is not None and spread.n_seeds > 1 else np.nan,
    }


def _group_stats(frame: pd.DataFrame, rows: list[str], metric: str, versus: list[str], opts: Resampling) -> list[dict[str, Any]]:
    """The value rows (with highlight) and difference rows of one (dataset, level group, metric)."""
    scores = {m: _row_frame(frame, m, metric) for m in rows if not frame[(frame["method"] == m)][metric].isna().all()}
    scores = {m: s for m, s in scores.items() if not s.empty}
    out = []
    candidates = {m: s for m, s in scores.items() if m != "input"}
    mark: dict[str, str] = {}
    direction = metric_spec.higher_is_better(metric)
    if len(candidates) >= 2 and direction is not None:
        hl = stats.highlight(candidates, metric, higher_is_better=direction, **opts.kwargs())
        mark = {hl.best: "best"} if hl.best else dict.fromkeys(hl.leaders, "tie")
    for method, s in scores.items():
        out.append({"metric": metric, "method": method, "versus": "", **_value_row(s, metric), "highlight": mark.get(method, "")})
        for ref in versus:
            if ref != method and ref in scores:
                out.append({"metric": metric, "method": method, "versus": ref, **_difference_row(s, scores[ref], metric, (method, ref), opts), "highlight": ""})
    return out


def table_stats(frame: pd.DataFrame, spec: Mapping[str, Any], opts: Resampling = Resampling()) -> pd.DataFrame:
    """Every value and stated difference of one table (see the module docstring), from per-image scores.

    frame: :func:`dgno.report.reading.read_scores` of the table's evaluations (every replicate); spec: :func:`table_spec`.
    Metrics a dataset's evaluations lack (LPIPS off; psnr_y8 of grayscale data) are left out.
    """
    out = []
    for ds in spec["datasets"]:
        levels = spec["levels"][ds]
        groups = [[lvl] for lvl in levels] if spec["by_level"] else [levels]
        for group in groups:
            sub = frame[(frame["dataset"] == ds) & frame["level"].isin(group) & frame["method"].isin(spec["rows"])]
            for metric in spec["metrics"]:
                if metric not in sub or sub[metric].isna().all():
                    continue
                level = group[0] if spec["by_level"] else ALL_LEVELS
                out += [{"dataset": ds, "level": level, **r} for r in _group_stats(sub, list(spec["rows"]), metric, list(spec["versus"]), opts)]
    result = pd.DataFrame(out, columns=STATS_COLUMNS)
    result["confidence"] = opts.confidence
    return result


# ----------------------------------------------------------------------- pooled statistics (edge band, AP)


def matrix_interval(arrays: list[np.ndarray], statistic, opts: Resampling) -> stats.Interval:
    """Interval of a statistic of arrays shaped (images, seeds, ...): the crossed images × seeds bootstrap
    with several seeds, BCa over images with one (the statistic always sees a seed axis)."""
    if arrays[0].shape[1] > 1:
        return stats.crossed_bootstrap_interval(arrays, statistic, **opts.kwargs())
    return stats.bootstrap_interval([x[:, 0] for x in arrays], lambda *xs: statistic(*(x[:, :, None] for x in xs)), **opts.kwargs())


def pooled_psnr_gain(sse_a: np.ndarray, sse_b: np.ndarray) -> np.ndarray:
    """10·log10(ΣSSE_b / ΣSSE_a) over images (and seeds) per resample: the PSNR of a over that of b
    on the same pixels (the edge band's pooled PSNR is 10·log10(n / ΣSSE))."""
    return 10 * np.log10(sse_b.reshape(sse_b.shape[0], -1).sum(axis=1) / sse_a.reshape(sse_a.shape[0], -1).sum(axis=1))


def sse_matrix(frame: pd.DataFrame, method: str, seeds: list[int]) -> np.ndarray:
    """(images, seeds) squared-error sums of one method (levels summed per image); an untrained row
    (no seed of its own) is the same for every seed."""
    sub = frame[frame["method"] == method]
    if sub["replicate"].nunique() == 1 and len(seeds) > 1:
        sub = pd.concat([sub.assign(replicate=s) for s in seeds], ignore_index=True)
    per = sub.groupby(["id", "replicate"], as_index=False)["sse"].sum().rename(columns={"replicate": "seed"})
    return stats.image_by_seed(per, "sse")[0]


def _lead_marks(leader: str, leads: Mapping[str, stats.Interval]) -> dict[str, str]:
    """{row: best|tie} from the leader's lead over each other row (the rule of :func:`dgno.stats.highlight`)."""
    tied = [name for name, iv in leads.items() if iv.side() != 1]
    return {leader: "best"} if not tied else dict.fromkeys([leader, *tied], "tie")


def edge_band_stats(frame: pd.DataFrame, versus: list[str], opts: Resampling = Resampling()) -> pd.DataFrame:
    """Pooled edge-band / interior / whole-image PSNR of every method with the gains the report states.

    frame: the edge-band rule's per-image rows (dataset, level, method, replicate, id, region, sse,
    n_values). Per region: each method's pooled PSNR (10·log10(Σn / ΣSSE) over images and levels, mean ±
    sd over seeds), its gain over each of ``versus`` (the blurred input, GG) with a bootstrap interval
    over images (× seeds), and the highlight of the best pooled PSNR among the methods.
    """
    out = []
    for (ds, region), sub in frame.groupby(["dataset", "region"], sort=False):
        seeds = sorted(sub["replicate"].unique())
        methods = list(dict.fromkeys(sub["method"]))
        sse = {m: sse_matrix(sub, m, seeds) for m in methods}
        values = {m: sub[sub["method"] == m].groupby("replicate").apply(lambda g: 10 * np.log10(g["n_values"].sum() / g["sse"].sum()), include_groups=False) for m in methods}
        candidates = [m for m in methods if m != "input"]
        marks: dict[str, str] = {}
        if len(candidates) >= 2:
            leader = max(candidates, key=lambda m: values[m].mean())
            leads = {m: matrix_interval([sse[leader], sse[m]], pooled_psnr_gain, opts) for m in candidates if m != leader}
            marks = _lead_marks(leader, leads)
        metric = f"psnr_{region}"
        for m in methods:
            v = values[m]
            base = {"dataset": ds, "level": ALL_LEVELS, "metric": metric, "method": m, "n_images": sse[m].shape[0], "n_seeds": len(v)}
            sd = float(v.std(ddof=1)) if len(v) > 1 else np.nan
            out.append({**base, "versus": "", "estimate": float(v.mean()), "seed_mean": float(v.mean()) if len(v) > 1 else np.nan, "seed_sd": sd, "highlight": marks.get(m, "")})
            for ref in versus:
                if ref in sse and ref != m:
                    iv = matrix_interval([sse[m], sse[ref]], pooled_psnr_gain, opts)
                    out.append({**base, "versus": ref, "estimate": iv.estimate, "low": iv.low, "high": iv.high, "interval_method": iv.method, "n_seeds": iv.n_seeds, "highlight": ""})
    result = pd.DataFrame(out, columns=STATS_COLUMNS)
    result["confidence"] = opts.confidence
    return result


# --------------------------------------------------------------------------------------- StarDist AP


def ap_counts(frame: pd.DataFrame, condition: str, metric: str, seeds: list) -> tuple[np.ndarray, np.ndarray]:
    """(TP, TP+FP+FN) arrays (images, seeds, thresholds) of one StarDist condition, for AP at `metric`
    (ap50, ap70, ap90, or map: every threshold). A condition without seeds is the same for every seed."""
    sub = frame[frame["condition"] == condition]
    if metric != "map":
        sub = sub[np.isclose(sub["iou"], int(metric[2:]) / 100)]
    if "seed" not in sub or sub["seed"].isna().all():
        sub = pd.concat([sub.assign(seed=s) for s in seeds], ignore_index=True)
    sub = sub.assign(den=sub["tp"] + sub["fp"] + sub["fn"]).sort_values(["id", "seed", "iou"])
    shape = (sub["id"].nunique(), len(seeds), sub["iou"].nunique())
    if len(sub) != int(np.prod(shape)) or sub.duplicated(["id", "seed", "iou"]).any():
        raise ValueError(f"StarDist counts of {condition!r} are not one row per image, seed and IoU threshold. Fix: rerun the StarDist rule")
    return sub["tp"].to_numpy(float).reshape(shape), sub["den"].to_numpy(float).reshape(shape)


def pooled_ap(tp: np.ndarray, den: np.ndarray) -> np.ndarray:
    """AP = ΣTP / Σ(TP+FP+FN) over images and seeds per threshold, averaged over thresholds, per resample."""
    return (tp.sum(axis=(1, 2)) / den.sum(axis=(1, 2))).mean(axis=-1)


def ap_difference(tp_a: np.ndarray, den_a: np.ndarray, tp_b: np.ndarray, den_b: np.ndarray) -> np.ndarray:
    return pooled_ap(tp_a, den_a) - pooled_ap(tp_b, den_b)


STARDIST_REFERENCES = ("blurred", "sharp")


def stardist_stats(frame: pd.DataFrame, opts: Resampling = Resampling(), metrics=("ap50", "ap70", "ap90", "map")) -> pd.DataFrame:
    """StarDist AP of every condition, each restoration's AP minus the blurred images' with a bootstrap
    interval over images, and the highlight of the best restoration (pooled counts: AP is a ratio of sums).

    frame: the StarDist rule's per-image counts (condition, level, id, iou, tp, fp, fn[, seed]).
    """
    seeds = sorted(frame["seed"].dropna().unique()) if "seed" in frame and frame["seed"].notna().any() else [0]
    conditions = list(dict.fromkeys(frame["condition"]))
    out = []
    for metric in metrics:
        counts = {c: ap_counts(frame, c, metric, seeds) for c in conditions}
        restorations = [c for c in conditions if c not in STARDIST_REFERENCES]
        ap = {c: float(pooled_ap(*(x[None] for x in counts[c]))[0]) for c in conditions}
        marks: dict[str, str] = {}
        if len(restorations) >= 2:
            leader = max(restorations, key=ap.get)
            marks = _lead_marks(leader, {c: matrix_interval([*counts[leader], *counts[c]], ap_difference, opts) for c in restorations if c != leader})
        for c in conditions:
            base = {"dataset": "", "level": ALL_LEVELS, "metric": metric, "method": c, "n_images": counts[c][0].shape[0], "n_seeds": len(seeds)}
            out.append({**base, "versus": "", "estimate": ap[c], "highlight": marks.get(c, "")})
            if c != "blurred" and "blurred" in counts:
                iv = matrix_interval([*counts[c], *counts["blurred"]], ap_difference, opts)
                out.append({**base, "versus": "blurred", "estimate": iv.estimate, "low": iv.low, "high": iv.high, "interval_method": iv.method, "highlight": ""})
    result = pd.DataFrame(out, columns=STATS_COLUMNS)
    result["confidence"] = opts.confidence
    return result
