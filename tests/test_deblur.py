"""`dgno deblur`: users' own images keep dtype/shape/range; bad files are named and skipped; tiles are seamless."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
import torch

from dgno.checkpoint import load_trained
from dgno.cli import main
from dgno.inference.deblur import deblur_files
from dgno.inference.evaluate import model_restorer
from dgno.io import InputError
from dgno.train import ModelChoice, TrainConfig, train


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from conftest import write_tiny_dataset

    root = tmp_path_factory.mktemp("deblur")
    data = write_tiny_dataset(root / "data")
    cfg = TrainConfig.from_dict(dict(iterations=2, batch_size=1, patch_size=32, val_every=10, log_every=1, checkpoint_every=10, device="cpu"))
    return train(data, root / "run", model_choice=ModelChoice(name="lg", scale="smoke"), levels=["a"], cfg=cfg, progress=False)


def test_16bit_frame_round_trips_dtype_and_shape(checkpoint, tmp_path):
    img = (np.random.default_rng(0).random((520, 696)) * 60000).astype(np.uint16)
    src = tmp_path / "frame.tif"
    tifffile.imwrite(src, img)
    assert deblur_files([src], tmp_path / "out", checkpoint=checkpoint, tile=256, overlap=64, device="cpu") == []
    out = tifffile.imread(tmp_path / "out" / "frame.tif")
    assert out.dtype == np.uint16 and out.shape == (520, 696)


def test_rgb_8bit_png_is_restored_per_channel_into_a_png(checkpoint, tmp_path):
    import imagecodecs
    import skimage.io

    rgb = (np.random.default_rng(1).random((40, 50, 3)) * 255).astype(np.uint8)
    skimage.io.imsave(tmp_path / "rgb.png", rgb, check_contrast=False)
    assert deblur_files([tmp_path / "rgb.png"], tmp_path / "out", checkpoint=checkpoint, tile=None, device="cpu") == []
    out = imagecodecs.png_decode((tmp_path / "out" / "rgb.png").read_bytes())
    assert out.dtype == np.uint8 and out.shape == (40, 50, 3)


def test_training_records_the_datasets_normalisation(checkpoint):
    """model.pt and checkpoint.pt say how the network saw intensities (no manifest: by dtype), for dgno deblur."""
    assert torch.load(checkpoint, weights_only=True)["normalise"] == "dtype"
    assert torch.load(checkpoint.parent / "checkpoint.pt", weights_only=True)["normalise"] == "dtype"


def test_bad_files_are_named_and_the_rest_processed(checkpoint, tmp_path, capsys):
    good = tmp_path / "good.tif"
    tifffile.imwrite(good, np.zeros((40, 40), np.uint16))
    bad = tmp_path / "broken.tif"
    bad.write_bytes(b"not a tiff")
    code = main(["deblur", str(bad), str(good), "--checkpoint", str(checkpoint), "--output", str(tmp_path / "out"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 1 and "broken.tif" in err and "1 of 2 file(s) failed" in err
    assert (tmp_path / "out" / "good.tif").exists() and not (tmp_path / "out" / "broken.tif").exists()


def test_wrong_checkpoint_is_a_clear_error(tmp_path, capsys):
    fake = tmp_path / "model.pt"
    torch.save({"weights": 1}, fake)
    code = main(["deblur", str(fake), "--checkpoint", str(fake), "--output", str(tmp_path / "o"), "--device", "cpu"])
    assert code == 2 and "not a dgno model file" in capsys.readouterr().err


def test_one_tile_equals_untiled(checkpoint):
    model, _ = load_trained(checkpoint)
    img = np.random.default_rng(2).random((64, 64)).astype(np.float32)
    whole = model_restorer(model, torch.device("cpu"), tile=None, overlap=0)(img)
    tiled = model_restorer(model, torch.device("cpu"), tile=64, overlap=16)(img)
    np.testing.assert_allclose(tiled, whole, atol=1e-4)


def test_never_overwrites_an_input_nor_writes_two_inputs_to_one_file(checkpoint, tmp_path, capsys):
    folder, other = tmp_path / "imgs", tmp_path / "more"
    folder.mkdir()
    other.mkdir()
    tif, png, twin = folder / "a.tif", folder / "a.png", other / "a.tif"
    tifffile.imwrite(tif, np.full((40, 40), 1234, np.uint16))
    tifffile.imwrite(twin, np.full((40, 40), 99, np.uint16))
    import skimage.io

    skimage.io.imsave(png, np.full((40, 40), 7, np.uint8), check_contrast=False)
    before = tif.read_bytes()
    # output folder = input folder: every output would replace its own input
    code = main(["deblur", str(tif), str(png), "--checkpoint", str(checkpoint), "--output", str(folder), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 1 and tif.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["a.png", "a.tif"]
    assert "a.tif: its output" in err and "would overwrite the input file" in err and "a.png: its output" in err
    # another folder: a.png keeps its name beside a.tif; the a.tif of a second folder is refused by name
    failures = deblur_files([tif, png, twin], tmp_path / "out", checkpoint=checkpoint, device="cpu")
    assert [p for p, _ in failures] == [twin] and "is also the output of" in failures[0][1]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.png", "a.tif"]
    assert tifffile.imread(tmp_path / "out" / "a.tif").dtype == np.uint16  # written from a.tif


def test_nan_output_is_an_error_naming_the_file_never_pixels(checkpoint, tmp_path, monkeypatch):
    from dgno.inference.evaluate import evaluate_checkpoint

    model_file = tmp_path / "nan.pt"
    blob = torch.load(checkpoint, weights_only=True)
    blob["state_dict"] = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in blob["state_dict"].items()}
    torch.save(blob, model_file)
    src = tmp_path / "cells.tif"
    tifffile.imwrite(src, np.full((40, 40), 500, np.uint16))
    failures = deblur_files([src], tmp_path / "out", checkpoint=model_file, device="cpu")
    assert len(failures) == 1 and str(src) in failures[0][1] and "NaN/Inf" in failures[0][1]
    assert not (tmp_path / "out" / "cells.tif").exists()
    from conftest import write_tiny_dataset

    data = write_tiny_dataset(tmp_path / "data")
    with pytest.raises(InputError, match=r"blur/a/img\d\d\.tif \(nan-model\): the model's output holds \d+ NaN/Inf"):
        evaluate_checkpoint(model_file, data, "a", tmp_path / "eval", method="nan-model", with_lpips=False, progress=False)
    assert not (tmp_path / "eval" / "summary.json").exists()
