"""Report sections of the controlled synthetic experiments (shapes; BBBC006 w1 with sigma-map blur)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dgno.experiments.catalogue import table_levels
from dgno.report.comparisons import table_spec
from dgno.report.operators_section import edge_band_caption, edge_band_values, gain_verdict
from dgno.report.reading import load_paper, paper_row, read_stats
from dgno.report.render import Cell, ShownTable, annotate, eval_command, metric_table, stat_row
from dgno.report.section import Section, empty_section, table_metrics


def synthetic_section(name: str, config: dict, summaries: pd.DataFrame, results: Path) -> Section:
    exp = config["experiments"][name]
    dss, methods = exp["datasets"], exp["methods"]
    mcfg = config["methods"]
    paper = load_paper(name)
    levels = {ds: table_levels(config, ds) for ds in dss}
    sec = empty_section(name, paper.get("source", ""))
    for ds in dss:
        d = config["datasets"][ds]
        rng = next(iter(d["levels"].values()))
        sec.notes.append(f"{ds}: sigma range {rng[0]}–{rng[1]} px ({d.get('sigma_scaling', 'as configured')}); {d['n_test']} test images.")
    if int(exp.get("seeds", 1)) > 1:
        sec.notes.append(f"Every trained method is trained with {exp['seeds']} seeds: values are means over the seeds (± sd over seeds).")
    paper_rows, paper_columns = synthetic_paper_rows(paper, config, dss)
    extra: dict = {}
    for ds in dss:
        extra.update(edge_band_values(results, ds))
    stats = read_stats(results / "tables" / f"{name}_stats.csv")
    sec.tables.append(
        metric_table(
            summaries, datasets=dss, methods=methods, method_cfgs=mcfg, levels=levels, metrics=table_metrics(name), paper_rows=paper_rows,
            paper_columns=paper_columns, stats=stats, deltas=table_spec(config, name)["versus"],
        )
    )  # fmt: skip
    if extra:
        band = [read_stats(results / "tables" / f"edge_band_{ds}_stats.csv") for ds in dss]
        band_stats = pd.concat([b for b in band if b is not None], ignore_index=True) if any(b is not None for b in band) else None
        t = metric_table(
            summaries, datasets=dss, methods=methods, method_cfgs=mcfg, levels=levels, metrics=["psnr_edge", "psnr_interior"],
            paper_rows=None, extra=extra, stats=band_stats,
        )  # fmt: skip
        t.caption = edge_band_caption(results)
        sec.tables.append(t)
    labels = {m: mcfg[m].get("label", m) for m in methods}
    gg = next((m for m in methods if mcfg[m]["model"] == "gg"), None)
    for ds in dss:
        for m in methods:
            if gg and mcfg[m]["model"].startswith("dgno"):
                pg = None
                pr = paper_row(paper_rows, mcfg[m], m).get(paper_columns.get(ds, ""), {})
                pgg = paper_row(paper_rows, mcfg[gg], gg).get(paper_columns.get(ds, ""), {})
                if pr.get("psnr") is not None and pgg.get("psnr") is not None:
                    pg = pr["psnr"] - pgg["psnr"]
                v = gain_verdict(summaries, ds, m, gg, labels, pg, levels[ds], stats)
                if v:
                    sec.verdicts.append(v)
    return sec


def synthetic_paper_rows(paper: dict, config: dict, datasets: list[str]) -> tuple[dict, dict[str, str]]:
    """The paper's synthetic PSNRs re-shaped for :func:`metric_table`, using each dataset's `paper_column`.

    Returns (rows {method: {column: {psnr: v}}}, {dataset: column}).
    """
    columns = set(paper.get("columns", []))
    paper_columns = {ds: config["datasets"][ds]["paper_column"] for ds in datasets if config["datasets"][ds].get("paper_column") in columns}
    rows = {method: {k: {"psnr": v} for k, v in row.items() if k in columns} for method, row in paper.get("rows", {}).items()}
    return rows, paper_columns


def synthetic_bbbc006_section(name: str, config: dict, summaries: pd.DataFrame, results: Path) -> Section:
    """The paper's second controlled synthetic experiment: BBBC006 w1 with sigma-map blur, GG vs DG.

    The paper gives whole-image PSNRs of GG and "DG" (25.81 → 27.75 dB, +1.94) and the gain on
    boundary regions (+1.77 dB), without saying which DG variant or how boundary regions are drawn;
    here every DG variant is compared with GG, and the boundary gain is the edge-band gain.
    """
    exp = config["experiments"][name]
    ds, methods, mcfg = exp["dataset"], exp["methods"], config["methods"]
    paper = load_paper(name)
    prows = paper.get("rows", {})
    d = config["datasets"][ds]
    levels = table_levels(config, ds)
    sec = empty_section(name, paper.get("source", ""))
    rng = d["levels"][levels[0]]
    sec.notes.append(
        f"Sharp images of {d['base']} (its split; the test split is the paper's 153 images at full scale) blurred by random "
        f"sigma maps, sigma {rng[0]}–{rng[1]} px, correlation length {d['correlation_length']} px, no noise. "
        f"Edge band: {config['evaluate']['edge_band_px']} px around ground-truth edges (results/tables/edge_band_definition.txt). " + str(paper.get("notes", ""))
    )
    band = edge_band_values(results, ds)
    gg = next((m for m in methods if mcfg[m]["model"] == "gg"), None)
    stats = read_stats(results / "tables" / f"{name}_stats.csv")
    band_stats = read_stats(results / "tables" / f"edge_band_{ds}_stats.csv")

    def measured(method: str, metric: str) -> float | None:
        if metric in ("psnr_edge", "psnr_interior"):
            return band.get((method, ds, metric))
        sub = summaries[(summaries.dataset == ds) & (summaries.method == method) & summaries.level.isin(levels)]
        return float(sub["psnr"].mean()) if set(sub.level) == set(levels) else None

    table = ShownTable(columns=[("whole image", "psnr"), ("whole image", "psnr_gain"), ("edge band", "psnr_edge"), ("edge band", "psnr_boundary_gain")])
    base = {k: measured(gg, k) for k in ("psnr", "psnr_edge")} if gg else {}
    for method in ["input", *methods]:
        cfg = mcfg.get(method, {"model": "blur", "label": "Blurred input"})
        psnr, edge = measured(method, "psnr"), measured(method, "psnr_edge")
        is_dg = cfg["model"].startswith("dgno")
        gain = psnr - base["psnr"] if is_dg and psnr is not None and base.get("psnr") is not None else None
        edge_gain = edge - base["psnr_edge"] if is_dg and edge is not None and base.get("psnr_edge") is not None else None
        prow = prows.get("gg" if cfg["model"] == "gg" else "dg" if is_dg else "", {})
        pgain = prows.get("dg_minus_gg", {}) if is_dg else {}
        command = None if psnr is not None else eval_command(ds, method, levels[0])
        cells = [
            annotate(Cell(measured=psnr, paper=prow.get("psnr"), command=command, digits=2), stats, ds, "psnr", method),
            Cell(measured=gain, paper=pgain.get("psnr_gain"), digits=2),
            annotate(Cell(measured=edge, paper=None, digits=2), band_stats, ds, "psnr_edge", method),
            Cell(measured=edge_gain, paper=pgain.get("psnr_boundary_gain"), digits=2),
        ]
        if is_dg and gg:
            _gain_intervals(cells, stats, band_stats, ds, method, gg)
        table.rows.append((cfg.get("label", method), cells))
    table.caption = (
        "PSNR (dB); gains are DG minus GG on the same images, with a bootstrap interval over the test images (and seeds). "
        "The paper's 'DG' row (variant not stated) is shown beside every DG variant."
    )
    sec.tables.append(table)
    return sec


def _gain_intervals(cells: list[Cell], stats: pd.DataFrame | None, band_stats: pd.DataFrame | None, ds: str, method: str, gg: str) -> None:
    """The whole-image and edge-band gain cells of one DG row get their paired intervals; the edge-band gain
    takes the statistics' estimate (PSNR pooled over images and levels, as its interval)."""
    annotate(cells[1], stats, ds, "psnr", method, versus=gg)
    row = stat_row(band_stats, ds, "psnr_edge", method, versus=gg)
    if row is not None:
        cells[3].measured = float(row["estimate"])
        annotate(cells[3], band_stats, ds, "psnr_edge", method, versus=gg)
