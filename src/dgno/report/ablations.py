"""Report sections of the ablation grids (flux x boundary, penalty, element size x T)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dgno import metric_spec
from dgno.experiments.catalogue import table_levels
from dgno.report.reading import load_paper, read_stats
from dgno.report.render import Cell, ShownTable, annotate
from dgno.report.results import psnr_of
from dgno.report.section import Section, empty_section


def _tau_key(tau) -> str:
    """Paper row key of a penalty value: 0.25 → p0_25, 1.0 → p1, 'learnable' → learnable."""
    if tau == "learnable":
        return "learnable"
    return "p" + f"{float(tau):g}".replace(".", "_")


def ablation_section(name: str, config: dict, summaries: pd.DataFrame, results: Path | None = None) -> Section:
    """One ablation grid as the paper lays it out, measured beside reported, missing points 'not run'. The
    highlight goes to the best grid point of the whole grid only when its lead over every other point has
    an interval excluding 0 (``results/tables/ablation_<name>_stats.csv``)."""
    stats = read_stats(results / "tables" / f"ablation_{name}_stats.csv") if results is not None else None
    runs = config["ablation_runs"][name]
    ds = runs[0]["dataset"]
    levels = table_levels(config, ds)
    paper = load_paper(name)
    prows = paper.get("rows", {})
    sec = empty_section(name, paper.get("source", ""))
    sec.notes.append(
        f"Dataset {ds}; PSNR (dB) averaged over test levels {', '.join(levels)}. Results: results/tables/ablation_{name}.csv. "
        "A grid point whose settings are those of a configured method (e.g. DGNO-Face's avg_jump + Dirichlet, learnable τ) "
        "is that method's trained model, trained once and scored under both names, as the paper's tables do."
    )
    by = {tuple((k, v) for k, v in r.items() if k not in ("method", "dataset")): r["method"] for r in runs}

    def cell(method: str, paper_value, metric: str = "psnr") -> Cell:
        measured, command = psnr_of(summaries, ds, method, levels, metric)
        return annotate(Cell(measured=measured, paper=paper_value, command=command, digits=metric_spec.digits(metric)), stats, ds, metric, method)

    spec = config["ablations"][name]
    if name == "flux_boundary":
        table = ShownTable(columns=[(v, b) for v in spec["variants"] for b in spec["boundary"]])
        for flux in spec["flux"]:
            cells = []
            for v, b in table.columns:
                method = by[(("variant", v), ("flux", flux), ("boundary", b))]
                cells.append(cell(method, prows.get(flux, {}).get(v.replace("-", "_"), {}).get(b)))
            table.rows.append((prows.get(flux, {}).get("label", flux), cells))
    elif name == "penalty":
        table = ShownTable(columns=[(v, m) for v in spec["variants"] for m in ("psnr", "ssim")])
        for tau in spec["tau"]:
            prow = prows.get(_tau_key(tau), {})
            cells = [cell(by[(("variant", v), ("tau", tau))], prow.get(v.replace("-", "_"), {}).get(m), m) for v, m in table.columns]
            table.rows.append((f"τ = {tau}", cells))
    else:
        v = spec["variant"]
        table = ShownTable(columns=[(v, f"T={t}") for t in spec["T"]])
        for p in spec["element_size"]:
            prow = prows.get(f"we_{p}", {})
            cells = [cell(by[(("variant", v), ("element_size", p), ("T", t))], prow.get(f"t{t}")) for t in spec["T"]]
            table.rows.append((f"element {p}×{p}", cells))
    sec.tables.append(table)
    return sec
