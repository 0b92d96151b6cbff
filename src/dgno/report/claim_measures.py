"""Measuring one claim from the results files: where they live, which dataset, levels and seeds, the
per-image scores or counts, and the difference with its bootstrap interval (dgno.stats).

Split from :mod:`dgno.report.claims` (the list, the verdicts and the report section) so each reads
on its own. A missing input raises :class:`NotRun` with the command that produces it; a claim whose
experiment, dataset, method or level this configuration lacks raises :class:`NotConfigured`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dgno import stats
from dgno.report.tables import HIGHER_IS_BETTER

UNTRAINED = ("input", "blurred", "sharp")  # references, not networks: no seeds, no training curve
DIGITS = {"psnr": 2, "ssim": 3, "lpips": 3, "ap50": 4, "ap70": 4, "ap90": 4, "map": 4}
BENCH_COMMAND = "python benchmarks/bench_gpu_speed.py benchmarks/results/gpu_speed_<device>.json (on a GPU), then snakemake --cores 1 results/tables/runtime_memory.csv"


@dataclass
class Layout:
    """Where the results files a claim reads live, in one place (phase 2 adds the seed paths' rules).

    Seed replicates: ``<method>/seed=<s>/`` below the dataset, as any other target; a run without
    ``train.seeds`` has one unnamed seed (None) and the plain paths.
    """

    root: Path

    def _method(self, method: str, seed: int | None) -> str:
        return method if seed is None else f"{method}/seed={seed}"

    def per_image(self, dataset: str, method: str, level: str, seed: int | None = None) -> Path:
        return self.root / "eval" / dataset / self._method(method, seed) / level / "per_image.csv"

    def train_metrics(self, dataset: str, method: str, seed: int | None = None) -> Path:
        return self.root / "train" / dataset / self._method(method, seed) / "train_metrics.csv"

    def edge_band(self, dataset: str, per_image: bool = False) -> Path:
        return self.root / "tables" / f"edge_band_{dataset}{'_per_image' if per_image else ''}.csv"

    def stardist(self, dataset: str, per_image: bool = False) -> Path:
        return self.root / "tables" / f"stardist_{dataset}{'_per_image' if per_image else ''}.csv"

    def runtime_memory(self) -> Path:
        return self.root / "tables" / "runtime_memory.csv"

    @staticmethod
    def seeds(config: dict, dataset: str) -> list[int | None]:
        """The training seeds of a dataset's models: ``train.seeds`` (a dataset's own ``train`` wins), else [None]."""
        train = {**config.get("train", {}), **config["datasets"][dataset].get("train", {})}
        return list(train.get("seeds") or [None])


class NotRun(Exception):
    """A measurement's input is missing: `path` (the first one), and the command that produces it."""

    def __init__(self, path: Path | str, command: str | None = None, reason: str | None = None):
        super().__init__(str(path))
        self.path, self.command, self.reason = Path(path), command, reason


class NotConfigured(Exception):
    """The claim needs an experiment, dataset, method or level this configuration does not have."""


@dataclass
class Options:
    """Statistics settings of one claims evaluation (all seeded: the report is reproducible)."""

    confidence: float = stats.CONFIDENCE
    n_resamples: int = stats.N_RESAMPLES
    seed: int = 0
    rise_db: float = stats.UNDERTRAINED_RISE_DB
    tail_fraction: float = stats.TAIL_FRACTION


@dataclass
class Measured:
    interval: stats.Interval
    b: str  # the method compared with (the best of a list, resolved)
    notes: list[str] = field(default_factory=list)
    spread: stats.SeedSpread | None = None
    scale: str | None = None  # where it differs from the config's: a recorded benchmark's own scale


# ------------------------------------------------------------------------------------- configuration


def _experiment(config: dict, measure: dict) -> dict:
    exp = config.get("experiments", {}).get(measure["experiment"])
    if exp is None:
        raise NotConfigured(f"it has no experiment {measure['experiment']!r}")
    return exp


