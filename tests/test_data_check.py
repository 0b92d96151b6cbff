"""`dgno data check NAME`: reports for every dataset, manual-placement checks and the download fallback."""

from __future__ import annotations

import io
import json
import zipfile

import imageio.v3 as iio
import numpy as np
import pytest
from conftest import write_tiny_dataset
from fixtures_http import bbbc006_http_session, bbbc006_server  # noqa: F401

from dgno.data import paired_sets as manual
from dgno.data.bbbc006 import fetch, prepare_dataset
from dgno.data.check import NAMES, data_check
from dgno.data.paired_sets import check_3dhistech, download_or_instructions
from dgno.io import InputError

FAST = dict(backoff=0.0, timeout=10, progress=False)
TINY_HISTECH = {"train": 3, "val": 1, "test": 2}


def _write_pairs(base, blur="blur", sharp="sharp", counts=TINY_HISTECH, size=256):
    img = np.zeros((size, size), np.uint8)
    for split, n in counts.items():
        for sub in (blur, sharp):
            folder = base / split / sub if split else base / sub
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                iio.imwrite(folder / f"patch_{i:05d}.png", img)


# ------------------------------------------------------------------------------------- 3DHistech


def test_3dhistech_empty_dir_gives_instructions(tmp_path):
    report = check_3dhistech(tmp_path)
    assert not report.ok
    text = report.text()
    for needle in ("INCOMPLETE", "no public download", "Geng", "Medical Image Analysis", "66 976", "9 088", "18 909",
                   "train/{blur,sharp}", "dgno data check 3dhistech --root"):
        assert needle in text, needle
    with pytest.raises(InputError, match="how to get it"):
        report.raise_if_incomplete()


def test_3dhistech_complete_layout_is_ok(tmp_path):
    _write_pairs(tmp_path / "copy" / "3DHistech")  # one folder deeper than root is accepted
    report = check_3dhistech(tmp_path / "copy", counts=TINY_HISTECH)
    assert report.ok, report.text()
    assert report.text().startswith(f"3dhistech at {tmp_path / 'copy'}: OK")
    report.raise_if_incomplete()


def test_3dhistech_wrong_counts_names_and_sizes_are_problems(tmp_path):
    _write_pairs(tmp_path, counts=TINY_HISTECH, size=64)
    (tmp_path / "val" / "sharp" / "patch_00000.png").rename(tmp_path / "val" / "sharp" / "other.png")
    report = check_3dhistech(tmp_path, counts={"train": 4, "val": 1, "test": 2})
    text = report.text()
    assert not report.ok
    assert "train: 3 blurred / 3 sharp images, expected 4" in text
    assert "val: 2 image name(s) without a partner" in text
    assert "is 64×64, expected 256×256" in text


def test_3dhistech_folder_aliases(tmp_path):
    _write_pairs(tmp_path, blur="blurred", sharp="gt")
    assert check_3dhistech(tmp_path, counts=TINY_HISTECH).ok


# --------------------------------------------------------------------------------- DPDD, RealDOF


@pytest.mark.parametrize("name, url", [("dpdd", manual.DPDD_URL), ("realdof", manual.REALDOF_URL)])
def test_download_datasets_report_url_and_manual_layout(tmp_path, name, url):
    ok, text = data_check(name, tmp_path / name)
    assert not ok
    assert url in text and "curl -fL -C -" in text and "verify it" in text
    assert ("train_c/{source,target}/ with 350 images" if name == "dpdd" else "{source,target}/ with 50 images") in text


def _realdof_zip(n: int) -> bytes:
    buf = io.BytesIO()
    img = iio.imwrite("<bytes>", np.zeros((20, 30, 3), np.uint8), extension=".png")
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(n):
            zf.writestr(f"RealDOF/source/{i:03d}.png", img)
            zf.writestr(f"RealDOF/target/{i:03d}.png", img)
    return buf.getvalue()


