"""A plain rerun after a crash, as a user meets it: a Snakemake killed with SIGKILL mid-job leaves a
lock and half-written outputs; `make demo` (dgno.workflow.recovery, then plain snakemake) recovers
from both, and never unlocks under a Snakemake that still runs. The workflow default profile that
turns on rerun-incomplete leaves the other profiles as they were."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import ROOT, SNAKEMAKE, patient
from snakemake.cli import parse_args

from dgno.workflow import recovery

SMOKE = str(ROOT / "tests" / "smoke.yaml")
SPLIT = "results/data/nuclei/split.csv"  # one job (sharp_images), a few seconds
BLUR = "results/data/nuclei/blur/z02"  # two jobs: sharp_images, then sigma_blur


def _snakemake(workdir: Path, *args: str) -> list[str]:
    return [SNAKEMAKE, *args, "--cores", "1", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir), "--configfile", SMOKE]


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=patient(600), env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, **kwargs)


def _start_and_wait_for_a_job(workdir: Path, target: str) -> subprocess.Popen:
    """Start Snakemake on `target` in its own process group; return once a job's script runs."""
    proc = subprocess.Popen(_snakemake(workdir, target), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"snakemake ended before its job could be caught:\n{proc.stdout.read()[-3000:]}"
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
            if any(".snakemake/scripts/" in " ".join(c.cmdline()) for c in children):
                return proc
        except psutil.Error:
            pass
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("no job started within 300 s")


@pytest.mark.e2e
def test_stale_lock_of_a_killed_run_is_removed_and_the_plain_rerun_redoes_its_job(tmp_path):
    proc = _start_and_wait_for_a_job(tmp_path, SPLIT)
    os.killpg(proc.pid, signal.SIGKILL)  # Snakemake and its job: no chance to clean up
    proc.wait(timeout=patient(60))
    assert recovery.lock_files(tmp_path) and list((tmp_path / ".snakemake" / "incomplete").iterdir())
    # what the job leaves when the kill comes while it writes (here it was still starting): its outputs,
    # half written. Snakemake's marker of the unfinished job (.snakemake/incomplete) is the real one.
    data = tmp_path / "results" / "data" / "nuclei"
    (data / "gt").mkdir(parents=True, exist_ok=True)
    (data / "split.csv").write_text("id,split\nimg")
    (data / "manifest.json").write_text("{")

    blocked = _run(_snakemake(tmp_path, SPLIT))  # what a user met: the rerun stops on the lock
    assert blocked.returncode != 0 and "--unlock" in blocked.stdout + blocked.stderr

    fix = _run([sys.executable, "-m", "dgno.workflow.recovery", "--directory", str(tmp_path)])
    assert fix.returncode == 0 and "Removed the stale Snakemake lock" in fix.stderr, fix.stderr
    assert not recovery.lock_files(tmp_path)

    # the half-written outputs need rerun-incomplete: without the default profile the rerun stops again
    without = _run(_snakemake(tmp_path, SPLIT, "--workflow-profile", "none"))
    assert without.returncode != 0 and "incomplete" in (without.stdout + without.stderr).lower()
    rerun = _run(_snakemake(tmp_path, SPLIT))  # plain, as `make demo` runs it: no --rerun-incomplete
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-3000:]
    assert "rule sharp_images" in rerun.stdout + rerun.stderr
    assert len((data / "split.csv").read_text().splitlines()) == 1 + 7 and len(list((data / "gt").glob("*.tif"))) == 7
    assert not list((tmp_path / ".snakemake" / "incomplete").glob("*")) and not recovery.lock_files(tmp_path)


@pytest.mark.e2e
def test_a_live_snakemake_of_this_checkout_keeps_its_lock_and_finishes(tmp_path):
    proc = _start_and_wait_for_a_job(tmp_path, BLUR)
    try:
        message = recovery.clear_stale_lock(tmp_path)
        assert "still running" in message and f"PID {proc.pid}" in message, message
        assert recovery.lock_files(tmp_path)
    finally:
        out, _ = proc.communicate(timeout=patient(600))
    assert proc.returncode == 0, out[-3000:]
    assert len(list((tmp_path / BLUR).glob("*.tif"))) == 7  # the smoke config's 4 + 1 + 2 images
    assert recovery.clear_stale_lock(tmp_path) == ""  # the finished run unlocked


def test_only_snakemakes_of_this_directory_count(tmp_path):
    """A Snakemake of another directory, or a process here that is no Snakemake, leaves a lock stale."""
    work, bin_dir = tmp_path / "work", tmp_path / "bin"
    (work / ".snakemake" / "locks").mkdir(parents=True)
    (work / ".snakemake" / "locks" / "0.output.lock").write_text("results/x\n")
    bin_dir.mkdir()
    (bin_dir / "snakemake").write_text("import time\ntime.sleep(60)\n")
    elsewhere = subprocess.Popen([sys.executable, str(bin_dir / "snakemake")], cwd=bin_dir)
    not_snakemake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "snakemake"], cwd=work)
    try:
        assert elsewhere.pid in [p.pid for p in recovery.snakemake_processes(bin_dir)]  # recognised, in its own directory
        assert recovery.snakemake_processes(work) == []
        assert "Removed the stale Snakemake lock" in recovery.clear_stale_lock(work) and not recovery.lock_files(work)
    finally:
        elsewhere.kill()
        not_snakemake.kill()
    assert recovery._runs_snakemake(["python", "-m", "snakemake", "--mode", "subprocess"])
    assert recovery._runs_snakemake(["bash", "-c", "python /w/.snakemake/scripts/tmpab12.train.py"])
    assert not recovery._runs_snakemake(["python", "-m", "dgno.workflow.recovery"])


def _setting(value) -> str:
    """A parsed setting as comparable text (plain objects by their attributes, not their address)."""
    if hasattr(value, "__dict__") and not callable(value):
        return f"{type(value).__name__}{vars(value)!r}"
    return repr(value)


@pytest.mark.parametrize(
    "profiles",
    [[], ["--profile", "profiles/slurm"], ["--profile", "profiles/slurm", "--profile", "profiles/slurm-test"], ["--profile", "profiles/local"]],
)
def test_the_default_profile_only_adds_rerun_incomplete(profiles, monkeypatch):
    """Snakemake reads profiles/default for every run; it changes no setting of the other profiles."""
    monkeypatch.chdir(ROOT)
    _, with_default = parse_args([*profiles, "--snakefile", str(ROOT / "Snakefile")])
    _, without = parse_args([*profiles, "--snakefile", str(ROOT / "Snakefile"), "--workflow-profile", "none"])
    assert with_default.rerun_incomplete is True
    mine, theirs = ({k: _setting(v) for k, v in vars(a).items() if k not in ("workflow_profile", "rerun_incomplete")} for a in (with_default, without))
    assert mine == theirs
    if profiles:  # every profile of the repository says so itself too
        assert without.rerun_incomplete is True