def _dataset(config: dict, measure: dict) -> str:
    exp = _experiment(config, measure)
    datasets = exp.get("datasets") or [exp["dataset"]]
    column = measure.get("paper_column")
    if column is not None:
        datasets = [d for d in datasets if config["datasets"][d].get("paper_column") == column]
        if not datasets:
            raise NotConfigured(f"no dataset of experiment {measure['experiment']!r} stands for the paper's {column!r} (paper_column)")
    return datasets[0]


def _levels(config: dict, measure: dict, dataset: str) -> list[str]:
    ds = config["datasets"][dataset]
    if measure["experiment"] == "stardist":
        return [config["experiments"]["stardist"]["level"]]
    spec = measure.get("levels", "table")
    if spec == "table":  # the results tables' levels: the test levels the models were trained on
        return [lvl for lvl in ds["test_levels"] if lvl in ds["train_levels"]] or list(ds["test_levels"])
    absent = [lvl for lvl in spec if lvl not in ds["test_levels"]]
    if absent:
        raise NotConfigured(f"level(s) {', '.join(absent)} are not test levels of {dataset}")
    return list(spec)


def _known(config: dict, measure: dict, method: str) -> bool:
    exp = config.get("experiments", {}).get(measure.get("experiment", ""), {})
    return method in config["methods"] or method in UNTRAINED or method in exp.get("deconvolution", [])


def _candidates(config: dict, measure: dict, methods: list[str]) -> list[str]:
    """Of a best-of list, the methods this experiment runs (a configured method outside it is not trained for it)."""
    exp = _experiment(config, measure)
    ran = set(exp.get("methods", [])) | set(exp.get("deconvolution", []))
    picked = [m for m in methods if m in ran]
    if not picked:
        raise NotConfigured(f"none of {', '.join(methods)} is in experiment {measure['experiment']!r}")
    return picked


def _trained(config: dict, method: str, dataset: str) -> bool:
    cfg = config["methods"].get(method)
    return cfg is not None and dataset not in cfg.get("official", {})


# ------------------------------------------------------------------------------------- reading files


def _rel(layout: Layout, path: Path) -> Path:
    """A results path as the user types it (results/...), for commands and messages."""
    return path.relative_to(layout.root.parent) if path.is_relative_to(layout.root.parent) else path


def _make(layout: Layout, path: Path) -> str:
    return f"snakemake --cores all {_rel(layout, path)}"


def _read_csv(path: Path, command: str) -> pd.DataFrame:
    if not path.exists():
        raise NotRun(path, command)
    return pd.read_csv(path, dtype={"id": str})


def _scores(layout: Layout, config: dict, dataset: str, method: str, levels: list[str], metric: str) -> pd.DataFrame:
    """Per-image `metric` of a method over `levels` and seeds (an untrained reference is shared by every seed)."""
    seeds = layout.seeds(config, dataset)
    own = seeds if _trained(config, method, dataset) else [None]
    frames = []
    for seed in own:
        for level in levels:
            path = layout.per_image(dataset, method, level, seed)
            frame = _read_csv(path, _make(layout, path))
            if metric not in frame:
                raise NotRun(path, None, f"{_rel(layout, path)} has no {metric} column (evaluate.lpips: false?)")
            frames.append(frame[["id", metric]].assign(level=level, seed=seed))
    out = pd.concat(frames, ignore_index=True)
    if own == [None] and seeds != [None]:
        out = pd.concat([out.assign(seed=s) for s in seeds], ignore_index=True)
    return out if seeds != [None] else out.drop(columns="seed")


def training_flags(layout: Layout, config: dict, dataset: str, methods: list[str], opts: Options) -> tuple[list[str], list[str]]:
    """(under-trained models, models without a training curve) among `methods`, per seed."""
    train_ds = config["datasets"][dataset].get("trained_on", dataset)
    flagged, unknown = [], []
    for method in methods:
        if not _trained(config, method, dataset):
            continue
        for seed in layout.seeds(config, train_ds):
            name = method if seed is None else f"{method} (seed {seed})"
            path = layout.train_metrics(train_ds, method, seed)
            if not path.exists():
                unknown.append(name)
                continue
            curve = pd.read_csv(path)
            trend = stats.training_trend(
                curve["iteration"],
                pd.to_numeric(curve["val_psnr"], errors="coerce"),
                tail_fraction=opts.tail_fraction,
                threshold_db=opts.rise_db,
            )
            if trend.under_trained:
                flagged.append(
                    f"{name}: validation PSNR +{trend.rise_db:.2f} dB over the last {opts.tail_fraction:.0%} of {trend.window[1]:.0f} iterations"
                )
            elif trend.under_trained is None:
                unknown.append(name)
    return flagged, unknown


