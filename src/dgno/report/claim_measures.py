"""Measuring one claim from the results files: where they live, which dataset, levels and seeds, the
per-image scores or counts, and the difference with its bootstrap interval (dgno.stats).

Split from :mod:`dgno.report.claims` (the list, the verdicts and the report section) so each reads
on its own. A missing input raises :class:`NotRun` with the command that produces it; a claim whose
experiment, dataset, method or level this configuration lacks raises :class:`NotConfigured`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dgno import metric_spec, stats
from dgno.experiments.catalogue import table_levels
from dgno.io import replicate_dir
from dgno.report.comparisons import Resampling, ap_counts, ap_difference, matrix_interval, pooled_ap, pooled_psnr_gain, sse_matrix

UNTRAINED = ("input", "blurred", "sharp")  # references, not networks: no seeds, no training curve
BENCH_COMMAND = "python -m benchmarks.gpu.speed benchmarks/results/gpu_speed_<device>.json (on a GPU), then snakemake --cores 1 results/tables/runtime_memory.csv"


@dataclass
class Layout:
    """Where the results files a claim reads live, in one place.

    Seed replicates (``experiments.<name>.seeds``, dgno.workflow.replicates): replicate 0 at the plain
    paths, replicate r >= 1 at ``<method>/seed=<r>/`` below the dataset; an experiment without seeds has
    one unnamed seed (None) and the plain paths.
    """

    root: Path

    def _method(self, method: str, seed: int | None) -> str:
        return replicate_dir(method, seed or 0)

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
    def seeds(config: dict, experiment: str) -> list[int | None]:
        """The replicates an experiment's claims read: [0, …, seeds − 1] with ``experiments.<name>.seeds`` > 1, else [None]."""
        n = int(config.get("experiments", {}).get(experiment, {}).get("seeds", 1))
        return list(range(n)) if n > 1 else [None]


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

    @classmethod
    def from_config(cls, config: dict) -> Options:
        """The config's ``stats`` block (schema defaults where it has none)."""
        s = config.get("stats", {})
        r = Resampling.from_config(config)
        return cls(r.confidence, r.n_resamples, r.seed, s.get("undertrained_rise_db", stats.UNDERTRAINED_RISE_DB), s.get("tail_fraction", stats.TAIL_FRACTION))

    def resampling(self) -> Resampling:
        return Resampling(self.confidence, self.n_resamples, self.seed)


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
    own = _experiment(config, measure).get("level")
    if own:  # an experiment of one level (StarDist segments the images of its `level`)
        return [own]
    spec = measure.get("levels", "table")
    if spec == "table":  # the results tables' levels: the test levels the models were trained on
        return table_levels(config, dataset)
    absent = [lvl for lvl in spec if lvl not in ds["test_levels"]]
    if absent:
        raise NotConfigured(f"level(s) {', '.join(absent)} are not test levels of {dataset}")
    return list(spec)


def _known(config: dict, measure: dict, method: str, dataset: str) -> bool:
    """Whether this configuration evaluates `method` on `dataset`: a reference, a deconvolution of the
    experiment, or a configured method that some experiment runs on that dataset (MPT of Table 1 serves
    the operators claim on the same data); a configured method no experiment runs there is not measured."""
    exp = config.get("experiments", {}).get(measure.get("experiment", ""), {})
    if method in UNTRAINED or method in exp.get("deconvolution", []):
        return True
    runs = (spec for spec in config.get("experiments", {}).values() if dataset in spec.get("datasets", [spec.get("dataset")]))
    return method in config["methods"] and any(method in spec.get("methods", []) for spec in runs)


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
    return cfg is not None and dataset not in cfg.get("authors_checkpoints", {})


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


def _scores(layout: Layout, config: dict, m: dict, dataset: str, method: str, levels: list[str]) -> pd.DataFrame:
    """Per-image metric of a method over `levels` and the experiment's seeds (an untrained reference is shared by every seed)."""
    metric = m["metric"]
    seeds = layout.seeds(config, m["experiment"])
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


