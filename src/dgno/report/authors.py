"""Report section "Reproduction from the authors' released weights": every paper number the authors' weights cover.

Why: the cheapest reproduction of the paper is the authors' released checkpoints scored on the
authors' own test images (target ``authors``). This module lists each number of the paper that
such a run measures — Table 1, Table 2's DGNO rows, the defocus-level tables, StarDist (Table 8)
and the ablation cells whose settings are those of the released networks — reads the measured
value beside it, and gives a verdict against the configured tolerance. Paper numbers come from
``paper_values.yaml`` only. With Gumbel repeats, their mean and sd stand beside the argmax value,
so a reader sees how much of a gap is the authors' inference noise.

:func:`write_table` (rule ``authors_table``) writes ``results/tables/authors.csv`` and a
JSON beside it (the jobs' time from their benchmark files, labelled by the device their results
record: "GPU time (NVIDIA ...)" or "CPU time"); :func:`authors_section` renders both, with how
the data were read from each dataset's manifest (pairing, hidden files skipped, plane rule and the
files each rule decided, the blur-order check, the Broad listing and mapping). A per-plane number of a
dataset whose planes are unverified is marked. Torch-free: it runs in the report environment.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from dgno import metric_spec
from dgno.io import read_json, write_csv, write_json
from dgno.report.reading import load_paper_values
from dgno.report.section import Section

TOLERANCE_KEY = {"psnr": "psnr", "ssim": "ssim", "lpips": "lpips", "ap50": "ap", "ap70": "ap", "ap90": "ap", "map": "ap"}
STARDIST_CONDITIONS = {"blur": "blurred", "sharp": "sharp"}  # paper row → condition of the StarDist CSV
COLUMNS = [
    "table", "row", "method", "dataset", "levels", "metric", "paper", "measured", "delta", "tolerance",
    "gumbel_mean", "gumbel_sd", "gumbel_n", "n_images", "test_set", "verdict", "caveat",
]  # fmt: skip
ARCHIVE_LEVELS = ("z02", "z06", "z10")  # the planes of the authors' archive, whose files' planes the preparation decides
TITLE = "Reproduction from the authors' released weights"  # the report section's, and the Snakemake report's category


# --------------------------------------------------------------------------------- which numbers


def _cell(table: str, row: str, method: str, dataset: str, levels: list[str], metric: str, paper: Any) -> dict:
    return {"table": table, "row": row, "method": method, "dataset": dataset, "levels": levels, "metric": metric, "paper": paper}


def _ablation_cells(tables: dict, key: str, method: str, ds: str, levels: list[str], network: dict) -> list[dict]:
    """Cells of the w1 ablation tables whose settings are the released network's (the same measurement as Table 1)."""
    variant, out = f"dgno_{network.get('variant', 'cell')}", []
    flux = tables["flux_boundary"]["rows"].get(network.get("flux_mode"), {}).get(variant, {}).get(network.get("boundary_type"))
    if flux is not None:
        out.append(_cell("flux_boundary", f"{network['flux_mode']} / {network['boundary_type']}", method, ds, levels, "psnr", flux))
    if network.get("learnable_tau", True):
        for metric, value in tables["penalty"]["rows"]["learnable"].get(variant, {}).items():
            out.append(_cell("penalty", "learnable τ", method, ds, levels, metric, value))
    if variant == "dgno_cell":  # the paper's element-size table is DGNO-Cell's; T = 2 in every released network
        value = tables["element_size_T"]["rows"].get(f"we_{network.get('win_dg', 8)}", {}).get("t2")
        if value is not None:
            out.append(_cell("element_size_T", f"W_e = {network.get('win_dg', 8)}, T = 2", method, ds, levels, "psnr", value))
    return out


