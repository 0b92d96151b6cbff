"""`dgno deblur --authors NAME` / `--checkpoint FILE.pth`: the authors' released weights on users' own images.

The released checkpoint (at toy size, rebuilt from tests/fixtures/authors) is served on 127.0.0.1
(``DGNO_AUTHORS_URL``); the cache is a temporary folder (``DGNO_CACHE``).
"""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
import torch
from fixtures_authors import toy_release
from fixtures_http import serve

from dgno.checkpoint import load_trained
from dgno.cli import main
from dgno.inference import authors
from dgno.inference.deblur import deblur_files
from dgno.inference.evaluate import model_restorer

NAME = "DGNO_BBBC006_w1_Cell"


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    folder = tmp_path_factory.mktemp("release")
    files, options = toy_release(folder, names=(NAME,))
    with serve(files) as srv:
        yield srv, folder, options


@pytest.fixture
def env(tmp_path, monkeypatch, release):
    srv, _, _ = release
    srv.reset()
    monkeypatch.setenv(authors.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(authors.URL_ENV, srv.base_url)
    return srv


def _frame(path, seed=0, shape=(60, 70)):
    img = (np.random.default_rng(seed).random(shape) * 3000 + 200).astype(np.uint16)
    tifffile.imwrite(path, img)
    return img


def test_authors_downloads_once_imports_once_and_restores(env, release, tmp_path, capsys):
    _, _, options = release
    src = tmp_path / "in" / "cells.tif"
    src.parent.mkdir()
    before = _frame(src)
    args = ["deblur", str(src), "--authors", NAME, "--options", str(options / f"{NAME}.yml"), "--output", str(tmp_path / "out"), "--device", "cpu"]
    assert main(args) == 0
    cache = tmp_path / "cache" / "authors"
    imported = list(cache.glob(f"{NAME}.*.pt"))
    assert (cache / f"{NAME}.pth").exists() and len(imported) == 1 and len(env.served(f"{NAME}.pth")) == 1
    stamp = imported[0].stat().st_mtime_ns
    assert main([*args[:-4], "--output", str(tmp_path / "out2"), "--device", "cpu"]) == 0  # cache hit: no download, no import
    assert len(env.served(f"{NAME}.pth")) == 1 and imported[0].stat().st_mtime_ns == stamp
    assert np.array_equal(tifffile.imread(src), before)  # the input is never overwritten
    out = tifffile.imread(tmp_path / "out" / "cells.tif")
    assert out.dtype == np.uint16 and out.shape == before.shape and before.min() <= out.min() and out.max() <= before.max()
    assert np.array_equal(out, tifffile.imread(tmp_path / "out2" / "cells.tif"))
    # the authors' protocol: per-image min-max in, mapped back out; 512-px tiles, 32 px cross-fade
    model, blob = load_trained(imported[0])
    assert blob["normalise"] == "minmax"  # the import records the BBBC006 networks' normalisation
    unit = (before - before.min()) / float(before.max() - before.min())
    expected = model_restorer(model, __import__("torch").device("cpu"), tile=512, overlap=32, blend="crossfade")(unit.astype(np.float32))
    assert np.abs(out.astype(float) - (expected * (before.max() - before.min()) + before.min())).max() <= 1.0
    assert "downloading" in capsys.readouterr().out


def test_rgb_into_a_w1_model_is_refused_naming_image_model_and_fix(env, release, tmp_path, capsys):
    _, _, options = release
    rgb = tmp_path / "slide.tif"
    tifffile.imwrite(rgb, (np.random.default_rng(3).random((40, 50, 3)) * 255).astype(np.uint8))
    gray = tmp_path / "gray.tif"
    _frame(gray, shape=(40, 50))
    code = main(["deblur", str(rgb), str(gray), "--authors", NAME, "--options", str(options / f"{NAME}.yml"), "--output", str(tmp_path / "out"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 1 and "1 of 2 file(s) failed" in err
    assert f"{rgb}: a RGB image (3 channel(s)), but model {NAME} restores 1-channel images" in err and "DGNO_3DHistech" in err
    assert (tmp_path / "out" / "gray.tif").exists() and not (tmp_path / "out" / "slide.tif").exists()


def test_checkpoint_takes_a_local_authors_file_or_a_model_pt(env, release, tmp_path):
    _, folder, options = release
    pth = folder / f"{NAME}.pth"
    assert authors.checkpoint_kind(pth) == "authors"
    how = authors.local(pth, options=options / f"{NAME}.yml")
    assert how.strict_channels and how.normalise == "minmax" and how.blend == "crossfade" and how.overlap == 32
    assert authors.checkpoint_kind(how.model) == "dgno" and authors.local(how.model).model == how.model  # a model.pt as it is
    assert not env.served(f"{NAME}.pth")  # nothing downloaded for a local file
    src = tmp_path / "a.tif"
    _frame(src)
    assert main(["deblur", str(src), "--checkpoint", str(pth), "--options", str(options / f"{NAME}.yml"), "--output", str(tmp_path / "o"), "--device", "cpu"]) == 0
    renamed = tmp_path / "mine.pth"
    renamed.write_bytes(pth.read_bytes())
    with pytest.raises(Exception, match="Fix: pass --options"):
        authors.local(renamed)


def test_an_unknown_release_name_lists_the_released_ones(env, tmp_path, capsys):
    assert main(["deblur", str(tmp_path / "x.tif"), "--authors", "DGNO_BBBC006_w3_Cell", "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "not a released checkpoint" in err and "DGNO_BBBC006_w1_Face" in err


def test_project_checkpoints_keep_their_per_channel_rgb_restoration(tmp_path):
    """A project model.pt restores RGB channel by channel (no strict channels, the normalisation it records)."""
    from conftest import write_tiny_dataset

    from dgno.train import ModelChoice, TrainConfig, train

    data = write_tiny_dataset(tmp_path / "data")
    cfg = TrainConfig.from_dict(dict(iterations=1, batch_size=1, patch_size=32, val_every=10, log_every=1, checkpoint_every=10, device="cpu"))
    ckpt = train(data, tmp_path / "run", model_choice=ModelChoice(name="lg", scale="smoke"), levels=["a"], cfg=cfg, progress=False)
    how = authors.local(ckpt)
    assert not how.strict_channels and how.normalise is None and how.blend == "ramp"  # None: as model.pt records
    assert torch.load(ckpt, weights_only=True)["normalise"] == "dtype"  # the tiny dataset has no manifest
    rgb = tmp_path / "rgb.tif"
    tifffile.imwrite(rgb, (np.random.default_rng(1).random((40, 50, 3)) * 255).astype(np.uint8))
    assert deblur_files([rgb], tmp_path / "out", checkpoint=ckpt, tile=None, device="cpu") == []


def test_options_are_checked_before_any_download(env, tmp_path, capsys):
    args = ["deblur", str(tmp_path / "x.tif"), "--authors", NAME, "--output", str(tmp_path / "o"), "--device", "cpu"]
    assert main([*args, "--tile", "0"]) == 2
    assert "--tile 0" in capsys.readouterr().err and not env.served(f"{NAME}.pth")