def training_flags(layout: Layout, config: dict, experiment: str | None, dataset: str, methods: list[str], opts: Options) -> tuple[list[str], list[str]]:
    """(under-trained models, models without a training curve) among `methods`, per seed of the experiment."""
    train_ds = config["datasets"][dataset].get("trained_on", dataset)
    flagged, unknown = [], []
    for method in methods:
        if not _trained(config, method, dataset):
            continue
        for seed in layout.seeds(config, experiment or ""):
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
    a = _scores(layout, config, m, ds, m["a"], levels)
    b = _scores(layout, config, m, ds, m["b"], levels)
    diffs = stats.paired_differences(a, b, m["metric"], names=(m["a"], m["b"]))
    interval = stats.mean_difference_interval(diffs, confidence=opts.confidence, n_resamples=opts.n_resamples, seed=opts.seed)
    spread = stats.seed_spread(diffs, "diff") if "seed" in diffs else None
    return Measured(interval, m["b"], spread=spread)


def _best_of(layout: Layout, config: dict, m: dict, ds: str, levels: list[str], opts: Options) -> Measured:
    candidates = [c for c in _candidates(config, m, m["b"]) if c != m["a"]]
    if not candidates:
        raise NotConfigured(f"experiment {m['experiment']!r} has no method to compare {m['a']} with")
    sign = -1 if metric_spec.higher_is_better(m["metric"]) is False else 1
    means = {c: float(_scores(layout, config, m, ds, c, levels)[m["metric"]].mean()) for c in candidates}
    best = max(means, key=lambda c: sign * means[c])
    out = _paired(layout, config, {**m, "b": best}, ds, levels, opts)
    out.notes.append(
        f"compared with the best of {', '.join(candidates)} in this run: {best} ({means[best]:.{metric_spec.digits(m['metric'])}f})"
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
    if "replicate" not in frame:
        frame = frame.assign(replicate=0)
    seeds = [s or 0 for s in layout.seeds(config, m["experiment"])]
    frame = frame[frame["replicate"].isin(seeds) | frame["method"].isin(UNTRAINED)]
    sse = {}
    for method in (m["a"], m["b"]):
        if frame[frame["method"] == method].empty:
            raise NotRun(per_path, _make(layout, table_path), f"{_rel(layout, per_path)} has no rows of {method}")
        sse[method] = sse_matrix(frame, method, seeds)
    interval = matrix_interval([sse[m["a"]], sse[m["b"]]], pooled_psnr_gain, opts.resampling())
    return Measured(interval, m["b"])


def _stardist(layout: Layout, config: dict, m: dict, ds: str, levels: list[str], opts: Options) -> Measured:
    """Pooled AP difference: AP = ΣTP / Σ(TP+FP+FN) over images per IoU threshold (mean AP: their mean)."""
    per_path, table_path = layout.stardist(ds, per_image=True), layout.stardist(ds)
    command = _make(layout, table_path)
    if m["a"] not in config["experiments"][m["experiment"]]["methods"]:
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

    ids = {c: sorted(set(frame.loc[frame["condition"] == c, "id"])) for c in [m["a"], *bs]}
    if any(v != ids[m["a"]] for v in ids.values()):
        raise ValueError(
            f"{_rel(layout, per_path)}: StarDist conditions {', '.join(ids)} were scored on different images. Fix: rerun the StarDist rule"
        )
    counts = {c: ap_counts(frame, c, m["metric"], seeds) for c in [m["a"], *bs]}
    pooled = {c: float(pooled_ap(tp[None], den[None])[0]) for c, (tp, den) in counts.items()}
    best = max(bs, key=lambda b: pooled[b])
    interval = matrix_interval([*counts[m["a"]], *counts[best]], ap_difference, opts.resampling())
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
    lacking = [c for c in ("kind", "mode", "size", "batch", "amp_bf16", "file", "device", "model", "scale", "recorded_utc", m["column"]) if c not in frame]
    if lacking:
        raise NotRun(path, BENCH_COMMAND, f"{_rel(layout, path)} has no column(s) {', '.join(lacking)} (written by an older runtime_memory rule)")
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
        if not _known(config, m, method, ds):
            raise NotConfigured(f"method {method!r} is not run on {ds} by this configuration")
    return ds, levels


def measure(config: dict, m: dict, ds: str | None, levels: list[str], layout: Layout, opts: Options) -> Measured:
    """The measured difference (or ratio) of one claim's ``measure`` entry (one variant) with its interval."""
    if m["kind"] == "benchmark_ratio":
        return _benchmark(layout, config, m, opts)
    return MEASURES[m["kind"]](layout, config, m, ds, levels, opts)