def paper_cells(settings: dict) -> list[dict]:
    """Every paper number the reproduction measures: (table, row, method, dataset, levels, metric, paper value)."""
    tables = load_paper_values()
    cells = []
    for ds, info in settings["datasets"].items():
        col = info["paper_column"]
        for m in settings["methods"]:
            key = settings["paper_keys"][m]
            if ds not in settings["networks"][m]:
                continue  # this method has no checkpoint for this dataset
            main = tables["main"]["rows"].get(key, {}).get(col, {})
            cells += [_cell("main", key, m, ds, info["table_levels"], metric, v) for metric, v in main.items()]
            if col == "bbbc006_w1":
                ops = tables["operators"]["rows"].get(key, {})
                cells += [_cell("operators", key, m, ds, info["table_levels"], metric, ops[metric]) for metric in ("psnr", "ssim", "lpips") if metric in ops]
                cells += _ablation_cells(tables, key, m, ds, info["table_levels"], settings["networks"][m][ds])
            defocus = tables.get(f"defocus_{col.removeprefix('bbbc006_')}", {}) if col.startswith("bbbc006_") else {}
            for lvl, values in defocus.get("rows", {}).get(key, {}).items():
                if isinstance(values, dict) and lvl in info["test_levels"]:
                    cells += [_cell(f"defocus_{col.removeprefix('bbbc006_')}", key, m, ds, [lvl], metric, v) for metric, v in values.items()]
    sd = settings["stardist"]["dataset"]
    if sd:
        for row, values in tables["stardist"]["rows"].items():
            method = STARDIST_CONDITIONS.get(row) or next((m for m in settings["methods"] if settings["paper_keys"][m] == row and sd in settings["networks"][m]), None)
            if method is not None:
                cells += [_cell("stardist", row, method, sd, [settings["stardist"]["level"]], metric, v) for metric, v in values.items() if metric in TOLERANCE_KEY]
    return cells


# ------------------------------------------------------------------------------------- measuring


def _pooled(paths: list[Path], metric: str) -> tuple[float | None, int]:
    """Mean of `metric` over every image of the summaries (weighted by their image counts), and that count.

    RGB data (3DHistech) are scored as the authors did: 8-bit BT.601 luma PSNR (``psnr_y8``).
    """
    total, n = 0.0, 0
    for p in paths:
        s = read_json(p)
        value = s.get("psnr_y8") if metric == "psnr" and s.get("psnr_y8") is not None else s.get(metric)
        if value is None:
            return None, 0
        total += float(value) * s["n_images"]
        n += s["n_images"]
    return (total / n if n else None), n


def _measure(cell: dict, results: Path, repeats: int) -> dict:
    """The measured value of one cell (argmax evaluation), its Gumbel repeats' mean and sd, and the image count."""
    if cell["table"] == "stardist":
        csv = results / "authors" / f"stardist_{cell['dataset']}.csv"
        frame = pd.read_csv(csv) if csv.exists() else pd.DataFrame()
        row = frame[frame["condition"] == cell["method"]] if len(frame) else frame
        if not len(row):
            return {"measured": None, "n_images": 0}
        return {"measured": float(row.iloc[0][cell["metric"]]), "n_images": int(row.iloc[0]["n_images"])}
    base = results / "eval" / cell["dataset"] / cell["method"]
    paths = [base / lvl / "summary.json" for lvl in cell["levels"]]
    if not all(p.exists() for p in paths):
        return {"measured": None, "n_images": 0}
    measured, n = _pooled(paths, cell["metric"])
    runs = [_pooled([base / lvl / "gumbel" / f"r{r}" / "summary.json" for lvl in cell["levels"]], cell["metric"])[0] for r in range(1, repeats + 1)]
    runs = [v for v in runs if v is not None]
    mean = sum(runs) / len(runs) if runs else None
    sd = math.sqrt(sum((v - mean) ** 2 for v in runs) / (len(runs) - 1)) if len(runs) > 1 else None
    return {"measured": measured, "n_images": n, "gumbel_mean": mean, "gumbel_sd": sd, "gumbel_n": len(runs)}


def verdict(measured: float | None, paper: float, tolerance: float, metric: str) -> str:
    """'reproduced' within the tolerance, else 'not reproduced' with the size of the gap."""
    if measured is None:
        return "not measured"
    delta, unit, d = measured - paper, metric_spec.unit(metric), metric_spec.digits(metric)
    if abs(delta) <= tolerance + 1e-9:  # a gap of exactly the tolerance is within it (not lost to float rounding)
        return f"reproduced (|Δ| ≤ {tolerance:g}{unit})"
    times = f", {abs(delta) / tolerance:.1f}× the tolerance" if tolerance > 0 else ""
    return f"not reproduced: Δ = {delta:+.{d}f}{unit}{times}"