# ---------------------------------------------------------------------------------------- measuring


def _paired(layout: Layout, config: dict, m: dict, ds: str, levels: list[str], opts: Options) -> Measured:
    a = _scores(layout, config, ds, m["a"], levels, m["metric"])
    b = _scores(layout, config, ds, m["b"], levels, m["metric"])
    diffs = stats.paired_differences(a, b, m["metric"], names=(m["a"], m["b"]))
    interval = stats.mean_difference_interval(diffs, confidence=opts.confidence, n_resamples=opts.n_resamples, seed=opts.seed)
    spread = stats.seed_spread(diffs, "diff") if "seed" in diffs else None
    return Measured(interval, m["b"], spread=spread)


def _best_of(layout: Layout, config: dict, m: dict, ds: str, levels: list[str], opts: Options) -> Measured:
    candidates = [c for c in _candidates(config, m, m["b"]) if c != m["a"]]
    if not candidates:
        raise NotConfigured(f"experiment {m['experiment']!r} has no method to compare {m['a']} with")
    sign = 1 if HIGHER_IS_BETTER.get(m["metric"], True) else -1
    means = {c: float(_scores(layout, config, ds, c, levels, m["metric"])[m["metric"]].mean()) for c in candidates}
    best = max(means, key=lambda c: sign * means[c])
    out = _paired(layout, config, {**m, "b": best}, ds, levels, opts)
    out.notes.append(
        f"compared with the best of {', '.join(candidates)} in this run: {best} ({means[best]:.{DIGITS.get(m['metric'], 3)}f})"
    )
    return out


def _pooled_table_only(estimate: float, per_image: Path) -> Measured:
    interval = stats.Interval(estimate, float("nan"), float("nan"), stats.CONFIDENCE, "none: pooled table only", 0)
    return Measured(interval, "", notes=[f"no per-image values, so no interval: it needs {per_image}"])


def _edge_band(layout: Layout, config: dict, m: dict, ds: str, levels: list[str], opts: Options) -> Measured:
    """Pooled PSNR gain of a region: 10·log10(ΣSSE_b / ΣSSE_a) over images (and levels, seeds) of the same pixels."""
    per_path, table_path = layout.edge_band(ds, per_image=True), layout.edge_band(ds)
    if not per_path.exists():
        table = _read_csv(table_path, _make(layout, table_path))
        sub = table[(table["region"] == m["region"]) & table["level"].isin(levels)]
        psnr = sub.groupby("method")["psnr"].mean()
        if m["a"] not in psnr or m["b"] not in psnr:
            raise NotRun(table_path, _make(layout, table_path), f"{_rel(layout, table_path)} lacks {m['a']} or {m['b']}")
        out = _pooled_table_only(float(psnr[m["a"]] - psnr[m["b"]]), _rel(layout, per_path))
        out.b = m["b"]
        return out
    frame = pd.read_csv(per_path, dtype={"id": str})
    frame = frame[(frame["region"] == m["region"]) & frame["level"].isin(levels)]
    if "seed" not in frame:
        frame = frame.assign(seed=0)
    sse = {}
    for method in (m["a"], m["b"]):
        sub = frame[frame["method"] == method]
        if sub.empty:
            raise NotRun(per_path, _make(layout, table_path), f"{_rel(layout, per_path)} has no rows of {method}")
        sse[method] = stats.image_by_seed(sub.groupby(["id", "seed"], as_index=False)["sse"].sum(), "sse")[0]

    def gain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return 10 * np.log10(b.reshape(b.shape[0], -1).sum(axis=1) / a.reshape(a.shape[0], -1).sum(axis=1))

    interval = _interval([sse[m["a"]], sse[m["b"]]], gain, opts)
    return Measured(interval, m["b"])


