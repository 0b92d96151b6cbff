"""Fine-tuning runs: from a start, the best validation kept, early stopping, exact resume (SIGTERM and kill -9),
the model file dgno deblur reads, the report, and the command's one-line errors."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tifffile
import torch
from conftest import ROOT

from dgno.checkpoint import CHECKPOINT_VERSION, load_trained, save_checkpoint, weights_digest
from dgno.cli import main
from dgno.data.synthetic_stacks import StackSpec, render_stack, write_stacks
from dgno.inference.deblur import deblur_files
from dgno.io import InputError
from dgno.models.registry import build_model
from dgno.report.finetune import verdict, write_report
from dgno.stats import Interval
from dgno.train import Interrupted
from dgno.train.early_stop import BestOnValidation
from dgno.train.finetune import finetune, recipe, start_from
from dgno.train.finetune_data import LEVEL, Inputs, Preparation, prepare
from dgno.train.loop import train
from dgno.train.recipe import ModelChoice, StartWeights, TrainConfig

TINY = {"iterations": 6, "patch_size": 32, "batch_size": 2, "val_every": 2}


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ft_stacks")
    write_stacks(folder, StackSpec(size=(48, 48), planes=5, blur="gaussian", seed=5), fields=5)
    return folder


def _start_file(path: Path, *, channels: int = 1, normalise: str = "minmax", seed: int = 0) -> Path:
    """A model file as dgno train writes one: a smoke-scale DGNO-Cell with seeded weights."""
    torch.manual_seed(seed)
    model = build_model("dgno-cell", scale="smoke", in_channels=channels)
    spec = {"name": "dgno-cell", "scale": "smoke", "hparams": model.hparams, "overrides": {}}
    save_checkpoint(path, {"version": CHECKPOINT_VERSION, "spec": spec, "state_dict": model.state_dict(), "normalise": normalise})
    return path


@pytest.fixture(scope="module")
def start_file(tmp_path_factory) -> Path:
    return _start_file(tmp_path_factory.mktemp("start") / "start.pt")


def test_best_on_validation_keeps_the_best_and_stops_after_its_patience():
    net = torch.nn.Linear(1, 1)
    rule = BestOnValidation(patience=2, min_delta=0.1)
    assert not rule.observe(0, 20.0, net)
    net.weight.data.fill_(3.0)
    assert not rule.observe(5, 21.0, net) and rule.best_iteration == 5 and float(rule.best_state["weight"]) == 3.0
    assert not rule.observe(10, 21.05, net)  # not better by min_delta
    assert rule.observe(15, 20.0, net) and rule.stopped_at == 15
    again = BestOnValidation(patience=2, min_delta=0.1)
    again.load_state(rule.state())
    assert again.record() == rule.record() and again.start_psnr == 20.0
    with pytest.raises(ValueError, match="patience=-1"):
        BestOnValidation(patience=-1)


def test_the_recipe_fits_the_data_and_the_device():
    cpu = recipe(trained=True, device=torch.device("cpu"), smallest_side=70, seed=1)
    assert (cpu.iterations, cpu.batch_size, cpu.patch_size, cpu.lr) == (400, 4, 64, 1e-4)
    assert cpu.val_every == 20 and cpu.checkpoint_every == 20
    gpu = recipe(trained=False, device=torch.device("cuda"), smallest_side=1024, seed=1, overrides={"iterations": 100})
    assert (gpu.iterations, gpu.batch_size, gpu.patch_size, gpu.lr) == (100, 8, 256, 3e-4)
    with pytest.raises(InputError, match="smallest prepared field is 20 px across.*Fix: give larger fields"):
        recipe(trained=True, device=torch.device("cpu"), smallest_side=20, seed=1)


@pytest.mark.slow
def test_a_start_that_cannot_be_beaten_is_kept_and_the_report_warns(stacks, start_file, tmp_path):
    """With a learning rate of 1e-12 nothing beats the starting weights: model.pt holds them, bit for bit."""
    out = tmp_path / "run"
    start = start_from(checkpoint=str(start_file))
    assert start.normalise == "minmax" and start.channels == 1
    summary = finetune(Inputs(stacks=(str(stacks),)), out, start=start, overrides={**TINY, "lr": 1e-12}, device="cpu", lpips=False, progress=False)
    model, blob = load_trained(out / "model.pt")
    assert blob["selection"]["best_iteration"] == 0 and blob["weights_sha256"] == weights_digest(start.weights.state_dict)
    assert blob["normalise"] == "minmax" and blob["start"]["file"] == str(start_file)  # dgno deblur scales as the start did
    log = pd.read_csv(out / "train_metrics.csv")
    assert log["iteration"].iloc[0] == 0 and np.isnan(log["loss"].iloc[0]) and log["val_psnr"].iloc[0] == pytest.approx(summary["selection"]["start_psnr"], abs=1e-4)
    report = write_report(out)
    assert report["warning"].startswith("WARNING: the fine-tuned network is not better than the starting network")
    html = (out / "report.html").read_text()
    assert "WARNING" in html and "data:image/png;base64," in html and "fine-tuned − start" in html
    markdown = (out / "report.md").read_text()
    assert "## PSNR (dB)" in markdown and "| all |" in markdown and "![field_" in markdown
    restored = deblur_files([stacks / "field_000.tif"], tmp_path / "restored", checkpoint=out / "model.pt", device="cpu")
    assert restored == [] and tifffile.imread(tmp_path / "restored" / "field_000.tif").shape == (5, 48, 48)


def test_training_stops_early_and_a_rerun_trains_anew(stacks, start_file, tmp_path, capsys):
    data = prepare(Inputs(stacks=(str(stacks),)), Preparation(normalise="minmax", distances=(1,)), tmp_path / "data", progress=False)
    start = start_from(checkpoint=str(start_file))
    cfg = TrainConfig(**{**TINY, "iterations": 20, "lr": 1e-12, "checkpoint_every": 10, "val_crops": 4, "device": "cpu"})
    train(data, tmp_path, model_choice=start.choice, levels=[LEVEL], cfg=cfg, start=start.weights, selection=BestOnValidation(patience=2, min_delta=0.01), progress=False)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["selection"]["stopped_at"] == 4 and state["iteration"] == 4
    assert "stopped at iteration 4, keeping iteration 0" in capsys.readouterr().out
    train(data, tmp_path, model_choice=start.choice, levels=[LEVEL], cfg=cfg, start=start.weights, selection=BestOnValidation(patience=2, min_delta=0.01), progress=False)
    assert "already finished" in capsys.readouterr().out and (tmp_path / "checkpoint.stale-1.pt").exists()


@pytest.mark.slow
def test_resume_after_sigterm_is_exact_with_the_selection(stacks, start_file, tmp_path, monkeypatch):
    import dgno.train.loop as loop

    data = prepare(Inputs(stacks=(str(stacks),)), Preparation(normalise="minmax", distances=(1,)), tmp_path / "data", progress=False)
    start = start_from(checkpoint=str(start_file))
    cfg = TrainConfig(**{**TINY, "iterations": 8, "lr": 1e-3, "checkpoint_every": 2, "val_crops": 4, "device": "cpu"})

    def run(out):
        return train(data, out, model_choice=start.choice, levels=[LEVEL], cfg=cfg, start=start.weights, selection=BestOnValidation(patience=0), progress=False)

    run(tmp_path / "straight")
    real, calls = loop.ema_update, {"n": 0}

    def ema_then_signal(*args):
        real(*args)
        calls["n"] += 1
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(loop, "ema_update", ema_then_signal)
    with pytest.raises(Interrupted):
        run(tmp_path / "halves")
    monkeypatch.setattr(loop, "ema_update", real)
    run(tmp_path / "halves")
    a, b = (torch.load(p / "model.pt", weights_only=True) for p in (tmp_path / "straight", tmp_path / "halves"))
    assert a["weights_sha256"] == b["weights_sha256"] and a["selection"] == b["selection"]


def test_a_start_whose_weights_do_not_fit_its_network_is_named(stacks, tmp_path):
    data = prepare(Inputs(stacks=(str(stacks),)), Preparation(normalise="minmax", distances=(1,)), tmp_path / "data", progress=False)
    wrong = StartWeights({"nope": torch.zeros(1)}, {"file": "their.pt"})
    with pytest.raises(InputError, match=r"^their.pt: do not fit network dgno-cell .*Fix: start from a model file of that network"):
        train(data, tmp_path, model_choice=ModelChoice("dgno-cell", "smoke"), levels=[LEVEL], cfg=TrainConfig(**TINY, device="cpu"), start=wrong, progress=False)


def test_verdict_words():
    better = Interval(1.2, 0.8, 1.6, 0.95, "BCa", 8)
    assert verdict(better, "start") == ("fine-tuned − starting network: +1.20 dB held-out PSNR [+0.80, +1.60] (95% interval over 8 held-out fields)", None)
    assert verdict(Interval(0.3, -0.1, 0.7, 0.95, "BCa", 8), "start")[1].startswith("CAUTION")
    assert verdict(Interval(0.3, float("nan"), float("nan"), 0.95, "none (fewer than 6 images)", 2), "start")[1].startswith("CAUTION")
    assert verdict(Interval(-0.2, -0.5, 0.1, 0.95, "BCa", 8), "start")[1].startswith("WARNING: the fine-tuned network is not better than the starting network")
    assert verdict(Interval(-0.2, -0.5, 0.1, 0.95, "BCa", 8), "input")[1].startswith("WARNING: the fine-tuned network does not restore the held-out fields better than their blurred input")


# --- the command -------------------------------------------------------------------------------------


def _cli(*args: str) -> list[str]:
    return ["finetune", *args, "--no-lpips", "--device", "cpu"]


def test_bad_input_is_one_line_with_the_file_and_the_fix(stacks, start_file, tmp_path, capsys):
    (tmp_path / "b").mkdir()
    (tmp_path / "s").mkdir()
    for name in ("x", "y"):
        tifffile.imwrite(tmp_path / "b" / f"{name}.tif", np.ones((48, 48), np.uint16))
    tifffile.imwrite(tmp_path / "s" / "x.tif", np.ones((48, 48), np.uint16))
    cases = [
        (_cli("--pairs", str(tmp_path / "b"), str(tmp_path / "s"), "--checkpoint", str(start_file), "--output", str(tmp_path / "o")), r"b/y.tif: no image of that name in .*Fix"),
        (_cli("--stacks", str(stacks), "--scratch", "nope", "--output", str(tmp_path / "o")), r"--scratch nope: not a network of the registry.*Fix"),
        (_cli("--stacks", str(stacks), "--checkpoint", str(tmp_path / "none.pt"), "--output", str(tmp_path / "o")), r"none.pt: checkpoint does not exist. Fix"),
        (_cli("--stacks", str(stacks), "--checkpoint", str(start_file), "--output", str(tmp_path / "o"), "--test-fraction", "1.5"), r"--test-fraction 1.5: a share between 0 and 1. Fix"),
        (_cli("--stacks", str(stacks), "--checkpoint", str(_start_file(tmp_path / "rgb.pt", channels=3, normalise="dtype")), "--output", str(tmp_path / "o")),
         r"field_000.tif: a grayscale image \(1 channel\(s\)\), but model .*rgb.pt restores 3-channel images. Fix"),
    ]  # fmt: skip
    for argv, pattern in cases:
        assert main(argv) == 2
        err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("prepare fields")]  # the progress bar aside
        assert len(err) == 1 and err[0].startswith("error: "), err
        assert re.search(pattern, err[0]), (pattern, err[0])


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_to_the_weights_of_an_uninterrupted_one(stacks, tmp_path):
    args = ["--stacks", str(stacks), "--scratch", "dgno-cell", "--scale", "smoke", "--iterations", "24", "--patch", "32", "--batch", "2", "--distances", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    # Both runs in a child process with one thread: the same float reductions, so the same weights bit for bit
    straight = [sys.executable, "-m", "dgno.cli", *_cli(*args, "--output", str(tmp_path / "straight"))]
    assert subprocess.run(straight, env=env, capture_output=True, text=True, timeout=900).returncode == 0
    cmd = [sys.executable, "-m", "dgno.cli", *_cli(*args, "--output", str(tmp_path / "killed"))]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = tmp_path / "killed" / "checkpoint.pt"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if ckpt.exists() and torch.load(ckpt, weights_only=True)["iteration"] >= 4:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stopped = torch.load(ckpt, weights_only=True)["iteration"]
    assert 4 <= stopped < 24 and not (tmp_path / "killed" / "model.pt").exists()
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"from iteration {stopped}" in rerun.stdout + rerun.stderr
    a, b = (torch.load(tmp_path / d / "model.pt", weights_only=True) for d in ("straight", "killed"))
    assert a["weights_sha256"] == b["weights_sha256"] and a["selection"] == b["selection"]
    assert (tmp_path / "killed" / "report.html").is_file()


def test_render_stack_is_deterministic():
    a, fa = render_stack(StackSpec(size=(32, 32), planes=3, seed=2, focus_jitter=0), 1)
    b, fb = render_stack(StackSpec(size=(32, 32), planes=3, seed=2, focus_jitter=0), 1)
    assert fa == fb == 1 and np.array_equal(a, b)