def test_set_note(manifest: dict | None, levels: list[str]) -> str:
    """Which test images a cell was measured on, from the dataset's manifest."""
    if manifest is None:
        return "unknown (no manifest)"
    fallback = [lvl for lvl in levels if lvl in manifest.get("test_sets", {})]
    if fallback:
        return f"by-well split for {', '.join(fallback)} (not the authors' test images: {manifest['test_sets'][fallback[0]]['note']})"
    if manifest.get("generator") == "dgno.data.bbbc006_authors.prepare_dataset":
        return "the authors' own test images (their BBBC006.tar.gz test/ split)"
    if "split" in manifest and "well" in str(manifest["split"].get("unit", "")):
        return "this project's by-well split (not the authors' test images; the released models may have been trained on some)"
    return "the dataset's published test split"


def plane_caveat(manifest: dict | None, levels: list[str]) -> str:
    """Why a per-plane number (one archive plane, not the pooled z02+z06+z10) may be of another plane, or ''."""
    planes = (manifest or {}).get("planes", {})
    check = planes.get("check", {})
    if len(levels) != 1 or levels[0] not in ARCHIVE_LEVELS or not check:
        return ""
    if check.get("status") == "failed":
        share = check.get("share_out_of_order") or 0.0
        return (
            f"per-plane value: the blur-order check failed ({len(check.get('out_of_order', []))} of {check.get('independent_fields')} fields, {share:.0%}, "
            f"out of order under plane rule {planes.get('rule')!r}); some files of {levels[0]} may be of another plane"
        )
    if check.get("status") == "not independent" or planes.get("decided_by", {}).get("sharpness"):
        return f"per-plane value: the {levels[0]} files of some or all fields were assigned by sharpness; the order check is then not independent"
    return ""


def build_table(settings: dict, results: str | Path) -> pd.DataFrame:
    """One row per paper number the reproduction covers (:data:`COLUMNS`)."""
    results = Path(results)
    manifests = {ds: (read_json(p) if (p := results / "data" / ds / "manifest.json").exists() else None) for ds in settings["datasets"]}
    rows = []
    for cell in paper_cells(settings):
        info = settings["datasets"][cell["dataset"]]
        tol = settings["tolerances"][TOLERANCE_KEY[cell["metric"]]]
        if not info["placed"]:
            got, note = {"measured": None}, f"not run: {info['source']} was not placed by hand in {info['path']}"
        else:
            got, note = _measure(cell, results, settings["gumbel_repeats"]), test_set_note(manifests.get(cell["dataset"]), cell["levels"])
        measured = got.get("measured")
        rows.append({
            **cell,
            "levels": "+".join(cell["levels"]),
            "measured": measured,
            "delta": None if measured is None else measured - cell["paper"],
            "tolerance": tol,
            "gumbel_mean": got.get("gumbel_mean"),
            "gumbel_sd": got.get("gumbel_sd"),
            "gumbel_n": got.get("gumbel_n", 0),
            "n_images": got.get("n_images", 0),
            "test_set": note,
            "verdict": verdict(measured, cell["paper"], tol, cell["metric"]) if info["placed"] else "not run",
            "caveat": plane_caveat(manifests.get(cell["dataset"]), cell["levels"]),
        })  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def _result_of(rel: str, root: Path) -> Path | None:
    """The summary a benchmarked job wrote (it records the device): evaluate and evaluate_gumbel jobs only."""
    m = re.fullmatch(r"results/benchmarks/(evaluate|evaluate_gumbel)/(.+)\.tsv", rel)
    if m is None:
        return None
    base = root / "results" / "eval" / m.group(2)
    return base / "summary.json" if m.group(1) == "evaluate" else base / "gumbel" / "summary.json"


