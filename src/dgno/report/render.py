"""Render ``report/index.html``: every experiment of this run, measured beside the paper, standing alone.

The renderer only reads results files (tables CSVs, figures, benchmark TSVs, model summaries);
it never computes science. A cell whose result file is absent says "not run" and gives the
exact snakemake command that produces it, so a partial run is never mistaken for a complete one.
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from dgno import metric_spec, provenance
from dgno.data import GENERATED_SOURCES
from dgno.io import atomic_path
from dgno.report.reading import paper_row

TEMPLATE_DIR = Path(__file__).with_name("templates")


@dataclass
class Cell:
    """One measured value of a table, with the paper's beside it; what makes it uncertain, when known.

    best: highlighted — its lead over every other row has an interval excluding 0 (dgno.stats.highlight);
    tie: one of the rows that tie for first (no lead resolved); sd / n_seeds: spread over training
    seeds; low / high: the interval of a stated difference (signed: the value is a difference).
    """

    measured: float | None
    paper: float | None = None
    best: bool = False
    command: str | None = None  # set when not run
    digits: int = 2
    tie: bool = False
    sd: float | None = None
    n_seeds: int = 1
    low: float | None = None
    high: float | None = None
    signed: bool = False

    @property
    def diff(self) -> float | None:
        if self.measured is None or self.paper is None:
            return None
        return self.measured - self.paper


@dataclass
class ShownTable:
    """A table as the report shows it: columns and rows of cells, each measured value beside the paper's (how an
    experiment's results table compares its rows: :class:`dgno.experiments.catalogue.Table`)."""

    columns: list[tuple[str, str]]  # (group label, metric key)
    rows: list[tuple[str, list[Cell]]] = field(default_factory=list)
    caption: str = ""
    title: str = ""  # a header row over the whole table (e.g. which StarDist model segmented)


def _num(x: Any) -> float | None:
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def stat_row(stats: pd.DataFrame | None, dataset: str, metric: str, method: str, *, versus: str = "", level: str = "") -> dict | None:
    """The row of a table's statistics (dgno.report.comparisons, ``<table>_stats.csv``) for one cell, if any."""
    if stats is None or stats.empty:
        return None
    hit = stats[(stats["dataset"] == dataset) & (stats["metric"] == metric) & (stats["method"] == method) & (stats["versus"] == versus) & (stats["level"] == level)]
    return None if hit.empty else hit.iloc[0].to_dict()


def annotate(cell: Cell, stats: pd.DataFrame | None, dataset: str, metric: str, method: str, *, versus: str = "", level: str = "") -> Cell:
    """Fill a cell's uncertainty from the table's statistics: the highlight (best or tie) and sd over seeds of a
    value; the interval of a difference (``versus`` a reference row). A cell without statistics stays as it is
    (never highlighted: the highlight needs the interval of the lead)."""
    row = stat_row(stats, dataset, metric, method, versus=versus, level=level)
    if row is None:
        return cell
    if versus:
        cell.low, cell.high, cell.signed = _num(row["low"]), _num(row["high"]), True
        if cell.measured is None and cell.command is None:
            cell.measured = _num(row["estimate"])
        return cell
    n = int(row.get("n_seeds") or 1)
    cell.n_seeds, cell.sd = n, _num(row.get("seed_sd")) if n > 1 else None
    cell.best, cell.tie = row.get("highlight") == "best", row.get("highlight") == "tie"
    return cell


def eval_command(dataset: str, method: str, level: str) -> str:
    return f"snakemake --cores all results/eval/{dataset}/{method}/{level}/summary.json"


