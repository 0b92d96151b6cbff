"""End to end: the real Snakemake workflow on the smoke config, in a temporary directory.

This is the test a new user's `make demo` relies on: data → blur → training → evaluation →
tables, figures → report/index.html with a numeric PSNR for each of the four methods. It also
checks Snakemake's own report, lint, and that a rerun has nothing to do.
"""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pandas as pd
import pytest
import tifffile
from conftest import ROOT, SNAKEMAKE, patient, snakemake

METHOD_LABELS = ["SRNO (GG)", "SRNO+Win (LG)", "DGNO-Face", "DGNO-Cell"]

pytestmark = pytest.mark.e2e


def test_report_has_numeric_psnr_for_each_method(smoke_run):
    page = (smoke_run / "report" / "index.html").read_text()
    assert 'id="operators"' in page and 'id="synthetic"' in page and 'id="demo-warning"' in page
    section = page.split('id="operators"')[1].split("</section>")[0]
    for label in METHOD_LABELS:
        row = re.search(rf"<tr><td>{re.escape(label)}</td>(.*?)</tr>", section, re.S)
        assert row, f"no row for {label}"
        first_cell = re.search(r'<span class="m">([-0-9.]+)</span>', row.group(1))
        assert first_cell and 0 < float(first_cell.group(1)) < 100, f"{label}: no numeric PSNR"
    assert "not run" not in section  # everything of this config ran
    assert page.count("data:image/png;base64,") >= 6  # figures embedded: the page stands alone


def test_table_numbers_match_results_files(smoke_run):
    frame = pd.read_csv(smoke_run / "results" / "tables" / "operators.csv")
    page = (smoke_run / "report" / "index.html").read_text()
    gg = frame[frame["method"] == "gg"]["psnr"].mean()
    assert f"{gg:.2f}" in page
    assert set(frame["method"]) == {"gg", "lg", "dgno-face", "dgno-cell", "input"}


def test_lam_figure_and_table_come_from_the_trained_models(smoke_run):
    """The LAM rule ran on the smoke checkpoints: one row per method, numbers in range, in the report."""
    frame = pd.read_csv(smoke_run / "results" / "tables" / "lam_nuclei.csv")
    assert list(frame["method"]) == ["gg", "dgno-cell"]
    assert frame["di"].between(0, 100).all() and (frame["r50_px"] >= 0).all() and frame["psnr"].between(0, 100).all()
    assert (smoke_run / "results" / "figures" / "lam_nuclei.png").stat().st_size > 0
    section = (smoke_run / "report" / "index.html").read_text().split('id="lam"')[1].split("</section>")[0]
    assert f"{frame['di'].iloc[1]:.1f}" in section and "data:image/png;base64," in section


def test_checkpoints_describe_themselves(smoke_run):
    import torch

    blob = torch.load(smoke_run / "results/train/nuclei/dgno-cell/model.pt", weights_only=True)
    assert blob["spec"]["name"] == "dgno-cell" and blob["spec"]["overrides"] == {"flux": "jump", "boundary": "neumann"}
    assert blob["provenance"]["versions"]["torch"]


def test_rerun_has_nothing_to_do_and_report_zip(smoke_run):
    dry = snakemake(smoke_run, "-n", "--cores", "2")
    assert "Nothing to be done" in dry.stdout + dry.stderr
    snakemake(smoke_run, "--report", str(smoke_run / "report.zip"))
    assert (smoke_run / "report.zip").stat().st_size > 10_000


def test_lint_is_clean():
    proc = subprocess.run([SNAKEMAKE, "--lint", "--snakefile", str(ROOT / "Snakefile")], capture_output=True, text=True, cwd=ROOT, timeout=patient(300))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_changing_one_ablation_reruns_only_that_method(smoke_run, tmp_path):
    """Editing dgno-cell's flux reruns its trainings and what depends on them — nothing else."""
    import yaml

    cfg = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())
    cfg["methods"]["dgno-cell"]["overrides"]["flux"] = "central"
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(smoke_run), "--configfile", str(changed)],
        capture_output=True,
        text=True,
        timeout=patient(300),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    trains = re.findall(r"rule train:\n(?:.*\n)*?\s+wildcards: (.*)", out)
    assert trains and all("method=dgno-cell" in w for w in trains), trains
    assert "rule sharp_images" not in out and "rule sigma_blur" not in out
    evals = re.findall(r"rule evaluate:\n(?:.*\n)*?\s+wildcards: (.*)", out)
    assert evals and all("method=dgno-cell" in w for w in evals), evals


