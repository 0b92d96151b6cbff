"""Target `authors`: the authors' archive, split and released weights through Snakemake, offline.

A replica of the authors' BBBC006.tar.gz as it really may be (tests/bbbc006_replica.py: Broad names
with a different UUID per plane, macOS AppleDouble files and .DS_Store beside the images, members in
shuffled order with pax headers), the Broad archives of the same fields and the six released
checkpoints at toy size (rebuilt from tests/fixtures/authors) are served on 127.0.0.1; the workflow
downloads, lists the Broad z02/z06/z10 archives' names over HTTP Range, pairs, identifies every plane,
checks, splits, maps, imports, evaluates (argmax and Gumbel repeats), segments and writes the
authors' table and report, with the default plane rule.
"""

from __future__ import annotations

import json
import re
import subprocess
from html import unescape
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from bbbc006_replica import CHANNELS, TEST_FIELDS, WELLS, archive_members, broad_name, broad_zips, plane_image, targz_bytes
from conftest import ROOT, SNAKEMAKE, patient
from fixtures_authors import toy_release
from fixtures_http import serve

from dgno.data import bbbc006
from dgno.workflow import authors
from dgno.workflow.config import ConfigError, validate_config

NAMES = ("DGNO_BBBC006_w1_Face", "DGNO_BBBC006_w1_Cell", "DGNO_BBBC006_w2_Face", "DGNO_BBBC006_w2_Cell", "DGNO_3DHistech_Face", "DGNO_3DHistech_Cell")


def _jobs(text: str) -> dict[str, int]:
    table = text.split("Job stats:")[1].split("total")[0]
    return {name: int(n) for name, n in re.findall(r"^(\w+)\s+(\d+)\s*$", table, re.M)}


@pytest.mark.slow
def test_dry_run_of_the_slurm_profile_lists_archive_imports_and_evaluations():
    """The documented dry run, verbatim from the repository root: `snakemake -n --profile slurm authors`."""
    proc = subprocess.run([SNAKEMAKE, "-n", "--profile", "slurm", "authors"], cwd=ROOT, capture_output=True, text=True, timeout=patient(300))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    jobs = _jobs(proc.stdout + proc.stderr)
    assert jobs["bbbc006_authors_archive"] == 1 and jobs["authors_checkpoint"] == 6 and jobs["import_authors"] == 6
    # DGNO-Face and DGNO-Cell on w1 and w2 at z02/z06/z10 and the unseen z01/z05/z13; 5 Gumbel repeats each in one job
    assert jobs["evaluate"] == 2 * 2 * 6 and jobs["evaluate_gumbel"] == 2 * 2 * 6
    assert jobs["stardist_authors"] == 1 and jobs["authors_table"] == 1 and jobs["report_authors"] == 1
    assert "train" not in jobs  # nothing is trained
    for name in NAMES:
        assert f"resources/authors/{name}.pth" in proc.stdout


def _paper(**extra) -> dict:
    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    cfg.update(extra)
    return cfg


def test_hand_placed_3dhistech_joins_the_target_when_its_folders_are_there(tmp_path):
    cfg = _paper()
    cfg["datasets"]["3dhistech"]["path"] = str(tmp_path / "histech")
    before = validate_config(cfg)
    assert "3dhistech" in authors.datasets(before) and "3dhistech" not in authors.evaluated(before)
    assert len(authors.imports(before)) == 6  # the six checkpoints are imported either way
    assert not any("/3dhistech/" in s for s in authors.summaries(before))
    assert not authors.settings(before)["datasets"]["3dhistech"]["placed"]
    for split in ("train", "val", "test"):
        for sub in ("blur", "sharp"):
            (tmp_path / "histech" / split / sub).mkdir(parents=True)
    after = validate_config(cfg)
    assert authors.placed(after, "3dhistech")
    assert "results/eval/3dhistech/dgno-cell-authors/real/summary.json" in authors.summaries(after)
    assert authors.settings(after)["datasets"]["3dhistech"]["placed"]  # decided when the DAG is built


