"""Report sections on the operators: GG vs LG vs DGNO (with edge band, effective rank, operator maps) and LAM."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dgno.experiments.catalogue import table_levels
from dgno.report.comparisons import table_spec
from dgno.report.cost_section import cost_table
from dgno.report.reading import load_paper, paper_key, paper_row, read_stats
from dgno.report.render import Cell, ShownTable, annotate, metric_table, stat_row
from dgno.report.section import Section, catalogue_figure, empty_section, table_metrics


def edge_band_values(results: Path, dataset: str) -> dict[tuple[str, str, str], float]:
    """(method, dataset, psnr_edge|psnr_interior) → PSNR averaged over the dataset's test levels."""
    path = results / "tables" / f"edge_band_{dataset}.csv"
    if not path.exists():
        return {}
    df = pd.read_csv(path)
    out = {}
    for (method, region), sub in df.groupby(["method", "region"]):
        if region in ("edge", "interior"):
            out[(method, dataset, f"psnr_{region}")] = float(sub["psnr"].mean())
    return out


def edge_band_gains(
    band: dict[tuple[str, str, str], float], dataset: str, methods: list[str], method_cfgs: dict[str, dict], gg: str | None
) -> tuple[dict[tuple[str, str, str], float], dict[str, dict]]:
    """(measured DG − GG edge/interior gains keyed like ``band``, the paper's gains as rows per DG method)."""
    paper = load_paper("edge_band").get("rows", {}).get("dg_minus_gg", {})
    gains: dict[tuple[str, str, str], float] = {}
    paper_rows: dict[str, dict] = {}
    for m in methods:
        if not method_cfgs[m]["model"].startswith("dgno"):
            continue
        paper_rows[paper_key(method_cfgs[m], m)] = {k: paper.get(k) for k in ("psnr_edge_gain", "psnr_interior_gain")}
        for region in ("edge", "interior"):
            mine, base = band.get((m, dataset, f"psnr_{region}")), band.get((gg, dataset, f"psnr_{region}"))
            if gg and mine is not None and base is not None:
                gains[(m, dataset, f"psnr_{region}_gain")] = mine - base
    return gains, paper_rows


def edge_band_caption(results: Path) -> str:
    note = results / "tables" / "edge_band_definition.txt"
    return note.read_text().strip() if note.exists() else "Edge band: see dgno.metrics.edge_band_mask."


def gain_verdict(
    summaries: pd.DataFrame, dataset: str, a: str, b: str, labels: dict[str, str], paper_gain: float | None, levels: list[str], stats: pd.DataFrame | None = None
) -> str | None:
    """'DGNO-Cell vs GG on X: +0.42 dB [+0.10, +0.71] … — better', or None if either misses a level.

    Both means are over the same `levels`: a method also evaluated elsewhere (unseen defocus
    levels) must not be compared on a different set of images. With the table's statistics the word
    follows the paired interval (better / worse only when it excludes 0); without, it says no interval.
    """
    on = summaries[(summaries.dataset == dataset) & summaries.level.isin(levels)]
    pa, pb = on[on.method == a], on[on.method == b]
    if set(pa.level) != set(levels) or set(pb.level) != set(levels):
        return None
    gain = float(pa["psnr"].mean() - pb["psnr"].mean())
    paper = f" (paper: {paper_gain:+.2f} dB)" if paper_gain is not None else ""
    row = stat_row(stats, dataset, "psnr", a, versus=b)
    low, high = (row["low"], row["high"]) if row else (float("nan"), float("nan"))
    if row is None or not (np.isfinite(low) and np.isfinite(high)):
        return f"{labels[a]} vs {labels[b]} on {dataset}: {gain:+.2f} dB PSNR in this run (no interval: {'fewer than 6 images' if row else 'no per-image statistics'}){paper}."
    gain = float(row["estimate"])
    seeds = f" × {int(row['n_seeds'])} seeds" if int(row["n_seeds"]) > 1 else ""
    word = f"{labels[a]} better" if low > 0 else f"{labels[a]} worse" if high < 0 else "not resolved (the interval contains 0)"
    return (
        f"{labels[a]} vs {labels[b]} on {dataset}: {gain:+.2f} dB PSNR [{low:+.2f}, {high:+.2f}] "
        f"({row['confidence']:.0%} interval, {int(row['n_images'])} images{seeds}) — {word} in this run{paper}."
    )


