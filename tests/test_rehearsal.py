"""Rehearsal of the whole paper DAG: config/paper.yaml end to end on a real single-node SLURM, offline.

`make rehearsal` (or `pytest -m rehearsal tests/test_rehearsal.py`). Deselected from the default
`pytest` run (pyproject addopts) because it takes minutes. What stands in for the outside world:

- every download (the authors' BBBC006 archive, the Broad planes and labels of its fields, DPDD, RealDOF,
  the six released checkpoints at toy size) comes from a loopback server (tests/fixtures_http.py), with
  miniature archives of the real layouts (tests/bbbc006_replica.py, tests/fixtures_authors.py);
- 3DHistech, which is placed by hand (no public download), is a tiny folder in its layout;
- StarDist's published model, downloaded from GitHub at run time, is replaced by a tiny StarDist
  trained here for one step and named through DGNO_STARDIST_PRETRAINED_DIR (the offline copy switch).

tests/rehearsal.yaml shrinks sizes and iterations and keeps one point per experiment and ablation
grid; the test checks that every rule name of the full paper DAG (its dry run) really ran, and that
the numbers it wrote hold together (`check_*` below: scores, tables, training, analyses).
Measured run times are in docs/performance.md. The fast test below (part of `make test`) checks on every
run that the overlay still plans every rule of the paper DAG.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from bbbc006_replica import archive_members, broad_zips, targz_bytes
from conftest import ROOT, SNAKEMAKE, patient
from fixtures_authors import toy_release
from fixtures_http import make_image, make_mask, serve
from fixtures_paired import dpdd_zip, realdof_zip, write_histech

pytest_plugins = ["slurm_cluster"]

from slurm_cluster import terminate_with_parent  # noqa: E402

AUTHORS_NAME = "DGNO_BBBC006_w1_Cell"  # an authors' checkpoint the overlay evaluates (operators experiment, target authors)
RULE_LINE = re.compile(r"^(?:local)?rule (\w+):", re.MULTILINE)


def paper_rule_names(workdir: Path, *configfiles: Path) -> set[str]:
    """Rule names of a dry run's job table: what a full run of that config executes."""
    cmd = [SNAKEMAKE, "-n", "--quiet", "rules", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir), "--configfile", *map(str, configfiles)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=patient(300))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    table = (proc.stdout + proc.stderr).split("Job stats:")[1].split("total")[0]
    names = set(re.findall(r"^(\w+)\s+\d+\s*$", table, re.MULTILINE))
    assert names, table
    return names


def write_overlay(path: Path, *, loopback: str, histech: Path, options: Path) -> Path:
    """tests/rehearsal.yaml with its placeholders filled in (the servers' ports are only known at run time)."""
    text = (ROOT / "tests" / "rehearsal.yaml").read_text()
    text = text.replace("@LOOPBACK@", loopback).replace("@HISTECH@", str(histech)).replace("@OPTIONS@", str(options))
    assert "@" not in text, "unfilled placeholder in tests/rehearsal.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.slow
def test_overlay_plans_every_rule_of_the_paper_dag(tmp_path):
    """Seconds: a new rule in the paper DAG that the shrunken rehearsal would not reach fails here, in `make test`."""
    paper = ROOT / "config" / "paper.yaml"
    config = write_overlay(tmp_path / "rehearsal.yaml", loopback="http://127.0.0.1:9", histech=tmp_path / "h", options=tmp_path / "o")
    expected = paper_rule_names(tmp_path / "dry_paper", paper)
    planned = paper_rule_names(tmp_path / "dry_rehearsal", paper, config)
    assert len(expected) >= 30 and "report" in expected and "stardist_ap" in expected
    assert expected - planned == set(), f"the overlay drops rules of the paper DAG: {sorted(expected - planned)}"
    assert {"slide_synthetic", "restore_slide"} <= planned - expected  # the slides target, which the paper run leaves to its users