def test_authors_settings_and_config_checks():
    cfg = validate_config(_paper())
    s = authors.settings(cfg)
    assert s["tolerances"] == {"psnr": 0.05, "ssim": 0.002, "lpips": 0.005, "ap": 0.01} and s["gumbel_repeats"] == 5
    assert s["networks"]["dgno-face-authors"]["bbbc006_w2"]["flux_mode"] == "jump"  # the released w2 Face option file
    assert s["stardist"] == {"dataset": "bbbc006_w1", "level": "z06"}
    assert ("bbbc006_w1", "dgno-cell-authors", "z06") in authors.restored_needed(cfg)
    with pytest.raises(ConfigError, match=r"authors.methods: 'dgno-cell' has no authors' weights"):
        validate_config(_paper(authors={"methods": ["dgno-cell"]}))
    bad = _paper()
    bad["datasets"]["dpdd"]["split"] = "authors"
    with pytest.raises(ConfigError, match=r"datasets.dpdd.split: only for source 'bbbc006'"):
        validate_config(bad)


# ------------------------------------------------------------------------------------- end to end


def _config(tmp: Path, base_url: str, options: Path, **datasets) -> Path:
    """A toy configuration of target authors: CPU, untiled, no LPIPS, 2 Gumbel repeats."""
    ds = {"source": "bbbc006", "split": "authors", "n_val_wells": 1, "train_levels": ["z02", "z06", "z10"]}
    cfg = {
        "name": "authors-toy",
        "seed": 0,
        "device": "cpu",
        "scale": "smoke",
        "downloads": {
            "bbbc006_url": base_url,
            "bbbc006_authors_url": base_url + "BBBC006.tar.gz",
            "authors_checkpoints_url": base_url,
            "authors_options": str(options),
            "raw_dir": str(tmp / "resources"),
            "retries": 1,
        },
        "datasets": {
            "bbbc006_w1": {**ds, "channel": "w1", "paper_column": "bbbc006_w1", "test_levels": ["z02", "z06", "z01"], **datasets.get("bbbc006_w1", {})},
            "bbbc006_w2": {**ds, "channel": "w2", "paper_column": "bbbc006_w2", "test_levels": ["z02"]},
            "3dhistech": {"source": "3dhistech", "path": str(tmp / "not_placed"), "paper_column": "3dhistech", "train_levels": ["real"], "test_levels": ["real"]},
        },
        "methods": {
            m: {"model": m.removesuffix("-authors"), "label": m, "paper_key": m.removesuffix("-authors").replace("-", "_"), "authors_checkpoints": {
                "bbbc006_w1": f"DGNO_BBBC006_w1_{v}", "bbbc006_w2": f"DGNO_BBBC006_w2_{v}", "3dhistech": f"DGNO_3DHistech_{v}"}}
            for m, v in (("dgno-face-authors", "Face"), ("dgno-cell-authors", "Cell"))
        },  # fmt: skip
        "train": {"iterations": 1},
        "evaluate": {"tile": None, "lpips": False, "gumbel_repeats": 2},
        "experiments": {"stardist": {"dataset": "bbbc006_w1", "level": "z06", "methods": ["dgno-cell-authors"], "model": "train", "epochs": 1, "steps_per_epoch": 1, "patch": 16}},
        "authors": {"methods": ["dgno-face-authors", "dgno-cell-authors"]},
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _snakemake(tmp: Path, config: Path, *targets: str, timeout: float = 900) -> subprocess.CompletedProcess:
    cmd = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp), "--configfile", str(config), "--cores", "2", *targets]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=patient(timeout), env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture
def release(tmp_path):
    """The six toy checkpoints and their option files."""
    return toy_release(tmp_path / "release")