def test_sigma_map_experiment_on_another_datasets_sharp_images(smoke_run):
    """The BBBC006-style sigma-map experiment: the base's sharp images and split, blurred by known sigma maps,
    GG vs DG in the report with edge-band numbers; and the protocol section is there."""
    import json

    import numpy as np
    import tifffile

    base, sig = smoke_run / "results/data/nuclei", smoke_run / "results/data/nuclei_sigma"
    assert (sig / "split.csv").read_text() == (base / "split.csv").read_text()
    assert json.loads((sig / "manifest.json").read_text())["base"] == "nuclei"
    some = sorted((sig / "gt").glob("*.tif"))[0]
    sharp, sigma = tifffile.imread(some), tifffile.imread(sig / "sigma" / "sigma" / some.name)
    assert sharp.dtype == np.float32 and sharp.min() >= 0.0 and sharp.max() <= 1.0
    assert float(sigma.min()) == 0.5 and float(sigma.max()) == 3.0  # the configured range, hit exactly
    assert not np.allclose(tifffile.imread(sig / "blur" / "sigma" / some.name), sharp)
    page = (smoke_run / "report" / "index.html").read_text()
    section = page.split('id="synthetic_bbbc006"')[1].split("</section>")[0]
    assert "25.81" in section and "1.77" in section  # the paper's numbers shown beside the measured ones
    row = re.search(r"<tr><td>DGNO-Cell</td>(.*?)</tr>", section, re.S)
    assert row and len(re.findall(r'<span class="m">[-+0-9.]+</span>', row.group(1))) == 4  # psnr, gain, edge, edge gain
    protocol = page.split('id="protocol"')[1].split("</section>")[0]
    assert "raster token order" in protocol  # the authors' network conventions are listed


