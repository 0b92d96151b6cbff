"""The learned focus measure of brightfield slides: its network, its shipped weights, what it tells apart on
tissue it was never trained on, its decision rule, and the recipe that made the weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import ndimage

from dgno.data import tissue_sources as ts
from dgno.slides import focus as fm
from dgno.slides import focus_net as fnet
from dgno.slides import focus_training as ft


def test_the_network_scores_one_cell_per_16_pixels_whatever_the_tile_size():
    assert fnet.cell_logits(np.full((512, 512), 200.0)).shape == (32, 32)
    assert fnet.cell_logits(np.full((100, 70), 200.0)).shape == (7, 5)  # mirrored out to 112 × 80
    assert fnet.cell_logits(np.full((10, 9), 200.0)).shape == (1, 1)  # smaller than the context window
    assert sum(p.numel() for p in fnet.shipped_net().parameters()) < 120_000


def _held_out_tile() -> np.ndarray:
    """512 px of a held-out source (tiatoolbox's H&E target: never used in training) as luminance with sensor noise."""
    rgb = ts.load("tia-target")[200:712, 200:712].astype(np.float32)
    grey = rgb @ np.array([0.2125, 0.7154, 0.0721], np.float32)
    return grey + np.random.default_rng(0).normal(0.0, 1.5, grey.shape).astype(np.float32)


def test_held_out_tissue_defocused_on_one_half_is_found_there_and_to_a_cell_or_two_of_its_edge():
    grey = _held_out_tile()
    half = grey.copy()
    half[:, 256:] = ndimage.gaussian_filter(grey, 2.0)[:, 256:]  # the right half defocused (σ 2 px)
    p = fm.learned_detail(half, None, blocks=32)
    assert np.all((p >= 0) & (p <= 1))
    assert np.median(p[:, :13]) < 0.05 and np.median(p[:, 19:]) > 0.95
    found = (p >= 0.5).mean(axis=0)  # per cell column: the share of rows found blurred
    assert found[:14].max() < 0.2 and found[18:].min() > 0.8  # the edge at column 16


def test_pale_tissue_in_focus_is_not_taken_for_defocus():
    grey = _held_out_tile()
    pale = 245.0 - 0.35 * (245.0 - grey)  # a third of the stain
    cut = 1.0 / (1.0 + np.exp(-fm.LEARNED_FLOOR))  # the lowest cut the decision ever uses
    assert (fm.learned_detail(pale, None, blocks=32) < cut).mean() > 0.85


def test_cells_without_tissue_are_not_scored_and_another_cell_count_samples_the_network_cells():
    grey = _held_out_tile()
    mask = np.zeros(grey.shape, bool)
    mask[:, :256] = True
    p = fm.learned_detail(grey, mask, blocks=32)
    assert np.isfinite(p[:, :16]).all() and np.isnan(p[:, 16:]).all()
    assert fm.learned_detail(grey, None, blocks=16).shape == (16, 16)


def test_the_learned_cut_is_relative_to_the_slides_in_focus_tissue_with_a_floor():
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
    soft = fm.LEARNED_FLOOR - fm.LEARNED_MARGIN + 2.0  # a slide whose in-focus tissue the network is less sure of
    assert fm.learned_cut(sig(soft)) == pytest.approx(sig(soft + fm.LEARNED_MARGIN))
    assert fm.learned_cut(sig(-40.0)) == pytest.approx(sig(fm.LEARNED_FLOOR))
    blocks = np.full((2, 2, 4, 4), sig(soft), np.float32)
    blocks[0, 0, :2] = sig(soft + fm.LEARNED_MARGIN + 0.5)  # half its cells a few logits above the slide's sharp tissue
    blocks[1, 1, :2] = sig(soft + fm.LEARNED_MARGIN - 0.5)  # ... and half of these not quite
    d = fm.decide(np.ones((2, 2)), blocks, restore="blurry", min_tissue=0.05, threshold=None, margin=fm.FOCUS_MARGIN, measure="learned")
    assert d.restored[0, 0] and d.restored.sum() == 1 and "logit" in d.rule
    detail = fm.decide(np.ones((2, 2)), blocks, restore="blurry", min_tissue=0.05, threshold=None, margin=fm.FOCUS_MARGIN)
    assert detail.threshold == pytest.approx(fm.relative_cut(detail.reference, fm.FOCUS_MARGIN))
    with pytest.raises(ValueError, match="focus measure"):
        fm.decide(np.ones((2, 2)), blocks, restore="blurry", min_tissue=0.05, threshold=None, margin=0.3, measure="sharpness")
    assert fm.measure_for("rgb") == "learned" and fm.measure_for("minisblack") == "detail" and fm.measure_for("rgb", 2) == "detail"


def test_the_training_recipe_makes_crops_with_cell_targets_and_weights_that_load_back(tmp_path):
    grey, target, tissue = ft.slide_crops(3)
    assert grey.shape == (ft.CROPS_PER_SLIDE, ft.CROP, ft.CROP) and grey.dtype == np.uint8
    assert target.shape == tissue.shape == (ft.CROPS_PER_SLIDE, ft.CROP // fnet.CELL, ft.CROP // fnet.CELL)
    assert 0 < target.mean() < 1 and (tissue.mean(axis=(1, 2)) >= ft.MIN_CROP_TISSUE - 1e-6).all()
    net, curve = ft.train(*(torch.from_numpy(a[:64]) for a in (grey, target, tissue)), steps=3, log_every=1)
    assert len(curve) == 3 and all(np.isfinite(curve))
    fnet.save_weights(net, tmp_path / "w.npz")
    again = fnet.shipped_net.__wrapped__(tmp_path / "w.npz")
    x = torch.from_numpy(grey[:2].astype(np.float32))[:, None]
    with torch.inference_mode():
        assert torch.equal(net(x), again(x))


def test_the_shipped_weights_have_their_training_record():
    record = json.loads(fnet.WEIGHTS.with_suffix(".json").read_text())
    assert record["command"].startswith("python -m dgno.slides.focus_training") and record["slides"] >= 50
    assert record["loss_every_100_steps"][-1] < record["loss_every_100_steps"][0] / 2
