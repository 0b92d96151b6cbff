"""The network a slide is restored with (dgno.slides.network): its normalisation (the model file's by default, one
map per slide, unclipped beyond the thumbnail's range), the checks made before any model is read, and what a run
shows and writes around the network: the writer's progress after the last tile, a before/after picture always."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from fixtures_slides import affine, brightfield_slide, fluorescence_slide, identity_model_file, network

from dgno import cli
from dgno.checkpoint import save_checkpoint
from dgno.inference.normalisation import Scaling, from_unit, to_unit
from dgno.io import InputError
from dgno.slides.network import load_network, restore_batch
from dgno.slides.pyramid import OutputLayout, tile_count
from dgno.slides.restore import restore_slide


@pytest.fixture(scope="module")
def gray_model(tmp_path_factory):
    return identity_model_file(tmp_path_factory.mktemp("model") / "model.pt", 1)


def _recording(path, source, normalise):
    """A copy of the model file ``source`` that records ``normalise`` (as dgno train writes it)."""
    blob = torch.load(source, map_location="cpu", weights_only=True)
    save_checkpoint(path, {**blob, "normalise": normalise})
    return path


def test_the_model_files_normalisation_is_the_default_and_an_option_overrides_it(gray_model, tmp_path, capsys):
    minmax = _recording(tmp_path / "minmax.pt", gray_model, "minmax")
    assert load_network(checkpoint=str(minmax), device="cpu", threads=1).normalise == "minmax"
    assert load_network(checkpoint=str(minmax), device="cpu", threads=1, normalise="dtype").normalise == "dtype"
    capsys.readouterr()
    unrecorded = load_network(checkpoint=str(gray_model), device="cpu", threads=1)
    assert unrecorded.normalise == "dtype" and "records no input normalisation" in capsys.readouterr().err
    odd = _recording(tmp_path / "odd.pt", gray_model, "zscore")
    with pytest.raises(InputError, match=r"odd.pt: .*zscore.*Fix: pass --normalise minmax or dtype"):
        load_network(checkpoint=str(odd), device="cpu", threads=1)


def test_options_are_refused_before_any_model_is_read(tmp_path):
    missing = str(tmp_path / "no_such_model.pt")  # were it read first, the error would be about the file
    for options, message in [
        ({"threads": 0}, r"--threads 0: at least one thread"),
        ({"tile": 16}, r"--tile 16: a tile must be at least 32 px"),
        ({"overlap": -1}, r"--overlap -1"),
        ({"tile_batch": 0}, r"--tile-batch 0"),
        ({"normalise": "zscore"}, r"--normalise zscore: allowed: minmax, dtype"),
    ]:
        with pytest.raises(InputError, match=message):
            load_network(checkpoint=missing, device="cpu", **options)
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match=r"--device cuda: no CUDA device here"):
            load_network(checkpoint=missing, device="cuda")
    with pytest.raises(InputError, match=r"no_such_model.pt: checkpoint does not exist"):
        load_network(checkpoint=missing, device="cpu", threads=1)
    assert torch.get_num_threads() == 1  # --threads went to torch
    assert "deblur-slide" in cli.PASSIVE_THREAD_COMMANDS  # its threads sleep when idle, as dgno deblur's


def test_values_beyond_the_slides_map_reach_the_network_and_come_back_unclipped():
    """The map comes from the thumbnail, whose block means miss the brightest pixels: those go to the network
    above 1 and come back as they were (identity) or changed like the rest (affine), never cut at the map's top."""
    scaling = Scaling(lo=100.0, hi=1000.0, dtype=np.dtype(np.uint16).str, kind="minmax")
    tiles = np.array([50, 100, 550, 1000, 4000, 65535], np.uint16).reshape(1, 1, 6, 1).repeat(8, axis=1)
    assert np.array_equal(restore_batch(network(1), tiles, scaling, where="t"), tiles)
    changed = restore_batch(network(1, fn=affine), tiles, scaling, where="t")[0, 0, :, 0]
    expected = np.clip(np.rint(100 + ((tiles[0, 0, :, 0].astype(float) - 100) / 900 * 0.8 + 0.1) * 900), 0, 65535)
    assert np.abs(changed.astype(int) - expected).max() <= 1 and changed[4] > 3000  # 4000 → 3310, not 1000
    assert to_unit(np.array([4000]), scaling, clip=False)[0] > 1 and to_unit(np.array([4000]), scaling)[0] == 1
    assert from_unit(np.array([5.0]), scaling, clip=False)[0] == 4600 and from_unit(np.array([5.0]), scaling)[0] == 1000


def test_one_map_per_slide_from_its_thumbnail_recorded_in_the_summary(tmp_path):
    src = tmp_path / "cells.ome.tif"
    img = fluorescence_slide(src, shape=(600, 700), regions=[])
    summary = restore_slide(src, tmp_path / "out", network=network(1, normalise="minmax"), channel="DAPI", restore="all", progress=False)
    norm = summary["normalisation"]
    assert norm["kind"] == "minmax" and norm["fallback"] == "" and img[0].min() <= norm["lo"] < norm["hi"] <= img[0].max()
    rgb = tmp_path / "he.tif"
    brightfield_slide(rgb, shape=(300, 400), regions=[])
    assert restore_slide(rgb, tmp_path / "out", network=network(3), restore="all", progress=False)["normalisation"] == {"kind": "dtype", "lo": 0.0, "hi": 255.0, "fallback": ""}


def test_the_writers_tail_shows_progress_and_a_run_without_restored_tiles_still_has_its_pictures(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DGNO_PROGRESS_SECONDS", "0")  # stderr is no terminal here: a progress line at every step
    src = tmp_path / "he.tif"
    brightfield_slide(src, shape=(700, 1100), regions=[])
    out = tmp_path / "out"
    summary = restore_slide(src, out, network=network(3), threshold=1.0, progress=True)  # nothing is that blurred
    assert summary["tiles"]["restored"] == 0 and summary["files"]["before_after"] == str(out / "he.before_after.png")
    assert (out / "he.before_after.png").stat().st_size > 1000 and (out / "he.focus.png").exists()
    total = tile_count(OutputLayout(700, 1100, np.dtype(np.uint8), "rgb", ("R", "G", "B"), None))
    assert total == 3 * 2 + 2 * 1 + 1  # 512-px tiles of 700 × 1100, 350 × 550, 175 × 275
    err = capsys.readouterr().err
    assert f"write he.tif: {total}/{total} tile (100 %)" in err
    assert json.loads((out / "he.summary.json").read_text())["files"]["before_after"].endswith("he.before_after.png")
