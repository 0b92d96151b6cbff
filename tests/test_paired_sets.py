"""3DHistech, DPDD and RealDOF in the workflow: config checks, and the real rule chain of the paper
config (source → prepare) run by the Snakemake CLI against miniature copies: DPDD and RealDOF zips
with the real folder names served on loopback (tests/fixtures_http.py), a hand-placed 3DHistech folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import ROOT, SNAKEMAKE, patient
from fixtures_http import bbbc006_http_session, bbbc006_server  # noqa: F401  (fixtures)
from fixtures_paired import DPDD_COUNTS, HISTECH_COUNTS, SHAPE, dpdd_zip, pair, realdof_zip, write_histech

from dgno.data import paired_sets as manual
from dgno.data.paired import load_pairs, read_split
from dgno.io import read_json
from dgno.workflow.config import ConfigError, load_schema, validate_config


def paper_config(tmp_path: Path, *, dpdd_url: str, realdof_url: str, histech: Path, tiny_training: bool = False) -> Path:
    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    if tiny_training:  # seconds on a CPU: the point is the wiring (3-channel model, RealDOF scored by the DPDD model)
        cfg.update(scale="smoke", device="cpu")
        cfg["train"].update(iterations=2, batch_size=1, patch_size=16, val_every=1, checkpoint_every=1, log_every=1, val_crops=1)
        cfg["evaluate"].update(tile=None, lpips=False)
    cfg["downloads"].update(dpdd_url=dpdd_url, realdof_url=realdof_url, retries=1, raw_dir="resources")
    cfg["datasets"]["dpdd"].update(counts=DPDD_COUNTS, check_size=False)  # the paper's 1680×1120 is checked otherwise
    cfg["datasets"]["realdof"].update(counts={".": 2})
    cfg["datasets"]["3dhistech"].update(path=str(histech), counts=HISTECH_COUNTS)
    path = tmp_path / "paper_paired.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_snakemake(tmp_path: Path, config: Path, *targets: str) -> subprocess.CompletedProcess:
    cmd = [SNAKEMAKE, *targets, "--cores", "2", "--keep-going", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile", str(config)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=patient(300))


TARGETS = [f"results/data/{ds}/manifest.json" for ds in ("dpdd", "realdof", "3dhistech")]


@pytest.mark.e2e
def test_paired_chain_through_the_workflow(tmp_path, bbbc006_server):  # noqa: F811
    srv = bbbc006_server
    srv.archives["DPDD.zip"] = dpdd_zip()
    srv.archives["RealDOF.zip"] = realdof_zip()
    srv.faults.drop_first.add("DPDD.zip")  # a dropped connection is resumed inside the rule
    histech = write_histech(tmp_path / "histech_copy")
    config = paper_config(tmp_path, dpdd_url=srv.url("DPDD.zip"), realdof_url=srv.url("RealDOF.zip"), histech=histech, tiny_training=True)
    proc = run_snakemake(tmp_path, config, *TARGETS, "results/eval/realdof/dgno-face/real/summary.json")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    data = tmp_path / "results" / "data"
    expected = {"dpdd": {"train": 2, "val": 1, "test": 1}, "realdof": {"test": 2}, "3dhistech": {"train": 2, "val": 1, "test": 1}}
    for ds, counts in expected.items():
        split = read_split(data / ds)
        assert {k: len(v) for k, v in split.items()} == counts, ds
        manifest = read_json(data / ds / "manifest.json")
        assert manifest["channels"] == 3 and manifest["normalise"] == "dtype" and manifest["test_levels"] == ["real"]
        ids = [i for v in split.values() for i in v]
        for sub in ("gt", "blur/real"):
            assert sorted(p.stem for p in (data / ds / sub).glob("*.tif")) == sorted(ids), (ds, sub)
        assert not list(data.glob(f"{ds}.tmp-*"))
    assert read_json(data / "realdof" / "manifest.json")["train_levels"] == []
    assert not any("train_l" in p.name or "_L" in p.name for p in (data / "dpdd" / "gt").iterdir())
    assert read_json(data / "dpdd" / "manifest.json")["archive"]["sha256"]

    # RGB pairs as training reads them: (H, W, 3) in [0, 1], pixel values of the originals.
    test = load_pairs(data / "dpdd", split="test", levels=["real"])
    blur, sharp = pair(3, dtype=np.uint16)
    assert test[0].gt.shape == (*SHAPE, 3)
    assert read_json(data / "dpdd" / "manifest.json")["dtype"] == "uint16"  # all 16 bits of DPDD's PNGs kept
    np.testing.assert_allclose(test[0].gt, sharp / 65535, rtol=1e-6, atol=1e-7)  # not just to 8-bit precision
    np.testing.assert_allclose(test[0].blur, blur / 65535, rtol=1e-6, atol=1e-7)
    histech_train = load_pairs(data / "3dhistech", split="train", levels=["real"])
    assert histech_train[0].blur.shape == (256, 256, 3)
    ranges = [r["range"] for r in srv.served("DPDD.zip")]
    assert any(ranges), "the dropped DPDD download was not resumed with a Range request"

    # RealDOF is scored by the model trained on DPDD, built for 3 channels; nothing trains on RealDOF.
    summary = read_json(tmp_path / "results" / "eval" / "realdof" / "dgno-face" / "real" / "summary.json")
    assert summary["checkpoint"] == "results/train/dpdd/dgno-face/model.pt"
    assert summary["model_spec"]["hparams"]["in_channels"] == 3
    assert not (tmp_path / "results" / "train" / "realdof").exists()


@pytest.mark.e2e
def test_missing_data_fail_with_instructions_and_leave_nothing(tmp_path, bbbc006_server):  # noqa: F811
    srv = bbbc006_server  # serves no DPDD.zip: the download fails with HTTP 404
    missing = tmp_path / "histech_not_here"
    config = paper_config(tmp_path, dpdd_url=srv.url("DPDD.zip"), realdof_url="", histech=missing)
    proc = run_snakemake(tmp_path, config, *TARGETS)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    # 3DHistech: names the folder, says there is no public download and how to get and place it.
    assert f"{missing} does not exist" in out and "no public download" in out and "how to get it:" in out
    # DPDD: the download error, then the manual placement steps naming its folder.
    assert "automatic download failed" in out and "HTTP 404" in out
    assert "Place the files so that resources/dpdd" in out and "train_c/{source,target}/" in out
    # RealDOF with no URL configured: manual placement only.
    assert "Place the files so that resources/realdof" in out
    results = tmp_path / "results"
    assert not list(results.glob("sources/*.json"))
    for ds in ("dpdd", "realdof", "3dhistech"):
        assert not (results / "data" / ds / "manifest.json").exists()
        assert not (results / "data" / ds / "split.csv").exists()
    assert "does not exist" in (results / "logs" / "download" / "3dhistech.log").read_text()


# ------------------------------------------------------------------------------------- config


def _cfg(**datasets) -> dict:
    return {
        "name": "t",
        "seed": 0,
        "datasets": datasets,
        "methods": {"dgno-face": {"model": "dgno-face"}},
        "train": {},
        "evaluate": {},
        "experiments": {},
    }


DPDD = {"source": "dpdd", "train_levels": ["real"], "test_levels": ["real"]}
REALDOF = {"source": "realdof", "train_levels": ["real"], "test_levels": ["real"]}


def test_config_defaults_for_paired_sources():
    cfg = validate_config(_cfg(dpdd=DPDD, realdof={**REALDOF, "trained_on": "dpdd"}))
    assert cfg["datasets"]["dpdd"]["path"] == "resources/dpdd"
    assert cfg["datasets"]["realdof"]["levels"] == {"real": None}
    assert cfg["datasets"]["dpdd"]["check_size"] is True
    # The schema's default URLs are the ones dgno.data.paired_sets documents.
    downloads = load_schema()["properties"]["downloads"]["properties"]
    assert downloads["dpdd_url"]["default"] == manual.DPDD_URL
    assert downloads["realdof_url"]["default"] == manual.REALDOF_URL


@pytest.mark.parametrize(
    "datasets, message",
    [
        ({"realdof": REALDOF}, "datasets.realdof.trained_on: required"),
        ({"realdof": {**REALDOF, "trained_on": "nope"}}, "datasets.realdof.trained_on: 'nope'"),
        ({"realdof": {**REALDOF, "trained_on": "realdof"}}, "must name another dataset"),
        ({"dpdd": {**DPDD, "test_levels": ["z02"]}}, "level 'z02' is not allowed for source 'dpdd'"),
    ],
)
def test_config_rejects_bad_paired_datasets(datasets, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(_cfg(**datasets))


def test_every_model_takes_rgb():
    """DPDD/RealDOF/3DHistech are RGB: training builds in_channels=3 from the prepared images."""
    import torch

    from dgno.models.registry import build_model, list_models

    x = torch.rand(1, 3, 20, 28)
    for name in list_models():
        with torch.no_grad():
            out = build_model(name, scale="smoke", in_channels=3).eval()(x)
        assert out[-1].shape == x.shape, name


# ------------------------------------------------------------------------------------- report


def test_report_sections_compare_with_paper_or_say_how_to_run():
    import pandas as pd

    from dgno.report.results import main_section, real_defocus_section
    from dgno.workflow.config import load_config

    cfg = load_config(ROOT / "config" / "paper.yaml")
    summaries = pd.DataFrame(
        [
            {"dataset": "realdof", "method": "dgno-face", "level": "real", "psnr": 24.0, "ssim": 0.7, "lpips": 0.3},
            {"dataset": "dpdd", "method": "mpt", "level": "real", "psnr": 25.0, "ssim": 0.8, "lpips": 0.2},
            {"dataset": "3dhistech", "method": "dgno-cell", "level": "real", "psnr": 33.0, "ssim": 0.88, "lpips": 0.1, "psnr_y8": 32.5},
        ]
    )
    realdof = real_defocus_section("realdof", cfg, summaries)
    rows = dict(realdof.tables[0].rows)
    face = rows[cfg["methods"]["dgno-face"]["label"]]
    assert (face[0].measured, face[0].paper) == (24.0, 25.08)  # the paper's 'DGNO (Ours)' row
    gkm = rows["GKMNet"][0]
    assert gkm.measured is None and "results/eval/realdof/gkmnet/real/summary.json" in gkm.command
    assert any("DPDNet" in n for n in realdof.notes) and any("trained on dpdd" in n for n in realdof.notes)
    dpdd = dict(real_defocus_section("dpdd", cfg, summaries).tables[0].rows)
    mpt = dpdd[cfg["methods"]["mpt"]["label"]][0]
    assert (mpt.measured, mpt.paper) == (25.0, 26.21)  # Table 5's plain MPT row, not Table 1's MPT+EFCR
    section = main_section("main", cfg, summaries, ROOT / "no-results")
    main = section.tables[0]
    col = main.columns.index(("3dhistech", "psnr"))
    cell = dict(main.rows)["DGNO-Cell"][col]
    # 3DHistech's paper-comparable PSNR is the authors' 8-bit luma PSNR, not the float RGB one (33.0)
    assert (cell.measured, cell.paper) == (32.5, 34.00)
    assert any("BT.601 luma" in n for n in section.notes)


def test_prepare_a_subset_reads_only_the_checked_splits(tmp_path):
    from dgno.data.paired_prepare import prepare

    root = write_histech(tmp_path / "raw")
    out = prepare("3dhistech", root, tmp_path / "prepared", counts={"test": 1}, progress=False)
    assert read_split(out) == {"test": ["test_patch_203"]}
    assert read_json(out / "manifest.json")["train_levels"] == []


def test_hidden_files_beside_the_pairs_are_skipped_and_counted(tmp_path):
    """A copy made on a Mac: AppleDouble '._' forks and .DS_Store beside every image, never taken for one."""
    from dgno.data.paired_prepare import prepare
    from dgno.data.paired_sets import check

    root = write_histech(tmp_path / "raw")
    for png in list(root.rglob("*.png")):
        (png.parent / f"._{png.name}").write_bytes(b"\x00\x05\x16\x07" + bytes(60))
        (png.parent / ".DS_Store").write_bytes(b"Bud1")
    assert check("3dhistech", root, counts={"train": 2, "val": 1, "test": 1}).ok
    out = prepare("3dhistech", root, tmp_path / "prepared", counts={"train": 2, "val": 1, "test": 1}, progress=False)
    manifest = read_json(out / "manifest.json")
    assert manifest["n_train"] == 2 and manifest["hidden_files_skipped"] == {"train/blur": 2, "train/sharp": 2, "val/blur": 1, "val/sharp": 1, "test/blur": 1, "test/sharp": 1}
