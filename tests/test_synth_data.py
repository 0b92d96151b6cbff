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
# A flat, bright-enough microscope: no haze, even illumination, so the scene checks see the nuclei alone.
FLAT = synth.Photometry(background=0.05, offset=0.0, photons=1000.0, read_noise=2.0, haze=0.0, haze_blur=4.0, illumination=0.0)


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
    clean, labels = synth.render_nuclei((128, 128), n_nuclei=12, seed=seed, noise=False, photometry=FLAT)
    noisy, labels_noisy = synth.render_nuclei((128, 128), n_nuclei=12, seed=seed, photometry=FLAT)
    np.testing.assert_array_equal(labels, labels_noisy)  # noise never changes the scene
    _, labels_other = synth.render_nuclei((128, 128), n_nuclei=12, seed=seed)  # nor does the photometry
    np.testing.assert_array_equal(labels, labels_other)
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


# ----------------------------------------------------------------------------- photometry


def _flat(**kw) -> synth.Photometry:
    return synth.Photometry(**{**FLAT.to_dict(), "illumination_centre": (0.5, 0.5), **kw})


def test_photometry_sampling_honours_ranges():
    """Every drawn value lies in its range; photons spread log-uniformly (half below the geometric mean),
    the others uniformly (half below the midpoint); a degenerate range gives exactly its value."""
    ranges = {"background": [0.1, 0.5], "photons": [10.0, 1000.0], "haze": [0.2, 0.2]}
    draws = [synth.sample_photometry([7, i], ranges) for i in range(400)]
    full = synth.photometry_ranges(ranges)
    for key, (lo, hi) in full.items():
        values = np.array([getattr(d, key) for d in draws])
        assert values.min() >= lo and values.max() <= hi, key
    photons = np.array([d.photons for d in draws])
    assert 0.4 < np.mean(photons < 100.0) < 0.6  # geometric mean of 10 and 1000
    assert photons.min() < 15 and photons.max() > 700
    assert 0.4 < np.mean(np.array([d.background for d in draws]) < 0.3) < 0.6
    assert {d.haze for d in draws} == {0.2}
    centres = np.array([d.illumination_centre for d in draws])
    assert centres.min() >= 0 and centres.max() <= 1 and centres.std(axis=0).min() > 0.2
    assert synth.sample_photometry([7, 0], ranges) == draws[0]  # a seed names a photometry


def test_photometry_ranges_reject_bad_input():
    with pytest.raises(ValueError, match="photometry key 'gain' is unknown"):
        synth.photometry_ranges({"gain": [1, 2]})
    with pytest.raises(ValueError, match=r"photometry.photons=\[300, 30\]: must be \[lo, hi\]"):
        synth.photometry_ranges({"photons": [300, 30]})
    with pytest.raises(ValueError, match="photons=0.0: must be > 0"):
        synth.photometry_ranges({"photons": [0, 30]})
    with pytest.raises(ValueError, match="illumination=1.0: must be in"):
        synth.photometry_ranges({"illumination": [0.5, 1.0]})


def test_camera_noise_is_poisson_gaussian_with_offset():
    """mean = x + offset, variance = x / photons + (read_noise / photons)², on a flat field of 256² pixels."""
    x = np.full((256, 256), 0.2, dtype=np.float32)
    p = _flat(photons=50.0, read_noise=3.0, offset=0.05)
    y = synth.add_camera_noise(x, seed=1, photometry=p).astype(np.float64)
    assert abs(y.mean() - 0.25) < 0.002
    assert y.var() == pytest.approx(0.2 / 50 + (3.0 / 50) ** 2, rel=0.05)
    bright = synth.add_camera_noise(x, seed=1, photometry=_flat(photons=3000.0, read_noise=3.0, offset=0.05))
    assert bright.var() < y.var() / 30  # more photons, less noise
    # The offset keeps the read noise of a dark field from clipping at 0: without it the mean is biased up.
    dark = np.zeros((256, 256), dtype=np.float32)
    with_offset = synth.add_camera_noise(dark, seed=2, photometry=_flat(photons=50.0, read_noise=3.0, offset=0.1))
    without = synth.add_camera_noise(dark, seed=2, photometry=_flat(photons=50.0, read_noise=3.0, offset=0.0))
    assert abs(with_offset.mean() - 0.1) < 0.003 and (with_offset == 0).mean() < 0.06  # 0.1 = 1.7 read-noise sigmas
    assert without.mean() > 0.015 and (without == 0).mean() > 0.4


