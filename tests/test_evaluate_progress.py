"""Scoring a training in progress: an interrupted run leaves only checkpoint.pt, which `dgno evaluate` and the
evaluate rule (evaluate.checkpoint: in_progress) score at its iteration, recorded in summary.json and in
progress.csv, so test PSNR can be drawn against iterations before the run ends."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

import dgno.train.loop as loop
from dgno.checkpoint import load_evaluated, load_trained
from dgno.cli import main
from dgno.inference.evaluate import evaluate_checkpoint
from dgno.io import InputError
from dgno.train import ModelChoice, TrainConfig, train
from dgno.workflow import plan
from dgno.workflow.config import validate_config

CFG = TrainConfig.from_dict(dict(iterations=8, batch_size=2, patch_size=32, val_every=4, log_every=2, checkpoint_every=4, val_crops=2, device="cpu"))
CHOICE = ModelChoice(name="gg", scale="smoke")


def _interrupted_run(data, out, monkeypatch, at: int = 6):
    """A training that dies (as on a power loss) at iteration `at`: checkpoint.pt of iteration 4, no model.pt."""
    step = loop._step

    def dying(run, batches, it):
        if it == at:
            raise RuntimeError("power loss")
        return step(run, batches, it)

    monkeypatch.setattr(loop, "_step", dying)
    with pytest.raises(RuntimeError, match="power loss"):
        train(data, out, model_choice=CHOICE, levels=["a"], cfg=CFG, progress=False)
    monkeypatch.setattr(loop, "_step", step)


def test_an_interrupted_run_is_scored_at_its_iteration(tiny_dataset, tmp_path, monkeypatch):
    run = tmp_path / "run"
    _interrupted_run(tiny_dataset, run, monkeypatch)
    assert (run / "checkpoint.pt").exists() and not (run / "model.pt").exists()
    with pytest.raises(InputError, match="dgno evaluate scores it"):
        load_trained(run / "checkpoint.pt")  # deblur, LAM, … still want a finished model file

    summary = evaluate_checkpoint(run / "checkpoint.pt", tiny_dataset, "a", tmp_path / "eval", device="cpu", with_lpips=False, progress=False)
    assert summary["iteration"] == 4 and summary["iterations"] == 8 and summary["in_progress"] is True
    assert summary["weights"] == "ema"
    progress = pd.read_csv(tmp_path / "eval" / "progress.csv")
    assert list(progress["iteration"]) == [4] and progress["psnr"].iloc[0] == pytest.approx(summary["psnr"])

    # the run resumes and finishes; its final checkpoint holds the weights model.pt holds
    train(tiny_dataset, run, model_choice=CHOICE, levels=["a"], cfg=CFG, progress=False)
    final = evaluate_checkpoint(run / "checkpoint.pt", tiny_dataset, "a", tmp_path / "final", device="cpu", with_lpips=False, progress=False)
    model = evaluate_checkpoint(run / "model.pt", tiny_dataset, "a", tmp_path / "model", device="cpu", with_lpips=False, progress=False)
    assert final["in_progress"] is False and final["iteration"] == model["iteration"] == 8
    assert final["psnr"] == pytest.approx(model["psnr"], abs=1e-9)
    assert not (tmp_path / "final" / "progress.csv").exists()  # only a run in progress has a curve to extend
    net, described = load_evaluated(run / "checkpoint.pt")
    state = torch.load(run / "checkpoint.pt", weights_only=True)["ema"]
    assert all(torch.equal(net.state_dict()[k], state[k].float() if state[k].is_floating_point() else state[k]) for k in state)
    assert described["iteration"] == 8


def test_repeated_scoring_draws_the_test_curve(tiny_dataset, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    _interrupted_run(tiny_dataset, run, monkeypatch)
    out = tmp_path / "eval"
    args = ["evaluate", "--checkpoint", str(run / "checkpoint.pt"), "--data", str(tiny_dataset), "--level", "a", "--out", str(out), "--no-lpips"]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["iteration"] == 4 and printed["in_progress"] is True
    blob = torch.load(run / "checkpoint.pt", weights_only=True)
    blob["iteration"] = 6  # the run went on: the same weights stand in for a later checkpoint
    torch.save(blob, run / "checkpoint.pt")
    assert main(args) == 0 and main(args) == 0  # scoring the same iteration again replaces its row
    assert list(pd.read_csv(out / "progress.csv")["iteration"]) == [4, 6]


def test_the_evaluate_rule_scores_the_checkpoint_through_a_config_switch():
    raw = {
        "name": "t",
        "seed": 0,
        "datasets": {"d": {"source": "synthetic_shapes", "levels": {"s": [1.0, 2.0]}, "train_levels": ["s"], "test_levels": ["s"]}},
        "methods": {"gg": {"model": "gg"}},
        "train": {},
        "evaluate": {},
        "experiments": {"synthetic": {"datasets": ["d"], "methods": ["gg"], "seeds": 2}},
    }
    assert plan.evaluated_checkpoint(validate_config(raw), "d", "gg") == "results/train/d/gg/model.pt"
    raw["evaluate"]["checkpoint"] = "in_progress"
    config = validate_config(raw)
    assert plan.evaluated_checkpoint(config, "d", "gg") == "results/train/d/gg/checkpoint.pt"
    assert plan.evaluated_checkpoint(config, "d", "gg", replicate=1) == "results/train/d/gg/seed=1/checkpoint.pt"
