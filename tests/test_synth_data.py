"""Synthetic generators (dgno.data.synth) and the demo dataset writer (dgno.data.demo)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tifffile
from scipy import ndimage

from dgno.data import demo, synth
from dgno.data.demo import write_demo_dataset

LEVELS = {"mild": [0.6, 1.2], "medium": [2.0, 3.0], "strong": [5.0, 7.0]}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(1.0 / np.mean((a.astype(np.float64) - b) ** 2)))


def _unit(arr: np.ndarray) -> np.ndarray:
    """Decode like the readers do: integers by per-image min-max, floats as stored."""
    x = arr.astype(np.float64)
    return (x - x.min()) / (x.max() - x.min()) if arr.dtype.kind == "u" else x


# ----------------------------------------------------------------------------- generators


def test_generators_are_deterministic_by_seed():
    a, la = synth.render_nuclei((64, 80), n_nuclei=6, seed=7)
    b, lb = synth.render_nuclei((64, 80), n_nuclei=6, seed=7)
    c, _ = synth.render_nuclei((64, 80), n_nuclei=6, seed=8)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(la, lb)
    assert not np.array_equal(a, c)
    assert a.dtype == np.float32 and la.dtype == np.uint16 and a.shape == la.shape == (64, 80)
    assert a.min() >= 0.0 and a.max() <= 1.0
    s1, s2 = synth.render_shapes((64, 80), seed=3), synth.render_shapes((64, 80), seed=3)
    np.testing.assert_array_equal(s1, s2)
    assert not np.array_equal(s1, synth.render_shapes((64, 80), seed=4))
    assert s1.dtype == np.float32 and s1.min() >= 0.0 and s1.max() <= 1.0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_nuclei_labels_are_consistent_instances(seed):
    clean, labels = synth.render_nuclei((128, 128), n_nuclei=12, seed=seed, noise=False)
    noisy, labels_noisy = synth.render_nuclei((128, 128), n_nuclei=12, seed=seed)
    np.testing.assert_array_equal(labels, labels_noisy)  # noise never changes the scene
    ids = np.unique(labels[labels > 0])
    assert 8 <= ids.size <= 12
    np.testing.assert_array_equal(ids, np.arange(1, ids.size + 1))  # consecutive ids
    for i in ids:
        _, n_components = ndimage.label(labels == i)  # 4-connectivity
        assert n_components == 1, f"label {i} has {n_components} components"
    # Labels only where the image is bright: every labelled pixel of the clean image is brighter than
    # all background pixels at least 3 px away from any nucleus, and each nucleus clearly stands out
    # of the noisy image too.
    background = ~ndimage.binary_dilation(labels > 0, iterations=3)
    assert clean[labels > 0].min() > clean[background].max()
    bg_level = float(np.median(noisy[background]))
    for i in ids:
        assert noisy[labels == i].mean() > 2.5 * bg_level


def test_shapes_contain_bright_structures_on_dark_background():
    img = synth.render_shapes((96, 96), seed=5)
    assert np.median(img) <= 0.05  # dark background dominates
    assert img.max() >= 0.4 and (img >= 0.4).mean() > 0.02


def test_defocus_sigma_range_grows_with_dz():
    ranges = [synth.defocus_sigma_range(dz) for dz in (0, 3, 6, 10, 14)]
    assert ranges[0] == (0.0, 0.0)
    for (lo1, hi1), (lo2, hi2) in zip(ranges, ranges[1:]):
        assert lo2 > lo1 and hi2 > hi1
    with pytest.raises(ValueError, match="dz"):
        synth.defocus_sigma_range(-1)


# ----------------------------------------------------------------------------- dataset writer


@pytest.fixture(scope="module")
def nuclei_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "nuclei"
    write_demo_dataset(
        out, kind="nuclei", size=(64, 72), n_train=3, n_test=2, levels=LEVELS, seed=5, correlation_length=8.0, progress=False
    )
    return out


def test_layout_and_manifest(nuclei_dir):
    ids = [f"train_{i:04d}" for i in range(3)] + [f"test_{i:04d}" for i in range(2)]
    assert (nuclei_dir / "split.csv").read_text().splitlines() == ["id,split"] + [
        f"{i},{i.split('_')[0]}" for i in ids
    ]
    for ident in ids:
        gt = tifffile.imread(nuclei_dir / "gt" / f"{ident}.tif")
        labels = tifffile.imread(nuclei_dir / "labels" / f"{ident}.tif")
        assert gt.dtype == np.uint16 and gt.shape == (64, 72) and gt.min() == 0 and gt.max() == 65535
        assert labels.dtype == np.uint16 and labels.shape == (64, 72) and labels.max() >= 1
        for name, (lo, hi) in LEVELS.items():
            blur = tifffile.imread(nuclei_dir / "blur" / name / f"{ident}.tif")
            sigma = tifffile.imread(nuclei_dir / "sigma" / name / f"{ident}.tif")
            assert blur.dtype == np.uint16 and blur.shape == gt.shape and blur.max() == 65535
            assert sigma.dtype == np.float32 and sigma.shape == gt.shape
            assert sigma.min() == np.float32(lo) and sigma.max() == np.float32(hi)
    manifest = json.loads((nuclei_dir / "manifest.json").read_text())
    assert manifest["kind"] == "nuclei" and manifest["seed"] == 5 and manifest["size"] == [64, 72]
    assert (manifest["n_train"], manifest["n_test"]) == (3, 2)
    assert manifest["levels"] == {k: {"sigma_range": v} for k, v in LEVELS.items()}
    assert manifest["normalise"] == "minmax" and manifest["dtype"] == "uint16"
    assert manifest["sigma_map"]["correlation_length"] == 8.0 and "scaling" in manifest["sigma_map"]
    assert manifest["sigma_units"].startswith("pixels")
    assert manifest["render"]["n_nuclei"] == demo.n_nuclei_for((64, 72))
    assert manifest["noise"]["photons"] == synth.PHOTONS
    assert not list(nuclei_dir.parent.glob("nuclei.tmp-*"))


def test_blur_levels_are_ordered(nuclei_dir):
    """More blur → lower PSNR against the ground truth, for every image."""
    for gt_path in sorted((nuclei_dir / "gt").glob("*.tif")):
        gt = _unit(tifffile.imread(gt_path))
        psnrs = [_psnr(_unit(tifffile.imread(nuclei_dir / "blur" / name / gt_path.name)), gt) for name in LEVELS]
        assert psnrs[0] > psnrs[1] > psnrs[2], f"{gt_path.name}: {psnrs}"


def test_deterministic_and_stable_when_adding_images(nuclei_dir, tmp_path):
    again = tmp_path / "again"
    write_demo_dataset(
        again, kind="nuclei", size=(64, 72), n_train=3, n_test=2, levels=LEVELS, seed=5, correlation_length=8.0, progress=False
    )
    assert _files(again) == _files(nuclei_dir)  # byte-identical

    more = tmp_path / "more"
    levels = {"medium": LEVELS["medium"], "extra": [1.0, 9.0]}  # drop one level, add one
    write_demo_dataset(
        more, kind="nuclei", size=(64, 72), n_train=4, n_test=2, levels=levels, seed=5, correlation_length=8.0, progress=False
    )
    old, new = _files(nuclei_dir), _files(more)
    shared = [k for k in old if k in new and k not in ("manifest.json", "split.csv")]
    assert len(shared) == 5 * 5 + 1  # gt, labels, clean, blur/medium, sigma/medium of the 5 old images + level.json
    for key in shared:
        assert old[key] == new[key], key


def test_two_stage_writer_matches_one_call_and_regenerates_one_level(nuclei_dir, tmp_path):
    """The workflow's two rules (sharp images, then each level) give the same files as one call,
    and re-running one level leaves the others untouched."""
    staged = tmp_path / "staged"
    demo.write_sharp_dataset(staged, kind="nuclei", size=(64, 72), n_train=3, n_test=2, seed=5, progress=False)
    for name, rng in LEVELS.items():
        demo.write_blur_level(staged, level=name, sigma_range=tuple(rng), correlation_length=8.0, progress=False)
    one, two = _files(nuclei_dir), _files(staged)
    images = [k for k in one if k.endswith(".tif")]
    assert images and all(one[k] == two[k] for k in images)
    before = _files(staged)
    demo.write_blur_level(staged, level="mild", sigma_range=tuple(LEVELS["mild"]), correlation_length=8.0, progress=False)
    assert _files(staged) == before
    assert not list(staged.glob(".tmp-*"))


def test_val_split_ids(tmp_path):
    out = demo.write_sharp_dataset(tmp_path / "v", kind="shapes", size=(32, 32), n_train=2, n_val=1, n_test=1, seed=0, progress=False)
    rows = (out / "split.csv").read_text().splitlines()[1:]
    assert rows == ["train_0000,train", "train_0001,train", "val_0000,val", "test_0000,test"]


def test_shapes_dataset_float32_and_ordered(tmp_path):
    out = write_demo_dataset(
        tmp_path / "shapes",
        kind="shapes",
        size=(64, 64),
        n_train=2,
        n_test=1,
        levels={"narrow": [8.0, 10.0], "wide": [0.6, 13.0]},
        seed=1,
        correlation_length=16.0,
        progress=False,
    )
    assert not (out / "labels").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["normalise"] == "dtype" and manifest["dtype"] == "float32" and manifest["noise"] is None
    for gt_path in sorted((out / "gt").glob("*.tif")):
        gt = tifffile.imread(gt_path)
        assert gt.dtype == np.float32 and gt.min() >= 0.0 and gt.max() <= 1.0
        narrow = tifffile.imread(out / "blur" / "narrow" / gt_path.name)
        wide = tifffile.imread(out / "blur" / "wide" / gt_path.name)
        assert narrow.dtype == np.float32 and narrow.shape == gt.shape
        assert _psnr(narrow, gt) < _psnr(wide, gt)  # σ 8–10 everywhere blurs more than 0.6–13 on average


def test_atomic_write_leaves_nothing_on_failure(tmp_path, monkeypatch):
    calls = {"n": 0}
    real_blur = demo.sigma_blur

    def failing_blur(image, sigma):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("simulated crash half-way")
        return real_blur(image, sigma)

    monkeypatch.setattr(demo, "sigma_blur", failing_blur)
    out = tmp_path / "broken"
    with pytest.raises(RuntimeError, match="half-way"):
        write_demo_dataset(
            out, kind="shapes", size=(32, 32), n_train=3, n_test=1, levels={"a": [1.0, 2.0]}, seed=0,
            correlation_length=4.0, progress=False,
        )
    assert calls["n"] == 4
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary directory left behind either


def test_replaces_existing_dataset_but_not_other_directories(tmp_path):
    out = tmp_path / "ds"
    kwargs = dict(kind="shapes", size=(32, 32), n_train=1, n_test=1, levels={"a": [1.0, 2.0]}, correlation_length=4.0, progress=False)
    write_demo_dataset(out, seed=0, **kwargs)
    first = _files(out)
    write_demo_dataset(out, seed=1, **kwargs)
    assert _files(out) != first and sorted(p.name for p in tmp_path.iterdir()) == ["ds"]
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        write_demo_dataset(precious, seed=0, **kwargs)
    assert (precious / "notes.txt").read_text() == "keep me"


def test_rejects_bad_arguments(tmp_path):
    kwargs = dict(size=(32, 32), n_train=1, n_test=1, levels={"a": [1.0, 2.0]}, seed=0, correlation_length=4.0, progress=False)
    with pytest.raises(ValueError, match="kind='cells'.*'nuclei'"):
        write_demo_dataset(tmp_path / "x", kind="cells", **kwargs)
    with pytest.raises(ValueError, match="sigma range"):
        write_demo_dataset(tmp_path / "x", kind="shapes", **{**kwargs, "levels": {"a": [3.0, 1.0]}})
    assert not (tmp_path / "x").exists()
