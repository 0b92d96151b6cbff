"""Progress on a terminal and in a log (dgno.progress): a bar on a terminal, plain lines with done/total,
rate and time left everywhere else — a redirected stderr, a SLURM log, a rule's log.

The interval between lines is set by DGNO_PROGRESS_SECONDS; the tests set it to 0 (a line at every
step), so that what they see does not depend on how fast this machine is.
"""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tifffile
from conftest import ROOT
from fixtures_deblur import model_file
from tqdm import tqdm

from dgno import progress
from dgno.cli import main
from dgno.io import InputError
from dgno.progress import LogLines, duration, progress_line

SCRIPTS = ROOT / "workflow" / "scripts"


class _Log(io.StringIO):
    """A stream that is a file, not a terminal, as a redirected stderr."""

    def isatty(self) -> bool:
        return False


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_line_says_done_of_total_rate_and_time_left():
    line = progress_line("deblur", 3, 10, 6.0, rate_done=3, unit="image")
    assert line == "deblur: 3/10 image (30 %), 2 s/image, about 14 s left (elapsed 6 s)"
    assert progress_line("deblur", 30, 100, 6.0, rate_done=30, unit="image").startswith("deblur: 30/100 image (30 %), 5 image/s,")
    slow = progress_line("big.tif", 2, 5, 400.0, rate_done=2, unit="pass")
    assert "200 s/pass" in slow and "about 10 min 00 s left" in slow and "(elapsed 6 min 40 s)" in slow
    resumed = progress_line("restore s.svs", 60, 100, 10.0, rate_done=10, unit="tile")  # 50 tiles were done by an earlier run
    assert "1 tile/s" in resumed and "about 40 s left" in resumed
    assert progress_line("get x.zip", 3 * 2**20, 6 * 2**20, 3.0, rate_done=3 * 2**20, unit="B", unit_scale=True).startswith("get x.zip: 3.00MB/6.00MB (50 %), 1.00MB/s")
    assert duration(3 * 3600 + 7 * 60 + 5) == "3 h 07 min"


def test_in_a_log_lines_come_every_interval_and_a_last_one_at_the_end():
    quiet = _Log()
    with LogLines(total=4, desc="job", every=3600, file=quiet) as lines:
        for _ in range(4):
            lines.update()
    assert quiet.getvalue() == ""  # work shorter than the interval says nothing
    log = _Log()
    steps = LogLines(range(3), desc="train lg", unit="step", every=0, file=log)
    for _ in steps:
        steps.set_postfix(loss="0.1234")
    out = log.getvalue().splitlines()
    assert [line.split(" (")[0] for line in out] == ["train lg: 1/3 step", "train lg: 2/3 step", "train lg: 3/3 step"]  # the end once
    assert out[-1].endswith("; loss=0.1234") and "left" not in out[-1]
    later = _Log()
    with LogLines(total=3, desc="write", unit="tile", every=0, file=later) as lines:
        lines.update(1)
        lines.every = 3600  # the rest comes sooner than the next line
        lines.update(2)
    assert [line.split(" (")[0] for line in later.getvalue().splitlines()] == ["write: 1/3 tile", "write: 3/3 tile"]  # and the end, at close


def test_bar_is_a_bar_on_a_terminal_lines_in_a_file_and_nothing_when_off(monkeypatch):
    monkeypatch.setenv("DGNO_PROGRESS_SECONDS", "0")
    assert isinstance(progress.bar(total=2, file=_Terminal()), tqdm)
    log = _Log()
    lines = progress.bar(total=2, desc="x", file=log)
    assert isinstance(lines, LogLines)
    lines.update()
    assert log.getvalue().startswith("x: 1/2 it (50 %)")
    off = _Log()
    for _ in progress.bar(range(3), desc="x", enabled=False, file=off):
        pass
    assert off.getvalue() == ""


@pytest.mark.parametrize("value", ["abc", "-1", "nan"])
def test_an_interval_that_is_no_number_of_seconds_is_named(monkeypatch, value):
    monkeypatch.setenv("DGNO_PROGRESS_SECONDS", value)
    with pytest.raises(InputError, match=f"DGNO_PROGRESS_SECONDS={value}: not a number of seconds. Fix:"):
        progress.interval()
    monkeypatch.setenv("DGNO_PROGRESS_SECONDS", "0.5")
    assert progress.interval() == 0.5
    monkeypatch.delenv("DGNO_PROGRESS_SECONDS")
    assert progress.interval() == 30


def test_a_bad_interval_stops_dgno_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DGNO_PROGRESS_SECONDS", "soon")
    image = tmp_path / "a.tif"
    tifffile.imwrite(image, np.zeros((40, 40), np.uint16))
    assert main(["deblur", str(image), "--checkpoint", str(tmp_path / "m.pt"), "--output", str(tmp_path / "out")]) == 2
    assert "DGNO_PROGRESS_SECONDS=soon" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_dgno_deblur_with_stderr_redirected_prints_progress_lines(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DGNO_PROGRESS_SECONDS", "0")
    model = model_file(tmp_path / "model.pt")
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a.tif", "b.tif"):
        tifffile.imwrite(folder / name, np.random.default_rng(0).integers(0, 4096, (100, 100)).astype(np.uint16))
    argv = ["deblur", str(folder), "--checkpoint", str(model), "--output", str(tmp_path / "out"), "--device", "cpu", "--tile", "32", "--overlap", "8"]
    assert main(argv) == 0
    err = capsys.readouterr().err  # captured: a file, not a terminal
    assert "a.tif: 1/16 pass (6 %)" in err and "a.tif: 16/16 pass (100 %)" in err  # 4 × 4 tiles of 32 px, 8 px overlap
    assert "deblur: 1/2 image (50 %)" in err and "about" in err and "left" in err and "\r" not in err


def test_training_prints_progress_lines_with_the_loss(tiny_dataset, tmp_path, monkeypatch, capsys):
    from dgno.train import ModelChoice, TrainConfig, train

    monkeypatch.setenv("DGNO_PROGRESS_SECONDS", "0")
    cfg = TrainConfig.from_dict(dict(iterations=3, batch_size=2, patch_size=32, val_every=3, log_every=3, checkpoint_every=3, val_crops=2, device="cpu"))
    train(tiny_dataset, tmp_path / "run", model_choice=ModelChoice(name="lg", scale="smoke"), levels=["a"], cfg=cfg, progress=True)
    err = capsys.readouterr().err
    assert "train lg: 1/3 step (33 %)" in err and "train lg: 3/3 step (100 %)" in err and "; loss=" in err and "lr=" in err


def test_a_rule_scripts_log_receives_the_lines(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            from types import SimpleNamespace
            sys.path.insert(0, {str(SCRIPTS)!r})
            snakemake = SimpleNamespace(rule="some_rule", log=[{str(tmp_path / "job.log")!r}])
            import _log
            _log.redirect(snakemake.log[0])
            from dgno.progress import bar
            for _ in bar(range(2), desc="blur z06", unit="image"):
                pass
            """
        )
    )
    env = {"PYTHONPATH": str(ROOT / "src"), "DGNO_PROGRESS_SECONDS": "0"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    log = (tmp_path / "job.log").read_text().splitlines()
    assert [line.split(" (")[0] for line in log] == ["blur z06: 1/2 image", "blur z06: 2/2 image"]