def _interval(arrays: list[np.ndarray], statistic: Callable, opts: Options) -> stats.Interval:
    """Arrays (images, seeds, ...): crossed bootstrap with several seeds, BCa over images with one."""
    kw = dict(confidence=opts.confidence, n_resamples=opts.n_resamples, seed=opts.seed)
    if arrays[0].shape[1] > 1:
        return stats.crossed_bootstrap_interval(arrays, statistic, **kw)
    return stats.bootstrap_interval([x[:, 0] for x in arrays], lambda *xs: statistic(*(x[:, :, None] for x in xs)), **kw)


def _ap_counts(frame: pd.DataFrame, condition: str, metric: str, seeds: list) -> tuple[np.ndarray, np.ndarray]:
    """(TP, TP+FP+FN) arrays (images, seeds, thresholds) of one StarDist condition, for AP at `metric`."""
    sub = frame[frame["condition"] == condition]
    if metric != "map":
        sub = sub[np.isclose(sub["iou"], int(metric[2:]) / 100)]
    if "seed" not in sub or sub["seed"].isna().all():  # blurred / sharp: the same for every seed
        sub = pd.concat([sub.assign(seed=s) for s in seeds], ignore_index=True)
    sub = sub.assign(den=sub["tp"] + sub["fp"] + sub["fn"]).sort_values(["id", "seed", "iou"])
    shape = (sub["id"].nunique(), len(seeds), sub["iou"].nunique())
    if len(sub) != int(np.prod(shape)) or sub.duplicated(["id", "seed", "iou"]).any():
        raise ValueError(
            f"StarDist counts of {condition!r} are not one row per image, seed and IoU threshold. Fix: rerun the StarDist rule"
        )
    return sub["tp"].to_numpy(float).reshape(shape), sub["den"].to_numpy(float).reshape(shape)


def _stardist(layout: Layout, config: dict, m: dict, ds: str, levels: list[str], opts: Options) -> Measured:
    """Pooled AP difference: AP = ΣTP / Σ(TP+FP+FN) over images per IoU threshold (mean AP: their mean)."""
    per_path, table_path = layout.stardist(ds, per_image=True), layout.stardist(ds)
    command = _make(layout, table_path)
    if m["a"] not in config["experiments"]["stardist"]["methods"]:
        raise NotConfigured(f"{m['a']} is not among the StarDist experiment's methods")
    bs = _candidates(config, m, m["b"]) if isinstance(m["b"], list) else [m["b"]]
    bs = [b for b in bs if b != m["a"]]
    if not bs:
        raise NotConfigured(f"experiment {m['experiment']!r} has no condition to compare {m['a']} with")
    if not per_path.exists():
        table = _read_csv(table_path, command).set_index("condition")
        if m["a"] not in table.index or any(b not in table.index for b in bs):
            raise NotRun(table_path, command, f"{_rel(layout, table_path)} lacks {m['a']} or one of {', '.join(bs)}")
        best = max(bs, key=lambda b: table.loc[b, m["metric"]])
        out = _pooled_table_only(float(table.loc[m["a"], m["metric"]] - table.loc[best, m["metric"]]), _rel(layout, per_path))
        out.b = best
        return out
    frame = pd.read_csv(per_path, dtype={"id": str})
    frame = frame[frame["level"].isin(levels)] if "level" in frame else frame
    seeds = sorted(frame["seed"].dropna().unique()) if "seed" in frame and frame["seed"].notna().any() else [0]
    missing = [c for c in [m["a"], *bs] if c not in set(frame["condition"])]
    if missing:
        raise NotRun(per_path, command, f"{_rel(layout, per_path)} has no rows of {', '.join(missing)}")

    def ap(tp: np.ndarray, den: np.ndarray) -> np.ndarray:
        return (tp.sum(axis=(1, 2)) / den.sum(axis=(1, 2))).mean(axis=-1)

    ids = {c: sorted(set(frame.loc[frame["condition"] == c, "id"])) for c in [m["a"], *bs]}
    if any(v != ids[m["a"]] for v in ids.values()):
        raise ValueError(
            f"{_rel(layout, per_path)}: StarDist conditions {', '.join(ids)} were scored on different images. Fix: rerun the StarDist rule"
        )
    counts = {c: _ap_counts(frame, c, m["metric"], seeds) for c in [m["a"], *bs]}
    pooled = {c: float(ap(tp[None], den[None])[0]) for c, (tp, den) in counts.items()}
    best = max(bs, key=lambda b: pooled[b])

    def diff(tp_a, den_a, tp_b, den_b):
        return ap(tp_a, den_a) - ap(tp_b, den_b)

    interval = _interval([*counts[m["a"]], *counts[best]], diff, opts)
    notes = [f"compared with the best of {', '.join(bs)} in this run: {best} ({pooled[best]:.4f})"] if len(bs) > 1 else []
    return Measured(interval, best, notes)


