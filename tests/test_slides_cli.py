"""`dgno deblur-slide`: the command, its errors, resuming after a kill, and memory that does not grow with the slide.

Slides are written here (fixtures_slides); the network is a model file whose output is its input (a
smoke-scale DGNO with a zero head) or a small callable; runs that must be killed run in a child process.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tifffile
from conftest import ROOT, patient
from fixtures_authors import toy_release
from fixtures_http import serve
from fixtures_slides import affine, brightfield_slide, fluorescence_slide, identity_model_file, network

from dgno.cli import main
from dgno.inference import authors
from dgno.slides import work as work_module
from dgno.slides.restore import restore_slide

CHILD_ENV = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return identity_model_file(tmp_path_factory.mktemp("model") / "model.pt", 3)


@pytest.fixture(scope="module")
def small_slide(tmp_path_factory):
    path = tmp_path_factory.mktemp("slide") / "small.svs.tif"
    brightfield_slide(path, shape=(700, 900), regions=[])
    return path


def _cli(*args) -> int:
    return main(["deblur-slide", *map(str, args), "--device", "cpu", "--threads", "1"])


def test_command_restores_with_a_model_file_and_never_overwrites_unasked(model, small_slide, tmp_path, capsys):
    out = tmp_path / "out"
    assert _cli(small_slide, "--checkpoint", model, "--output", out, "--restore", "all", "--min-tissue", "0") == 0
    line = capsys.readouterr().out
    assert "small.svs.tif: 4 tiles, " in line and "4 to restore" in line and str(out / "small.svs.ome.tif") in line
    summary = json.loads((out / "small.svs.summary.json").read_text())
    assert summary["network"] == "model.pt" and summary["tile"] == 512 and summary["tiles_computed"] == 4 and summary["peak_memory_mb"] > 0
    assert {"seconds", "tiles_per_second", "seconds_per_megapixel", "share_outside_network", "device"} <= set(summary)
    with tifffile.TiffFile(out / "small.svs.ome.tif") as tf:
        restored = tf.series[0].levels[0].asarray()
    import openslide

    before = np.asarray(openslide.OpenSlide(str(small_slide)).read_region((0, 0), 0, (900, 700)))[..., :3]
    assert np.array_equal(restored, before)  # the identity network through the real model loader: every pixel back
    assert not any(p.name.startswith(".") for p in out.iterdir())  # the work folder is gone
    stamp = (out / "small.svs.ome.tif").stat().st_mtime_ns
    assert _cli(small_slide, "--checkpoint", model, "--output", out) == 1
    err = capsys.readouterr().err
    assert "small.svs.tif: the output" in err and "exists already. Fix: pass --overwrite" in err
    assert (out / "small.svs.ome.tif").stat().st_mtime_ns == stamp
    assert _cli(small_slide, "--checkpoint", model, "--output", out, "--overwrite", "--dry-run") == 0
    assert "s per tile → about" in capsys.readouterr().out


@pytest.mark.slow  # child processes / several slide runs: make test
def test_released_networks_by_name_with_the_authors_tiles(tmp_path, monkeypatch, capsys):
    """--authors NAME: the released checkpoint (toy size, served on 127.0.0.1) downloaded once, applied with
    the authors' protocol (512-px tiles, 32 px overlap, cross-fade); a fluorescence network refuses RGB."""
    files, options = toy_release(tmp_path / "release", names=("DGNO_3DHistech_Cell", "DGNO_BBBC006_w1_Cell"))
    src = tmp_path / "he.tif"
    brightfield_slide(src, shape=(400, 500), regions=[])  # one tile: the network at toy size still takes seconds
    monkeypatch.setenv(authors.CACHE_ENV, str(tmp_path / "cache"))
    with serve(files) as srv:
        monkeypatch.setenv(authors.URL_ENV, srv.base_url)
        args = ["--output", tmp_path / "out", "--restore", "all"]
        assert _cli(src, "--authors", "DGNO_3DHistech_Cell", "--options", options / "DGNO_3DHistech_Cell.yml", *args) == 0
        assert _cli(src, "--authors", "DGNO_BBBC006_w1_Cell", "--options", options / "DGNO_BBBC006_w1_Cell.yml", *args, "--overwrite") == 1
    err = capsys.readouterr().err
    assert "he.tif: a 8-bit RGB brightfield slide, but DGNO_BBBC006_w1_Cell restores 1-channel images. Fix: use a 3DHistech network" in err
    summary = json.loads((tmp_path / "out" / "he.summary.json").read_text())
    assert (summary["network"], summary["tile"], summary["overlap"], summary["blend"]) == ("DGNO_3DHistech_Cell", 512, 32, "crossfade")
    assert summary["normalisation"] == {"kind": "dtype", "lo": 0.0, "hi": 255.0, "fallback": ""} and summary["tiles_computed"] == 1
    with tifffile.TiffFile(tmp_path / "out" / "he.ome.tif") as tf:
        assert tf.series[0].levels[0].shape == (400, 500, 3) and tf.series[0].dtype == np.uint8


