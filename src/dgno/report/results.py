"""Report sections of the results tables: Table 1 (main), lifting modules, defocus levels, DPDD / RealDOF, robustness."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dgno.experiments.catalogue import table_levels
from dgno.io import read_json
from dgno.report.comparisons import table_spec
from dgno.report.reading import load_paper, paper_key, paper_row, read_stats
from dgno.report.render import Cell, ShownTable, annotate, metric_table
from dgno.report.section import Section, empty_section, table_metrics


def psnr_of(summaries: pd.DataFrame, dataset: str, method: str, levels: list[str], metric: str = "psnr") -> tuple[float | None, str | None]:
    """Mean metric over the levels, or (None, command) when any level has not been evaluated."""
    sub = summaries[(summaries.dataset == dataset) & (summaries.method == method) & summaries.level.isin(levels)]
    missing = [lvl for lvl in levels if lvl not in set(sub["level"])]
    if missing:
        return None, f"snakemake --cores all results/eval/{dataset}/{method}/{missing[0]}/summary.json"
    return float(sub[metric].mean()), None


def main_section(name: str, config: dict, summaries: pd.DataFrame, results: Path | None = None) -> Section:
    """Table 1: every method on every main dataset; our datasets map to the paper's columns by paper_column."""
    exp = config["experiments"][name]
    paper = load_paper(name)
    dss = exp["datasets"]
    sec = empty_section(name, paper.get("source", ""))
    results = Path(results or "results")
    keys = {ds: config["datasets"][ds].get("paper_column", ds) for ds in dss}
    sec.notes.append("Columns: " + "; ".join(f"{ds} → paper column {keys[ds]}" for ds in dss) + ". Levels: the in-distribution test levels of each dataset.")
    levels = {ds: table_levels(config, ds) for ds in dss}
    luma = luma_psnr_values(summaries, dss, levels)
    if luma:
        rgb = sorted({ds for _, ds, _ in luma})
        sec.notes.append(
            f"PSNR of {', '.join(rgb)}: the authors' protocol (restored and sharp images ×255 truncated to uint8, BT.601 luma, "
            "PSNR with data range 255), which the paper's column was computed with; the float RGB PSNR is in each summary.json (psnr)."
        )
    renamed = [m for m in exp["methods"] if "efcr" in config["methods"][m].get("paper_key", "")]
    for m in renamed:
        sec.notes.append(
            f"{config['methods'][m].get('label', m)}: measured without EFCR (not part of the released MPT code this pipeline follows); "
            "its paper row in Table 1 is MPT+EFCR, so the difference includes EFCR's contribution."
        )
    released = [m for m in exp["methods"] if "authors_checkpoints" in config["methods"].get(m, {})]
    if released:
        own = [ds for ds in dss if config["datasets"][ds].get("split") == "authors"]
        other = [ds for ds in dss if config["datasets"][ds]["source"] == "bbbc006" and ds not in own]
        where = f"evaluated on the authors' own test split on {', '.join(own)} (their BBBC006.tar.gz)" if own else "evaluated on this pipeline's test split"
        caveat = f"; on {', '.join(other)} this pipeline's by-well split, whose test images the released models may have been trained on" if other else ""
        sec.notes.append(f"Rows {', '.join(config['methods'][m].get('label', m) for m in released)}: the authors' released weights, not trained here, {where}{caveat}.")
    sec.tables.append(
        metric_table(
            summaries,
            datasets=dss,
            methods=exp["methods"],
            method_cfgs=config["methods"],
            levels=levels,
            metrics=table_metrics(name),
            paper_rows=paper.get("rows", {}),
            paper_columns=keys,
            extra=luma or None,
            stats=read_stats(results / "tables" / f"{name}_stats.csv"),
            deltas=table_spec(config, name)["versus"],
            stat_metric={(ds, "psnr"): "psnr_y8" for _, ds, _ in luma},
        )
    )
    return sec


def luma_psnr_values(summaries: pd.DataFrame, datasets: list[str], levels: dict[str, list[str]]) -> dict[tuple[str, str, str], float]:
    """{(method, dataset, "psnr"): mean psnr_y8} for the RGB datasets (those whose summaries carry psnr_y8)."""
    if "psnr_y8" not in summaries:
        return {}
    out = {}
    for ds in datasets:
        sub = summaries[(summaries["dataset"] == ds) & summaries["level"].isin(levels[ds]) & summaries["psnr_y8"].notna()]
        for method, g in sub.groupby("method"):
            if set(g["level"]) >= set(levels[ds]):
                out[(method, ds, "psnr")] = float(g["psnr_y8"].mean())
    return out