def test_download_or_instructions_downloads_then_checks(bbbc006_server, tmp_path):
    srv = bbbc006_server
    srv.archives["RealDOF.zip"] = _realdof_zip(2)
    srv.faults.drop_first.add("RealDOF.zip")
    root = tmp_path / "realdof"
    report = download_or_instructions("realdof", root, url=srv.url("RealDOF.zip"), counts={"": 2}, **FAST)
    assert report.ok, report.text()
    assert (root / "extracted" / "RealDOF" / "source" / "001.png").is_file()
    n = len(srv.requests)
    assert download_or_instructions("realdof", root, url=srv.url("RealDOF.zip"), counts={"": 2}, **FAST).ok
    assert len(srv.requests) == n  # already present: nothing downloaded


def test_download_failure_falls_back_to_instructions(bbbc006_server, tmp_path):
    srv = bbbc006_server
    report = download_or_instructions("dpdd", tmp_path / "dpdd", url=srv.url("DPDD.zip"), **FAST)
    text = report.text()
    assert not report.ok
    assert "automatic download failed" in text and "HTTP 404" in text and "train_c/{source,target}" in text
    assert not (tmp_path / "dpdd" / "archive" / "dpdd.zip").exists()


# ---------------------------------------------------------------------------------------- BBBC006


def test_bbbc006_check_empty_root_lists_commands(tmp_path):
    ok, text = data_check("bbbc006", tmp_path / "raw")
    assert not ok
    assert "z16 (in-focus ground truth): no folder" in text and "z02 (training input)" in text and "z13 (defocus-level tables)" in text
    assert "https://data.broadinstitute.org/bbbc/BBBC006/BBBC006_v1_images_z_16.zip" in text
    assert "BBBC006_v1_labels.zip" in text and "from dgno.data.bbbc006 import fetch" in text


def test_bbbc006_check_complete_partial_and_prepared(bbbc006_server, tmp_path):
    srv = bbbc006_server
    raw = tmp_path / "raw"
    fetch(raw, planes=srv.planes, base_url=srv.base_url, **FAST)
    kw = dict(per_channel=10, n_labels=10, planes=srv.planes)
    ok, text = data_check("bbbc006", raw, **kw)
    assert ok, text
    assert "z16 (in-focus ground truth): 10 w1 + 10 w2 images" in text and "label masks: 10" in text
    next((raw / "z05").rglob("*_w2*.tif")).unlink()
    ok, text = data_check("bbbc006", raw, base_url=srv.base_url, **kw)
    assert not ok and "10 w1 + 9 w2" in text and srv.url("BBBC006_v1_images_z_05.zip") in text
    prepared = prepare_dataset(raw, tmp_path / "bbbc006_w1", channel="w1", seed=0, n_val_wells=1, progress=False)
    ok, text = data_check("bbbc006", prepared)
    assert ok, text
    assert "blur/z13: 10 of 10 images" in text and "labels: 10 of 10 images" in text


# ------------------------------------------------------------------------------------------- demo


def test_demo_check(tmp_path):
    ok, text = data_check("demo", tmp_path / "results" / "data")
    assert not ok and "snakemake --cores all" in text
    ds = write_tiny_dataset(tmp_path / "results" / "data" / "nuclei", levels=("z02", "z06"))
    (ds / "manifest.json").write_text(json.dumps({"source": "synthetic demo (nuclei)", "levels": {"z02": {}, "z06": {}}}))
    ok, text = data_check("demo", tmp_path / "results" / "data")
    assert ok, text
    assert "nuclei: blur/z06: 6 of 6 images" in text
    (ds / "blur" / "z06" / "img00.tif").unlink()
    ok, text = data_check("demo", tmp_path / "results" / "data", datasets=["nuclei", "shapes_wide"])
    assert not ok and "blur/z06: 1 image(s) of split.csv missing (img00)" in text and "shapes_wide" in text


def test_every_name_has_a_check_and_bad_names_are_refused(tmp_path):
    for name in NAMES:
        ok, text = data_check(name, tmp_path / "nothing")
        assert not ok and text.startswith(f"{name} at ") and "how to get it:" in text
    with pytest.raises(ValueError, match="'bbbc007'.*allowed"):
        data_check("bbbc007", tmp_path)
