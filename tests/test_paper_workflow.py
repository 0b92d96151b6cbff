"""The paper-scale configuration: its whole DAG builds, and its download → prepare chain runs
for real against a miniature BBBC006 served on loopback (tests/fixtures_http.py)."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, SNAKEMAKE, patient
from fixtures_http import bbbc006_http_session, bbbc006_server  # noqa: F401  (fixtures)


@pytest.mark.slow
def test_paper_dag_lists_every_experiment(tmp_path):
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile", str(ROOT / "config" / "paper.yaml")],
        capture_output=True,
        text=True,
        timeout=patient(300),  # a guard against a hang, not a speed requirement (the machine may be shared)
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    for target in (
        "results/tables/main.csv",
        "results/tables/lifting.csv",
        "results/tables/defocus.csv",
        "results/tables/operators.csv",
        "results/tables/synthetic.csv",
        "results/tables/nonblind.csv",
        "results/tables/stardist_bbbc006_w1.csv",
        "results/tables/ablation_flux_boundary.csv",
        "results/tables/ablation_penalty.csv",
        "results/tables/ablation_element_size_T.csv",
        "results/train/bbbc006_w1/dgno-cell/flux=jump/boundary=dirichlet/model.pt",
        "results/train/bbbc006_w1/dgno-face/tau=0.5/model.pt",
        "results/train/bbbc006_w1/dgno-cell/element_size=16/T=3/model.pt",
        "resources/bbbc006/z16",
        "results/sources/3dhistech.json",
        "results/sources/dpdd.json",
        "results/eval/3dhistech/dgno-cell/real/summary.json",
        "results/train/dpdd/dgno-face/model.pt",
        "results/eval/realdof/dgno-face/real/summary.json",
        # the authors' released weights, downloaded, imported and evaluated beside the trained models
        "resources/authors/DGNO_BBBC006_w2_Face.pth",
        "results/authors/3dhistech/dgno-cell-authors/model.pt",
        "results/eval/bbbc006_w1/dgno-face-authors/z02/summary.json",
        "results/eval/bbbc006_w2/dgno-cell-authors/z13/summary.json",
        # the paper's second controlled synthetic experiment
        "results/eval/bbbc006_w1_sigma/dgno-cell/sigma/summary.json",
        "results/tables/edge_band_bbbc006_w1_sigma.csv",
    ):
        assert target in out, target
    assert "results/train/realdof/" not in out  # RealDOF is evaluated with the DPDD models (trained_on)
    assert "results/train/bbbc006_w1/dgno-face-authors" not in out  # the authors' weights are not trained
    # grid points with a default method's settings reuse its training (trained once, as in the paper)
    for same in ("dgno-face/flux=avg_jump/boundary=dirichlet", "dgno-cell/flux=jump/boundary=neumann", "dgno-face/tau=learnable", "dgno-cell/tau=learnable", "dgno-cell/element_size=8/T=2"):
        assert f"results/train/bbbc006_w1/{same}/model.pt" not in out, same
        assert f"results/eval/bbbc006_w1/{same}/z02/summary.json" in out, same
    assert "results/train/bbbc006_w1/dgno-face/flux=avg_jump/boundary=neumann/model.pt" in out  # a new setting trains


@pytest.mark.e2e
def test_bbbc006_chain_through_the_workflow(tmp_path, bbbc006_server):  # noqa: F811
    bbbc006_server.faults.drop_first.add("BBBC006_v1_images_z_16.zip")  # a dropped connection is resumed
    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    cfg["downloads"] = {"bbbc006_url": bbbc006_server.base_url, "retries": 3, "raw_dir": "resources"}
    cfg["datasets"]["bbbc006_w1"]["n_val_wells"] = 1
    cfg["datasets"]["bbbc006_w1"]["split"] = "by_well"  # the Broad chain (the authors' archive: tests/test_authors_workflow.py)
    path = tmp_path / "paper_loopback.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        [SNAKEMAKE, "results/data/bbbc006_w1/split.csv", "--cores", "2", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile", str(path)],
        capture_output=True,
        text=True,
        timeout=patient(600),
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    data = tmp_path / "results" / "data" / "bbbc006_w1"
    rows = list(csv.DictReader((data / "split.csv").open()))
    wells = {s: {r["id"].split("_")[0] for r in rows if r["split"] == s} for s in ("train", "val", "test")}
    assert wells["test"] and wells["train"] and not (wells["test"] & wells["train"]) and not (wells["val"] & wells["train"])
    for lvl in ("z01", "z02", "z05", "z06", "z10", "z13"):
        assert len(list((data / "blur" / lvl).glob("*.tif"))) == len(rows), lvl
    assert len(list((data / "gt").glob("*.tif"))) == len(rows)
    ranges = [r["range"] for r in bbbc006_server.served("BBBC006_v1_images_z_16.zip")]
    assert any(r for r in ranges), "the dropped download was not resumed with a Range request"
    assert Path(tmp_path / "resources" / "bbbc006" / "archives" / "BBBC006_v1_images_z_16.zip").exists()