def job_device(summary: Path | None) -> str:
    """'cuda: <GPU model>', 'cuda', 'cpu' or 'unknown': the device a job's results record."""
    if summary is None or not summary.exists():
        return "unknown"
    s = read_json(summary)
    recorded = str(s.get("provenance", {}).get("device", ""))
    runtime = str(s.get("runtime", {}).get("device", "")) or next(
        (str(read_json(r).get("runtime", {}).get("device", "")) for r in sorted(summary.parent.glob("r*/summary.json"))), ""
    )
    if recorded.startswith("cuda"):
        return recorded
    if runtime.startswith("cuda"):
        return "cuda"  # an older summary: the GPU's model was not recorded
    return "cpu" if recorded.startswith("cpu") or runtime.startswith("cpu") else "unknown"


def job_time(settings: dict, root: str | Path = ".") -> dict:
    """Wall-clock seconds of the target's evaluation jobs (argmax and Gumbel repeats), by the device they ran on, and of StarDist."""
    out: dict[str, Any] = {"seconds": 0.0, "jobs": 0, "devices": {}, "stardist_seconds": 0.0, "missing": []}
    root = Path(root)
    for rel in settings["benchmarks"]:
        path = root / rel
        if not path.exists():
            out["missing"].append(rel)
            continue
        seconds = float(pd.read_csv(path, sep="\t")["s"].mean())
        if "/stardist_authors/" in rel:
            out["stardist_seconds"] += seconds
            continue
        out["seconds"] += seconds
        out["jobs"] += 1
        device = job_device(_result_of(rel, root))
        out["devices"][device] = out["devices"].get(device, 0) + 1
    return out


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        return device.removeprefix("cuda").lstrip(": ") or "GPU model not recorded"
    return "the CPU" if device == "cpu" else "an unrecorded device"


def time_label(devices: dict[str, int]) -> str:
    """'GPU time (NVIDIA H100 ...)', 'CPU time', or what the jobs ran on when they differ: from the devices the results record."""
    kinds = {"gpu" if d.startswith("cuda") else d for d in devices}
    if kinds == {"gpu"}:
        return f"GPU time ({', '.join(sorted(_device_name(d) for d in devices))})"
    if kinds == {"cpu"}:
        return "CPU time"
    if kinds <= {"unknown"}:
        return "Time (device not recorded)"
    return "Time (" + "; ".join(f"{n} job(s) on {_device_name(d)}" for d, n in sorted(devices.items())) + ")"


def write_table(settings: dict, results: str | Path, out_csv: str | Path) -> pd.DataFrame:
    """Rule ``authors_table``: the CSV, and beside it a JSON with the jobs' time (and devices) and the settings."""
    frame = build_table(settings, results)
    write_csv(out_csv, frame)
    results_root = Path(results).resolve().parent
    write_json(Path(out_csv).with_suffix(".json"), {"settings": settings, "time": job_time(settings, results_root)})
    return frame


# ---------------------------------------------------------------------------------------- section


def _table_label(tables: dict, table: str) -> str:
    source = tables.get(table, {}).get("source", table)
    return source.split(" (")[0]


def _fmt(value: Any, digits: int) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _gumbel(row: pd.Series, digits: int) -> str:
    if not row["gumbel_n"]:
        return "—"
    sd = "" if pd.isna(row["gumbel_sd"]) else f" ± {row['gumbel_sd']:.{digits + 1}f}"
    return f"{row['gumbel_mean']:.{digits}f}{sd} (n = {int(row['gumbel_n'])})"


def _time_note(meta: dict) -> str:
    t = meta.get("time", {})
    if not t:
        return "Time of this target: not recorded."
    label = time_label(t.get("devices", {}))
    text = (
        f"{label} of this target: {t['seconds'] / 60:.1f} min over {t['jobs']} job(s) (evaluations and Gumbel repeats; the sum of the "
        f"wall-clock seconds in their Snakemake benchmark files, results/benchmarks/evaluate*/; the device from each job's summary.json); "
        f"StarDist (its environment holds TensorFlow's CPU build): {t['stardist_seconds'] / 60:.1f} min. Downloads, imports and data preparation are not counted."
    )
    if t.get("missing"):
        text += f" {len(t['missing'])} benchmark file(s) missing (jobs run outside this workflow), e.g. {t['missing'][0]}."
    return text