LISTED = ("BBBC006_v1_images_z_02.zip", "BBBC006_v1_images_z_06.zip", "BBBC006_v1_images_z_10.zip")


def _mac_archive() -> bytes:
    """The authors' archive packed on a Mac, with the Broad names of every plane, in shuffled pax order."""
    return targz_bytes(archive_members("broad", mac=True), shuffle=11)


@pytest.mark.e2e
@pytest.mark.long  # 90 s: in make rehearsal, which runs the same target inside the paper DAG
def test_authors_target_end_to_end_at_toy_size(tmp_path, release):
    files, options = release
    archives = {"BBBC006.tar.gz": _mac_archive(), **broad_zips(listed=(2, 6, 10)), **files}
    with serve(archives) as srv:
        config = _config(tmp_path, srv.base_url, options)
        proc = _snakemake(tmp_path, config, "authors")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-8000:]
        assert "rule train:" not in out and "rule bbbc006_plane:" in out and "rule bbbc006_broad_names:" in out
        assert len(srv.served("BBBC006.tar.gz")) == 1
        for name in LISTED:  # only the central directory of the planes the archive holds: one Range request each
            (request,) = srv.served(name)
            assert request["status"] == 206 and request["sent"] < len(archives[name]) / 4
        for name in NAMES:  # all six downloaded and imported, 3DHistech's too although its data are not placed
            assert srv.served(f"{name}.pth")
    _check_prepared_dataset(tmp_path / "results" / "data" / "bbbc006_w1", tmp_path / "resources" / "bbbc006")
    _check_gumbel(tmp_path)
    _check_report(tmp_path)


def _check_prepared_dataset(data: Path, raw: Path) -> None:
    """Pairing, plane check, split and the Broad mapping of the unseen level, as the workflow wrote them."""
    manifest = json.loads((data / "manifest.json").read_text())
    planes = manifest["planes"]
    assert manifest["generator"] == "dgno.data.bbbc006_authors.prepare_dataset" and planes["requested"] == "auto"
    assert planes["rule"] == "broad" and planes["decided_by"] == {"broad": 36}  # every plane from the Broad listing, exactly
    assert planes["check"]["passed"] and planes["check"]["independent"] and planes["check"]["out_of_order"] == []
    assert planes["broad_listing"]["status"] == "listed" and "HTTP Range" in planes["broad_listing"]["planes"]["z06"]["source"]
    assert sum(manifest["pairing"]["hidden_files_skipped"].values()) == 100 and manifest["warnings"] == []
    for key, by_plane in planes["files"].items():
        w, s = key.split("/")[1].split("_s")
        assert {z: f["file"] for z, f in by_plane.items()} == {f"z{z:02d}": broad_name(w, int(s), "w1", z) for z in (2, 6, 10)}
    assert manifest["broad"]["status"] == "mapped" and manifest["broad"]["gt_identical_to_broad_z16"] == [12, 12]
    split = dict(line.split(",") for line in (data / "split.csv").read_text().splitlines()[1:])
    assert {k for k, v in split.items() if v == "test"} == {bbbc006.image_id(w, s) for w, s in TEST_FIELDS}  # the authors' test set
    val = [k for k, v in split.items() if v == "val"]
    assert val and len({k.split("_s")[0] for k in val}) == 1  # the train fields of one well (n_val_wells: 1)
    w, s = sorted(TEST_FIELDS)[0]
    ident = bbbc006.image_id(w, s)
    assert np.array_equal(_tif(data / "blur" / "z06" / f"{ident}.tif"), plane_image(w, s, "w1", 6))
    assert np.array_equal(_tif(data / "blur" / "z01" / f"{ident}.tif"), _tif(next((raw / "z01").rglob(broad_name(w, s, "w1", 1)))))
    assert (data / "labels" / f"{ident}.tif").exists()
    assert json.loads((raw / "authors.json").read_text())["counts"]["test"]["GT"] == {c: len(TEST_FIELDS) for c in CHANNELS} | {"other": 0, "hidden": 9}  # ._* of both channels and a .DS_Store