def _model_rows(frame: pd.DataFrame, model: str) -> pd.DataFrame:
    """Rows of a model, whatever scan backend its label names ("dgno-cell [scan: triton]")."""
    names = frame["model"].astype(str)
    return frame[(names == model) | names.str.startswith(model + " [")]


def _benchmark(layout: Layout, config: dict, m: dict, opts: Options) -> Measured:
    """a / b of a recorded benchmark column (one measurement: no sampling interval), newest file with both."""
    path = layout.runtime_memory()
    frame = _read_csv(path, _make(layout, path))
    mode = m.get("mode", "autograd")
    sel = frame[
        (frame["kind"] == "forward") & (frame["mode"] == mode) & (frame["size"] == m["size"]) & (frame["batch"] == m.get("batch", 1))
    ]
    sel = sel[sel["amp_bf16"].astype(str).str.lower().isin(["false", "0", "0.0"]) & sel[m["column"]].notna()]
    found = []
    for (file, device), g in sel.groupby(["file", "device"], sort=True):
        ra, rb = _model_rows(g, m["a"]), _model_rows(g, m["b"])
        if len(ra) and len(rb):
            found.append(
                (
                    str(g["recorded_utc"].max()),
                    file,
                    device,
                    float(ra[m["column"]].iloc[0]),
                    float(rb[m["column"]].iloc[0]),
                    str(ra["scale"].iloc[0]),
                )
            )
    if not found:
        raise NotRun(
            path, BENCH_COMMAND, f"{_rel(layout, path)} has no {mode} forward pass of both {m['a']} and {m['b']} at {m['size']} px"
        )
    _, file, device, va, vb, scale = max(found)
    ratio = va / vb
    interval = stats.Interval(ratio, ratio, ratio, opts.confidence, "single recorded measurement (no sampling interval)", 1)
    note = f"recorded benchmark benchmarks/results/{file} on {device}: {va:.4g} / {vb:.4g} ({m['column']})"
    return Measured(interval, m["b"], notes=[note], scale=f"{scale} scale (recorded benchmark)")


MEASURES = {
    "paired_difference": _paired,
    "best_of_difference": _best_of,
    "edge_band_difference": _edge_band,
    "stardist_difference": _stardist,
}


def resolve(config: dict, m: dict) -> tuple[str | None, list[str]]:
    """(dataset, levels) one claim's ``measure`` entry reads in this configuration; (None, []) for a benchmark.

    Raises NotConfigured when the configuration lacks the experiment, a dataset standing for the paper's
    column, a level, or one of the two methods.
    """
    if m["kind"] == "benchmark_ratio":
        return None, []
    ds = _dataset(config, m)
    levels = _levels(config, m, ds)
    for method in [m["a"]] + ([m["b"]] if isinstance(m["b"], str) else []):
        if not _known(config, m, method):
            raise NotConfigured(f"method {method!r} is not configured")
    return ds, levels


def measure(config: dict, m: dict, ds: str | None, levels: list[str], layout: Layout, opts: Options) -> Measured:
    """The measured difference (or ratio) of one claim's ``measure`` entry (one variant) with its interval."""
    if m["kind"] == "benchmark_ratio":
        return _benchmark(layout, config, m, opts)
    return MEASURES[m["kind"]](layout, config, m, ds, levels, opts)
