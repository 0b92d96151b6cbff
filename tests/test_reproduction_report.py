"""The reproduction table: which paper numbers the released weights cover, the verdicts, Gumbel columns, test sets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from dgno.report import reproduction as rep
from dgno.workflow import reproduction
from dgno.workflow.config import validate_config


@pytest.fixture(scope="module")
def settings() -> dict:
    return reproduction.settings(validate_config(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())))


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