def _corrupt_tile(path: Path) -> int:
    """Overwrite the compressed bytes of a level-0 tile in the middle of the slide; its index."""
    with tifffile.TiffFile(path) as tf:
        page = tf.pages[0]
        k = len(page.dataoffsets) // 2
        offset, count = int(page.dataoffsets[k]), int(page.databytecounts[k])
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(bytes(range(256)) * (count // 256) + b"\x00" * (count % 256))
    return k


def test_bad_slides_give_one_clear_error_each_and_no_output(model, tmp_path, capsys):
    corrupt = tmp_path / "corrupt.ome.tif"
    fluorescence_slide(corrupt, shape=(1100, 1300), regions=[])
    k = _corrupt_tile(corrupt)
    truncated = tmp_path / "cut.tif"
    brightfield_slide(truncated, shape=(900, 1100), regions=[])
    data = truncated.read_bytes()
    truncated.write_bytes(data[: int(len(data) * 0.6)])
    text = tmp_path / "notes.txt"
    text.write_text("not a slide\n")
    out = tmp_path / "out"
    bf = identity_model_file(tmp_path / "gray.pt", 1)
    code = _cli(corrupt, truncated, text, tmp_path / "missing.svs", "--checkpoint", bf, "--output", out, "--channel", "0", "--restore", "all")
    err = capsys.readouterr().err
    assert code == 1 and "4 of 4 slide(s) failed" in err
    assert f"corrupt.ome.tif: level 0, tile {k} (pixels y" in err and "cannot be decoded" in err
    assert "cut.tif: file is truncated" in err and "notes.txt: not a slide format this reads" in err and "missing.svs: slide does not exist" in err
    assert all(line.count("Fix:") == 1 for line in err.splitlines() if line.startswith("error:"))
    assert not list(out.glob("*.ome.tif"))  # nothing under a final name
    (tmp_path / "b").mkdir()
    twin = tmp_path / "b" / "corrupt.ome.tif"
    twin.write_bytes(corrupt.read_bytes())
    assert main(["deblur-slide", str(corrupt), str(twin), "--checkpoint", str(bf), "--output", str(out)]) == 2
    assert "corrupt.ome.tif: its results would have the same name (corrupt) as those of" in capsys.readouterr().err


def test_full_disk_is_an_error_naming_the_folder_and_the_fix(small_slide, tmp_path, monkeypatch):
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(work_module, "write_durable", full)
    with pytest.raises(Exception, match=r"small\.svs\.tif: no space left on the disk of .*Fix: free space"):
        restore_slide(small_slide, tmp_path / "out", network=network(fn=affine), restore="all", progress=False)
    assert not (tmp_path / "out" / "small.svs.ome.tif").exists()


def test_a_second_run_on_the_same_slide_and_folder_is_refused(small_slide, tmp_path):
    held = work_module.WorkFolder(tmp_path / ".small.svs.work")
    with held.locked(small_slide), pytest.raises(Exception, match=r"small\.svs\.tif: another run is restoring it into .*Fix: wait"):
        restore_slide(small_slide, tmp_path, network=network(), progress=False)
    assert restore_slide(small_slide, tmp_path, network=network(), progress=False)["tiles"]["total"] == 12  # free again


CHILD = """
import sys, time, torch
from fixtures_slides import network, affine
from dgno.slides.restore import restore_slide
torch.set_num_threads(1)
def slow(x):
    time.sleep(0.15)
    return affine(x)
restore_slide(sys.argv[1], sys.argv[2], network=network(fn=slow, batch=2, name="affine"), restore="all", min_tissue=0.0, progress=False)
"""


def _wait_for_chunks(work: Path, n: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    t0 = time.monotonic()
    while len(list((work / "chunks").glob("*.npy"))) < n:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() - t0 < timeout, "the child made no progress"
        time.sleep(0.05)


@pytest.mark.slow  # child processes / several slide runs: make test
def test_kill_9_then_rerun_resumes_and_gives_the_same_bytes(tmp_path):
    src = tmp_path / "slide.tif"
    brightfield_slide(src, shape=(1200, 1400), regions=[])
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(src), str(tmp_path / "a")], env=CHILD_ENV, stderr=subprocess.PIPE)
    try:
        _wait_for_chunks(tmp_path / "a" / ".slide.work", 3, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not (tmp_path / "a" / "slide.ome.tif").exists()
    resumed = restore_slide(src, tmp_path / "a", network=network(fn=affine, batch=2, name="affine"), restore="all", min_tissue=0.0, progress=False)
    assert resumed["tiles_reused"] >= 6 and resumed["tiles_computed"] + resumed["tiles_reused"] == resumed["tiles"]["restored"] == 42
    whole = restore_slide(src, tmp_path / "b", network=network(fn=affine, batch=2, name="affine"), restore="all", min_tissue=0.0, progress=False)
    assert whole["tiles_reused"] == 0
    assert (tmp_path / "a" / "slide.ome.tif").read_bytes() == (tmp_path / "b" / "slide.ome.tif").read_bytes()


@pytest.mark.slow  # child processes / several slide runs: make test
def test_sigterm_stops_with_143_and_the_same_command_finishes_the_job(model, tmp_path):
    src = tmp_path / "slide.tif"
    brightfield_slide(src, shape=(1100, 1500), regions=[])
    args = ["-m", "dgno.cli", "deblur-slide", str(src), "--checkpoint", str(model), "--output", str(tmp_path / "a"), "--restore", "all", "--min-tissue", "0", "--device", "cpu", "--threads", "1"]
    proc = subprocess.Popen([sys.executable, *args], env=CHILD_ENV, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        _wait_for_chunks(tmp_path / "a" / ".slide.work", 1, proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=patient(60)) == 143
    finally:
        proc.kill()
    err = proc.stderr.read().decode()
    assert "slide.tif: stopped by a signal" in err and "run the same command again to resume" in err
    assert _cli(src, "--checkpoint", model, "--output", tmp_path / "a", "--restore", "all", "--min-tissue", "0") == 0
    assert _cli(src, "--checkpoint", model, "--output", tmp_path / "b", "--restore", "all", "--min-tissue", "0") == 0
    assert (tmp_path / "a" / "slide.ome.tif").read_bytes() == (tmp_path / "b" / "slide.ome.tif").read_bytes()


MEMORY_CHILD = """
import sys, torch
from fixtures_slides import network
from dgno.slides.restore import peak_memory_mb, restore_slide
torch.set_num_threads(1)
for src, out in zip(sys.argv[1::2], sys.argv[2::2]):
    restore_slide(src, out, network=network(1, batch=2), channel="DAPI", restore="all", min_tissue=0.0, progress=False)
    print(peak_memory_mb())
"""


@pytest.mark.slow  # child processes / several slide runs: make test
def test_peak_memory_does_not_grow_with_the_slide(tmp_path):
    """4× the area (2× each side) restored in one process after the small one: peak RSS within 10 %.
    benchmarks/cpu/slides.py records the same up to 64× the area, with the pipeline's own allocations."""
    args = []
    for side in (1024, 2048):
        src = tmp_path / f"s{side}.ome.tif"
        fluorescence_slide(src, shape=(side, side), regions=[])
        args += [str(src), str(tmp_path / f"o{side}")]
    done = subprocess.run([sys.executable, "-c", MEMORY_CHILD, *args], env=CHILD_ENV, capture_output=True, text=True, timeout=patient(300))
    assert done.returncode == 0, done.stderr[-2000:]
    small, big = map(float, done.stdout.split()[-2:])
    assert big <= 1.10 * small, (small, big)
    assert (tmp_path / "o2048" / "s2048.ome.tif").stat().st_size > 4 * 2**20  # the big slide was written