def test_background_and_illumination():
    """No nuclei: the clean image is background · illumination, 1 on the optical axis and 1 − u at the
    farthest field point (a corner)."""
    clean, labels = synth.render_nuclei((65, 65), n_nuclei=0, seed=0, noise=False, photometry=_flat(background=0.3))
    np.testing.assert_allclose(clean, 0.3, rtol=1e-6)
    assert labels.max() == 0
    p = _flat(background=0.3, illumination=0.25, illumination_centre=(0.5, 0.5))
    shaded, _ = synth.render_nuclei((65, 65), n_nuclei=0, seed=0, noise=False, photometry=p)
    assert shaded.max() == pytest.approx(0.3, rel=1e-6) and shaded[32, 32] == shaded.max()
    assert shaded.min() == pytest.approx(0.3 * 0.75, rel=1e-6) and shaded[0, 0] == shaded.min()
    off = synth.illumination_field((65, 65), _flat(illumination=0.25, illumination_centre=(0.0, 1.0)))
    assert off[0, 64] == 1.0 and off[64, 0] == pytest.approx(0.75)  # the axis may sit anywhere in the field


def test_haze_is_smooth_out_of_focus_light_that_scales_with_its_range():
    """Haze = blurred nuclei of other planes: absent at haze 0, linear in haze, smooth (no in-focus edges),
    independent of the in-focus scene and labels."""
    kw = dict(n_nuclei=6, seed=[3, 3])
    none = synth.haze((96, 96), photometry=_flat(haze=0.0), **kw)
    half = synth.haze((96, 96), photometry=_flat(haze=0.2, haze_blur=5.0), **kw)
    full = synth.haze((96, 96), photometry=_flat(haze=0.4, haze_blur=5.0), **kw)
    assert not none.any() and half.max() > 0.01
    np.testing.assert_allclose(full, 2 * half, rtol=1e-12)
    assert np.abs(np.diff(full, axis=0)).max() < 0.15 * full.max()  # no sharp edge anywhere
    sharper = synth.haze((96, 96), photometry=_flat(haze=0.4, haze_blur=1.0), **kw)
    assert np.abs(np.diff(sharper, axis=0)).max() > 2 * np.abs(np.diff(full, axis=0)).max()
    a, la = synth.render_nuclei((96, 96), n_nuclei=6, seed=3, noise=False, photometry=_flat(background=0.0))
    b, lb = synth.render_nuclei((96, 96), n_nuclei=6, seed=3, noise=False, photometry=_flat(background=0.0, haze=0.3))
    np.testing.assert_array_equal(la, lb)
    far = ~ndimage.binary_dilation(la > 0, iterations=4)
    assert (b[far] - a[far]).mean() > 0.003  # haze brightens the background between in-focus nuclei


def test_exposure_avoids_saturation():
    """A bright background plus haze would exceed the camera's range: the exposure shortens so the brightest
    pixel plus the offset sits at 1, never clipped; a dim scene keeps its exposure."""
    p = _flat(background=0.3, haze=0.4, offset=0.1)
    clean, _ = synth.render_nuclei((96, 96), n_nuclei=6, seed=4, noise=False, photometry=p)
    assert clean.max() == pytest.approx(0.9, rel=1e-6)
    dim, _ = synth.render_nuclei((96, 96), n_nuclei=0, seed=4, noise=False, photometry=_flat(background=0.2))
    np.testing.assert_allclose(dim, 0.2, rtol=1e-6)


def test_schema_defaults_are_the_generator_defaults():
    from dgno.workflow.config import load_schema

    props = load_schema()["properties"]["datasets"]["additionalProperties"]["properties"]["photometry"]["properties"]
    assert {k: tuple(float(x) for x in v["default"]) for k, v in props.items()} == synth.PHOTOMETRY_RANGES


