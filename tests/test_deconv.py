"""Ring deconvolution vs single-PSF baselines, and the non-blind pipeline functions end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tifffile
import torch

from dgno.experiments.nonblind import deconvolve_dataset, restore_image, sensitivity
from dgno.experiments.nonblind_data import bead_frame, blur_dataset, brute_force_blur, calibrate, data_psf_size
from dgno.experiments.nonblind_settings import (
    DEFAULT_PARAMS,
    REFERENCE_COEFFS,
    deconv_params,
    estimate_noise_sigma,
    noise_settings,
)
from dgno.optics.deconv import richardson_lucy_deconvolve, ring_deconvolve, smoothed_tv, wiener_deconvolve
from dgno.optics.noise import camera_noise
from dgno.optics.ring import RingBlur
from dgno.optics.seidel import SeidelCoefficients

ROOT = Path(__file__).resolve().parents[1]
STRONGER = SeidelCoefficients(**{k: 2 * v for k, v in REFERENCE_COEFFS.as_dict().items()})


def cells(shape: tuple[int, int], *, n: int = 8, seed: int = 0) -> np.ndarray:
    """Soft-edged bright discs with a little texture on a dim background, in [0, 1]: nuclei-like."""
    g = np.random.default_rng(seed)
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]].astype(np.float64)
    img = np.full(shape, 0.05)
    for _ in range(n):
        cy, cx, r = g.uniform(0, shape[0]), g.uniform(0, shape[1]), g.uniform(4, 9)
        d = np.hypot(yy - cy, xx - cx)
        img += g.uniform(0.4, 0.9) / (1 + np.exp((d - r) / 0.7)) * (1 + 0.15 * np.sin(xx / 1.7 + yy / 2.3))
    return np.clip(img / img.max(), 0, 1).astype(np.float32)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(1.0 / np.mean((a.astype(np.float64) - b) ** 2)))


def test_ring_deconvolution_beats_blur_and_single_psf_wiener():
    """Noiseless blur by the ring model (mirror-padded frame): ring deconvolution > Wiener > blurred input.

    Measured on this image: blurred 28.4 dB, Wiener (centre PSF) 35.4 dB, Richardson–Lucy 35.4 dB,
    ring deconvolution (200 steps) 45.3 dB.
    """
    x = cells((64, 64))
    probe = RingBlur(coeffs=STRONGER, image_shape=(64, 64))
    m = probe.psf_size // 2
    op = RingBlur(coeffs=STRONGER, image_shape=(64 + 2 * m, 64 + 2 * m), field_radius=32.0, psf_size=probe.psf_size)
    padded = torch.from_numpy(np.pad(x, m, mode="symmetric"))[None, None]
    y = op.A(padded)[0, 0, m:-m, m:-m].numpy()
    psf = op.centre_psf().double().numpy()
    p_blur = psnr(y, x)
    p_wiener = psnr(wiener_deconvolve(y, psf), x)
    p_rl = psnr(richardson_lucy_deconvolve(y, psf, n_iter=30), x)
    p_ring = psnr(ring_deconvolve(torch.from_numpy(y)[None, None], op, n_iter=200)[0, 0].numpy(), x)
    assert p_ring > p_blur + 5
    assert p_ring > p_wiener + 2
    assert p_ring > p_rl + 2
    assert p_wiener > p_blur


def test_smoothed_tv_of_constant_and_step():
    eps = 1e-3
    assert float(smoothed_tv(torch.ones(1, 5, 7), eps)) == pytest.approx(35 * eps)
    step = torch.zeros(4, 6)
    step[:, 3:] = 1.0
    assert float(smoothed_tv(step, eps)) == pytest.approx(4 * np.sqrt(1 + eps**2) + 20 * eps, rel=1e-6)


def test_ring_deconvolve_rejects_mismatched_frame():
    op = RingBlur(coeffs=REFERENCE_COEFFS, image_shape=(20, 21))
    with pytest.raises(ValueError, match="even margin"):
        ring_deconvolve(torch.zeros(1, 1, 18, 18), op, n_iter=1)


def _write_dataset(root, shape=(64, 64)):
    """A 3-image dataset in the CONVENTIONS layout: uint16 gt (full range), labels, minmax manifest."""
    (root / "gt").mkdir(parents=True)
    (root / "labels").mkdir()
    rows = [("train_0000", "train"), ("test_0000", "test"), ("test_0001", "test")]
    for k, (ident, _) in enumerate(rows):
        img = cells(shape, seed=k)
        q = np.round(65535 * (img - img.min()) / (img.max() - img.min())).astype(np.uint16)
        tifffile.imwrite(root / "gt" / f"{ident}.tif", q)
        tifffile.imwrite(root / "labels" / f"{ident}.tif", (img > 0.5).astype(np.uint16))
    (root / "split.csv").write_text("id,split\n" + "".join(f"{i},{s}\n" for i, s in rows))
    (root / "manifest.json").write_text(json.dumps({"source": "test cells", "normalise": "minmax"}))


NO_NOISE = {"photons": 0.0, "read_sigma": 0.0}


def test_nonblind_pipeline(tmp_path):
    """calibrate → blur_dataset → deconvolve_dataset (all methods): files, layout, dtypes, ranges, JSON."""
    src = tmp_path / "src"
    _write_dataset(src)
    calib_json = tmp_path / "calib" / "coeffs.json"
    calib = calibrate(
        calib_json, coeffs_true=REFERENCE_COEFFS.as_dict(), image_size=64, seed=0, n_images=3, n_iter=60, n_starts=1
    )
    saved = json.loads(calib_json.read_text())
    assert saved["coeffs"] == calib["coeffs"] and saved["fit"]["n_beads"] >= 3
    assert saved["coeffs"]["W311"] == 0.0 and saved["error"]["max_abs_error"] >= 0
    assert saved["noise"] == {"photons": 2000.0, "read_sigma": 0.005}  # DEFAULT_NOISE: calibrated from noisy beads

    out = tmp_path / "seidel_data"
    blur_dataset(src, out, seidel={}, clean_dir=tmp_path / "clean", split="test")
    assert (out / "split.csv").read_text().splitlines() == ["id,split", "test_0000,test", "test_0001,test"]
    for ident in ("test_0000", "test_0001"):
        gt = tifffile.imread(out / "gt" / f"{ident}.tif")
        blurred = tifffile.imread(out / "blur" / "seidel" / f"{ident}.tif")
        assert gt.dtype == blurred.dtype == np.float32 and gt.shape == blurred.shape == (64, 64)
        assert blurred.min() >= 0 and blurred.max() <= 1 and gt.max() == 1.0
        assert 15 < psnr(blurred, gt) < 45  # blurred, but the same scene
        assert (out / "labels" / f"{ident}.tif").exists()
        assert (tmp_path / "clean" / f"{ident}.tif").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["normalise"] == "dtype" and "seidel" in manifest["levels"]
    assert not list(tmp_path.glob("*.tmp-*")) and not (out / "_clean").exists()

    for method in ("wiener", "richardson_lucy", "ring"):
        restored = tmp_path / "restored" / method
        deconvolve_dataset(out, calib_json, restored, method=method, params={"ring": {"iterations": 20}, "richardson_lucy": {"iterations": 5}})
        files = sorted(p.name for p in restored.iterdir())
        assert files == ["settings.json", "test_0000.tif", "test_0001.tif"]
        img = tifffile.imread(restored / "test_0000.tif")
        assert img.dtype == np.float32 and img.shape == (64, 64) and img.min() >= 0 and img.max() <= 1
        assert json.loads((restored / "settings.json").read_text())["method"] == method
    with pytest.raises(ValueError, match="'wiener', 'richardson_lucy', 'ring'"):
        deconvolve_dataset(out, calib_json, tmp_path / "bad", method="tikhonov")


def test_test_data_are_made_by_brute_force_superposition_not_by_the_deconvolution_operator(tmp_path, monkeypatch):
    """No inverse crime: the blurred images are the per-pixel PSF superposition of the *true* coefficients;
    the ring operator (what ring deconvolution inverts) is never called, and it differs from the data."""
    src = tmp_path / "src"
    _write_dataset(src)

    def forbidden(*args, **kwargs):
        raise AssertionError("blur_dataset used the ring operator")

    monkeypatch.setattr(RingBlur, "A", forbidden)
    true = SeidelCoefficients(W040=0.1, W131=0.12, W222=0.08, W220=0.05, W311=0.0, W020=0.06)
    out = blur_dataset(src, tmp_path / "d", seidel={"coeffs": true.as_dict(), "noise": NO_NOISE}, split="test")
    monkeypatch.undo()
    y = tifffile.imread(out / "blur" / "seidel" / "test_0000.tif")
    x = tifffile.imread(out / "gt" / "test_0000.tif")
    m = data_psf_size(true, (64, 64), 2.0)
    reference = brute_force_blur(x[None], true, field_radius=32.0, psf_size=m)[0]
    np.testing.assert_allclose(y, np.clip(reference, 0, 1), atol=1e-5)
    # the ring model of the same (true!) coefficients is close but measurably different from the data
    op = RingBlur(coeffs=true, image_shape=(64 + 2 * (m // 2),) * 2, field_radius=32.0, psf_size=m)
    ring = op.A(torch.from_numpy(np.pad(x, m // 2, mode="symmetric"))[None, None])[0, 0, m // 2 : -(m // 2), m // 2 : -(m // 2)].numpy()
    rel = np.linalg.norm(ring - reference) / np.linalg.norm(reference)
    assert 1e-4 < rel < 0.05
    level = json.loads((out / "manifest.json").read_text())["levels"]["seidel"]
    assert "brute-force" in level["model"] and level["coeffs_true"] == true.as_dict()


def test_noise_is_present_in_the_data_and_in_the_bead_frames(tmp_path):
    """Poisson-Gaussian noise of the configured size: var(noisy − clean) ≈ mean(clean)/photons + read_sigma²."""
    src = tmp_path / "src"
    _write_dataset(src)
    noise = {"photons": 500.0, "read_sigma": 0.01}
    out = blur_dataset(src, tmp_path / "d", seidel={"noise": noise}, clean_dir=tmp_path / "clean", split="test")
    y = tifffile.imread(out / "blur" / "seidel" / "test_0000.tif").astype(np.float64)
    clean = tifffile.imread(tmp_path / "clean" / "test_0000.tif").astype(np.float64)
    expected = np.sqrt(clean.mean() / noise["photons"] + noise["read_sigma"] ** 2)
    assert np.std(y - clean) == pytest.approx(expected, rel=0.15)
    assert json.loads((out / "manifest.json").read_text())["levels"]["seidel"]["noise"]["photons"] == 500.0
    quiet = bead_frame(REFERENCE_COEFFS, image_shape=(64, 64), psf_size=25, oversampling=2.0, noise=NO_NOISE, seed=3).image
    noisy = bead_frame(REFERENCE_COEFFS, image_shape=(64, 64), psf_size=25, oversampling=2.0, noise=noise, seed=3).image
    background = noisy[quiet < 0.021]  # where no bead light falls: background 0.02 + noise only
    assert np.std(background) == pytest.approx(np.sqrt(0.02 / 500 + 0.01**2), rel=0.25)


def test_camera_noise_and_noise_estimate():
    rng = np.random.default_rng(0)
    flat = np.full((128, 128), 0.3)
    for photons, read in ((0.0, 0.01), (1000.0, 0.0), (1000.0, 0.02)):
        y = camera_noise(flat, photons=photons, read_noise=read, unit="intensity", rng=rng)
        truth = np.sqrt((0.3 / photons if photons else 0.0) + read**2)
        assert np.std(y) == pytest.approx(truth, rel=0.05)
        assert estimate_noise_sigma(y) == pytest.approx(truth, rel=0.1)
    smooth = cells((96, 96))  # a blurred-looking image with no noise: σ̂ near zero
    assert estimate_noise_sigma(smooth) < 0.01


def _tv(img: np.ndarray) -> float:
    """Mean absolute difference of neighbours: what more regularisation lowers and sharpening raises."""
    img = np.asarray(img, np.float64)
    return float(np.abs(np.diff(img, axis=0)).mean() + np.abs(np.diff(img, axis=1)).mean())


def _config_settings(tmp_path: Path, name: str, settings: dict) -> dict:
    """deconv_params of the smoke config whose experiments.nonblind holds `settings`, read the way the
    workflow reads a config file (schema validation, defaults filled in)."""
    import yaml

    from dgno.workflow.config import load_config

    cfg = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())
    cfg["experiments"]["nonblind"] = {k: cfg["experiments"]["nonblind"][k] for k in ("dataset", "methods")} | settings
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return deconv_params(load_config(path)["experiments"]["nonblind"])


def _yaml_block(path: Path, *keys: str) -> dict:
    """A block of a YAML file as written (no schema defaults)."""
    import yaml

    block = yaml.safe_load(path.read_text())
    for key in keys:
        block = block[key]
    return block


def _noisy_blurred(read_sigma: float = 0.01) -> tuple[np.ndarray, RingBlur]:
    """A 64-px nuclei-like image blurred by brute-force superposition plus camera noise, and the ring
    operator of its mirror-padded frame (what restore_image expects)."""
    x = cells((64, 64), seed=2)
    clean = brute_force_blur(x[None], REFERENCE_COEFFS, field_radius=32.0, psf_size=25)[0]
    y = camera_noise(clean, photons=2000.0 if read_sigma else 0.0, read_noise=read_sigma, unit="intensity", rng=np.random.default_rng(0))
    return y, RingBlur(coeffs=REFERENCE_COEFFS, image_shape=(64 + 2 * 12, 64 + 2 * 12), field_radius=32.0, psf_size=25)


@pytest.mark.parametrize(
    "method, weak, strong, smoother",
    [
        ("wiener", {"balance": 1e-3}, {"balance": 1e-1}, True),  # more balance: less noise amplified
        ("richardson_lucy", {"iterations": 2}, {"iterations": 40}, False),  # more iterations: sharper
        ("ring", {"tv_weight": 1e-4, "iterations": 40}, {"tv_weight": 3e-2, "iterations": 40}, True),  # more TV weight
    ],
)
def test_a_changed_config_setting_changes_the_restoration_in_its_direction(tmp_path, method, weak, strong, smoother):
    """The settings reach the restoration through the config file. Measured (total variation of the
    output; the input's is 0.043): Wiener 0.070 → 0.033, Richardson–Lucy 0.031 → 0.070, ring 0.075 → 0.025."""
    y, op = _noisy_blurred()
    restored = [restore_image(y, method, op, _config_settings(tmp_path, name, {method: block})[method])[0] for name, block in (("weak", weak), ("strong", strong))]
    ratio = _tv(restored[1]) / _tv(restored[0])
    assert ratio < 0.6 if smoother else ratio > 1.6, ratio


def test_a_config_without_restoration_settings_restores_as_the_library_defaults(tmp_path):
    """The schema's defaults (what a config that says nothing gets) and the library's (a call without
    settings) restore identically, and so do the camera-noise defaults of a seidel dataset."""
    from dgno.workflow.config import load_config

    y, op = _noisy_blurred()
    from_config = _config_settings(tmp_path, "bare", {})
    for method in ("wiener", "richardson_lucy", "ring"):
        a, used_a = restore_image(y, method, op, from_config[method])
        b, used_b = restore_image(y, method, op, deconv_params({})[method])
        np.testing.assert_array_equal(a, b, err_msg=method)
        assert used_a == used_b, method
    seidel = load_config(ROOT / "tests" / "smoke.yaml")["datasets"]["nuclei_seidel"]["seidel"]
    assert "noise" not in _yaml_block(ROOT / "tests" / "smoke.yaml", "datasets", "nuclei_seidel", "seidel")  # filled in by the schema
    assert noise_settings(seidel) == noise_settings({})


def test_auto_regularisation_grows_with_the_noise_of_the_image():
    """The config's default `tv_weight: auto`: the noisier the image, the stronger the TV weight it is restored with
    (measured λ: 1.3e-4 noise-free, 2.8e-3 at read σ 0.005, 9.7e-3 at 0.02), and never zero."""
    lams = []
    for read_sigma in (0.0, 0.005, 0.02):
        y, op = _noisy_blurred(read_sigma)
        _, used = restore_image(y, "ring", op, {**deconv_params({})["ring"], "iterations": 5})
        lams.append(used["tv_weight"])
    assert lams[0] > 0 and lams[0] * 5 < lams[1] and lams[1] * 2 < lams[2], lams


def test_deconvolve_dataset_uses_the_given_settings(tmp_path):
    """A fixed λ is used for every image; with `auto`, a larger λ per unit of noise restores each image
    with a larger λ (measured 1.2e-2 vs 3e-4) and a smoother result. settings.json records what each image got."""
    src = tmp_path / "src"
    _write_dataset(src)
    calib_json = tmp_path / "c.json"
    calibrate(calib_json, coeffs_true=REFERENCE_COEFFS, image_size=64, seed=0, n_images=2, n_iter=30, n_starts=1)
    data = blur_dataset(src, tmp_path / "d", seidel={}, split="test")
    runs = {
        "fixed": {"tv_weight": 1e-2, "iterations": 15},
        "auto_strong": {"tv_weight_per_sigma": 2.0, "iterations": 60},
        "auto_weak": {"tv_weight_per_sigma": 0.05, "iterations": 60},
    }
    out = {name: deconvolve_dataset(data, calib_json, tmp_path / name, method="ring", params={"ring": p}) for name, p in runs.items()}
    settings = {name: json.loads((path / "settings.json").read_text()) for name, path in out.items()}
    ids = sorted(settings["fixed"]["per_image"])
    assert ids == ["test_0000", "test_0001"]
    assert all(settings["fixed"]["per_image"][i]["tv_weight"] == 1e-2 and settings["fixed"]["per_image"][i]["iterations"] == 15 for i in ids)
    for i in ids:
        strong, weak = settings["auto_strong"]["per_image"][i], settings["auto_weak"]["per_image"][i]
        assert strong["sigma_hat"] == weak["sigma_hat"] > 0  # the same image, the same noise estimate
        assert strong["tv_weight"] > 10 * weak["tv_weight"], (strong, weak)
        images = {name: tifffile.imread(path / f"{i}.tif") for name, path in out.items()}
        assert _tv(images["auto_strong"]) < 0.92 * _tv(images["auto_weak"]), i  # measured 0.85 and 0.87
        assert not np.array_equal(images["fixed"], images["auto_strong"])


def test_ring_lambda_following_the_noise_beats_the_noise_free_default():
    """With read noise σ = 0.01 the noise-free default λ = 3e-5 lets noise through; the auto rule does better."""
    x = cells((64, 64), seed=2)
    m = 12
    clean = brute_force_blur(x[None], REFERENCE_COEFFS, field_radius=32.0, psf_size=25)[0]
    y = camera_noise(clean, photons=2000.0, read_noise=0.01, unit="intensity", rng=np.random.default_rng(0))
    op = RingBlur(coeffs=REFERENCE_COEFFS, image_shape=(64 + 2 * m, 64 + 2 * m), field_radius=32.0, psf_size=25)
    fixed, _ = restore_image(y, "ring", op, {**DEFAULT_PARAMS["ring"], "tv_weight": 3e-5, "iterations": 150})
    auto, used = restore_image(y, "ring", op, {**DEFAULT_PARAMS["ring"], "iterations": 150})
    assert used["tv_weight"] > 1e-3
    assert psnr(auto, x) > psnr(fixed, x) + 2


def test_sensitivity_sweep(tmp_path):
    src = tmp_path / "src"
    _write_dataset(src)
    calib_json = tmp_path / "c.json"
    calibrate(calib_json, coeffs_true=REFERENCE_COEFFS, image_size=64, seed=0, n_images=2, n_iter=30, n_starts=1)
    data = blur_dataset(src, tmp_path / "d", seidel={}, clean_dir=tmp_path / "clean", split="test")
    rows = sensitivity(
        data, tmp_path / "clean", calib_json, tmp_path / "s.csv", read_sigmas=[0.0, 0.03], photons=2000.0,
        methods=["wiener"], restorers={"identity": lambda img: img},
    )
    frame = pd.read_csv(tmp_path / "s.csv")
    assert set(frame["method"]) == {"input", "wiener", "identity"} and len(rows) == 6
    psnrs = frame.pivot(index="read_sigma", columns="method", values="psnr")
    assert psnrs.loc[0.03, "input"] < psnrs.loc[0.0, "input"] - 2  # more noise, lower PSNR
    np.testing.assert_allclose(psnrs["identity"], psnrs["input"])
    hats = frame.groupby("read_sigma")["sigma_hat"].first()
    assert hats[0.03] == pytest.approx(0.03, rel=0.3)
