"""Multi-process training from the workflow: the `train` rule with `gpu=2` launches torchrun itself.

On CPU (the smoke config has `device: cpu`) the two processes talk through gloo, which exercises the
same launch path as a 4-GPU SLURM job (NCCL), only with another backend.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import ROOT, patient, snakemake

from dgno.checkpoint import load_trained, weights_digest
from dgno.data.paired import load_pairs
from dgno.inference.evaluate import model_restorer
from dgno.io import InputError
from dgno.train import ModelChoice, TrainConfig, launch

TARGET = "results/train/nuclei/gg/model.pt"


def test_processes_follow_the_gpu_resource():
    assert [launch.processes(g) for g in (0, None, 1, "2", 4)] == [1, 1, 1, 2, 4]
    with pytest.raises(InputError, match="not a whole number"):
        launch.processes("four")


def test_batches_must_split_over_the_processes():
    launch.check_batches(4, 32, [{"iterations": 1, "patch_size": 64, "batch_size": 8}])
    with pytest.raises(InputError, match=r"train.batch_size=32 cannot be split over 3"):
        launch.check_batches(3, 32)
    with pytest.raises(InputError, match=r"progressive\[1\].batch_size=6 cannot be split over 4"):
        launch.check_batches(4, 32, [{"iterations": 1, "patch_size": 64, "batch_size": 8}, {"iterations": 1, "patch_size": 64, "batch_size": 6}])


def test_paper_recipe_on_four_gpus_is_the_authors_eight_crops_per_gpu():
    """train.batch_size is the batch of one optimizer step (split over the processes): the paper
    config's 32 on 4 GPUs is the authors' batch_size_per_gpu 8, and the 3DHistech progressive
    stages split evenly as well (their per-GPU mini-batches times 4)."""
    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    assert cfg["train"]["batch_size"] // 4 == 8 and cfg["train"]["batch_size"] % 4 == 0
    for ds in cfg["datasets"].values():
        merged = {**cfg["train"], **ds.get("train", {})}
        launch.check_batches(4, merged["batch_size"], merged.get("progressive"))  # raises if one does not split
    stages = cfg["datasets"]["3dhistech"]["train"]["progressive"]
    assert [s["batch_size"] // 4 for s in stages] == [8, 5, 4, 3, 2]


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed (torchrun)")
def test_torchrun_launch_trains_in_this_environment_whatever_is_on_path(tiny_dataset, tmp_path):
    """The rule's multi-process path, run for real with one process: exec_torchrun replaces the
    caller by torchrun, whose trainer reads the JSON job and writes model.pt with exactly that recipe.
    `python`, `python3` and `torchrun` first on PATH are decoys that fail and leave a mark: the launch
    must not reach for them (a job's PATH may lead to another environment than the rule's)."""
    decoys, marks = tmp_path / "bin", tmp_path / "decoys_called"
    decoys.mkdir()
    for name in ("python", "python3", "torchrun"):
        (decoys / name).write_text(f"#!/bin/sh\necho {name} >> {marks}\nexit 1\n")
        (decoys / name).chmod(0o755)
    smoke = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())["train"]
    cfg = TrainConfig.from_dict({**smoke, "iterations": 2, "val_every": 2, "checkpoint_every": 2, "seed": 3, "device": "cpu"})
    out, log = tmp_path / "out", tmp_path / "train.log"
    job = launch.job_spec(tiny_dataset, out, model_choice=ModelChoice(name="gg", scale="smoke"), levels=["a"], cfg=cfg)
    code = "import sys; from dgno.train import launch; launch.exec_torchrun(1, sys.argv[1], sys.argv[2])"
    env = {**os.environ, "PATH": f"{decoys}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code, job, str(log)], env=env, capture_output=True, text=True, timeout=patient(600))
    text = log.read_text() if log.exists() else ""
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\n--- log ---\n{text[-4000:]}"
    assert not marks.exists(), marks.read_text()
    _, blob = load_trained(out / "model.pt")
    assert blob["train_config"] == asdict(cfg) and blob["iterations"] == 2  # the job carried the whole recipe
    assert "training with 1 processes" in text  # the caller's message and the trainer's output share the log


@pytest.mark.e2e
@pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="needs torch.distributed with the gloo backend",
)
def test_train_rule_with_two_gpus_runs_torchrun_and_a_rerun_does_nothing(tmp_path: Path):
    workdir = tmp_path / "ddp"
    run = snakemake(workdir, "--cores", "2", TARGET, "--set-resources", "train:gpu=2")
    assert "train" in run.stdout + run.stderr

    out = workdir / "results/train/nuclei/gg"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "model.pt", "train_metrics.csv"]
    model, blob = load_trained(out / "model.pt")
    assert blob["world_size"] == 2 and weights_digest(model.state_dict()) == blob["weights_sha256"]
    rows = (out / "train_metrics.csv").read_text().splitlines()
    smoke = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())["train"]
    assert rows[-1].split(",")[0] == str(smoke["iterations"])  # one writer: the last logged step, once
    assert len(torch.load(out / "checkpoint.pt", weights_only=True)["ranks"]) == 2

    log = (workdir / "results/logs/train/nuclei/gg.log").read_text()
    assert "training with 2 processes" in log and "world size 2 (gloo)" in log
    assert log.count("world size") == 1  # rank 0 alone reports

    # Resources do not change results: neither the same request nor one GPU trains again.
    for extra in (["--set-resources", "train:gpu=2"], []):
        dry = snakemake(workdir, "-n", "--cores", "2", TARGET, *extra)
        assert "Nothing to be done" in dry.stdout + dry.stderr

    # ... and that is true: one process on the whole batch, forced to train again on the same data,
    # ends where the two processes with half the batch each ended (the gradient of a batch mean is the
    # mean of the half-batch gradients; only the order of float sums differs).
    two = model
    snakemake(workdir, "--cores", "1", TARGET, "--forcerun", "train")
    one, blob = load_trained(out / "model.pt")
    assert blob["world_size"] == 1
    _assert_same_training(one, two, workdir / "results/data/nuclei")


def _biases_before_instance_norm(model: torch.nn.Module) -> set[str]:
    """Conv biases followed directly by an InstanceNorm: the norm subtracts each channel's mean, so such
    a bias changes no output and its gradient is float rounding alone, which Adam (dividing by the
    gradient's own size) turns into full-size steps of random sign. No two runs agree on these."""
    names = set()
    for prefix, seq in model.named_modules():
        if isinstance(seq, torch.nn.Sequential):
            for (i, a), b in zip(seq.named_children(), list(seq.children())[1:]):
                if isinstance(a, torch.nn.Conv2d) and a.bias is not None and isinstance(b, torch.nn.InstanceNorm2d):
                    names.add(f"{prefix}.{i}.bias")
    return names


def _assert_same_training(one: torch.nn.Module, two: torch.nn.Module, data: Path) -> None:
    """Same weights (measured: at most 7e-6 apart after 12 smoke steps; 1e-3 to 4e-3 when the two
    processes trained on other crops than the one process) and the same restored test images."""
    weights_one, weights_two = one.state_dict(), two.state_dict()
    assert weights_one.keys() == weights_two.keys()
    free = _biases_before_instance_norm(one)
    assert free and free <= weights_one.keys()  # the rule above still finds them (gg has two)
    for name in weights_one.keys() - free:
        torch.testing.assert_close(weights_one[name], weights_two[name], rtol=1e-4, atol=5e-5, msg=lambda m, name=name: f"{name}: {m}")
    # What the weights are for: the restored images agree (measured 2e-7 apart; 5e-3 after other crops).
    restore_one, restore_two = (model_restorer(m, torch.device("cpu"), tile=None, overlap=0) for m in (one, two))
    pairs = load_pairs(data, split="test", levels=["z02"])
    assert pairs
    for pair in pairs:
        np.testing.assert_allclose(restore_one(pair.blur), restore_two(pair.blur), rtol=0, atol=1e-5, err_msg=pair.id)
