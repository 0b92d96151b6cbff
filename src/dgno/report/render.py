"""Render ``report/index.html``: every experiment of this run, measured beside the paper, standing alone.

The renderer only reads results files (tables CSVs, figures, benchmark TSVs, model summaries);
it never computes science. A cell whose result file is absent says "not run" and gives the
exact snakemake command that produces it, so a partial run is never mistaken for a complete one.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from dgno import provenance
from dgno.io import atomic_path
from dgno.report.tables import HIGHER_IS_BETTER, load_paper_values, paper_row

TEMPLATE_DIR = Path(__file__).with_name("templates")
METRIC_LABELS = {
    "psnr": "PSNR (dB) ↑",
    "ssim": "SSIM ↑",
    "lpips": "LPIPS ↓",
    "params_m": "Params (M)",
    "gflops": "GFLOPs",
    "gmacs": "GMACs",
    "psnr_edge": "edge-band PSNR ↑",
    "psnr_interior": "interior PSNR ↑",
    "psnr_edge_gain": "edge-band gain over GG (dB)",
    "psnr_gain": "PSNR gain over GG (dB)",
    "psnr_gain_input": "gain over blurred input (dB)",
    "psnr_boundary_gain": "edge-band gain over GG (dB)",
    "psnr_interior_gain": "interior gain over GG (dB)",
    "di": "diffusion index DI",
    "r50_px": "r₅₀ (px)",
}
DIGITS = {"psnr": 2, "ssim": 3, "lpips": 3, "params_m": 2, "gflops": 2, "gmacs": 2, "psnr_edge": 2, "psnr_interior": 2, "psnr_edge_gain": 2, "psnr_interior_gain": 2, "psnr_gain": 2, "psnr_boundary_gain": 2, "psnr_gain_input": 2}

# The paper's experiment catalogue (DESIGN.md) and where this pipeline stands on each entry.
CATALOGUE = [
    ("main", "Table 1 — main results (BBBC006 w1, w2, 3DHistech; 9 methods)"),
    ("operators", "GG vs LG vs DGNO (+ params, FLOPs)"),
    ("flux_boundary", "Flux × boundary condition (Face / Cell)"),
    ("penalty", "Flux penalty τ"),
    ("element_size_T", "Element size × T"),
    ("lifting", "Lifting modules (NAFNet / Restormer / MPT ± DGNO)"),
    ("defocus", "Defocus levels z = 01 / 05 / 13 (w1, w2)"),
    ("stardist", "StarDist AP downstream"),
    ("nonblind", "Seidel-PSF non-blind comparison"),
    ("synthetic", "Controlled synthetic sigma-map experiment"),
    ("synthetic_bbbc006", "Controlled synthetic experiment on BBBC006 w1 (sigma 0.6–13, GG vs DG, boundary gain)"),
    ("dpdd", "DPDD"),
    ("realdof", "RealDOF"),
    ("runtime_memory", "Runtime / memory vs image size"),
    ("lam", "LAM interpretability figure (NAFNet / MPT / SRNO / DGNO)"),
]


@dataclass
class Cell:
    measured: float | None
    paper: float | None = None
    best: bool = False
    command: str | None = None  # set when not run
    digits: int = 2

    @property
    def diff(self) -> float | None:
        if self.measured is None or self.paper is None:
            return None
        return self.measured - self.paper


@dataclass
class Table:
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


def mark_best(table: Table, skip_rows: tuple[str, ...] = ("Blurred input",)) -> None:
    """Bold the best measured value per column among the methods (the blurred input is a reference row)."""
    for j, (_, metric) in enumerate(table.columns):
        vals = [(i, row[1][j].measured) for i, row in enumerate(table.rows) if row[1][j].measured is not None and row[0] not in skip_rows]
        if len(vals) < 2 or metric not in HIGHER_IS_BETTER:
            continue
        best = (max if HIGHER_IS_BETTER[metric] else min)(v for _, v in vals)
        for i, v in vals:
            table.rows[i][1][j].best = v == best


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
    paper_dataset_key: dict[str, str] | None = None,
    include_input: bool = True,
    extra: dict[tuple[str, str, str], float] | None = None,
) -> Table:
    """Rows = methods (+ blurred input), columns = dataset × metric, metrics averaged over levels.

    paper_rows: the paper table's rows; paper_dataset_key maps our dataset name to the paper's
    column group (None → single-dataset table whose rows hold metrics directly).
    extra: additional measured values keyed (method, dataset, metric), e.g. edge-band PSNR.
    """
    table = Table(columns=[(ds, m) for ds in datasets for m in metrics])
    rows = (["input"] if include_input else []) + list(methods)
    for method in rows:
        cfg = method_cfgs.get(method, {"model": "blur", "label": "Blurred input"})
        cells = []
        for ds, metric in table.columns:
            # only this table's levels: a method may also be evaluated on others (e.g. unseen defocus levels)
            sub = summaries[(summaries["dataset"] == ds) & (summaries["method"] == method) & summaries["level"].isin(levels[ds])]
            missing = [lvl for lvl in levels[ds] if lvl not in set(sub["level"])]
            measured = None
            command = None
            if extra is not None and (method, ds, metric) in extra:
                measured = _num(extra[(method, ds, metric)])
            elif missing:
                command = eval_command(ds, method, missing[0])
            elif metric in sub:
                measured = _num(sub[metric].mean())
            paper = None
            if paper_rows is not None:
                prow = paper_row(paper_rows, cfg, method)
                if paper_dataset_key is not None:
                    prow = prow.get(paper_dataset_key.get(ds, ds), {}) if isinstance(prow, dict) else {}
                paper = _num(prow.get(metric)) if isinstance(prow, dict) else None
            cells.append(Cell(measured=measured, paper=paper, command=command, digits=DIGITS.get(metric, 3)))
        table.rows.append((cfg.get("label", method), cells))
    mark_best(table)
    return table


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
    page = env.get_template("report.html").render(**context, metric_labels=METRIC_LABELS, esc=html.escape)
    with atomic_path(out_html) as tmp:
        tmp.write_text(page, encoding="utf-8")


def header_context(config: dict[str, Any], summaries: pd.DataFrame, stardist_source: str | None = None) -> dict[str, Any]:
    """What this report is: config, data sources, device, versions, commit, metric weight sources."""
    prov = provenance.collect()
    sources = {name: ds["source"] for name, ds in config["datasets"].items()}
    lpips_sources = sorted({str(s) for s in summaries.get("lpips_source", pd.Series(dtype=str)).dropna()})
    return {
        "config_name": config["name"],
        "config_description": config.get("description", ""),
        "is_demo": config["name"] != "paper",
        "data_sources": sources,
        "synthetic": all(s.startswith("demo_") for s in sources.values()),
        "provenance": prov,
        "lpips_sources": lpips_sources or ["not computed"],
        "stardist_source": stardist_source or "not run in this configuration",
    }


def load_paper(table_id: str) -> dict[str, Any]:
    """One table of paper_values.yaml ({} when the paper has no such table)."""
    return load_paper_values().get(table_id, {})
