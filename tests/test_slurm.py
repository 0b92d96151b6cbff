"""The SLURM path against a real single-node SLURM (fixture: tests/slurm_cluster.py).

(a) the cluster runs a plain batch job; (b) a two-rule workflow goes through Snakemake's slurm
executor with the real `slurm` profile plus the `slurm-test` overlay, and every job ran inside
the SLURM allocation Snakemake reported for it; (c) GPU requests, raw (`--gres=gpu:1`) and
through the plugin's `gpu`/`gpu_model` resources, are scheduled on the node's fake GPUs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import patient

# The plugin provides the fixture, registers the `slurm` marker and puts it on every test that
# uses the cluster (so `-m "not slurm"` deselects them all).
pytest_plugins = ["slurm_cluster"]

REPO = Path(__file__).resolve().parents[1]

# make_a -> train is the producer/consumer pair. `train` declares no resources: the profiles
# decide what it requests (the slurm-test overlay: no GPU). `gpu_check` exists only when the node
# has fake GPUs and asks for one the way the real profile does, with `gpu` + `gpu_model`. It runs
# beside `train`, so the GPU path costs no extra round of status polling.
RULES = """
rule make_a:
    output:
        "a.txt",
    shell:
        "echo job=$SLURM_JOB_ID host=$(hostname -s) > {output}"

rule train:
    input:
        "a.txt",
    output:
        "b.txt",
    shell:
        "cat {input} > {output}; echo job=$SLURM_JOB_ID >> {output}; scontrol show job $SLURM_JOB_ID >> {output}"
"""
GPU_RULE = """
rule gpu_check:
    input:
        "a.txt",
    output:
        "gpu.txt",
    resources:
        gpu=1,
        gpu_model="{model}",
    shell:
        "echo job=$SLURM_JOB_ID cuda=${{{{CUDA_VISIBLE_DEVICES:-none}}}} > {{output}}; "
        "scontrol show job $SLURM_JOB_ID >> {{output}}"
"""


@dataclass(kw_only=True)
class TinyRun:
    workdir: Path
    log: str  # Snakemake's console output
    seconds: float
    jobs: dict[str, str]  # rule -> SLURM job id, from Snakemake's log


def _submitted_job_ids(log: str) -> dict[str, str]:
    """rule name -> SLURM job id, from Snakemake's line about each submission."""
    return {rule: job for job, rule in re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/rule_(\w+)/", log)}


@pytest.fixture(scope="module")
def tiny_run(slurm_cluster, tmp_path_factory) -> TinyRun:
    """Run the tiny workflow once through `--profile slurm --profile slurm-test`."""
    wf = tmp_path_factory.mktemp("tiny_wf")
    targets = ["b.txt", "gpu.txt"] if slurm_cluster.gpus else ["b.txt"]
    gpu_rule = GPU_RULE.format(model=slurm_cluster.gpu_type) if slurm_cluster.gpus else ""
    (wf / "Snakefile").write_text(f"rule all:\n    input:\n        {targets!r},\n" + RULES + gpu_rule)
    (wf / "tiny.yaml").write_text("name: tiny\n")
    cmd = [
        sys.executable, "-m", "snakemake",
        "--snakefile", str(wf / "Snakefile"),
        "--directory", str(wf),
        "--profile", str(REPO / "profiles" / "slurm"),
        "--profile", str(REPO / "profiles" / "slurm-test"),
        "--configfile", str(wf / "tiny.yaml"),
    ]  # fmt: skip
    t0 = time.monotonic()
    res = subprocess.run(
        cmd,
        cwd=wf,
        env={**slurm_cluster.env, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=patient(240),
        preexec_fn=slurm_cluster.terminate_with_parent,  # no orphaned Snakemake if pytest is killed
    )
    seconds = time.monotonic() - t0
    log = res.stdout + res.stderr
    (wf / "snakemake.out").write_text(log)
    assert res.returncode == 0, f"snakemake failed after {seconds:.0f} s:\n{log}\n{slurm_cluster.diagnostics()}"
    print(f"\ntiny workflow through SLURM: {seconds:.1f} s (cluster started in {slurm_cluster.startup_s:.1f} s)")
    return TinyRun(workdir=wf, log=log, seconds=seconds, jobs=_submitted_job_ids(log))


def test_batch_job_runs(slurm_cluster, tmp_path):
    out = tmp_path / "hostname.out"
    res = slurm_cluster.run("sbatch", "--parsable", "-p", "debug", "-o", str(out), "--wrap", "hostname -s")
    job_id = res.stdout.strip().split(";")[0]
    assert slurm_cluster.wait_job(job_id) == "COMPLETED", slurm_cluster.diagnostics()
    assert out.read_text().strip() == slurm_cluster.host


def test_tiny_workflow_through_slurm_profile(slurm_cluster, tiny_run):
    wf, jobs = tiny_run.workdir, tiny_run.jobs
    assert {"make_a", "train"} <= set(jobs), tiny_run.log
    assert len(set(jobs.values())) == len(jobs)
    # Snakemake's own log file records the same submissions.
    (snakemake_log,) = (wf / ".snakemake" / "log").glob("*.snakemake.log")
    assert _submitted_job_ids(snakemake_log.read_text()) == jobs

    # Each rule ran inside the SLURM job Snakemake reported for it, not on the submit host's shell.
    a, b = (wf / "a.txt").read_text(), (wf / "b.txt").read_text()
    assert a.strip() == f"job={jobs['make_a']} host={slurm_cluster.host}"
    assert f"job={jobs['train']}\n" in b and f"JobId={jobs['train']} " in b
    # `slurm-test` keeps every job's log at .snakemake/slurm_logs/rule_<rule>/<jobid>.log.
    for rule, job in jobs.items():
        assert (wf / ".snakemake" / "slurm_logs" / f"rule_{rule}" / f"{job}.log").is_file()
        assert slurm_cluster.job_state(job) == "COMPLETED"
    # Settings that came from the slurm-test overlay: partition debug, no GPU for `train`.
    assert "Partition=debug " in b
    assert "gres/gpu" not in b and "gres:gpu" not in b


def test_gpu_requests_get_fake_gpus(slurm_cluster, tiny_run, tmp_path):
    if not slurm_cluster.gpus:
        reason = "this SLURM refused the fake gpu GRES (see slurmctld.log in the cluster directory)"
        if os.environ.get("CI"):  # CI sets up the cluster itself: a skip there would hide a broken GPU path
            pytest.fail(reason)
        pytest.skip(reason)
    out = tmp_path / "gres.out"
    wrap = "echo cuda=$CUDA_VISIBLE_DEVICES"
    res = slurm_cluster.run("sbatch", "--parsable", "-p", "debug", "--gres=gpu:1", "-o", str(out), "--wrap", wrap)
    job_id = res.stdout.strip()
    assert slurm_cluster.wait_job(job_id) == "COMPLETED", slurm_cluster.diagnostics()
    assert out.read_text().strip() == "cuda=0"

    # Through Snakemake: `gpu` + `gpu_model` became `--gpus=<model>:1` on the sbatch line and
    # SLURM gave the job one of the node's GPUs.
    gpu = (tiny_run.workdir / "gpu.txt").read_text()
    assert f"job={tiny_run.jobs['gpu_check']} " in gpu
    assert re.search(rf"TresPerJob=gres:gpu:{slurm_cluster.gpu_type}:1\b", gpu), gpu
    assert re.search(r"cuda=\d\b", gpu), gpu
