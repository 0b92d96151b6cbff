"""Rule scripts: their output goes to the job's log, and a failure reaches the console as one line with its fix.

Snakemake prints only "check log file(s)" for a failed job, so `workflow/scripts/_log.py` makes an
uncaught error print itself on the real stderr too: the project's input and config errors as their
message and fix (no traceback), anything else as its type and message with the traceback in the log.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from bbbc006_replica import unpack_replica, write_broad
from conftest import ROOT, SNAKEMAKE, patient

SCRIPTS = ROOT / "workflow" / "scripts"


def test_every_rule_script_sends_its_output_to_the_log_first():
    for script in sorted(SCRIPTS.glob("*.py")):
        if script.name == "_log.py":
            continue
        code = script.read_text()
        assert "_log.redirect(snakemake.log[0])" in code, f"{script.name} does not call _log.redirect"
        first_dgno = code.find("from dgno")
        assert first_dgno == -1 or code.find("_log.redirect(") < first_dgno, f"{script.name} imports dgno before redirecting its output"


def _job(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    """Run `body` as Snakemake runs a rule script: a `snakemake` object in __main__, then _log.redirect."""
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            from types import SimpleNamespace
            sys.path.insert(0, {str(SCRIPTS)!r})
            snakemake = SimpleNamespace(rule="some_rule", log=[{str(tmp_path / 'job.log')!r}])
            import _log
            _log.redirect(snakemake.log[0])
            print("working")
            """
        )
        + textwrap.dedent(body)
    )
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=patient(60), env={"PYTHONPATH": str(ROOT / "src")})


@pytest.mark.parametrize(
    "raise_it",
    [
        "from dgno.io import InputError\nraise InputError('/data/x.tif: missing. Fix: fetch it again')",
        "from dgno.data.download import DownloadError\nraise DownloadError('/data/x.tif: missing. Fix: fetch it again')",
        "from dgno.workflow.config import ConfigError\nraise ConfigError('/data/x.tif: missing. Fix: fetch it again')",
    ],
    ids=["InputError", "its subclass DownloadError", "ConfigError"],
)
def test_a_users_mistake_prints_its_message_and_fix_on_the_console_and_in_the_log(tmp_path, raise_it):
    proc = _job(tmp_path, raise_it)
    assert proc.returncode == 1
    assert proc.stderr == "some_rule: /data/x.tif: missing. Fix: fetch it again\n" and proc.stdout == ""
    log = (tmp_path / "job.log").read_text()
    assert log == "working\nsome_rule: /data/x.tif: missing. Fix: fetch it again\n"  # no traceback for a user's mistake


def test_any_other_error_says_what_and_where_the_traceback_is(tmp_path):
    proc = _job(tmp_path, "raise RuntimeError('boom')")
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"some_rule: RuntimeError: boom (traceback in {tmp_path / 'job.log'})"
    assert "Traceback (most recent call last)" in (tmp_path / "job.log").read_text()


def test_a_script_that_ends_well_prints_nothing_on_the_console(tmp_path):
    proc = _job(tmp_path, "print('done')")
    assert proc.returncode == 0 and proc.stderr == "" and (tmp_path / "job.log").read_text() == "working\ndone\n"


def test_a_warning_reaches_the_console_and_the_log_and_the_job_goes_on(tmp_path):
    proc = _job(tmp_path, "_log.warn('planes by sharpness')\nprint('done')")
    assert proc.returncode == 0 and proc.stderr == "some_rule: warning: planes by sharpness\n"
    assert (tmp_path / "job.log").read_text() == "working\nsome_rule: warning: planes by sharpness\ndone\n"


# ------------------------------------------------------------------------------- through Snakemake


def _authors_config(tmp_path: Path, raw: Path, **ds) -> Path:
    dataset = {"source": "bbbc006", "split": "authors", "channel": "w1", "n_val_wells": 1, "train_levels": ["z02", "z06", "z10"], "test_levels": ["z02"], **ds}
    cfg = {
        "name": "scripts-test", "seed": 0, "device": "cpu", "scale": "smoke",
        "downloads": {"raw_dir": str(raw), "retries": 0, "bbbc006_url": "http://127.0.0.1:9/bbbc/", "bbbc006_authors_url": "http://127.0.0.1:9/BBBC006.tar.gz"},
        "datasets": {"bbbc006_w1": dataset}, "methods": {"dgno-face": {"model": "dgno-face"}}, "train": {}, "evaluate": {}, "experiments": {},
    }  # fmt: skip
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _snakemake(tmp_path: Path, config: Path, target: str) -> subprocess.CompletedProcess:
    cmd = [SNAKEMAKE, target, "--cores", "1", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile", str(config)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=patient(300))


@pytest.mark.e2e
def test_bbbc006_prepare_and_the_archive_rule_print_their_fix_on_the_console(tmp_path):
    """A blur file missing from the unpacked archive; then the archive unreachable: both say what to do, on the console."""
    raw = tmp_path / "resources"
    unpack_replica(raw / "bbbc006" / "authors", "broad", drop_gt=("b07", 2, "w1"), mac=True)
    write_broad(raw / "bbbc006", planes=(16,))
    (raw / "bbbc006" / "authors.json").write_text("{}")  # the archive rule's record: as if it had run
    (raw / "bbbc006" / "broad_names.json").write_text('{"status": "unavailable", "planes": {}}')
    config = _authors_config(tmp_path, raw)
    proc = _snakemake(tmp_path, config, "results/data/bbbc006_w1/manifest.json")
    assert proc.returncode != 0
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("bbbc006_prepare: "))
    assert "no w1 GT file for field(s) b07_s2" in line and "gzip -t" in line and f"delete the unpacked folder {raw / 'bbbc006' / 'authors'}/" in line
    assert line in (tmp_path / "results" / "logs" / "data" / "bbbc006_w1.log").read_text()
    assert "Traceback" not in proc.stderr.split("bbbc006_prepare: ")[1].split("\n")[0]

    (raw / "bbbc006" / "authors.json").unlink()
    shutil.rmtree(raw / "bbbc006" / "authors")  # nothing unpacked, nothing downloadable: the archive rule runs and fails
    proc = _snakemake(tmp_path, config, f"{raw}/bbbc006/authors.json")
    assert proc.returncode != 0
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("bbbc006_authors_archive: "))
    assert re.search(r"download failed after 1 attempt", line) and "huggingface-cli download Duane245/DGNO BBBC006.tar.gz" in proc.stderr


@pytest.mark.e2e
def test_planes_assigned_by_sharpness_are_said_on_the_console(tmp_path):
    """The Broad listing unavailable: the preparation succeeds, and says on the console how the planes were decided."""
    raw = tmp_path / "resources"
    unpack_replica(raw / "bbbc006" / "authors", "broad", mac=True)
    write_broad(raw / "bbbc006", planes=(16,))
    (raw / "bbbc006" / "authors.json").write_text("{}")
    (raw / "bbbc006" / "broad_names.json").write_text('{"status": "unavailable", "planes": {}}')
    proc = _snakemake(tmp_path, _authors_config(tmp_path, raw), "results/data/bbbc006_w1/manifest.json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("bbbc006_prepare: warning: "))
    assert "36 of 36 w1 blur files were assigned their plane by sharpness" in line and "is not independent" in line and "broad_names.json" in line