def rank_table(results: Path, dataset: str, labels: dict[str, str]) -> ShownTable | None:
    """Effective rank (and utilisation) of each latent (scale, t) per method, from effective_rank_<dataset>.csv."""
    path = results / "tables" / f"effective_rank_{dataset}.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path)
    keys = list(dict.fromkeys(zip(df["scale"], df["t"], df["channels"])))
    table = ShownTable(columns=[(f"{s} t={t} (d={c})", m) for s, t, c in keys for m in ("r_eff", "r_eff/d")])
    for method in dict.fromkeys(df["method"]):
        sub = df[df["method"] == method].set_index(["scale", "t", "channels"])
        cells = []
        for (s, t, c), (_, metric) in zip([k for k in keys for _ in range(2)], table.columns):
            col = "erank" if metric == "r_eff" else "utilization"
            value = float(sub.loc[(s, t, c), col]) if (s, t, c) in sub.index else None
            cells.append(Cell(measured=value, digits=2 if col == "erank" else 3))
        table.rows.append((labels.get(method, method), cells))
    level = df["level"].iloc[0] if "level" in df else "?"
    table.caption = (
        f"Effective rank r_eff = exp(−Σ p_i log p_i), p_i = σ_i / Σ_j σ_j, of the (tokens × channels) matrix of the latent z after "
        f"operator layer t at scale s1 (1/4), s2 (1/2), s3 (1); utilisation r_eff/d with d channels. Mean over "
        f"{int(df['n_images'].iloc[0])} blurred test images of {dataset}, level {level}; file results/tables/effective_rank_{dataset}.csv."
    )
    return table


def rank_verdict(results: Path, dataset: str, labels: dict[str, str], method_cfgs: dict[str, dict]) -> str | None:
    """The paper's claim (DG keeps a higher effective rank than GG at every scale and t), checked on this run."""
    path = results / "tables" / f"effective_rank_{dataset}.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path)
    methods = list(dict.fromkeys(df["method"]))
    gg = next((m for m in methods if method_cfgs.get(m, {}).get("model") == "gg"), None)
    if gg is None:
        return None
    base = df[df["method"] == gg].set_index(["scale", "t"])["erank"]
    parts = []
    for m in methods:
        if not method_cfgs.get(m, {}).get("model", "").startswith("dgno"):
            continue
        mine = df[df["method"] == m].set_index(["scale", "t"])["erank"].reindex(base.index)
        parts.append(f"{labels.get(m, m)} > {labels.get(gg, gg)} at {int((mine > base).sum())} of {len(base)} latents")
    if not parts:
        return None
    return "Effective rank in this run: " + "; ".join(parts) + " (paper: DGNO-Face higher than GG at every scale and step)."


def operator_maps_caption(results: Path, dataset: str) -> str:
    """Caption of the learned-operator figure: what each column is, plus the measured interface-energy ratios."""
    text = (
        "Learned operators on one blurred test image (finest decoder scale, first and last operator step t): (a) blurred input; "
        "(b) the 3 most spatially varying channels of Q, the dynamic basis; (c) ‖Q(KᵀV)‖, the volume latent of each element "
        "(whole image for GG); (d) ‖flux term Q·ΣK^flux‖ with the element grid; (e) restored (paper: fig. qualitative)"
    )
    path = results / "tables" / f"operator_maps_{dataset}.csv"
    if not path.exists():
        return text
    df = pd.read_csv(path)
    parts = []
    for label, sub in df.dropna(subset=["flux_interface_ratio"]).sort_values("t", kind="stable").groupby("label", sort=False):
        parts.append(f"{label} " + " → ".join(f"×{r:.2f} (t={int(t)})" for t, r in zip(sub["t"], sub["flux_interface_ratio"])))
    summary = "; ".join(parts)
    if summary:
        n = int(df["n_images"].max())
        text += f". Flux energy within 1 px of element interfaces ÷ elsewhere (1 = no concentration), mean over {n} test images: {summary} (paper: flux responses concentrate at element interfaces)"
    return text