def stardist_stand_in(folder: Path) -> Path:
    """A StarDist model folder trained one step on a fixture image (a child process: TensorFlow stays out of pytest)."""
    img, mask = make_image(16, "a01", 1, "w1"), make_mask("a01", 1)
    code = textwrap.dedent(f"""
        import numpy as np
        from dgno.experiments.stardist import PRETRAINED_NAME
        from dgno.experiments.stardist_training import train_stardist
        img = np.array({img.tolist()}, np.float32); mask = np.array({mask.tolist()}, np.uint16)
        train_stardist([img / img.max()], [mask], {str(folder)!r} + "/" + PRETRAINED_NAME, epochs=1, steps_per_epoch=1,
                       patch=16, seed=0, dataset="rehearsal stand-in", n_rays=8)
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=patient(600), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder / "2D_versatile_fluo"


@pytest.fixture
def rehearsal_server(tmp_path):
    """Loopback downloads of the paper DAG: the authors' BBBC006 archive (replica) with the Broad archives of its
    fields, DPDD, RealDOF and the six released checkpoints at toy size (yields the server and their options)."""
    release, options = toy_release(tmp_path / "release")
    archives = {"BBBC006.tar.gz": targz_bytes(archive_members()), **broad_zips(), **release, "DPDD.zip": dpdd_zip(), "RealDOF.zip": realdof_zip()}
    with serve(archives) as srv:
        yield srv, options


@pytest.mark.rehearsal
def test_paper_dag_rehearsal(slurm_cluster, rehearsal_server, tmp_path):
    t0 = time.perf_counter()
    srv, options = rehearsal_server
    histech = write_histech(tmp_path / "3dhistech")
    stardist_dir = stardist_stand_in(tmp_path / "stardist")

    work = tmp_path / "run"
    config = write_overlay(work / "rehearsal.yaml", loopback=srv.base_url.removesuffix("/bbbc/BBBC006/"), histech=histech, options=options)
    paper = ROOT / "config" / "paper.yaml"
    expected = paper_rule_names(tmp_path / "dry_paper", paper)
    planned = paper_rule_names(tmp_path / "dry_rehearsal", paper, config)
    assert expected - planned == set(), f"the overlay drops rules of the paper DAG: {sorted(expected - planned)}"
    assert {"slide_synthetic", "restore_slide"} <= planned - expected  # the slides target, which the paper run leaves to its users

    env = {**os.environ, **slurm_cluster.env, "OMP_NUM_THREADS": "1", "DGNO_STARDIST_PRETRAINED_DIR": str(stardist_dir)}
    cmd = [
        SNAKEMAKE,
        "--snakefile", str(ROOT / "Snakefile"),
        "--directory", str(work),
        "--profile", str(ROOT / "slurm"),
        "--profile", str(ROOT / "profiles" / "slurm-test"),
        "--configfile", str(paper), str(config),
        "--keep-going",  # one run shows every failing rule
    ]  # fmt: skip
    t_run = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=patient(3000), preexec_fn=terminate_with_parent)
    run_s = time.perf_counter() - t_run
    out = proc.stdout + proc.stderr
    (tmp_path / "snakemake.log").write_text(out)
    assert proc.returncode == 0, out[-8000:] + "\n" + slurm_cluster.diagnostics()

    ran = set(RULE_LINE.findall(out))
    assert expected - ran == set(), f"rules of the paper DAG that did not run: {sorted(expected - ran)}"
    assert len(set(re.findall(r"SLURM jobid (\d+)", out))) >= 20  # the heavy rules really went through SLURM
    assert (work / "report" / "index.html").is_file()
    for path in (  # a grid point of each ablation (paths with = and /), the non-blind table, StarDist
        "results/train/bbbc006_w1/dgno-face/flux=upwind/boundary=periodic/model.pt",
        "results/train/bbbc006_w1/dgno-cell/tau=0.25/model.pt",
        "results/train/bbbc006_w1/dgno-cell/element_size=4/T=1/model.pt",
        "results/tables/nonblind.csv",
        "results/tables/stardist_bbbc006_w1.csv",
        "results/eval/realdof/dgno-face/real/summary.json",
        "results/authors/bbbc006_w1/dgno-cell-authors/model.pt",
        "results/tables/authors.csv",
        "results/eval/3dhistech/dgno-face-authors/real/gumbel/summary.json",
    ):
        assert (work / path).exists(), path
    for name in ("BBBC006.tar.gz", "BBBC006_v1_images_z_16.zip", "BBBC006_v1_labels.zip", "DPDD.zip", "RealDOF.zip", f"{AUTHORS_NAME}.pth", "DGNO_3DHistech_Cell.pth"):
        assert srv.served(name), f"{name} was never downloaded from the loopback server"
    # ... and what they hold (helpers below): scores, tables, training curves, analyses, noise sweep.
    cfg = merged_config(paper, config)
    summaries = check_scores(work)
    check_tables(work, cfg, summaries)
    check_training(work, cfg)
    check_analyses(work, summaries)
    check_sensitivity(work, cfg)
    check_authors_table(work, summaries)
    print(f"rehearsal: {len(expected)} rules, snakemake {run_s:.0f} s, whole test {time.perf_counter() - t0:.0f} s")


# --- What the rehearsal's numbers must satisfy ----------------------------------------------------
# Two training steps on miniature fixtures make no model better than its input, so nothing here asks
# for a good PSNR. What a broken pipeline would leave, and these catch: NaN or out-of-range scores, an
# input row that is not the blurred images' PSNR, a "restored" image equal to its input, tables whose
# rows are not the configured datasets × methods × levels or not the numbers of their summaries,
# pixel counts that do not add up, operation counts that do not grow with the image.


def merged_config(*paths: Path) -> dict:
    """Config files merged as Snakemake merges them: mappings key by key, anything else replaced."""

    def merge(base: dict, over: dict) -> dict:
        out = dict(base)
        for key, value in over.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out

    cfg: dict = {}
    for path in paths:
        cfg = merge(cfg, yaml.safe_load(path.read_text()))
    return cfg


def _test_ids(work: Path, dataset: str) -> list[str]:
    return sorted(r["id"] for r in csv.DictReader((work / "results" / "data" / dataset / "split.csv").open()) if r["split"] == "test")


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(1.0 / np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)))


def check_scores(work: Path) -> dict[tuple[str, str, str], dict]:
    """Every evaluation: one finite, plausible score per test image, the summary their mean; the input's
    PSNR recomputed here from the blurred and sharp files; every method's differs from its input's.
    Returns the summaries by (dataset, method, level)."""
    from dgno.data.paired import load_pairs

    summaries = {}
    for path in sorted((work / "results" / "eval").glob("**/summary.json")):
        parts = path.parent.relative_to(work / "results" / "eval").parts
        if parts[-1] == "gumbel":  # the Gumbel repeats' aggregate: checked against its repeats below
            check_gumbel(path)
            continue
        if "gumbel" in parts:  # one Gumbel repeat (…/<level>/gumbel/r<k>): an evaluation like any other
            dataset, *method, level, _, repeat = parts
            method = [*method, "gumbel", repeat]
        else:
            dataset, *method, level = parts
        summary, per_image = json.loads(path.read_text()), pd.read_csv(path.with_name("per_image.csv"))
        where = f"{path.relative_to(work)}"
        assert sorted(per_image["id"]) == _test_ids(work, dataset) and summary["n_images"] == len(per_image), where
        assert per_image["psnr"].between(3, 60).all() and per_image["ssim"].between(-1, 1).all(), (where, per_image)
        assert summary["psnr"] == pytest.approx(per_image["psnr"].mean(), abs=1e-9), where
        summaries[dataset, "/".join(method), level] = summary
        if method == ["input"]:
            pairs = {p.id: p for p in load_pairs(work / "results" / "data" / dataset, split="test", levels=[level])}
            for row in per_image.itertuples():
                assert row.psnr == pytest.approx(_psnr(pairs[row.id].blur, pairs[row.id].gt), abs=1e-6), (where, row.id)
    assert len(summaries) >= 30, sorted(summaries)
    for (dataset, method, level), summary in summaries.items():
        if (dataset, "input", level) not in summaries:  # only the released weights are scored without an input row
            assert method.split("/")[0].endswith("-authors"), (dataset, method, level)
        elif method != "input":
            assert abs(summary["psnr"] - summaries[dataset, "input", level]["psnr"]) > 1e-3, (dataset, method, level)
    return summaries


def check_gumbel(path: Path) -> None:
    """The Gumbel aggregate: one row per repeat, each the PSNR its repeat's own summary holds, their mean."""
    summary = json.loads(path.read_text())
    repeats = [json.loads((path.parent / f"r{r}" / "summary.json").read_text()) for r in range(1, summary["repeats"] + 1)]
    assert [row["psnr"] for row in summary["per_repeat"]] == [s["psnr"] for s in repeats], path
    assert summary["psnr_mean"] == pytest.approx(np.mean([s["psnr"] for s in repeats]), abs=1e-9), path


def _tables(work: Path, prefix: str) -> list[Path]:
    """The tables named ``prefix*.csv``, without their per-image and statistics companions."""
    found = [p for p in sorted((work / "results" / "tables").glob(f"{prefix}*.csv")) if not p.stem.endswith(("_per_image", "_stats"))]
    assert found, f"no results/tables/{prefix}*.csv"
    return found


def _rows(work: Path, table: str) -> pd.DataFrame:
    return pd.read_csv(work / "results" / "tables" / f"{table}.csv")


def check_tables(work: Path, cfg: dict, summaries: dict) -> None:
    """Each results table holds exactly the configured datasets × methods (+ the input) × levels, with
    the numbers of their evaluations; each ablation table one row per grid point and test level."""
    exp = cfg["experiments"]

    def levels(ds: str) -> list[str]:  # the tables' levels: the test levels seen in training (else all test levels)
        d = cfg["datasets"][ds]
        return [lvl for lvl in d["test_levels"] if lvl in d["train_levels"]] or d["test_levels"]

    expected = {
        "main": [(ds, exp["main"]["methods"] + ["input"], levels(ds)) for ds in exp["main"]["datasets"]],
        "defocus": [(ds, exp["defocus"]["methods"] + ["input"], exp["defocus"]["levels"]) for ds in exp["defocus"]["datasets"]],
        "synthetic": [(ds, exp["synthetic"]["methods"] + ["input"], levels(ds)) for ds in exp["synthetic"]["datasets"]],
        "lifting": [(exp["lifting"]["dataset"], exp["lifting"]["methods"] + ["input"], levels(exp["lifting"]["dataset"]))],
        "operators": [(exp["operators"]["dataset"], exp["operators"]["methods"] + ["input"], levels(exp["operators"]["dataset"]))],
        "nonblind": [
            (exp["nonblind"]["dataset"], exp["nonblind"]["methods"] + exp["nonblind"]["deconvolution"] + ["input"], levels(exp["nonblind"]["dataset"]))
        ],
    }
    for table, blocks in expected.items():
        rows = _rows(work, table)
        want = sorted((ds, m, lvl) for ds, methods, lvls in blocks for m in methods for lvl in lvls)
        assert sorted(zip(rows["dataset"], rows["method"], rows["level"], strict=True)) == want, table
        for row in rows.itertuples():
            assert row.psnr == pytest.approx(summaries[row.dataset, row.method, row.level]["psnr"], abs=1e-9), (table, row)
    for name, grid in cfg["ablations"].items():
        points = int(np.prod([len(v) for k, v in grid.items() if isinstance(v, list)]))
        rows = _rows(work, f"ablation_{name}")
        assert len(rows) == points * len(levels(grid["dataset"])) and set(rows["dataset"]) == {grid["dataset"]}, name
        for row in rows.itertuples():
            assert row.psnr == pytest.approx(summaries[row.dataset, row.method, row.level]["psnr"], abs=1e-9), (name, row)


def check_training(work: Path, cfg: dict) -> None:
    """Every trained model ran its configured steps with finite losses and validation PSNRs."""
    curves = sorted((work / "results" / "train").glob("**/train_metrics.csv"))
    assert len(curves) >= 10, curves
    for path in curves:
        dataset = path.relative_to(work / "results" / "train").parts[0]
        iterations = {**cfg["train"], **cfg["datasets"][dataset].get("train", {})}["iterations"]
        rows = pd.read_csv(path)
        assert list(rows["iteration"]) == list(range(1, iterations + 1)), path  # log_every 1
        assert np.isfinite(rows["loss"]).all() and (rows["loss"] > 0).all() and rows["val_psnr"].between(3, 60).all(), (path, rows)
        blob = torch.load(path.with_name("model.pt"), map_location="cpu", weights_only=True)
        assert blob["iterations"] == iterations and blob["weights_sha256"], path


def check_analyses(work: Path, summaries: dict) -> None:
    """Edge-band pixels add up to the test images' and the pooled PSNR lies between its parts'; counted
    operations grow with the pixels; effective ranks within their bounds; APs in [0, 1]; the measured
    point of the PSNR-vs-parameters figure is a mean of the main table."""
    from dgno.data.paired import load_pairs

    for path in _tables(work, "edge_band_"):
        rows = pd.read_csv(path).set_index(["dataset", "level", "method", "replicate", "region"])
        for (dataset, level, method, _), part in rows.groupby(level=[0, 1, 2, 3]):
            px = part["pixels"].droplevel([0, 1, 2, 3])
            pairs = load_pairs(work / "results" / "data" / dataset, split="test", levels=[level])
            assert px["edge"] + px["interior"] == px["all"] == sum(p.gt.shape[0] * p.gt.shape[1] for p in pairs), (path.name, method)
            psnr = part["psnr"].droplevel([0, 1, 2, 3])
            if px["interior"] and px["edge"]:
                assert min(psnr["edge"], psnr["interior"]) - 1e-9 <= psnr["all"] <= max(psnr["edge"], psnr["interior"]) + 1e-9, (path.name, method)
    cost = _rows(work, "cost_vs_resolution")
    for method, rows in cost.groupby("method"):
        per_pixel = rows["gflops"] / rows["size"] ** 2
        assert rows["params"].nunique() == 1 and per_pixel.max() < 1.05 * per_pixel.min(), (method, rows)
    summary = _rows(work, "model_summary").set_index("method")["params"]
    assert {m: int(p) for m, p in cost.groupby("method")["params"].first().items()} == {m: int(summary[m]) for m in set(cost["method"])}
    ranks = pd.concat([pd.read_csv(p) for p in (work / "results" / "tables").glob("effective_rank_*.csv")])
    assert ((ranks["erank"] >= 1) & (ranks["erank"] <= np.minimum(ranks["channels"], ranks["tokens"]))).all(), ranks
    stardist = pd.concat([pd.read_csv(p) for p in _tables(work, "stardist_")])
    assert {"sharp", "blurred"} <= set(stardist["condition"]) and stardist[["ap50", "ap70", "ap90", "map"]].stack().between(0, 1).all()
    measured = _rows(work, "psnr_vs_params").query("kind == 'measured'")
    main = _rows(work, "main")
    for row in measured.itertuples():
        means = main[main["method"] == row.method].groupby("dataset")["psnr"].mean()
        assert any(abs(m - row.psnr) < 1e-9 for m in means), (row, means)


def check_authors_table(work: Path, summaries: dict) -> None:
    """The authors' table: each measured cell the mean of its evaluations, Δ its difference from the
    paper, and the verdict "reproduced" exactly where |Δ| is within the tolerance."""
    rows = _rows(work, "authors")
    measured = rows.dropna(subset=["measured"])
    assert len(measured) and set(measured["metric"]) >= {"psnr", "ssim"}, rows
    pooled_cells = 0
    for row in measured.itertuples():
        levels = row.levels.split("+")
        if row.metric in ("psnr", "ssim") and all((row.dataset, row.method, lv) in summaries for lv in levels):
            per_level = [summaries[row.dataset, row.method, lv] for lv in levels]
            # RGB data are scored by 8-bit luma PSNR, as the authors did (dgno.report.authors)
            key = "psnr_y8" if row.metric == "psnr" and per_level[0].get("psnr_y8") is not None else row.metric
            pooled = sum(s[key] * s["n_images"] for s in per_level) / sum(s["n_images"] for s in per_level)
            assert row.measured == pytest.approx(pooled, abs=1e-9), row
            pooled_cells += 1
        assert row.delta == pytest.approx(row.measured - row.paper, abs=1e-9), row
        assert row.verdict.startswith("reproduced") == (abs(row.delta) <= row.tolerance), row
    assert pooled_cells, "no cell of the authors' table was checked against its evaluations"


def check_sensitivity(work: Path, cfg: dict) -> None:
    """The noise sweep: one row per read-noise level and restoration, and a noise estimate that does not
    fall as the added read noise grows."""
    nb = cfg["experiments"]["nonblind"]
    rows = pd.read_csv(work / "results" / "nonblind" / nb["dataset"] / "sensitivity.csv")
    methods = ["input", *nb["deconvolution"], *nb["methods"]]
    assert sorted(zip(rows["read_sigma"], rows["method"], strict=True)) == sorted((s, m) for s in nb["sensitivity_read_sigmas"] for m in methods)
    assert rows["psnr"].between(3, 60).all(), rows
    hats = rows.groupby("read_sigma")["sigma_hat"].first().sort_index()
    assert hats.is_monotonic_increasing and (hats > 0).all(), hats
