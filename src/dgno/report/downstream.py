"""Report sections of the downstream checks: StarDist AP and the Seidel non-blind comparison."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dgno.experiments.nonblind_settings import deconv_params, noise_settings, true_coefficients
from dgno.io import read_json
from dgno.report.comparisons import table_spec
from dgno.report.reading import load_paper, paper_row, read_stats
from dgno.report.render import Cell, ShownTable, annotate, metric_table
from dgno.report.section import Section, empty_section, table_metrics

DECONV_ROWS = {
    "wiener": ("Wiener (centre PSF)", "single_psf_deconv"),
    "richardson_lucy": ("Richardson-Lucy (centre PSF)", "single_psf_deconv"),
    "ring": ("Ring deconvolution (fitted spatially varying PSFs)", "ring_deconv"),
}


def nonblind_section(name: str, config: dict, summaries: pd.DataFrame, results: Path) -> Section:
    """Blurred vs single-centre-PSF deconvolution vs ring deconvolution vs the blind network(s)."""
    exp = config["experiments"][name]
    ds = exp["dataset"]
    paper = load_paper(name)
    sec = empty_section(name, paper.get("source", ""))
    sec.notes.extend(nonblind_protocol(config, results))
    cfgs = {m: {**config["methods"][m], "model": "dgno" if config["methods"][m]["model"].startswith("dgno") else config["methods"][m]["model"]} for m in exp["methods"]}
    rows = list(exp.get("deconvolution", [])) + list(exp["methods"])
    for d in exp.get("deconvolution", []):
        cfgs[d] = {"model": DECONV_ROWS[d][1], "label": DECONV_ROWS[d][0]}
    levels = {ds: config["datasets"][ds]["test_levels"]}
    stats = read_stats(results / "tables" / f"{name}_stats.csv")
    sec.tables.append(
        metric_table(
            summaries, datasets=[ds], methods=rows, method_cfgs=cfgs, levels=levels, metrics=table_metrics(name),
            paper_rows=paper.get("rows", {}), stats=stats, deltas=table_spec(config, name)["versus"],
        )
    )  # fmt: skip
    sigmas = ", ".join(f"{v:g}" for v in exp.get("sensitivity_read_sigmas", []))
    sec.notes.append(f"Noise sensitivity figure: read-noise sigmas {sigmas}; blind networks {', '.join(exp['methods'])}.")
    return sec


def _setting(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def nonblind_protocol(config: dict, results: Path) -> list[str]:
    """The non-blind protocol in words, every number read from the config, the data manifest or the calibration JSON.

    Why: the table's numbers mean little without how the data were made (blur model, noise, calibration)
    and how each restoration was tuned; prose with typed-in numbers would drift from the config.
    """
    exp = config["experiments"]["nonblind"]
    ds = exp["dataset"]
    spec = config["datasets"][ds]
    seidel = spec.get("seidel", {})
    true = true_coefficients(seidel)
    noise = noise_settings(seidel)
    coeffs = ", ".join(f"{k} {v:g}" for k, v in true.as_dict().items())
    notes = [
        f"Blur model: the sharp images of {spec['base']} are blurred by brute-force superposition of the exact Seidel PSF "
        f"of every pixel (dgno.optics.superposition.seidel_superposition, mirror padding by the PSF radius) with the true coefficients "
        f"({coeffs} waves, {seidel.get('convention', 'dgno')} convention) - not by the ring operator or the fitted coefficients "
        "that the restorations use, so the data differ from every model by the calibration error, the ring model's "
        "approximation and the noise.",
        f"Noise: Poisson-Gaussian camera noise, {noise['photons']:g} photo-electrons at intensity 1 and read sigma "
        f"{noise['read_sigma']:g}, on every blurred image (training and test) and on the bead frames.",
    ]
    calib = results / "nonblind" / ds / "calibration.json"
    if calib.exists():
        c = read_json(calib)
        fitted = ", ".join(f"{k} {v:.3f}" for k, v in c["coeffs"].items())
        notes.append(
            f"Calibration: {c.get('n_images', '?')} noisy bead frames of {c['image_size'][0]} x {c['image_size'][1]} px made by the "
            f"same blur and noise; {c['fit'].get('n_beads', '?')} beads fitted with one shifted PSF each at the detected peak. "
            f"Fitted {fitted} waves; max |fitted - true| {c['error']['max_abs_error']:.3f} waves, max relative PSF error "
            f"{c['error']['psf_rel_error_max']:.3f} (W311 is not identifiable from beads and fitted as 0)."
        )
    else:
        notes.append(f"Calibration: not run yet (snakemake --cores all results/nonblind/{ds}/calibration.json).")
    manifest = results / "data" / ds / "manifest.json"
    if manifest.exists():
        level = read_json(manifest)["levels"].get("seidel", {})
        if "blur_seconds" in level:
            grids = ", ".join(f"{m} px for {shape} frames" for shape, m in level.get("psf_size", {}).items())
            notes.append(f"The brute-force blur of the {read_json(manifest)['n_images']} images took {level['blur_seconds']:.1f} s (PSF grid {grids}).")
    params = deconv_params(exp)
    w, rl, ring = params["wiener"], params["richardson_lucy"], params["ring"]

    def auto(value: object, per: object, floor: object) -> str:
        return f"max({_setting(floor)}, {_setting(per)} x sigma_hat)" if value == "auto" else _setting(value)

    notes.append(
        "Restorations (settings from experiments.nonblind; sigma_hat = each image's noise estimate, Haar-wavelet MAD): "
        f"Wiener with the centre PSF, balance {auto(w['balance'], w['balance_per_sigma'], w['balance_min'])}; "
        f"Richardson-Lucy with the centre PSF, {rl['iterations']} iterations; ring deconvolution with all fitted PSFs, "
        f"TV weight lambda {auto(ring['tv_weight'], ring['tv_weight_per_sigma'], ring['tv_weight_min'])}, {ring['iterations']} Adam steps of "
        f"initial size {_setting(ring['lr'])}; the blind networks ({', '.join(exp['methods'])}) are trained on {ds}'s noisy "
        "training images and never see a PSF. Both single-PSF rows are compared with the paper's single 'Deconvolution' row; "
        "the paper calibrated on real bead images, so its numbers are not the same experiment."
    )
    return notes


def stardist_section(name: str, config: dict, summaries: pd.DataFrame, results: Path) -> Section:
    """AP of StarDist on blurred / restored / sharp images, with the source of the StarDist model."""
    spec = config["experiments"][name]
    ds = spec["dataset"]
    paper = load_paper(name)
    sec = empty_section(name, paper.get("source", ""))
    path = results / "tables" / f"stardist_{ds}.csv"
    metrics = ["ap50", "ap70", "ap90", "map"]
    model_json = results / "stardist" / ds / "model.json"
    record = read_json(model_json) if model_json.exists() else {}
    chosen = record.get("kind") or {"pretrained": "pretrained", "train": "trained here"}[spec["model"]]
    # the segmentation model is named in the table's header: a StarDist trained here is not the published one
    stats = read_stats(results / "tables" / f"stardist_{ds}_stats.csv")
    table = ShownTable(columns=[(ds, m) for m in metrics] + [(ds, "Δ mean AP vs blurred")])
    table.title = f"Segmentation by StarDist {'2D_versatile_fluo (published)' if chosen == 'pretrained' else 'trained here on ' + ds + ' (not the published model)'}"
    labels = {m: config["methods"][m].get("label", m) for m in spec["methods"]}
    frame = pd.read_csv(path) if path.exists() else None
    cond_cfg = {"blurred": {"model": "blur"}, "sharp": {"model": "sharp"}, **{m: config["methods"][m] for m in spec["methods"]}}
    for cond in ["blurred", *spec["methods"], "sharp"]:
        prow = paper_row(paper.get("rows", {}), cond_cfg[cond], cond)
        row = frame[frame["condition"] == cond] if frame is not None else None
        cells = []
        for m in metrics:
            if row is None or row.empty:
                cells.append(Cell(measured=None, paper=prow.get(m), command=f"snakemake --cores all results/tables/stardist_{ds}.csv", digits=4))
            else:
                cells.append(annotate(Cell(measured=float(row[m].iloc[0]), paper=prow.get(m), digits=4), stats, ds, m, cond))
        gain = Cell(measured=None, digits=4)
        cells.append(annotate(gain, stats, ds, "map", cond, versus="blurred") if cond != "blurred" else gain)
        table.rows.append(({"blurred": "Blurred input", "sharp": "Sharp (GT image)"}.get(cond, labels.get(cond, cond)), cells))
    sec.tables.append(table)
    if stats is not None:
        sec.notes.append(
            "Δ mean AP vs blurred: AP pooled over images (ΣTP / Σ(TP+FP+FN)), restored minus blurred on the same images, with a "
            f"bootstrap interval over test images (results/tables/stardist_{ds}_per_image.csv); the highlight goes to a restoration "
            "only when its lead over every other restoration has an interval excluding 0."
        )
    if frame is not None and "model" in frame:
        sec.notes.append(f"StarDist model: {frame['model'].iloc[0]}. Ground truth: the dataset's instance label masks ({ds}, level {spec['level']}).")
    sec.notes.append("Measured: AP = TP/(TP+FP+FN) at IoU 0.5 / 0.7 / 0.9 (stardist.matching); mean AP = mean of the three.")
    off = stardist_mean_mismatches(paper.get("rows", {}))
    if off:
        sec.notes.append(
            "The paper's 'Mean AP' is shown as printed; for some rows it is not the mean of its three APs: "
            + "; ".join(f"{label} prints {printed:.4f}, mean of its APs {mean:.4f}" for label, printed, mean in off)
            + "."
        )
    return sec


def stardist_mean_mismatches(rows: dict[str, dict]) -> list[tuple[str, float, float]]:
    """(label, printed Mean AP, mean of the printed APs) for paper rows where the two differ by more than rounding."""
    out = []
    for key, row in rows.items():
        aps = [row.get(k) for k in ("ap50", "ap70", "ap90")]
        if row.get("map") is None or any(a is None for a in aps):
            continue
        mean = sum(aps) / 3
        if abs(mean - row["map"]) > 1e-4:  # 4 printed decimals: the APs and the mean each round by up to 5e-5
            out.append((row.get("label", key), float(row["map"]), mean))
    return out