def metric_table(
    summaries: pd.DataFrame,
    *,
    datasets: list[str],
    methods: list[str],
    method_cfgs: dict[str, dict],
    levels: dict[str, list[str]],
    metrics: list[str],
    paper_rows: dict[str, dict] | None,
    paper_columns: dict[str, str] | None = None,
    include_input: bool = True,
    extra: dict[tuple[str, str, str], float] | None = None,
    stats: pd.DataFrame | None = None,
    deltas: list[str] = (),
    stat_metric: dict[tuple[str, str], str] | None = None,
) -> ShownTable:
    """Rows = methods (+ blurred input), columns = dataset × metric, metrics averaged over levels.

    paper_rows: the paper table's rows; paper_columns maps our dataset name to its paper_column, the paper's
    column group (None → single-dataset table whose rows hold metrics directly).
    extra: additional measured values keyed (method, dataset, metric), e.g. edge-band PSNR.
    stats: the table's statistics (:func:`dgno.report.reading.read_stats`): highlight, sd over seeds, and for each row of
    ``deltas`` a column "Δ PSNR vs <row>" with the paired per-image interval. stat_metric: the statistics'
    metric of a (dataset, metric) column where it differs (the luma PSNR of RGB datasets: psnr_y8).
    """
    columns = [(ds, m) for ds in datasets for m in metrics]
    delta_cols = [(ds, ref) for ds in datasets for ref in deltas if not (stats is None or stats.empty)]
    labels = {ref: method_cfgs.get(ref, {}).get("label", "blurred input" if ref == "input" else ref) for ref in deltas}
    table = ShownTable(columns=columns + [(ds, f"Δ PSNR vs {labels[ref]}") for ds, ref in delta_cols])
    rows = (["input"] if include_input else []) + list(methods)
    for method in rows:
        cfg = method_cfgs.get(method, {"model": "blur", "label": "Blurred input"})
        cells = [_value_cell(summaries, ds, metric, method, cfg, levels, extra, paper_rows, paper_columns) for ds, metric in columns]
        for cell, (ds, metric) in zip(cells, columns):
            annotate(cell, stats, ds, (stat_metric or {}).get((ds, metric), metric), method)
        for ds, ref in delta_cols:
            metric = (stat_metric or {}).get((ds, "psnr"), "psnr")
            cells.append(annotate(Cell(measured=None, digits=2), stats, ds, metric, method, versus=ref) if method != ref else Cell(measured=None))
        table.rows.append((cfg.get("label", method), cells))
    return table


def _value_cell(summaries, ds, metric, method, cfg, levels, extra, paper_rows, paper_columns) -> Cell:
    # only this table's levels: a method may also be evaluated on others (e.g. unseen defocus levels)
    sub = summaries[(summaries["dataset"] == ds) & (summaries["method"] == method) & summaries["level"].isin(levels[ds])]
    missing = [lvl for lvl in levels[ds] if lvl not in set(sub["level"])]
    measured, command = None, None
    if extra is not None and (method, ds, metric) in extra:
        measured = _num(extra[(method, ds, metric)])
    elif missing:
        command = eval_command(ds, method, missing[0])
    elif metric in sub:
        measured = _num(sub[metric].mean())
    paper = None
    if paper_rows is not None:
        prow = paper_row(paper_rows, cfg, method)
        if paper_columns is not None:
            prow = prow.get(paper_columns.get(ds, ds), {}) if isinstance(prow, dict) else {}
        paper = _num(prow.get(metric)) if isinstance(prow, dict) else None
    return Cell(measured=measured, paper=paper, command=command, digits=metric_spec.digits(metric))


def embed_png(path: str | Path) -> str | None:
    """A data: URI for a PNG so the HTML file stands alone; None if the figure is absent."""
    path = Path(path)
    if not path.exists():
        return None
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def benchmark_times(bench_root: str | Path) -> pd.DataFrame:
    """Total wall-clock seconds per rule from Snakemake benchmark TSVs (results/benchmarks/<rule>/...)."""
    rows = []
    for tsv in sorted(Path(bench_root).rglob("*.tsv")):
        try:
            df = pd.read_csv(tsv, sep="\t")
        except (pd.errors.EmptyDataError, pd.errors.ParserError):
            continue
        rule = tsv.relative_to(bench_root).parts[0]
        rows.append({"rule": rule, "jobs": 1, "seconds": float(df["s"].mean()), "max_rss_mb": _num(df.get("max_rss", pd.Series([None])).max())})
    if not rows:
        return pd.DataFrame(columns=["rule", "jobs", "seconds", "max_rss_mb"])
    frame = pd.DataFrame(rows)
    return frame.groupby("rule").agg(jobs=("jobs", "sum"), seconds=("seconds", "sum"), max_rss_mb=("max_rss_mb", "max")).reset_index()


def fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def fmt_diff(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:+.{digits}f}"


def render(context: dict[str, Any], out_html: str | Path) -> None:
    """Fill the Jinja2 template and write the page atomically."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_DIR), autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.StrictUndefined)
    env.filters["fmt"] = fmt
    env.filters["fmt_diff"] = fmt_diff
    labels = {e.name: metric_spec.label(e.name) for e in (*metric_spec.METRICS, *metric_spec.QUANTITIES)}
    page = env.get_template("report.html").render(**context, metric_labels=labels, esc=html.escape)
    with atomic_path(out_html) as tmp:
        tmp.write_text(page, encoding="utf-8")


def evaluated_scales(results: str | Path | None) -> set[str]:
    """The model scales (registry presets) that the evaluations under `results` record: what was actually run."""
    if results is None:
        return set()
    scales = set()
    for path in Path(results).glob("eval/**/summary.json"):
        if "gumbel" in path.parts:
            continue
        try:
            spec = json.loads(path.read_text()).get("model_spec") or {}
        except (OSError, ValueError):
            continue
        if spec.get("scale"):
            scales.add(str(spec["scale"]))
    return scales


def scale_banner(config: dict[str, Any], results: str | Path | None = None) -> dict[str, str] | None:
    """The warning above a report whose models are not the paper's size, or None: from the config's ``scale``
    and the scales its evaluated models record, never from the config's name (a renamed paper config is paper scale)."""
    configured = config.get("scale", "demo")
    run = evaluated_scales(results)
    scales = sorted({configured} | run)
    if scales == ["paper"]:
        return None
    data = "procedurally generated" if all(ds["source"] in GENERATED_SOURCES for ds in config["datasets"].values()) else "reduced"
    smaller = [s for s in scales if s != "paper"]
    recorded = f" (config key scale: {configured}; the evaluated models record {', '.join(sorted(run))})" if run else f" (config key scale: {configured})"
    return {
        "title": f"{' and '.join(s.capitalize() for s in smaller)} scale.",
        "text": f"These numbers come from smaller models than the paper's, at the registry's {' and '.join(smaller)} scale{recorded}, trained briefly on "
        f"{data} data. They are not comparable with the paper's values, which are shown beside them only to make the comparison "
        "structure visible. Run snakemake --profile slurm all for the paper-scale experiments.",
    }


def header_context(config: dict[str, Any], summaries: pd.DataFrame, stardist_source: str | None = None, *, results: str | Path | None = None) -> dict[str, Any]:
    """What this report is: config, data sources, device, versions, commit, metric weight sources, and the
    scale warning (:func:`scale_banner`; `results` is where the evaluations record their models' scale)."""
    prov = provenance.collect()
    sources = {name: ds["source"] for name, ds in config["datasets"].items()}
    lpips_sources = sorted({str(s) for s in summaries.get("lpips_source", pd.Series(dtype=str)).dropna()})
    return {
        "config_name": config["name"],
        "config_description": config.get("description", ""),
        "scale_banner": scale_banner(config, results),
        "data_sources": sources,
        "synthetic": all(s in GENERATED_SOURCES for s in sources.values()),
        "generated_sources": list(GENERATED_SOURCES),
        "provenance": prov,
        "lpips_sources": lpips_sources or ["not computed"],
        "stardist_source": stardist_source or "not run in this configuration",
    }
