"""The authors' table: which paper numbers the released weights cover, the verdicts, Gumbel columns, test sets."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT

from dgno.report import authors as rep
from dgno.workflow import authors
from dgno.workflow.config import validate_config


@pytest.fixture(scope="module")
def settings() -> dict:
    return authors.settings(validate_config(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())))


def _find(cells, **kw):
    return [c for c in cells if all(c[k] == v for k, v in kw.items())]


def test_the_cells_the_released_networks_cover(settings):
    cells = rep.paper_cells(settings)
    (w1,) = _find(cells, table="main", method="dgno-face-authors", dataset="bbbc006_w1", metric="psnr")
    assert w1["paper"] == 37.09 and w1["levels"] == ["z02", "z06", "z10"]
    (z13,) = _find(cells, table="defocus_w2", method="dgno-cell-authors", metric="psnr", levels=["z13"])
    assert z13["paper"] == 32.95
    # ablation cells whose settings are the released w1 networks': Face avg_jump/dirichlet, Cell jump/neumann, W_e 8 and T 2
    assert [c["row"] for c in _find(cells, table="flux_boundary")] == ["avg_jump / dirichlet", "jump / neumann"]
    assert [c["paper"] for c in _find(cells, table="flux_boundary")] == [37.09, 37.22]
    assert [c["method"] for c in _find(cells, table="element_size_T")] == ["dgno-cell-authors"]
    assert not _find(cells, table="flux_boundary", dataset="bbbc006_w2")  # the ablations are on w1
    assert {c["method"] for c in _find(cells, table="stardist")} == {"blurred", "dgno-face-authors", "dgno-cell-authors", "sharp"}
    assert {c["dataset"] for c in _find(cells, table="main")} == {"bbbc006_w1", "bbbc006_w2", "3dhistech"}
    assert not _find(cells, table="stardist", metric="n_images")


def test_verdicts_say_the_size_of_the_gap():
    assert rep.verdict(37.12, 37.09, 0.05, "psnr") == "reproduced (|Δ| ≤ 0.05 dB)"
    assert rep.verdict(36.99, 37.09, 0.05, "psnr") == "not reproduced: Δ = -0.10 dB, 2.0× the tolerance"
    assert rep.verdict(0.7311, 0.7211, 0.01, "ap70").startswith("reproduced")
    assert rep.verdict(None, 0.9, 0.002, "ssim") == "not measured"


def _summary(path: Path, psnr: float, n: int = 4, **extra) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"psnr": psnr, "ssim": 0.9, "lpips": 0.1, "n_images": n, **extra}))


def test_table_pools_levels_shows_gumbel_and_follows_the_manifest(settings, tmp_path):
    results = tmp_path / "results"
    for ds in ("bbbc006_w1", "bbbc006_w2"):
        manifest = {"generator": "dgno.data.bbbc006_authors.prepare_dataset"}
        if ds == "bbbc006_w2":
            manifest["test_sets"] = {lvl: {"split": "by_well", "note": "no name maps"} for lvl in ("z01", "z05", "z13")}
        (results / "data" / ds).mkdir(parents=True)
        (results / "data" / ds / "manifest.json").write_text(json.dumps(manifest))
        for m in settings["methods"]:
            for i, lvl in enumerate(settings["datasets"][ds]["test_levels"]):
                base = results / "eval" / ds / m / lvl
                _summary(base / "summary.json", 37.0 + i)
                for r in range(1, settings["gumbel_repeats"] + 1):
                    _summary(base / "gumbel" / f"r{r}" / "summary.json", 37.0 + i + 0.01 * r)
    frame = rep.build_table(settings, results)
    row = frame[(frame.table == "main") & (frame.dataset == "bbbc006_w1") & (frame.method == "dgno-cell-authors") & (frame.metric == "psnr")].iloc[0]
    assert row["measured"] == pytest.approx(38.0) and row["n_images"] == 12  # z02, z06, z10 pooled
    assert row["gumbel_n"] == 5 and row["gumbel_mean"] == pytest.approx(38.03) and row["gumbel_sd"] == pytest.approx(0.0158, abs=1e-4)
    assert row["test_set"].startswith("the authors' own test images")
    unseen = frame[(frame.table == "defocus_w2") & (frame.levels == "z01")].iloc[0]
    assert unseen["test_set"].startswith("by-well split for z01") and unseen["measured"] == pytest.approx(40.0)
    histech = frame[frame.dataset == "3dhistech"]
    assert (histech["verdict"] == "not run").all() and histech["test_set"].str.contains("not placed by hand").all()
    assert frame[frame.table == "stardist"]["verdict"].eq("not measured").all()  # no StarDist table written here


# ---------------------------------------------------------------------- time labels and data reading


def _bench(root: Path, rel: str, seconds: float) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(f"s\th:m:s\n{seconds}\t0:00:01\n")


@pytest.mark.parametrize(
    "device, label",
    [("cuda: NVIDIA H100 80GB HBM3", "GPU time (NVIDIA H100 80GB HBM3)"), ("cpu: AMD EPYC 7B13 (1 threads)", "CPU time")],
)
def test_time_is_labelled_by_the_device_the_jobs_recorded(tmp_path, device, label):
    rels = ["results/benchmarks/evaluate/bbbc006_w1/dgno-cell-authors/z02.tsv", "results/benchmarks/evaluate_gumbel/bbbc006_w1/dgno-cell-authors/z02.tsv"]
    for rel in rels:
        _bench(tmp_path, rel, 90.0)
    base = tmp_path / "results" / "eval" / "bbbc006_w1" / "dgno-cell-authors" / "z02"
    _summary(base / "summary.json", 37.0, provenance={"device": device}, runtime={"device": "cuda:0" if device.startswith("cuda") else "cpu"})
    _summary(base / "gumbel" / "summary.json", 37.0, provenance={"device": device})
    t = rep.job_time({"benchmarks": [*rels, "results/benchmarks/stardist_authors/bbbc006_w1.tsv"]}, tmp_path)
    assert t["seconds"] == 180.0 and t["jobs"] == 2 and t["devices"] == {(device if device.startswith("cuda") else "cpu"): 2} and t["missing"] == ["results/benchmarks/stardist_authors/bbbc006_w1.tsv"]
    assert rep.time_label(t["devices"]) == label
    assert rep._time_note({"time": t}).startswith(f"{label} of this target: 3.0 min over 2 job(s)")


def test_mixed_or_unrecorded_devices_are_said_as_they_are():
    assert rep.time_label({"cuda": 3}) == "GPU time (GPU model not recorded)"  # an older summary: cuda:0 at run time, no model
    assert rep.time_label({"cuda: NVIDIA A100": 2, "cpu": 1}) == "Time (1 job(s) on the CPU; 2 job(s) on NVIDIA A100)"
    assert rep.time_label({"unknown": 2}) == rep.time_label({}) == "Time (device not recorded)"


def _prepared(tmp_path: Path, listing_planes) -> Path:
    """The authors' w1 prepared from a Mac-packed replica with Broad names; the Broad listing from local folders of `listing_planes`."""
    from bbbc006_replica import unpack_replica, write_broad

    from dgno.data.bbbc006_authors import prepare_dataset
    from dgno.data.bbbc006_listing import broad_listing

    raw = unpack_replica(tmp_path / "raw", "broad", mac=True)
    write_broad(raw, planes=(1, 5, 13, 16, *listing_planes))
    listing = broad_listing(raw, base_url="http://127.0.0.1:9/nowhere/", retries=0, timeout=5)
    return prepare_dataset(raw, tmp_path / "results" / "data" / "bbbc006_w1", channel="w1", seed=0, broad_root=raw, n_val_wells=1, broad_listing=listing, progress=False)


