"""BBBC006: names, pairing, the by-well split and the full download → unpack → pair → split → prepare chain."""

from __future__ import annotations

import csv
import json
import random
import shutil

import numpy as np
import pytest
import tifffile
from fixtures_http import bbbc006_http_session, bbbc006_server, signature  # noqa: F401

from dgno.data import bbbc006
from dgno.data.bbbc006 import (
    fetch,
    fetch_labels,
    label_mask,
    pair_planes,
    plane_url,
    prepare_dataset,
    split_by_well,
)
from dgno.data.download import DownloadError
from dgno.data.paired import read_split
from dgno.io import InputError, read_image

FAST = dict(backoff=0.0, timeout=10, progress=False)
BLUR_PLANES = (1, 2, 5, 6, 10, 13)


@pytest.fixture(scope="module")
def raw_root(bbbc006_http_session, tmp_path_factory):
    """The miniature BBBC006 fetched once (no faults) for the pairing/prepare tests."""
    srv = bbbc006_http_session
    srv.reset()
    root = tmp_path_factory.mktemp("raw") / "bbbc006"
    fetch(root, planes=srv.planes, base_url=srv.base_url, **FAST)
    return root


def _read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ------------------------------------------------------------------------------------------ names


def test_plane_url_and_archive_names():
    assert plane_url(2) == "https://data.broadinstitute.org/bbbc/BBBC006/BBBC006_v1_images_z_02.zip"
    assert plane_url(16, "http://127.0.0.1:8000/x") == plane_url(16, "http://127.0.0.1:8000/x/") == "http://127.0.0.1:8000/x/BBBC006_v1_images_z_16.zip"
    assert bbbc006.labels_url().endswith("/BBBC006/BBBC006_v1_labels.zip")
    with pytest.raises(ValueError, match="34"):
        plane_url(34)


# ------------------------------------------------------------------------------------ full chain


