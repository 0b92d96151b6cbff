"""`dgno deblur` as a batch: checked before the first image, never dies on one file, uses the machine as told."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import tifffile
import torch
from fixtures_deblur import model_file

from dgno.cli import main
from dgno.inference import deblur, memory, preflight
from dgno.inference.deblur import DeblurOptions, deblur_batch

RNG = np.random.default_rng(1)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return model_file(tmp_path_factory.mktemp("model") / "model.pt")


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a.tif", "b.tif", "c.tif"):
        tifffile.imwrite(folder / name, RNG.integers(0, 4096, (40, 48)).astype(np.uint16))
    return folder


def _cli(inputs, out, model, *extra):
    return main(["deblur", *map(str, inputs), "--checkpoint", str(model), "--output", str(out), "--device", "cpu", *extra])


@pytest.mark.parametrize(
    "option, value, says",
    [
        ("--tile", "16", "--tile 16: a tile must be at least 32 px and larger than --overlap"),
        ("--tile", "0", "--tile 0"),
        ("--tile", "48", "larger than --overlap (64 px)"),
        ("--overlap", "-8", "--overlap -8: the overlap between tiles cannot be negative"),
        ("--tile-batch", "0", "--tile-batch 0: at least one tile per pass"),
        ("--threads", "0", "--threads 0: at least one thread"),
        ("--channel", "-1", "--channel -1: channels are numbered from 0"),
        ("--max-memory", "0", "--max-memory 0.0: must be a positive number"),
    ],
)
def test_bad_options_fail_before_any_image(model, images, tmp_path, capsys, option, value, says):
    assert _cli([images], tmp_path / "out", model, option, value) == 2
    err = capsys.readouterr().err
    assert says in err and "Fix:" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_cuda_without_a_gpu_is_said_plainly(model, images, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["deblur", str(images), "--checkpoint", str(model), "--output", str(tmp_path / "out"), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device here" in err and "use --device cpu" in err and "checkpoint" not in err


def test_an_output_folder_that_cannot_be_written_fails_before_any_image(model, images, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert _cli([images], blocker, model) == 2
    assert f"--output {blocker}: is a file, not a folder" in capsys.readouterr().err
    assert _cli([images], blocker / "sub", model) == 2  # a folder below a file: cannot be created
    assert "cannot write there" in capsys.readouterr().err
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert _cli([images], locked, model) == 2
        assert "cannot write there" in capsys.readouterr().err


def test_one_file_failing_anywhere_never_stops_the_batch(model, images, tmp_path, capsys):
    (images / "broken.tif").write_bytes(b"II*\x00 truncated")
    out = tmp_path / "out"
    (out / "b.tif").mkdir(parents=True)  # the write of b.tif fails: a folder is in the way
    missing = tmp_path / "nowhere.tif"
    assert _cli([images, missing], out, model) == 1
    captured = capsys.readouterr()
    assert (out / "a.tif").is_file() and (out / "c.tif").is_file() and not (out / "broken.tif").exists()
    assert f"{images / 'broken.tif'}: cannot be decoded as an image" in captured.err
    assert f"{images / 'b.tif'}: cannot write {out / 'b.tif'}" in captured.err
    assert f"{missing}: file does not exist. Fix: check the path" in captured.err and "re-run the rule" not in captured.err
    assert "deblur: 2 restored, 0 skipped (output already there), 3 failed in" in captured.out
    assert "3 of 5 file(s) failed" in captured.err and "Traceback" not in captured.err


def test_skip_existing_resumes_and_the_default_replaces(model, images, tmp_path, capsys):
    out = tmp_path / "out"
    assert _cli([images], out, model) == 0
    assert "deblur: 3 restored, 0 skipped" in capsys.readouterr().out
    (out / "b.tif").unlink()
    stamp = (out / "a.tif").stat().st_mtime_ns
    assert _cli([images], out, model, "--skip-existing") == 0
    assert "deblur: 1 restored, 2 skipped" in capsys.readouterr().out
    assert (out / "a.tif").stat().st_mtime_ns == stamp and (out / "b.tif").exists()
    assert _cli([images], out, model) == 0
    assert "deblur: 3 restored, 0 skipped" in capsys.readouterr().out


def test_folders_count_what_they_skip_and_an_empty_folder_is_named(model, images, tmp_path, capsys):
    (images / "._a.tif").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    (images / "notes.txt").write_text("not an image")
    (images / "deeper").mkdir()
    tifffile.imwrite(images / "deeper" / "d.tif", np.zeros((40, 48), np.uint16))  # folders are read one level deep
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _cli([images, empty], tmp_path / "out", model) == 1
    captured = capsys.readouterr()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.tif", "b.tif", "c.tif"]
    assert f"{empty}: a folder without images" in captured.err
    assert "; 1 hidden file(s), 1 non-image file(s) and 1 subfolder(s) ignored in the input folders (subfolders are not searched" in captured.out
    assert _cli([images / "a.tif"], tmp_path / "one", model) == 0
    assert "ignored" not in capsys.readouterr().out  # files named one by one: nothing was passed over


def test_threads_default_to_the_allowed_cpus_and_the_option_sets_them(model, images, tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert preflight.default_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert preflight.default_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the run without --threads: one thread, as the shared test machine wants
    used = []
    monkeypatch.setattr(preflight, "use_threads", lambda n: used.append(n) or torch.set_num_threads(n))
    before = torch.get_num_threads()
    assert _cli([images / "a.tif"], tmp_path / "o1", model, "--threads", "2") == 0
    assert _cli([images / "a.tif"], tmp_path / "o2", model) == 0
    assert used == [2, 1] and torch.get_num_threads() == before  # restored after the batch


def test_ctrl_c_stops_without_a_traceback_and_says_how_to_go_on(model, images, tmp_path, capsys, monkeypatch):
    calls = []

    def interrupted(run, path, target):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(run, path, target)

    real = deblur.restore_file
    monkeypatch.setattr(deblur, "restore_file", interrupted)
    assert _cli([images], tmp_path / "out", model) == 130
    captured = capsys.readouterr()
    assert "interrupted" in captured.out and "--skip-existing" in captured.err and "Traceback" not in captured.err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["a.tif"]  # nothing half-written


def test_small_planes_are_refused_with_the_size_that_works(model, tmp_path, capsys):
    tifffile.imwrite(tmp_path / "dot.tif", np.zeros((1, 1), np.uint16))
    tifffile.imwrite(tmp_path / "last.tif", RNG.integers(0, 255, (40, 50, 5)).astype(np.uint8))  # channels last: pages of 50×5
    assert _cli([tmp_path / "dot.tif", tmp_path / "last.tif"], tmp_path / "out", model) == 1
    err = capsys.readouterr().err
    assert "dot.tif: planes of 1×1 px" in err and "at least 8×8 px" in err
    assert "last.tif: planes of 50×5 px" in err and "--axes YXC" in err
    assert _cli([tmp_path / "last.tif"], tmp_path / "out", model, "--axes", "YXC") == 0
    assert tifffile.imread(tmp_path / "out" / "last.tif").shape == (40, 50, 5)


def test_a_model_file_without_a_recorded_normalisation_says_what_it_uses(tmp_path, images, capsys):
    unrecorded = model_file(tmp_path / "plain.pt", normalise=None)
    assert _cli([images / "a.tif"], tmp_path / "out", unrecorded) == 0
    assert "records no input normalisation; scaling by the data's full scale (dtype)" in capsys.readouterr().err
    assert _cli([images / "a.tif"], tmp_path / "out2", unrecorded, "--normalise", "minmax") == 0
    assert "records no input normalisation" not in capsys.readouterr().err


def test_one_pass_is_capped_to_the_memory_budget_and_equals_tiling(model, tmp_path, capsys):
    src = tmp_path / "big.tif"
    tifffile.imwrite(src, RNG.integers(0, 4096, (150, 170)).astype(np.uint16))
    budget_gib = 40 * 64 * 64 * 4 / 2**30  # room for about a 64² pass of a 40 B/px network
    reports: list[str] = []
    opts = DeblurOptions(tile=None, overlap=16, max_memory_gb=budget_gib)
    summary = deblur_batch([src], tmp_path / "capped", checkpoint=model, device="cpu", options=opts, report=reports.append)
    assert not summary.failed and any("more than the budget" in r and "px tiles" in r for r in reports), reports
    tile = int(next(r for r in reports if "more than the budget" in r).split("using ")[1].split("-px")[0])
    assert 32 <= tile < 170
    assert deblur_batch([src], tmp_path / "tiled", checkpoint=model, device="cpu", options=DeblurOptions(tile=tile, overlap=16), report=reports.append).failed == []
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "capped" / "big.tif"), tifffile.imread(tmp_path / "tiled" / "big.tif"))


def test_out_of_memory_is_retried_with_smaller_tiles(model, tmp_path, monkeypatch):
    src = tmp_path / "img.tif"
    tifffile.imwrite(src, RNG.integers(0, 4096, (100, 100)).astype(np.uint16))
    real = deblur.model_restorer

    def fragile(*args, tile, **kwargs):
        restore = real(*args, tile=tile, **kwargs)

        def run(img, *, progress=None):
            if tile is None or tile > 64:
                raise RuntimeError("CUDA out of memory. Tried to allocate 9.00 GiB")
            return restore(img, progress=progress)

        run.engine, run.engine_note = restore.engine, restore.engine_note  # what a restorer says about its engine
        return run

    monkeypatch.setattr(deblur, "model_restorer", fragile)
    reports: list[str] = []
    summary = deblur_batch([src], tmp_path / "out", checkpoint=model, device="cpu", options=DeblurOptions(tile=None, overlap=16), report=reports.append)
    assert summary.failed == [] and (tmp_path / "out" / "img.tif").exists()
    assert any("out of memory with one pass; retrying with 32-px tiles" in r for r in reports), reports  # 100 px halved, cut to 32s


def test_large_images_show_progress_per_tile(model, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(deblur, "PROGRESS_DELAY_S", 0.0)
    src = tmp_path / "large.tif"
    tifffile.imwrite(src, RNG.integers(0, 4096, (100, 100)).astype(np.uint16))
    assert _cli([src], tmp_path / "out", model, "--tile", "32", "--overlap", "8") == 0
    err = capsys.readouterr().err
    assert "/16 [" not in err  # not a terminal (a log file, a pipe): no bars between the lines
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert _cli([src], tmp_path / "out2", model, "--tile", "32", "--overlap", "8") == 0
    err = capsys.readouterr().err
    assert "large.tif:" in err and "/16 [" in err  # 4 × 4 tiles of 32 px with 8 px overlap


def test_peak_memory_follows_tensors_until_they_are_freed(model):
    with memory.PeakMemory() as meter:
        a = torch.ones(1000)
        b = a + 1
        del a, b
        c = torch.ones(500)
    assert meter.peak == 8000 and meter.now == 2000
    del c
    per_pixel = memory.activation_bytes_per_pixel(torch.nn.Conv2d(1, 8, 3, padding=1), torch.device("cpu"), 1)
    assert per_pixel >= 8 * 4  # the 8 float32 output channels at least
    assert memory.tile_cap(100.0, 100 * 256 * 256, tile_batch=1) == 256 and memory.tile_cap(100.0, 1000, tile_batch=1) == preflight.MIN_TILE
    assert memory.smaller_tile(512, 64) == 256 and memory.smaller_tile(48, 16) is None
    assert memory.is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 GB"))
    assert not memory.is_out_of_memory(RuntimeError("shape mismatch"))