def test_demo_photometry_from_config_ranges(tmp_path):
    """The dataset writer draws each image's photometry in the given ranges, records it, renders the same
    in-focus scenes whatever the ranges, and the blur stage adds the noise of that image's own photometry."""
    kwargs = dict(kind="nuclei", size=(64, 64), n_train=2, n_test=2, levels={"z": [1.0, 1.5]}, seed=3, correlation_length=8.0, progress=False)
    dim = {"background": [0.35, 0.5], "photons": [15.0, 25.0]}
    low = write_demo_dataset(tmp_path / "low", photometry=dim, **kwargs)
    high = write_demo_dataset(tmp_path / "high", photometry={"photons": [2000.0, 3000.0], "background": [0.02, 0.05]}, **kwargs)
    ph = json.loads((low / "manifest.json").read_text())["photometry"]
    assert ph["ranges"]["background"] == [0.35, 0.5] and ph["ranges"]["haze"] == list(synth.PHOTOMETRY_RANGES["haze"])
    for values in ph["images"].values():
        for key, (lo, hi) in ph["ranges"].items():
            assert lo <= values[key] <= hi, key
    for ident in ph["images"]:
        np.testing.assert_array_equal(tifffile.imread(low / "labels" / f"{ident}.tif"), tifffile.imread(high / "labels" / f"{ident}.tif"))

    def noise(path: Path) -> float:  # high-pass residual of a min-max normalised image
        x = _unit(tifffile.imread(path))
        return float(np.std(x - ndimage.uniform_filter(x, 3)))

    for ident in ph["images"]:
        for folder in ("gt", "blur/z"):
            assert noise(low / folder / f"{ident}.tif") > 3 * noise(high / folder / f"{ident}.tif"), (ident, folder)
        # background between the nuclei, relative to the nuclei after per-image min-max: brighter at low/
        labels = tifffile.imread(low / "labels" / f"{ident}.tif")
        far = ~ndimage.binary_dilation(labels > 0, iterations=4)
        assert np.median(_unit(tifffile.imread(low / "gt" / f"{ident}.tif"))[far]) > np.median(
            _unit(tifffile.imread(high / "gt" / f"{ident}.tif"))[far]
        )


def test_demo_and_config_robustness_set_lies_outside_the_training_range():
    """config.yaml's robustness set: brighter background and fewer photons than the training range;
    a robustness set inside the training range, or a test-only set without trained_on, is refused."""
    import copy

    import yaml

    from dgno.workflow.config import ConfigError, validate_config

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())
    cfg = validate_config(raw)
    ood = cfg["datasets"][cfg["experiments"]["robustness"]["dataset"]]
    train = cfg["datasets"][ood["trained_on"]]["photometry"]
    assert ood["photometry"]["background"][0] > train["background"][1]
    assert ood["photometry"]["photons"][1] < train["photons"][0]
    assert train == {k: list(v) for k, v in synth.PHOTOMETRY_RANGES.items()}  # the demo trains on the defaults
    inside = copy.deepcopy(raw)
    inside["datasets"]["nuclei_ood"]["photometry"] = {"background": [0.1, 0.2]}
    with pytest.raises(ConfigError, match="nuclei_ood.photometry: no range lies outside"):
        validate_config(inside)
    orphan = copy.deepcopy(raw)
    del orphan["datasets"]["nuclei_ood"]["trained_on"]
    with pytest.raises(ConfigError, match="nuclei_ood.n_train: 0 needs trained_on"):
        validate_config(orphan)
    bad = copy.deepcopy(raw)
    bad["datasets"]["nuclei"]["photometry"] = {"photons": [3000, 30]}
    with pytest.raises(ConfigError, match=r"datasets.nuclei.photometry: photometry.photons=\[3000, 30\]"):
        validate_config(bad)


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
    ph = manifest["photometry"]
    assert ph["ranges"] == {k: list(v) for k, v in synth.PHOTOMETRY_RANGES.items()}
    assert sorted(ph["images"]) == sorted(ids)
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