def _one_dataset_table(sec: Section, config: dict, summaries: pd.DataFrame, exp: dict, paper: dict, paper_rows: dict, results: Path | None = None) -> Section:
    """Add the paper's note and the PSNR / SSIM / LPIPS table of ``exp``'s methods on its one dataset (with the
    statistics of its table rule, ``results/tables/<section id>_stats.csv``, when they exist)."""
    ds = exp["dataset"]
    stats = read_stats(results / "tables" / f"{sec.id}_stats.csv") if results is not None else None
    if paper.get("notes"):
        sec.notes.append("Note on the paper's numbers: " + str(paper["notes"]))
    sec.tables.append(
        metric_table(
            summaries,
            datasets=[ds],
            methods=exp["methods"],
            method_cfgs=config["methods"],
            levels={ds: table_levels(config, ds)},
            metrics=table_metrics(sec.id),
            paper_rows=paper_rows,
            stats=stats,
            deltas=table_spec(config, sec.id)["versus"] if stats is not None else [],
        )
    )
    return sec


def lifting_section(name: str, config: dict, summaries: pd.DataFrame, results: Path | None = None) -> Section:
    exp = config["experiments"][name]
    paper = load_paper(name)
    ds = exp["dataset"]
    sec = empty_section(name, paper.get("source", ""))
    sec.notes.append(f"Dataset {ds}. '<encoder>-dgno' = that encoder as the lifting module of DGNO-Cell's decoder of operator layers.")
    return _one_dataset_table(sec, config, summaries, exp, paper, paper.get("rows", {}), results)


def _fallback_levels(results: Path | None, dataset: str, levels: list[str]) -> dict[str, str]:
    """{level: why} of the levels whose test images are the by-well fallback's (the dataset's manifest, ``test_sets``)."""
    manifest = Path(results or "results") / "data" / dataset / "manifest.json"
    sets = read_json(manifest).get("test_sets", {}) if manifest.exists() else {}
    return {lvl: sets[lvl]["note"] for lvl in levels if lvl in sets}


def defocus_section(name: str, config: dict, summaries: pd.DataFrame, results: Path | None = None) -> Section:
    """PSNR per unseen defocus level; dataset i compares with the paper's defocus table of its paper_column."""
    exp = config["experiments"][name]
    sec = empty_section(name)
    stats = read_stats(results / "tables" / f"{name}_stats.csv") if results is not None else None
    for ds in exp["datasets"]:
        col = config["datasets"][ds].get("paper_column", ds)
        paper = load_paper("defocus_w2" if col.endswith("w2") else "defocus_w1")
        sec.notes.append(f"{ds}: trained on {', '.join(config['datasets'][ds]['train_levels'])}; compared with {paper.get('source', 'the paper')}.")
        fallback = _fallback_levels(results, ds, exp["levels"])
        if fallback:  # decided when the data were prepared (the manifest's test_sets), not by the config
            sec.notes.append(f"{ds}, levels {', '.join(fallback)}: by-well split, not the authors' test images — {fallback[next(iter(fallback))]}.")
        table = ShownTable(columns=[(ds, lvl) for lvl in exp["levels"]])
        for method in ["input", *exp["methods"]]:
            cfg = config["methods"].get(method, {"model": "blur", "label": "Blurred input"})
            prow = paper_row(paper.get("rows", {}), cfg, method)
            cells = []
            for _, lvl in table.columns:
                measured, command = psnr_of(summaries, ds, method, [lvl])
                cells.append(annotate(Cell(measured=measured, paper=prow.get(lvl, {}).get("psnr"), command=command), stats, ds, "psnr", method, level=lvl))
            table.rows.append((cfg.get("label", method), cells))
        table.caption = "PSNR (dB) per level; the blurred input row is included for reference; the highlight is per level (column)."
        sec.tables.append(table)
    return sec


def real_paper_row(rows: dict[str, dict], cfg: dict, method: str) -> tuple[str | None, dict]:
    """(key, row) of the paper's single-dataset table (DPDD, RealDOF) that a configured method compares with.

    Tried in order: its paper_key, its registry name (MPT is 'mpt_efcr' in Table 1 but plain 'mpt' in
    Table 5), then the paper's unspecified 'dgno' row for a DGNO variant (Table 10 prints 'DGNO (Ours)').
    """
    model = cfg.get("model", method)
    keys = [paper_key(cfg, method), model.replace("-", "_")] + (["dgno"] if model.startswith("dgno-") else [])
    key = next((k for k in keys if k in rows), None)
    return key, (rows[key] if key else {})


