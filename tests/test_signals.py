"""SIGTERM — what a SLURM time limit, scancel and kill send — stops a command as Ctrl-C does and says
which outputs are complete and how to resume (exit 143); during start-up it ends the process at once.

Most signals are sent by the test process to itself at a chosen point of the work (a patched step),
so that nothing depends on timing; one test sends SIGTERM to a real `dgno deblur` child whose stderr
goes to a file, as under SLURM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tifffile
from conftest import ROOT
from fixtures_deblur import model_file
from fixtures_slides import brightfield_slide, identity_model_file

from dgno import commands
from dgno.cli import main
from dgno.inference import deblur
from dgno.slides import focus, run

CHILD_ENV = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return model_file(tmp_path_factory.mktemp("model") / "model.pt")


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a.tif", "b.tif", "c.tif"):
        tifffile.imwrite(folder / name, np.random.default_rng(1).integers(0, 4096, (40, 48)).astype(np.uint16))
    return folder


def _signal_on_call(n: int, real, signum: int = signal.SIGTERM):
    """``real``, sending ``signum`` to this process when called the n-th time (before doing its work)."""
    calls = []

    def wrapper(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            os.kill(os.getpid(), signum)
        return real(*args, **kwargs)

    return wrapper


def _deblur(inputs, out, model, *extra) -> int:
    return main(["deblur", *map(str, inputs), "--checkpoint", str(model), "--output", str(out), "--device", "cpu", *extra])


def test_sigterm_stops_a_batch_naming_the_complete_files_and_the_rerun(model, images, tmp_path, capsys, monkeypatch):
    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(deblur, "restore_file", _signal_on_call(2, deblur.restore_file))
    out = tmp_path / "out"
    assert _deblur([images], out, model) == 143
    captured = capsys.readouterr()
    assert "interrupted (SIGTERM)" in captured.out and "Traceback" not in captured.err
    assert "dgno deblur: stopped by SIGTERM: 1 file(s) restored by this run are complete (a.tif)" in captured.err
    assert f"{images / 'b.tif'} was not finished" in captured.err and "run the same command again with --skip-existing" in captured.err
    assert [p.name for p in out.iterdir()] == ["a.tif"]  # nothing half-written
    assert signal.getsignal(signal.SIGTERM) == before  # the command's handler is gone again
    monkeypatch.undo()
    assert _deblur([images], out, model, "--skip-existing") == 0
    assert "deblur: 2 restored, 1 skipped" in capsys.readouterr().out and sorted(p.name for p in out.iterdir()) == ["a.tif", "b.tif", "c.tif"]


def test_sigterm_before_the_first_image_says_to_run_again(model, images, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(commands, "deblur_batch", _signal_on_call(1, lambda *a, **k: time.sleep(30)))
    assert _deblur([images], tmp_path / "out", model) == 143
    assert "dgno deblur: stopped by SIGTERM before it finished; run the same command again" in capsys.readouterr().err


CHILD = """
import sys, time
from dgno.inference import deblur
real = deblur.restore_file
def slow(*args):
    time.sleep(0.2)  # every file takes a while: the signal lands in the middle of the batch on any machine
    return real(*args)