def test_full_chain_against_loopback_server(bbbc006_server, tmp_path):
    srv = bbbc006_server
    z16 = "BBBC006_v1_images_z_16.zip"
    srv.faults.drop_first.update({z16, "BBBC006_v1_labels.zip"})  # resume mid-way
    srv.faults.fail_first["BBBC006_v1_images_z_02.zip"] = 1  # one 503, then fine
    raw = tmp_path / "raw"
    fetch(raw, planes=srv.planes, base_url=srv.base_url, **FAST)
    assert [r["status"] for r in srv.served(z16)] == [200, 206]
    assert sorted(p.name for p in raw.iterdir()) == ["archives", "labels", "z01", "z02", "z05", "z06", "z10", "z13", "z16"]

    out = prepare_dataset(raw, tmp_path / "bbbc006_w1", channel="w1", seed=0, n_val_wells=1, progress=False)
    ids = sorted(f"{w}_s{s}" for w in srv.wells for s in srv.sites)
    assert sorted(p.stem for p in (out / "gt").iterdir()) == ids
    assert sorted(p.name for p in (out / "blur").iterdir()) == ["z01", "z02", "z05", "z06", "z10", "z13"]
    for level in ("z02", "z13"):
        assert sorted(p.stem for p in (out / "blur" / level).iterdir()) == ids
    # The 16-bit originals are kept byte for byte; reading applies the per-image min-max protocol.
    gt = tifffile.imread(out / "gt" / "a01_s1.tif")
    assert gt.dtype == np.uint16 and gt.shape == srv.shape
    assert list(gt[0, :4]) == signature(16, "a01", 1, "w1")
    assert list(tifffile.imread(out / "blur" / "z06" / "p24_s2.tif")[0, :4]) == signature(6, "p24", 2, "w1")
    x = read_image(out / "gt" / "a01_s1.tif", normalise="minmax")
    assert x.min() == 0.0 and x.max() == 1.0
    labels = tifffile.imread(out / "labels" / "b07_s2.tif")
    assert labels.dtype == np.uint16 and set(np.unique(labels)) == {0, 1, 2}

    split = read_split(out)
    assert sorted(split) == ["test", "train", "val"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["normalise"] == "minmax" and manifest["channel"] == "w1" and manifest["gt_level"] == "z16"
    assert manifest["train_levels"] == ["z02", "z06", "z10"]
    assert manifest["n_train"] + manifest["n_val"] + manifest["n_test"] == len(ids)
    for name in (z16, "BBBC006_v1_labels.zip"):
        rec = manifest["sources"][name]
        assert rec["url"] == srv.url(name) and rec["sha256"] == srv.sha256(name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bbbc006_w1", "raw"]  # no temporary folder left


def test_corrupt_archive_in_chain_leaves_no_output(bbbc006_server, tmp_path):
    srv = bbbc006_server
    srv.faults.corrupt.add("BBBC006_v1_labels.zip")
    raw = tmp_path / "raw"
    with pytest.raises(DownloadError, match=r"BBBC006_v1_labels\.zip.*corrupt.*Fix"):
        fetch_labels(raw, base_url=srv.base_url, **FAST)
    assert not (raw / "labels").exists()
    assert list((raw / "archives").iterdir()) == []


# ---------------------------------------------------------------------------------------- pairing


@pytest.mark.parametrize("channel", ["w1", "w2"])
def test_every_gt_has_all_blur_planes(raw_root, channel, bbbc006_http_session):
    srv = bbbc006_http_session
    pairs = pair_planes(raw_root, blur_planes=BLUR_PLANES, channel=channel)
    assert [(w, s) for w, s, *_ in pairs] == sorted((w, s) for w in srv.wells for s in srv.sites)
    for well, site, gt_path, blurs in pairs:
        assert sorted(blurs) == list(BLUR_PLANES)
        assert list(tifffile.imread(gt_path)[0, :4]) == signature(16, well, site, channel)
        for z, path in blurs.items():
            assert list(tifffile.imread(path)[0, :4]) == signature(z, well, site, channel)


def _copy_planes(raw_root, dest, planes):
    for z in planes:
        shutil.copytree(raw_root / f"z{z:02d}", dest / f"z{z:02d}")
    return dest


def test_pairing_reports_a_missing_image(raw_root, tmp_path):
    root = _copy_planes(raw_root, tmp_path / "raw", [16, 6])
    victim = next(p for p in (root / "z06").rglob("*.tif") if "_c12_s2_w1" in p.name.lower())
    victim.unlink()
    with pytest.raises(InputError, match=r"z06.*lacks 1 w1 image.*c12_s2.*Fix"):
        pair_planes(root, blur_planes=[6], channel="w1")
    pair_planes(root, blur_planes=[6], channel="w2")  # the other channel is complete


def test_pairing_reports_a_missing_plane(raw_root):
    with pytest.raises(InputError, match=r"plane z03 not found.*Fix: .*dgno data check bbbc006"):
        pair_planes(raw_root, blur_planes=[3], channel="w1")


def test_pairing_accepts_archive_named_folders(raw_root, tmp_path):
    root = tmp_path / "raw"
    shutil.copytree(raw_root / "z16", root / "BBBC006_v1_images_z_16")
    shutil.copytree(raw_root / "z02", root / "BBBC006_v1_images_z_02")
    assert len(pair_planes(root, blur_planes=[2], channel="w2")) == 10


# ------------------------------------------------------------------------------------------ split


WELLS_384 = [f"{r}{c:02d}" for r in "abcdefghijklmnop" for c in range(1, 25)]


def test_split_is_by_well_and_4_to_1():
    split = split_by_well(WELLS_384, seed=0, n_val=8)
    groups = {s: {w for w, sp in split.items() if sp == s} for s in ("train", "val", "test")}
    assert set(split) == set(WELLS_384)
    assert len(groups["test"]) == 77 and len(groups["val"]) == 8 and len(groups["train"]) == 299
    assert not (groups["train"] & groups["test"]) and not (groups["val"] & groups["test"]) and not (groups["train"] & groups["val"])


def test_split_is_identical_across_runs_and_input_order_and_differs_between_seeds():
    a = split_by_well(WELLS_384, seed=7, n_val=8)
    shuffled = WELLS_384[:]
    random.Random(1).shuffle(shuffled)
    assert split_by_well(shuffled + shuffled[:10], seed=7, n_val=8) == a
    assert split_by_well(WELLS_384, seed=8, n_val=8) != a


def test_split_rejects_impossible_requests():
    with pytest.raises(ValueError, match="test_fraction=1.5"):
        split_by_well(WELLS_384, seed=0, test_fraction=1.5)
    with pytest.raises(ValueError, match="training well"):
        split_by_well(["a01", "a02"], seed=0, n_val=1)


def test_prepared_split_has_no_well_on_both_sides_and_is_shared_by_channels(raw_root, tmp_path):
    w1 = prepare_dataset(raw_root, tmp_path / "w1", channel="w1", seed=3, n_val_wells=1, progress=False)
    w2 = prepare_dataset(raw_root, tmp_path / "w2", channel="w2", seed=3, n_val_wells=1, progress=False)
    rows = _read_csv(w1 / "split.csv")
    assert rows == _read_csv(w2 / "split.csv")
    by_well: dict[str, set[str]] = {}
    for row in rows:
        by_well.setdefault(row["id"].split("_s")[0], set()).add(row["split"])
    assert all(len(s) == 1 for s in by_well.values())
    assert list(tifffile.imread(w2 / "gt" / "a01_s1.tif")[0, :4]) == signature(16, "a01", 1, "w2")
    again = prepare_dataset(raw_root, tmp_path / "w1", channel="w1", seed=3, n_val_wells=1, progress=False)
    assert _read_csv(again / "split.csv") == rows  # re-running replaces the dataset with the same split


# ---------------------------------------------------------------------------------------- prepare


def test_prepare_failure_leaves_nothing(raw_root, tmp_path):
    root = _copy_planes(raw_root, tmp_path / "raw", [16, 2, 6, 10])  # no labels
    out = tmp_path / "data" / "bbbc006_w1"
    out.parent.mkdir()
    with pytest.raises(InputError, match=r"label masks not found.*Fix"):
        prepare_dataset(root, out, channel="w1", seed=0, extra_planes=(), n_val_wells=0, progress=False)
    assert list(out.parent.iterdir()) == []
    ok = prepare_dataset(root, out, channel="w1", seed=0, extra_planes=(), n_val_wells=0, labels=False, progress=False)
    assert sorted(p.name for p in ok.iterdir()) == ["blur", "gt", "manifest.json", "split.csv"]
    manifest = json.loads((ok / "manifest.json").read_text())
    assert manifest["sources"]["BBBC006_v1_images_z_16.zip"]["sha256"] is None  # unpacked by hand: unknown


def test_prepare_refuses_a_folder_that_is_not_a_dataset(raw_root, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious.txt").write_text("keep me")
    with pytest.raises(InputError, match="not a dataset"):
        prepare_dataset(raw_root, tmp_path / "out", channel="w1", seed=0, progress=False)
    with pytest.raises(ValueError, match="channel='w3'"):
        prepare_dataset(raw_root, tmp_path / "x", channel="w3", seed=0, progress=False)


def test_label_mask_conversions(tmp_path):
    import imageio.v3 as iio

    binary = np.zeros((12, 12), np.uint8)
    binary[1:4, 1:4] = 255
    binary[7:10, 6:11] = 255
    iio.imwrite(tmp_path / "binary.png", binary)
    assert sorted(np.unique(label_mask(tmp_path / "binary.png"))) == [0, 1, 2]
    rgb = np.zeros((12, 12, 3), np.uint8)
    rgb[1:4, 1:4] = (255, 0, 0)
    rgb[7:10, 6:11] = (0, 255, 0)
    rgb[0, 11] = (0, 0, 255)
    iio.imwrite(tmp_path / "rgb.png", rgb)
    m = label_mask(tmp_path / "rgb.png")
    assert m.dtype == np.uint16 and m[0, 0] == 0 and len(np.unique(m)) == 4