def _pairing_text(p: dict) -> str:
    files = p.get("files", {})
    hidden = p.get("hidden_files_skipped", {}) or {}
    n_hidden = sum(hidden.values())
    text = f"{p.get('fields', '?')} fields, {files.get('GT', '?')} GT + {files.get('blur', '?')} blur files; {p.get('verified', '')}"
    text += f"; {n_hidden} hidden file(s) skipped (macOS ._* forks, dot-files: never images" + (f": {', '.join(f'{k} {v}' for k, v in hidden.items() if v)})" if n_hidden else ")")
    if p.get("ignored_files"):
        text += f"; {p['ignored_files']} .tif file(s) of neither channel by the authors' rule"
    if p.get("authors_order_agrees") is False:
        text += "; the authors' sorted pairing differs from the pairing by field (their script would pair some files with another field's GT)"
    return text


def _rule_text(planes: dict) -> str:
    decided = planes.get("decided_by", {})
    total = sum(decided.values()) or 1
    by = ", ".join(f"{rule} {n} ({n / total:.0%})" for rule, n in decided.items())
    return f"asked: {planes.get('requested', planes.get('rule'))}; files decided by: {by or 'not recorded'}. {planes.get('description', '')}"


def _check_text(check: dict) -> str:
    medians = ", ".join(f"{lvl} {v:.3g}" for lvl, v in check.get("median_sharpness", {}).items())
    share = check.get("share_out_of_order")
    independent = "yes" if check.get("independent") else f"no ({check.get('independent_fields', 0)} of {check.get('fields', 0)} fields checked)"
    text = f"{check.get('status', '?')}: expected {check.get('expected', '')}; median sharpness {medians}; "
    text += f"{'—' if share is None else f'{share:.0%}'} of the checked fields out of order (allowed {check.get('max_out_of_order', 0):.0%}); independent: {independent}"
    return text + (f". {check['note']}" if not check.get("independent") and check.get("note") else "")


def _listing_text(listing: dict | None) -> str:
    if not listing:
        return "not read (plane rule without the Broad listing)"
    parts = []
    for lvl, p in listing.get("planes", {}).items():
        if p.get("status") != "listed":
            parts.append(f"{lvl}: unavailable ({p.get('reason', '')})")
            continue
        cost = f", {p['requests']} request(s), {p['bytes_read'] / 1024:.0f} KiB of {p['archive_bytes'] / 2**20:.1f} MiB" if "bytes_read" in p else ""
        parts.append(f"{lvl}: {p.get('names', 0)} names from {p.get('source', '?')}{cost}")
    return f"{listing.get('status')}: " + "; ".join(parts)


def data_reading(manifest: dict) -> list[list[str]]:
    """How the preparation read the authors' archive (rows of [what, how]), from a dataset's manifest."""
    planes, broad = manifest.get("planes", {}), manifest.get("broad", {})
    rows = [["pairing", _pairing_text(manifest.get("pairing", {}))], ["plane rule", _rule_text(planes)]]
    rows.append(["blur-order check", _check_text(planes.get("check", {}))])
    rows.append(["Broad listing (z02/z06/z10)", _listing_text(planes.get("broad_listing"))])
    same = broad.get("gt_identical_to_broad_z16")
    rows.append(["Broad mapping (unseen levels, labels)", f"{broad.get('status', '?')}: {broad.get('description', '')}" + (f"; archive GT identical to Broad z16 in {same[0]} of {same[1]} fields" if same else "")])
    return rows