def _gain_verdicts(
    summaries: pd.DataFrame, ds: str, methods: list[str], mcfg: dict, gg: str | None, labels: dict, prows: dict, levels: list[str], stats: pd.DataFrame | None = None
) -> list[str]:
    """The verdict on each DG variant's (and LG's) PSNR gain over GG, beside the paper's gain where it prints both."""
    verdicts = []
    for m in methods:
        if gg and m != gg and (mcfg[m]["model"].startswith("dgno") or mcfg[m]["model"] == "lg"):
            pg = None
            pm, pgg = paper_row(prows, mcfg[m], m), paper_row(prows, mcfg[gg], gg)
            if pm.get("psnr") is not None and pgg.get("psnr") is not None:
                pg = pm["psnr"] - pgg["psnr"]
            v = gain_verdict(summaries, ds, m, gg, labels, pg, levels, stats)
            if v:
                verdicts.append(v)
    return verdicts


def annotate_gains(table: ShownTable, stats: pd.DataFrame | None, dataset: str, methods: list[str], gg: str | None, gain_columns: dict[str, str]) -> None:
    """Edge-band gain cells get their interval (and the estimate of the statistics: PSNR pooled over images
    and levels) from the edge-band rule's statistics; gain_columns: {gain metric: the region metric}."""
    if stats is None or gg is None:
        return
    cols = {metric: j for j, (ds, metric) in enumerate(table.columns) if ds == dataset and metric in gain_columns}
    for method, (_, cells) in zip(["input", *methods], table.rows):
        for metric, j in cols.items():
            row = stat_row(stats, dataset, gain_columns[metric], method, versus=gg)
            if row is not None and method not in (gg, "input"):
                cells[j].measured = float(row["estimate"])
                annotate(cells[j], stats, dataset, gain_columns[metric], method, versus=gg)


def edge_band_table(
    summaries: pd.DataFrame, results: Path, ds: str, methods: list[str], mcfg: dict, levels: dict, gg: str | None, extra: dict
) -> ShownTable:
    """Edge-band and interior PSNR of each method and each DG variant's gain over GG on the same pixels,
    with the edge-band rule's statistics (highlight, sd over seeds, the gains' intervals)."""
    stats = read_stats(results / "tables" / f"edge_band_{ds}_stats.csv")
    gains, paper_gains = edge_band_gains(extra, ds, methods, mcfg, gg)
    t = metric_table(
        summaries,
        datasets=[ds],
        methods=methods,
        method_cfgs=mcfg,
        levels=levels,
        metrics=["psnr_edge", "psnr_interior", "psnr_edge_gain", "psnr_interior_gain"],
        paper_rows=paper_gains,
        extra={**extra, **gains},
        stats=stats,
    )
    annotate_gains(t, stats, ds, methods, gg, {"psnr_edge_gain": "psnr_edge", "psnr_interior_gain": "psnr_interior"})
    t.caption = (
        edge_band_caption(results) + " Gains: each DG variant minus GG on the same pixels, PSNR pooled over the test images and levels, "
        "with a bootstrap interval over images (and seeds); the paper's gains (+0.49 / +0.77 dB, DG variant not stated) below the measured ones."
    )
    return t