def _tif(path: Path) -> np.ndarray:
    import tifffile

    return tifffile.imread(path)


def _check_gumbel(tmp: Path) -> None:
    """Repeats differ from each other; the same seed reproduces a repeat; argmax is the plain evaluation."""
    from dgno.inference.evaluate import evaluate_checkpoint
    from dgno.inference.repeats import evaluate_repeats

    base = tmp / "results" / "eval" / "bbbc006_w1" / "dgno-cell-authors" / "z02"
    model, data = tmp / "results" / "authors" / "bbbc006_w1" / "dgno-cell-authors" / "model.pt", tmp / "results" / "data" / "bbbc006_w1"
    r1, r2 = (pd.read_csv(base / "gumbel" / f"r{r}" / "per_image.csv") for r in (1, 2))
    argmax = pd.read_csv(base / "per_image.csv")
    assert not np.allclose(r1["psnr"], r2["psnr"]) and not np.allclose(r1["psnr"], argmax["psnr"])
    again = evaluate_repeats(model, data, "z02", tmp / "again", repeats=1, seed=0, device="cpu", with_lpips=False, progress=False)
    assert np.array_equal(pd.read_csv(tmp / "again" / "r1" / "per_image.csv")["psnr"], r1["psnr"]) and again["repeats"] == 1
    plain = evaluate_checkpoint(model, data, "z02", tmp / "plain", device="cpu", with_lpips=False, progress=False, save_restored=False)
    assert plain["psnr"] == json.loads((base / "summary.json").read_text())["psnr"] and plain["routing"] == "argmax"
    summary = json.loads((base / "gumbel" / "summary.json").read_text())
    assert summary["repeats"] == 2 and summary["psnr_sd"] > 0 and [r["psnr"] for r in summary["per_repeat"]] == pytest.approx([r1["psnr"].mean(), r2["psnr"].mean()])


def _check_report(tmp: Path) -> None:
    table = pd.read_csv(tmp / "results" / "tables" / "authors.csv")
    w1 = table[(table["dataset"] == "bbbc006_w1") & (table["table"] == "main") & (table["metric"] == "psnr")]
    assert set(w1["method"]) == {"dgno-face-authors", "dgno-cell-authors"} and w1["measured"].notna().all()
    assert set(w1["paper"]) == {37.09, 37.22}  # paper_values.yaml, Table 1
    assert (w1["verdict"].str.startswith("reproduced") | w1["verdict"].str.startswith("not reproduced: Δ")).all()
    assert (w1["gumbel_n"] == 2).all() and "the authors' own test images" in w1["test_set"].iloc[0]
    defocus = table[table["table"] == "defocus_w1"]
    assert set(defocus["levels"]) == {"z01"} and defocus["measured"].notna().all()  # unseen level from the mapped Broad plane
    assert set(table[table["table"] == "stardist"]["method"]) == {"blurred", "dgno-face-authors", "dgno-cell-authors", "sharp"}
    assert table[table["table"] == "stardist"]["measured"].notna().all()
    histech = table[table["dataset"] == "3dhistech"]
    assert len(histech) and (histech["verdict"] == "not run").all()
    html = unescape((tmp / "report" / "authors.html").read_text())
    assert "Reproduction from the authors' released weights" in html and "CPU time of this target" in html and "GPU time" not in html  # device: cpu
    assert "files decided by: broad 36 (100%)" in html and "independent: yes" in html and "100 hidden file(s) skipped" in html
    assert "3dhistech: not run" in html and "not_placed" in html
    assert re.search(r"\d+ of \d+ measured paper numbers reproduced", html)