def authors_section(config: dict, results: str | Path) -> Section:
    """The section: verdict table, tolerances, test images, GPU time, and "not run" datasets with their steps."""
    results = Path(results)
    sec = Section(id="authors", title=TITLE, paper_source="Tables 1, 2, 3, 7, 8, 9, 12, 13 (the cells the released networks cover)")
    csv = results / "tables" / "authors.csv"
    if not csv.exists():
        sec.notes.append("Not run. Command: snakemake --profile slurm authors (or, on one GPU: snakemake --cores all --configfile config/paper.yaml authors).")
        return sec
    frame = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    meta = read_json(csv.with_suffix(".json")) if csv.with_suffix(".json").exists() else {}
    st = meta.get("settings", {})
    measured = frame[frame["measured"].notna()]
    ok = measured["verdict"].str.startswith("reproduced").sum()
    sec.verdicts.append(f"{ok} of {len(measured)} measured paper numbers reproduced within the tolerance; {len(frame) - len(measured)} not measured.")
    sec.notes.append(
        "Each number of the paper that the authors' released checkpoints cover, measured by this pipeline with those checkpoints (imported with "
        "dgno import-authors, nothing trained), beside the paper's value (src/dgno/report/paper_values.yaml). Tolerances (config authors.tolerances): "
        + ", ".join(f"{k} {v:g}" for k, v in st.get("tolerances", {}).items()) + "."
    )
    sets = sorted(set(measured["test_set"]))
    sec.notes.append("Test images (from each dataset's manifest; per cell in column 'test images'): " + ("; ".join(sets) if sets else "none measured yet") + ".")
    sec.notes.append(
        f"Measured: routing {st.get('routing', 'argmax')} (this project's default: deterministic argmax). Gumbel: the authors' stochastic routing, "
        f"{st.get('gumbel_repeats', 0)} seeded repeats (evaluate.gumbel_repeats), mean ± sd over the repeats of the pooled metric: how much of a gap is inference noise."
    )
    if (frame["table"] == "stardist").any():
        sec.notes.append(
            "StarDist 'map' here is the mean of AP at IoU 0.5, 0.7 and 0.9; the paper's 'Mean AP' is not that mean (see its notes in paper_values.yaml), "
            "so that column compares like with unlike. Rows blur and sharp are the blurred input and the in-focus image, segmented the same way."
        )
    for ds, info in st.get("datasets", {}).items():
        if not info.get("placed", True):
            sec.notes.append(
                f"{ds}: not run — its files are not in {info['path']} (datasets.{ds}.path; no public download). Place them there "
                f"(`dgno data check {info['source']} --root {info['path']}` prints the steps), then run the same command again: the target picks them up."
            )
    sec.notes.append(_time_note(meta))
    reading = []
    for ds in st.get("datasets", {}):
        path = results / "data" / ds / "manifest.json"
        manifest = read_json(path) if path.exists() else {}
        if "planes" in manifest:
            reading += [[ds, *row] for row in data_reading(manifest)]
            sec.notes += [f"{ds}: warning: {w}" for w in manifest.get("warnings", [])]
    if "caveat" in frame and frame["caveat"].notna().any():  # read with "" as missing
        sec.notes.append("A per-plane number (one of z02, z06, z10, not their pooled mean) is marked in its verdict when that plane's files are unverified; the pooled numbers do not depend on which file is which plane.")
    head = ["paper table", "row", "method", "dataset", "levels", "metric", "paper", "measured", "Δ", "Gumbel mean ± sd", "verdict", "test images"]
    body, tables = [], load_paper_values()  # parsed once: the YAML takes about a second
    for _, r in frame.iterrows():
        d = metric_spec.digits(r["metric"])
        delta = "—" if pd.isna(r["delta"]) else f"{r['delta']:+.{d}f}"
        body.append([_table_label(tables, r["table"]), str(r["row"]), str(r["method"]), str(r["dataset"]), str(r["levels"]), str(r["metric"]),
                     _fmt(r["paper"], d), _fmt(r["measured"], d), delta, _gumbel(r, d), _verdict_cell(r), str(r["test_set"])])  # fmt: skip
    sec.text_tables.append((head, body))
    if reading:
        sec.text_tables.append((["dataset", "how the data were read", "from the manifest"], reading))
    return sec


def _verdict_cell(row: pd.Series) -> str:
    caveat = row.get("caveat")
    return str(row["verdict"]) + (f" ({caveat})" if isinstance(caveat, str) and caveat else "")
