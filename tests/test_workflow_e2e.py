"""End to end: the real Snakemake workflow on the smoke config, in a temporary directory.

This is the test a new user's `make demo` relies on: data → blur → training → evaluation →
tables, figures → report/index.html with a numeric PSNR for each of the four methods. It also
checks Snakemake's own report, lint, and that a rerun has nothing to do.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
METHOD_LABELS = ["SRNO (GG)", "SRNO+Win (LG)", "DGNO-Face", "DGNO-Cell"]

pytestmark = pytest.mark.e2e


def snakemake(workdir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    cmd = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir), "--configfile", str(ROOT / "tests" / "smoke.yaml"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("smoke")
    snakemake(workdir, "--cores", "2")
    return workdir


def test_report_has_numeric_psnr_for_each_method(smoke_run):
    page = (smoke_run / "report" / "index.html").read_text()
    assert 'id="operators"' in page and 'id="synthetic"' in page and 'id="demo-warning"' in page
    section = page.split('id="operators"')[1].split("</section>")[0]
    for label in METHOD_LABELS:
        row = re.search(rf"<tr><td>{re.escape(label)}</td>(.*?)</tr>", section, re.S)
        assert row, f"no row for {label}"
        first_cell = re.search(r'<span class="m">([-0-9.]+)</span>', row.group(1))
        assert first_cell and 0 < float(first_cell.group(1)) < 100, f"{label}: no numeric PSNR"
    assert "not run" not in section  # everything of this config ran
    assert page.count("data:image/png;base64,") >= 6  # figures embedded: the page stands alone


def test_table_numbers_match_results_files(smoke_run):
    frame = pd.read_csv(smoke_run / "results" / "tables" / "operators.csv")
    page = (smoke_run / "report" / "index.html").read_text()
    gg = frame[frame["method"] == "gg"]["psnr"].mean()
    assert f"{gg:.2f}" in page
    assert set(frame["method"]) == {"gg", "lg", "dgno-face", "dgno-cell", "input"}


def test_checkpoints_describe_themselves(smoke_run):
    import torch

    blob = torch.load(smoke_run / "results/train/nuclei/dgno-cell/model.pt", weights_only=False)
    assert blob["spec"]["name"] == "dgno-cell" and blob["spec"]["overrides"] == {"flux": "jump", "boundary": "neumann"}
    assert blob["provenance"]["versions"]["torch"]


def test_rerun_has_nothing_to_do_and_report_zip(smoke_run):
    dry = snakemake(smoke_run, "-n", "--cores", "2")
    assert "Nothing to be done" in dry.stdout + dry.stderr
    snakemake(smoke_run, "--report", str(smoke_run / "report.zip"))
    assert (smoke_run / "report.zip").stat().st_size > 10_000


def test_lint_is_clean():
    proc = subprocess.run([SNAKEMAKE, "--lint", "--snakefile", str(ROOT / "Snakefile")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