deblur.restore_file = slow
from dgno.console import main
sys.argv = ["dgno", *sys.argv[1:]]
sys.exit(main())
"""


@pytest.mark.slow  # a child process that loads torch
def test_a_real_sigterm_to_a_logged_run_prints_progress_and_the_resume_line(model, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(30):
        tifffile.imwrite(folder / f"img{i:02d}.tif", np.full((40, 48), i, np.uint16))
    out, log = tmp_path / "out", tmp_path / "job.log"
    args = ["deblur", str(folder), "--checkpoint", str(model), "--output", str(out), "--device", "cpu"]
    with open(log, "w") as err:  # stderr into a file: as nohup, SLURM and `2>log` do
        proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], env={**CHILD_ENV, "DGNO_PROGRESS_SECONDS": "0"}, stdout=subprocess.DEVNULL, stderr=err)
        try:
            t0 = time.monotonic()
            while not (out.is_dir() and any(out.glob("img*.tif"))):
                assert proc.poll() is None, log.read_text()[-2000:]
                assert time.monotonic() - t0 < 600, "the child restored nothing"
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=120) == 143
        finally:
            proc.kill()
    text = log.read_text()
    assert "deblur: 1/30 image (3 %)" in text  # a progress line in the log
    assert "dgno deblur: stopped by SIGTERM: " in text and "with --skip-existing" in text and "Traceback" not in text
    done = sorted(p.name for p in out.iterdir())
    assert 1 <= len(done) < 30 and all(p.startswith("img") and p.endswith(".tif") for p in done)  # no temporary file left
    assert main([*args, "--skip-existing"]) == 0
    assert len(list(out.iterdir())) == 30


def test_sigterm_during_start_up_ends_at_once_with_one_line():
    code = "import os, signal, time\nfrom dgno.interrupts import quiet_start\nwith quiet_start():\n    os.kill(os.getpid(), signal.SIGTERM)\n    time.sleep(60)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=CHILD_ENV)
    assert proc.returncode == 143 and proc.stderr == "dgno: stopped by SIGTERM before any work began; nothing was written\n"


@pytest.fixture(scope="module")
def rgb_model(tmp_path_factory):
    return identity_model_file(tmp_path_factory.mktemp("rgb") / "model.pt", 3)


def _slides(*args) -> int:
    return main(["deblur-slide", *map(str, args), "--device", "cpu", "--threads", "1", "--restore", "all", "--min-tissue", "0"])


@pytest.mark.slow  # two slide runs each
@pytest.mark.parametrize("signum, status, name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "SIGINT")])
def test_a_signal_while_tiles_are_restored_keeps_them_and_the_same_command_resumes(rgb_model, tmp_path, capsys, monkeypatch, signum, status, name):
    src = tmp_path / "s.tif"
    brightfield_slide(src, shape=(700, 1100), regions=[])
    monkeypatch.setattr(run, "restore_batch", _signal_on_call(2, run.restore_batch, signum))
    out = tmp_path / "out"
    assert _slides(src, "--checkpoint", rgb_model, "--output", out) == status
    err = capsys.readouterr().err
    assert f"s.tif: stopped by a signal ({name}) after" in err and f"its finished tiles are kept in {out / '.s.work'}" in err
    assert "run the same command again to resume" in err and not (out / "s.ome.tif").exists()
    monkeypatch.undo()
    assert _slides(src, "--checkpoint", rgb_model, "--output", out) == 0
    assert (out / "s.ome.tif").exists() and "Traceback" not in capsys.readouterr().err


@pytest.mark.slow  # four slide runs
def test_sigterm_in_the_focus_analysis_of_a_later_slide_names_the_rerun_of_the_rest(rgb_model, tmp_path, capsys, monkeypatch):
    slides = [tmp_path / f"{name}.tif" for name in ("a", "b", "c")]
    for path in slides:
        brightfield_slide(path, shape=(400, 500), regions=[])
    monkeypatch.setattr(focus, "focus_scores", _signal_on_call(2, focus.focus_scores))
    out = tmp_path / "out"
    assert _slides(*slides, "--checkpoint", rgb_model, "--output", out) == 143
    err = capsys.readouterr().err
    assert f"dgno deblur-slide: {slides[1]}: stopped by SIGTERM; " in err and f"complete: {out / 'a.ome.tif'}" in err
    assert f"with only the slides not finished ({slides[1]} {slides[2]})" in err
    assert (out / "a.ome.tif").exists() and not (out / "b.ome.tif").exists()
    monkeypatch.undo()
    assert _slides(slides[1], slides[2], "--checkpoint", rgb_model, "--output", out) == 0  # the rerun it names
    assert all((out / f"{n}.ome.tif").exists() for n in "abc")


def test_sigterm_while_training_loads_says_to_run_again(tiny_dataset, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(commands, "train_model", _signal_on_call(1, lambda *a, **k: time.sleep(30)))
    argv = ["train", "--data", str(tiny_dataset), "--out", str(tmp_path / "run"), "--method", "lg", "--levels", "a", "--config", str(ROOT / "config.yaml")]
    assert main(argv) == 143
    assert "dgno train: stopped by SIGTERM before it finished; run the same command again" in capsys.readouterr().err


def test_the_start_up_handler_is_quiet_for_ctrl_c_too():
    code = "import os, signal, time\nfrom dgno.interrupts import quiet_start\nwith quiet_start():\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(60)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=CHILD_ENV)
    assert proc.returncode == 130 and proc.stderr == "dgno: interrupted\n"