def _section(settings: dict, results: Path):
    settings = {**settings, "gumbel_repeats": 0}
    for ds in settings["datasets"]:
        for m in settings["methods"]:
            for lvl in settings["datasets"][ds]["test_levels"]:
                _summary(results / "eval" / ds / m / lvl / "summary.json", 37.0)
    rep.write_table(settings, results, results / "tables" / "authors.csv")
    return rep.authors_section({}, results)


def test_the_section_says_how_the_data_were_read(settings, tmp_path):
    _prepared(tmp_path, (2, 6, 10))
    sec = _section(settings, tmp_path / "results")
    head, rows = sec.text_tables[-1]
    reading = {what: how for ds, what, how in rows if ds == "bbbc006_w1"}
    assert reading["pairing"].startswith("12 fields, 12 GT + 36 blur files; paired by field")
    assert "100 hidden file(s) skipped (macOS ._* forks, dot-files: never images: test/GT 9, test/blur 25, train/GT 17, train/blur 49)" in reading["pairing"]
    assert reading["plane rule"].startswith("asked: auto; files decided by: broad 36 (100%)")
    assert reading["blur-order check"].startswith("passed: expected sharpness(z02) < sharpness(z06) < sharpness(z10); median sharpness z02 ")
    assert "0% of the checked fields out of order (allowed 5%); independent: yes" in reading["blur-order check"]
    assert reading["Broad listing (z02/z06/z10)"].startswith("listed: z02: 24 names from the unpacked folder")
    assert reading["Broad mapping (unseen levels, labels)"].startswith("mapped: ") and "identical to Broad z16 in 12 of 12 fields" in reading["Broad mapping (unseen levels, labels)"]
    verdicts = [r[10] for r in sec.text_tables[0][1]]
    assert not any("per-plane value" in v for v in verdicts)  # every plane verified: nothing marked


def test_per_plane_numbers_are_marked_when_the_planes_are_unverified(settings, tmp_path):
    _prepared(tmp_path, ())  # no listing anywhere: the planes by sharpness
    sec = _section(settings, tmp_path / "results")
    reading = {what: how for ds, what, how in sec.text_tables[-1][1] if ds == "bbbc006_w1"}
    assert reading["plane rule"].startswith("asked: auto; files decided by: sharpness 36 (100%)")
    assert reading["blur-order check"].startswith("not independent:") and "assigned by sharpness; the order check is then not independent" in reading["blur-order check"]
    assert reading["Broad listing (z02/z06/z10)"].startswith("unavailable: z02: unavailable (")
    frame = pd.read_csv(tmp_path / "results" / "tables" / "authors.csv", keep_default_na=False)
    marked = frame[frame["caveat"] != ""]
    assert set(marked["dataset"]) == {"bbbc006_w1"} and set(marked["levels"]) == {"z06"}  # StarDist at z06: one plane
    assert (frame[(frame["table"] == "main") & (frame["dataset"] == "bbbc006_w1")]["caveat"] == "").all()  # pooled: not marked
    assert any("pooled numbers do not depend on which file is which plane" in n for n in sec.notes)