def real_defocus_section(name: str, config: dict, summaries: pd.DataFrame, results: Path | None = None) -> Section:
    """DPDD / RealDOF: the configured methods measured beside the paper's rows ('not run' + command when absent)."""
    exp = config["experiments"][name]
    paper = load_paper(name)
    ds = exp["dataset"]
    dcfg = config["datasets"][ds]
    sec = empty_section(name, paper.get("source", ""))
    trained = dcfg.get("trained_on", ds)
    sec.notes.append(f"Dataset {ds}: the authors' test pairs, the camera's own blur (level 'real'); models trained on {trained}'s training split.")
    rows, used, paper_rows = paper.get("rows", {}), set(), {}
    for method in exp["methods"]:
        cfg = config["methods"][method]
        key, row = real_paper_row(rows, cfg, method)
        paper_rows[paper_key(cfg, method)] = row
        if key:
            used.add(key)
            if key == "dgno":
                sec.notes.append(f"{cfg.get('label', method)} is compared with the paper's '{row.get('label', key)}' row, which does not say Face or Cell.")
    unmatched = [r.get("label", k) for k, r in rows.items() if k not in used]
    if unmatched:
        sec.notes.append("Paper rows with no method in this run (not in the model registry or not configured): " + ", ".join(unmatched) + ".")
    return _one_dataset_table(sec, config, summaries, exp, paper, paper_rows, results)


def _ranges(photometry: dict) -> str:
    return ", ".join(f"{k} {v[0]:g}–{v[1]:g}" for k, v in photometry.items())


def robustness_section(name: str, config: dict, summaries: pd.DataFrame, results: Path | None = None) -> Section:
    """Each demo model on test images whose photometry lies outside its training range, beside the blurred input.

    The question is whether a model helps or harms on images unlike its training data (a demo-trained model
    applied to a real microscope's images): the gain over the blurred input is the number to read, in range
    and out of range, on the same blur levels.
    """
    exp = config["experiments"][name]
    ood = exp["dataset"]
    dcfg = config["datasets"][ood]
    trained = dcfg["trained_on"]
    levels = dcfg["test_levels"]
    sec = empty_section(name)
    train_ph, ood_ph = config["datasets"][trained]["photometry"], dcfg["photometry"]
    outside = [k for k in ood_ph if ood_ph[k][0] > train_ph[k][1] or ood_ph[k][1] < train_ph[k][0]]
    sec.notes.append(
        f"Models trained on {trained} (per-image photometry: {_ranges(train_ph)}; photons log-uniform). "
        f"Scored on {ood}: the same test scenes and blur levels ({', '.join(levels)}) with photometry "
        f"{_ranges({k: ood_ph[k] for k in outside})} — outside the training range in {', '.join(outside)}; the other keys as in training. "
        "Both sets are min-max normalised per image (the BBBC006 protocol) before scoring. "
        f"Rerun: snakemake --cores all results/tables/{name}.csv"
    )
    groups = [(f"in range: {trained}", trained), (f"out of range: {ood}", ood)]
    stats = read_stats(results / "tables" / f"{name}_stats.csv") if results is not None else None
    table = ShownTable(columns=[(g, m) for g, _ in groups for m in ("psnr", "psnr_gain_input")])
    below = []
    for method in ["input", *exp["methods"]]:
        cfg = config["methods"].get(method, {"model": "blur", "label": "Blurred input"})
        cells = []
        for _, ds in groups:
            measured, command = psnr_of(summaries, ds, method, levels)
            base, base_command = psnr_of(summaries, ds, "input", levels)
            gain = measured - base if measured is not None and base is not None else None
            cells.append(annotate(Cell(measured=measured, command=command), stats, ds, "psnr", method))
            cells.append(annotate(Cell(measured=gain, command=command or base_command), stats, ds, "psnr", method, versus="input") if method != "input" else Cell(measured=gain))
            if ds == ood and method != "input" and gain is not None and gain < 0:
                below.append(cfg.get("label", method))
        table.rows.append((cfg.get("label", method), cells))
    table.caption = f"PSNR (dB) averaged over {', '.join(levels)}, and its gain over the blurred input of the same set (negative: the model harms)."
    sec.tables.append(table)
    scored = [r for r in table.rows[1:] if r[1][3].measured is not None]
    if scored:
        sec.verdicts.append(
            f"{len(below)} of {len(scored)} models score below the blurred input out of range"
            + (f": {', '.join(below)}." if below else ".")
        )
    return sec
