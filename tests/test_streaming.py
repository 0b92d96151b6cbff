"""Images streamed from disk through a bounded cache give exactly the crops and scores of decoding all.

The reference holds every pair, decoded by read_image: no streaming, no cache.
A cache budget far below one image makes every access decode again, the opposite extreme.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import write_tiny_dataset

from dgno.data.paired import CropSampler, Pair, load_pairs, read_split
from dgno.inference.evaluate import score_dataset
from dgno.io import InputError, read_image

LEVELS = ["a", "b"]


@pytest.fixture()
def data(tmp_path):
    return write_tiny_dataset(tmp_path / "tiny", n_train=6, n_val=1, n_test=3, size=(40, 44), levels=tuple(LEVELS), seed=3)


def _eager(data, split):
    ids = read_split(data)[split]
    return [Pair(i, lvl, read_image(data / "blur" / lvl / f"{i}.tif"), read_image(data / "gt" / f"{i}.tif")) for lvl in LEVELS for i in ids]


@pytest.mark.parametrize("cache_mb", [1e-6, 512])
def test_same_crops_with_the_same_seed_whatever_the_cache(data, cache_mb):
    eager = CropSampler(_eager(data, "train"), patch=16, batch_size=5, seed=11)
    pairs = load_pairs(data, split="train", levels=LEVELS, cache_mb=cache_mb)
    streamed = CropSampler(pairs, patch=16, batch_size=5, seed=11)
    for _ in range(30):
        for a, b in zip(eager.next_batch(), streamed.next_batch(), strict=True):
            assert a.dtype == b.dtype == np.float32 and np.array_equal(a, b)
    cache = pairs[0]._cache
    n_files = 6 + 6 * len(LEVELS)
    if cache_mb < 1:  # nothing stays: every crop decoded its image again, and at most one image is held
        assert cache.decodes > n_files + 100 and cache.nbytes <= max(p.gt.nbytes for p in pairs)
    else:  # everything fits: decoded once each, while checking
        assert cache.decodes == n_files


def test_scores_do_not_depend_on_the_cache(data, tmp_path, monkeypatch):
    def blur_a_bit(img):
        return np.clip(img * 0.97 + 0.01, 0, 1)

    frames = []
    for budget in ("0.000001", "512"):
        monkeypatch.setenv("DGNO_IMAGE_CACHE_MB", budget)
        out = tmp_path / f"eval_{budget}"
        score_dataset(blur_a_bit, data, "b", out, method="m", with_lpips=False, progress=False)
        frames.append(pd.read_csv(out / "per_image.csv"))
    pd.testing.assert_frame_equal(*frames)
    assert len(frames[0]) == 3


def test_streamed_images_are_checked_up_front_and_read_only(data):
    (data / "blur" / "b" / "img02.tif").write_bytes(b"not a tiff")
    with pytest.raises(InputError, match=r"blur/b/img02\.tif"):
        load_pairs(data, split="train", levels=LEVELS)
    pairs = load_pairs(data, split="train", levels=["a"])
    assert pairs[0].shape == pairs[0].gt.shape == pairs[0].blur.shape
    with pytest.raises(ValueError, match="read-only"):
        pairs[0].blur[0, 0] = 1.0  # shared by every user of the cache


def test_bad_cache_budget_is_named(data, monkeypatch):
    monkeypatch.setenv("DGNO_IMAGE_CACHE_MB", "lots")
    with pytest.raises(InputError, match="DGNO_IMAGE_CACHE_MB"):
        load_pairs(data, split="train", levels=["a"])
