"""The real workflow through the real `slurm` profile on a single-node SLURM started by the test.

Asserts the report is produced and that the heavy jobs really went through SLURM (job ids in
Snakemake's log and per-job SLURM logs), i.e. `snakemake --profile slurm` works end to end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import patient

pytest_plugins = ["slurm_cluster"]

from slurm_cluster import terminate_with_parent  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Minutes of real SLURM (job start, polling, the signal's wait): `make rehearsal` runs it, not `make test`.
pytestmark = pytest.mark.cluster


def test_smoke_workflow_through_slurm(slurm_cluster, tmp_path):
    env = {**os.environ, **slurm_cluster.env, "OMP_NUM_THREADS": "1"}
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    cmd = [
        snakemake,
        "--snakefile", str(ROOT / "Snakefile"),
        "--directory", str(tmp_path),
        "--profile", str(ROOT / "slurm"),
        "--profile", str(ROOT / "profiles" / "slurm-test"),
        "--configfile", str(ROOT / "tests" / "smoke_slurm.yaml"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=patient(900), preexec_fn=terminate_with_parent)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:] + "\n" + slurm_cluster.diagnostics()
    assert (tmp_path / "report" / "index.html").exists()
    job_ids = set(re.findall(r"SLURM jobid (\d+)", out))
    assert len(job_ids) >= 5, out[-3000:]  # data, blur, 2 trainings, evaluations, ...
    train_logs = list((tmp_path / ".snakemake" / "slurm_logs").glob("rule_train/**/*.log"))
    assert len(train_logs) == 2
    page = (tmp_path / "report" / "index.html").read_text()
    assert "DGNO-Cell" in page and "not run" not in page.split('id="operators"')[1].split("</section>")[0]