@pytest.mark.e2e
@pytest.mark.long  # 60 s: the same target with the Broad listing unreachable
def test_without_the_broad_listing_the_target_runs_by_sharpness_and_says_so(tmp_path, release):
    files, options = release
    archives = {"BBBC006.tar.gz": _mac_archive(), **broad_zips(), **{k: v for k, v in files.items() if "w1_Cell" in k}}  # no z02/z06/z10 archives
    with serve(archives) as srv:
        config = _config(tmp_path, srv.base_url, options)
        cfg = yaml.safe_load(config.read_text())
        cfg["datasets"].pop("bbbc006_w2")
        cfg["datasets"].pop("3dhistech")
        cfg["methods"] = {"dgno-cell-authors": {**cfg["methods"]["dgno-cell-authors"], "authors_checkpoints": {"bbbc006_w1": "DGNO_BBBC006_w1_Cell"}}}
        cfg.update(authors={"methods": ["dgno-cell-authors"]}, experiments={})
        cfg["evaluate"]["gumbel_repeats"] = 0
        config.write_text(yaml.safe_dump(cfg))
        proc = _snakemake(tmp_path, config, "authors")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
        assert [r["status"] for name in LISTED for r in srv.served(name)] == [404] * 3
    listing = json.loads((tmp_path / "resources" / "bbbc006" / "broad_names.json").read_text())
    assert listing["status"] == "unavailable" and "Not Found" in listing["planes"]["z02"]["reason"]
    planes = json.loads((tmp_path / "results" / "data" / "bbbc006_w1" / "manifest.json").read_text())["planes"]
    assert planes["rule"] == "sharpness" and planes["check"]["status"] == "not independent"
    html = (tmp_path / "report" / "authors.html").read_text()
    assert "files decided by: sharpness 36 (100%)" in html and "assigned by sharpness; the order check is then not independent" in html
    assert "unavailable: z02: unavailable (HTTPError: Not Found)" in html


@pytest.mark.e2e
def test_opaque_names_fall_back_to_the_by_well_split_and_an_interrupted_download_resumes(tmp_path, release):
    files, options = release
    archives = {"BBBC006.tar.gz": targz_bytes(archive_members("opaque")), **broad_zips(), **{k: v for k, v in files.items() if "w1_Cell" in k}}
    with serve(archives) as srv:
        srv.faults.drop_first.add("BBBC006.tar.gz")
        config = _config(tmp_path, srv.base_url, options, bbbc006_w1={"test_levels": ["z02", "z01"]})
        cfg = yaml.safe_load(config.read_text())
        cfg["authors"] = {"methods": ["dgno-cell-authors"]}
        cfg["experiments"] = {}
        config.write_text(yaml.safe_dump(cfg))
        proc = _snakemake(tmp_path, config, "results/eval/bbbc006_w1/dgno-cell-authors/z01/summary.json", "results/eval/bbbc006_w1/dgno-cell-authors/z02/summary.json")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
        tries = srv.served("BBBC006.tar.gz")
        assert len(tries) == 2 and tries[1]["range"] == f"bytes={tries[0]['sent']}-"  # resumed where the connection dropped
    data = tmp_path / "results" / "data" / "bbbc006_w1"
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["broad"]["status"] == "no_names" and manifest["test_sets"]["z01"]["split"] == "by_well"
    wells = bbbc006.split_by_well(WELLS, seed=0, n_val=1)
    unseen = pd.read_csv(tmp_path / "results" / "eval" / "bbbc006_w1" / "dgno-cell-authors" / "z01" / "per_image.csv")
    assert sorted(unseen["id"]) == sorted(f"by_well-{w}_s{s}" for w in WELLS for s in (1, 2) if wells[w] == "test")
    seen = pd.read_csv(tmp_path / "results" / "eval" / "bbbc006_w1" / "dgno-cell-authors" / "z02" / "per_image.csv")
    assert not any(i.startswith("by_well-") for i in seen["id"]) and len(seen) == len(TEST_FIELDS)