def operators_section(name: str, config: dict, summaries: pd.DataFrame, results: Path) -> Section:
    """GG vs LG vs DGNO: metrics, edge-band gains, cost, effective rank and operator maps, with verdicts."""
    exp = config["experiments"][name]
    ds, methods = exp["dataset"], exp["methods"]
    mcfg = config["methods"]
    paper = load_paper(name)
    levels = {ds: table_levels(config, ds)}
    sec = empty_section(name, paper.get("source", ""))
    seeds = int(exp.get("seeds", 1))
    sec.notes.append(
        f"Dataset {ds} ({config['datasets'][ds]['source']}), test levels {', '.join(levels[ds])}; metrics are means over test images, then over levels"
        + (f", then over {seeds} training seeds (± sd over seeds)." if seeds > 1 else ".")
    )
    labels = {m: mcfg[m].get("label", m) for m in methods}
    gg = next((m for m in methods if mcfg[m]["model"] == "gg"), None)
    prows = paper.get("rows", {})
    stats = read_stats(results / "tables" / f"{name}_stats.csv")
    sec.verdicts += _gain_verdicts(summaries, ds, methods, mcfg, gg, labels, prows, levels[ds], stats)
    extra = edge_band_values(results, ds)
    sec.tables.append(
        metric_table(
            summaries, datasets=[ds], methods=methods, method_cfgs=mcfg, levels=levels, metrics=table_metrics(name),
            paper_rows=prows, stats=stats, deltas=table_spec(config, name)["versus"],
        )
    )  # fmt: skip
    if extra:
        sec.tables.append(edge_band_table(summaries, results, ds, methods, mcfg, levels, gg, extra))
    cost = cost_table(results, methods, mcfg, prows)
    if cost is not None:
        sec.tables.append(cost)
    ranks = rank_table(results, ds, labels)
    if ranks is not None:
        sec.tables.append(ranks)
    verdict = rank_verdict(results, ds, labels, mcfg)
    if verdict:
        sec.verdicts.append(verdict)
    if any(mcfg[m]["model"] in ("gg", "lg", "dgno-face", "dgno-cell") for m in methods):
        sec.figures.append(catalogue_figure(results, "effective_rank", ds))
        sec.figures.append(catalogue_figure(results, "operator_maps", ds, title=operator_maps_caption(results, ds)))
    return sec


def lam_section(name: str, config: dict, summaries: pd.DataFrame, results: Path) -> Section:
    """Local attribution maps: the figure, DI / r₅₀ per method and the paper's (qualitative) claim checked."""
    exp = config["experiments"][name]
    ds = exp["dataset"]
    mcfg = config["methods"]
    sec = empty_section(name, "Figure 'LAM-based interpretability and defocus deblurring results on BBBC006' (fig:e4)")
    sec.notes.append(
        f"Dataset {ds}: which input pixels each network uses to restore one {exp['window']}-px output window of one test image. "
        "The paper shows the maps only (no numbers), so this section compares the methods with each other, not with the paper."
    )
    path = results / "tables" / f"lam_{ds}.csv"
    if path.exists():
        df = pd.read_csv(path)
        table = ShownTable(columns=[("this image", "di"), ("this image", "r50_px"), ("this image", "psnr")])
        for _, r in df.iterrows():
            table.rows.append((r["label"], [Cell(measured=float(r["di"]), digits=1), Cell(measured=float(r["r50_px"]), digits=1), Cell(measured=float(r["psnr"]))]))
        r0 = df.iloc[0]
        table.caption = (
            f"Test image {r0['image']} (level {r0['level']}, analysed region {r0['crop']} px), window at (y, x) = ({r0['window_y0']}, {r0['window_x0']}); "
            "DI = (1 − Gini) × 100 of |LAM| (higher = the network draws on more of the image); r₅₀ = radius about the window centre holding "
            f"half of the attribution; PSNR of the restored region. File results/tables/lam_{ds}.csv."
        )
        sec.tables.append(table)
        dg = df[[mcfg[m]["model"].startswith("dgno") for m in df["method"]]]
        others = df[[not mcfg[m]["model"].startswith("dgno") for m in df["method"]]]
        for _, d in dg.iterrows():
            if others.empty:
                continue
            wider = others[others["r50_px"] > d["r50_px"]]["label"].tolist()
            sec.verdicts.append(
                f"Paper: DGNO's attributions are more localised than those of the other networks. Measured: {d['label']} has r₅₀ = "
                f"{d['r50_px']:.1f} px, smaller than {len(wider)} of {len(others)} other methods"
                + (f" ({', '.join(wider)})" if wider else "")
                + f"; its DI is {d['di']:.1f} (others {', '.join(f'{lab} {v:.1f}' for lab, v in zip(others['label'], others['di']))}). One image and one window: an illustration, not a statistic."
            )
    sec.figures.append(catalogue_figure(results, "lam", ds))
    return sec