def test_forced_rerun_of_a_trained_model_trains_again(smoke_run):
    """snakemake -R / --forcerun on one model: the finished checkpoint is set aside and training runs
    (it must not 'resume' the finished run and rewrite the old weights). Last in this module: it
    rewrites one model of the shared smoke run."""
    target = "results/train/nuclei/gg/model.pt"
    proc = subprocess.run(
        [SNAKEMAKE, target, "--forcerun", target, "--cores", "1", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(smoke_run), "--configfile", str(ROOT / "tests" / "smoke.yaml")],
        capture_output=True,
        text=True,
        timeout=patient(300),
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    run = smoke_run / "results" / "train" / "nuclei" / "gg"
    assert (run / "checkpoint.stale-1.pt").exists()
    assert "already finished (a rerun trains anew)" in (smoke_run / "results" / "logs" / "train" / "nuclei" / "gg.log").read_text()
    rows = (run / "train_metrics.csv").read_text().splitlines()[1:]
    assert int(rows[0].split(",")[0]) < int(rows[-1].split(",")[0])  # a whole fresh curve, from the start


def test_robustness_table_scores_the_trained_models_on_out_of_range_photometry(smoke_run):
    """The out-of-range set is generated with its own photometry, scored with the nuclei models (no training
    of its own), and tabulated beside the blurred input, in range and out of range."""
    import json

    ood = smoke_run / "results/data/nuclei_ood"
    ph = json.loads((ood / "manifest.json").read_text())["photometry"]
    assert all(0.35 <= v["background"] <= 0.5 and 15 <= v["photons"] <= 25 for v in ph["images"].values())
    assert not (smoke_run / "results/train/nuclei_ood").exists()
    frame = pd.read_csv(smoke_run / "results" / "tables" / "robustness.csv")
    assert set(zip(frame.dataset, frame.method)) == {(d, m) for d in ("nuclei", "nuclei_ood") for m in ("gg", "dgno-cell", "input")}
    section = (smoke_run / "report" / "index.html").read_text().split('id="robustness"')[1].split("</section>")[0]
    row = re.search(r"<tr><td>DGNO-Cell</td>(.*?)</tr>", section, re.S)
    assert row and len(re.findall(r'<span class="m">[-+0-9.]+</span>', row.group(1))) == 4  # psnr and gain (signed), in and out of range


def test_restored_images_only_where_read_and_losslessly_compressed(smoke_run):
    """The blurred input's evaluation is read by no later rule: its folder stays empty; the methods'
    restored images (read by figures, edge band and StarDist) are zlib-compressed float32 TIFFs."""
    import tifffile

    eval_root = smoke_run / "results" / "eval" / "nuclei"
    assert (eval_root / "input" / "z02" / "restored").is_dir()
    assert not list((eval_root / "input" / "z02" / "restored").glob("*.tif"))
    images = sorted((eval_root / "gg" / "z02" / "restored").glob("*.tif"))
    assert len(images) == 2  # the smoke config's n_test
    with tifffile.TiffFile(images[0]) as tif:
        page = tif.pages[0]
        assert page.compression == tifffile.COMPRESSION.ADOBE_DEFLATE and page.dtype == "float32"


def test_seed_replicates_are_trained_evaluated_and_aggregated(smoke_run):
    """experiments.synthetic.seeds: 2 in the smoke config: replicate 1 of each method trains with seed + 1 in
    seed=1/, is evaluated like any method, and the table, edge band, figure and claims use both seeds."""
    import torch

    results = smoke_run / "results"
    for method in ("gg", "dgno-cell"):
        blob = torch.load(results / f"train/shapes_narrow/{method}/seed=1/model.pt", weights_only=True)
        assert blob["train_config"]["seed"] == 1  # replicate 0 trained with the config's seed, 0
        assert (results / f"eval/shapes_narrow/{method}/seed=1/sigma/per_image.csv").exists()
    assert not (results / "train/nuclei/gg/seed=1").exists()  # the operators of the smoke config have one seed
    stats = pd.read_csv(results / "tables" / "synthetic_stats.csv")
    gg = stats[(stats["method"] == "gg") & stats["versus"].isna() & (stats["metric"] == "psnr")].iloc[0]
    assert gg["n_seeds"] == 2 and gg["seed_sd"] > 0
    gain = stats[(stats["method"] == "dgno-cell") & (stats["versus"] == "gg") & (stats["metric"] == "psnr")].iloc[0]
    assert gain["n_images"] == 6 and gain["interval_method"] == "percentile, images × seeds" and gain["low"] < gain["estimate"] < gain["high"]
    assert set(pd.read_csv(results / "tables" / "edge_band_shapes_narrow_per_image.csv")["replicate"]) == {0, 1}
    section = (smoke_run / "report" / "index.html").read_text().split('id="synthetic"')[1].split("</section>")[0]
    assert '<span class="sd"> ± ' in section and "Δ PSNR vs SRNO (GG)" in section and "6 images × 2 seeds" in section


def test_claims_section_and_table_are_generated(smoke_run):
    claims = pd.read_csv(smoke_run / "results" / "tables" / "claims.csv")
    assert len(claims) >= 40 and set(claims["scale"]) <= {"smoke", "paper scale (recorded benchmark)"}
    assert set(claims["verdict"]) <= {"supported", "contradicted", "not resolved", "not run"}
    not_run = claims[claims["verdict"] == "not run"]
    assert not_run["command"].notna().all() and not_run["command"].str.startswith("snakemake").all()
    measured = claims[claims["id"] == "shapes_narrow_cell_vs_gg"].iloc[0]
    assert measured["verdict"] != "not run" and measured["n_seeds"] == 2
    page = (smoke_run / "report" / "index.html").read_text()
    section = page.split('id="claims"')[1].split("</section>")[0]
    assert "Measured at scale: smoke" in section and "shapes_narrow_cell_vs_gg" in section
    assert page.index('id="claims"') < page.index('id="operators"')  # the claims come first


def test_the_generated_slide_is_restored_where_blurred_and_shown_in_the_report(smoke_run):
    """The slides target of the smoke config: the restored slide is the generated one outside its restored tiles
    (the copied channel everywhere), and the report's section shows the slide's counts and both pictures."""
    summary = json.loads((smoke_run / "results/slides/restored/slide.summary.json").read_text())
    tiles = pd.read_csv(smoke_run / "results/slides/restored/slide.tiles.csv")
    assert summary["tiles"]["restored"] == int(tiles.restored.sum()) >= 1 and summary["restored_channels"] == ["DAPI"]
    before = tifffile.imread(smoke_run / "results/slides/synthetic/slide.ome.tif")
    with tifffile.TiffFile(smoke_run / "results/slides/restored/slide.ome.tif") as tf:
        after = tf.series[0].levels[0].asarray()
        assert len(tf.series[0].levels) == 1 and tf.series[0].dtype == np.uint16
    assert after.shape == before.shape and np.array_equal(after[1], before[1])  # Actin copied
    untouched = np.ones(before.shape[1:], bool)
    for t in tiles[tiles.restored].itertuples():
        untouched[t.y : t.y + t.height, t.x : t.x + t.width] = False
    assert np.array_equal(after[0][untouched], before[0][untouched]) and not np.array_equal(after[0], before[0])
    page = (smoke_run / "report" / "index.html").read_text()
    section = page.split('id="slides"')[1].split("</section>")[0]
    t = summary["tiles"]
    assert f"{t['total']} / {t['tissue']} / {t['blurry']} / {t['restored']}" in section and section.count("data:image/png;base64,") == 2
