"""SLURM's time-limit warning reaches `dgno train`, which checkpoints and fails; the retry resumes.

Real single-node SLURM (tests/slurm_cluster.py), real `slurm` + `slurm-test` profiles, the
profile's own `--signal=TERM@<s>` option with a shorter offset: a one-minute job gets SIGTERM
well before its limit, exactly as a 24 h training job gets it two minutes before. The signal
goes to the job step (srun) that runs Snakemake's job and, through it, to the training process.
Training runs "forever" (a huge iteration count, no periodic checkpoints), so the only
checkpoints are those written on SIGTERM, and both attempts must end that way.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import torch
import yaml
from conftest import write_tiny_dataset

pytest_plugins = ["slurm_cluster"]

from slurm_cluster import terminate_with_parent  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIGNAL_AT_S = 35  # seconds before the 1-minute limit: leaves time to start Python and torch first


def test_time_limit_signal_checkpoints_and_retry_resumes(slurm_cluster, tmp_path):
    data = write_tiny_dataset(tmp_path / "tiny")
    cfg = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())
    cfg["train"].update(checkpoint_every=10**9, val_every=10**9, log_every=10**9)
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(cfg))
    # The workflow's own shell prefix (the trap that keeps bash alive until training has stopped).
    prefix = re.search(r"^shell\.prefix\((?:.|\n)*?\)\n", (ROOT / "Snakefile").read_text(), re.M).group(0)
    (tmp_path / "Snakefile").write_text(
        prefix + "\n"
        "rule train:\n"
        "    output:\n"
        '        "run/model.pt",\n'
        "    shell:\n"
        # Snakemake empties the log before a retry: each attempt also writes its own file.
        f'        "{sys.executable} -m dgno.cli train --data {data} --out run --method gg --config train.yaml '
        '--levels a --iterations 1000000000 > attempt.$SLURM_JOB_ID.log 2>&1"\n'
    )
    extra = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())["set-resources"]["train"]["slurm_extra"]
    assert re.fullmatch(r"'--signal=TERM@\d+'", extra), extra  # the real profile's option, offset shortened below
    cmd = [
        sys.executable, "-m", "snakemake",
        "--snakefile", str(tmp_path / "Snakefile"),
        "--directory", str(tmp_path),
        "--profile", str(ROOT / "profiles" / "slurm"),
        "--profile", str(ROOT / "profiles" / "slurm-test"),
        "--configfile", str(tmp_path / "train.yaml"),
        "--retries", "1",
        "--set-resources", "train:runtime=1", "train:slurm_extra=" + re.sub(r"@\d+", f"@{SIGNAL_AT_S}", extra),
    ]  # fmt: skip
    env = {**slurm_cluster.env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400, preexec_fn=terminate_with_parent)
    out = proc.stdout + proc.stderr
    attempts = sorted(tmp_path.glob("attempt.*.log"), key=lambda p: int(p.name.split(".")[1]))
    jobs = [p.name.split(".")[1] for p in attempts]
    log = "".join(p.read_text() for p in attempts)
    context = f"{out[-4000:]}\n--- attempts ---\n{log[-3000:]}\n{slurm_cluster.diagnostics()}"

    assert proc.returncode != 0, context  # training never finishes: both attempts fail
    assert len(jobs) == 2, context  # the first attempt and one retry, each its own SLURM job
    assert "SIGTERM: waiting for the job command to stop" in out, context  # bash outlived the signal
    stops = [int(i) for i in re.findall(r"received signal 15 at iteration (\d+); checkpoint written", log)]
    assert len(stops) == 2 and 0 < stops[0] < stops[1], context
    resumed = re.findall(r"resuming \S+ from iteration (\d+)", log)
    assert resumed == [str(stops[0])], context  # the retry started where the first attempt stopped
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["iteration"] == stops[1]
    # Each job ended by exiting after its checkpoint, before SLURM's kill at the time limit.
    for job in jobs:
        assert slurm_cluster.job_state(job) == "FAILED", context
