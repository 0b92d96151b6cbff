"""The workflow's `finetune` target: the config block (schema and checks), what the job reads and gets
(dgno.workflow.finetune), and the target run end to end at smoke scale."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import yaml
from conftest import ROOT, SNAKEMAKE

from dgno.checkpoint import load_trained
from dgno.inference.deblur import deblur_files
from dgno.workflow import finetune, plan
from dgno.workflow.config import ConfigError, load_config, validate_config


def _smoke_with(block: dict | None) -> dict:
    raw = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())
    if block is not None:
        raw["finetune"] = block
    return validate_config(raw)


SMOKE_BLOCK = {"synthetic": {"fields": 6, "size": [64, 64], "planes": 5}, "start": {"method": "dgno-cell", "dataset": "nuclei"}, "iterations": 6, "lpips": False}


def test_the_demo_fine_tunes_its_network_on_generated_stacks_of_another_blur():
    demo = load_config(ROOT / "config.yaml")
    assert demo["finetune"]["synthetic"]["blur"] == "seidel" and demo["finetune"]["start"] == {"method": "dgno-cell", "dataset": "nuclei"}
    assert finetune.input_files(demo, plan.trained_model) == {"data": [finetune.GENERATED], "start": "results/train/nuclei/dgno-cell/model.pt"}
    assert finetune.job_settings(demo)["data"] == {"stacks": ["results/finetune/stacks"]}
    assert finetune.targets(demo) == list(finetune.FILES.values())


def test_bad_blocks_name_the_key_and_the_fix():
    with pytest.raises(ConfigError, match=r"config key finetune: stacks and synthetic given. Fix: give exactly one of"):
        _smoke_with({**SMOKE_BLOCK, "stacks": ["a/*.tif"]})
    with pytest.raises(ConfigError, match=r"config key finetune: no input given"):
        _smoke_with({"start": {"authors": "DGNO_BBBC006_w1_Cell"}})
    with pytest.raises(ConfigError, match=r"config key finetune.start.method: 'nope' is not defined; defined: gg, lg"):
        _smoke_with({**SMOKE_BLOCK, "start": {"method": "nope", "dataset": "nuclei"}})
    with pytest.raises(ConfigError, match=r"finetune.patiense: unknown key"):
        _smoke_with({**SMOKE_BLOCK, "patiense": 3})
    with pytest.raises(ConfigError, match=r"finetune.start: .*expected one of: \{authors: NAME\}"):
        _smoke_with({**SMOKE_BLOCK, "start": {"released": "x"}})


def test_without_the_block_nothing_is_fine_tuned():
    cfg = _smoke_with(None)
    assert finetune.targets(cfg) == [] and finetune.block(cfg) is None


def test_each_kind_of_input_and_start_is_read_from_its_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("scans/a.ome.tif", "scans/b.ome.tif", "wells/w1/z0.tif"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    cfg = _smoke_with({"stacks": ["wells/*"], "start": {"authors": "DGNO_BBBC006_w1_Cell"}})
    assert finetune.input_files(cfg, plan.trained_model) == {"data": ["wells/w1"], "start": "resources/authors/DGNO_BBBC006_w1_Cell.pth"}
    assert finetune.start_settings(cfg, "resources/authors/DGNO_BBBC006_w1_Cell.pth") == {"checkpoint": "resources/authors/DGNO_BBBC006_w1_Cell.pth", "options": None}
    cfg = _smoke_with({"slides": ["scans/*.ome.tif"], "start": {"scratch": "dgno-cell", "channels": 3}, "distances": [2, 4], "iterations": 50})
    assert finetune.input_files(cfg, plan.trained_model) == {"data": ["scans/a.ome.tif", "scans/b.ome.tif"]}
    assert finetune.start_settings(cfg, None) == {"scratch": "dgno-cell", "scale": "smoke", "channels": 3}
    job = finetune.job_settings(cfg)
    assert job["preparation"]["distances"] == [2, 4] and job["overrides"] == {"iterations": 50, "patch_size": None, "batch_size": None, "lr": None}
    cfg = _smoke_with({"pairs": {"blurred": "b", "sharp": "s"}, "start": {"checkpoint": "mine.pt"}})
    assert finetune.input_files(cfg, plan.trained_model) == {"data": ["b", "s"], "start": "mine.pt"}
    cfg = _smoke_with({"stacks": ["nothing/*.tif"], "start": {"checkpoint": "mine.pt"}})
    with pytest.raises(Exception, match=r"config key finetune.stacks: 'nothing/\*.tif' names no file or folder.*Fix: correct the path"):
        finetune.input_files(cfg, plan.trained_model)


def test_generated_stacks_follow_the_config_seed():
    cfg = _smoke_with(SMOKE_BLOCK)
    assert finetune.synthetic_settings(cfg) == {"fields": 6, "spec": {"size": [64, 64], "planes": 5, "blur": "seidel", "seed": 0}}
    other = copy.deepcopy(cfg)
    other["seed"] = 3
    assert finetune.synthetic_settings(other)["spec"]["seed"] == 3


@pytest.mark.e2e
def test_the_finetune_target_runs_and_its_model_restores_images(tmp_path):
    import subprocess

    config = tmp_path / "config.yaml"
    raw = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())
    config.write_text(yaml.safe_dump({**raw, "finetune": SMOKE_BLOCK}))
    cmd = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile", str(config), "--cores", "2", "--", "finetune"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = tmp_path / "results" / "finetune"
    summary = json.loads((out / "finetune.json").read_text())
    assert summary["start"]["source"]["file"] == "results/train/nuclei/dgno-cell/model.pt" and summary["data"]["fields"] == {"train": 4, "val": 1, "test": 1}
    _, blob = load_trained(out / "model.pt")
    assert blob["normalise"] == "minmax" and blob["selection"]["start_psnr"] is not None
    assert "fine-tuned − start" in (out / "report.md").read_text() and (out / "report.html").read_text().startswith("<!DOCTYPE html>")
    restored = deblur_files([out / "stacks" / "field_000.tif"], tmp_path / "restored", checkpoint=out / "model.pt", device="cpu")
    assert restored == [] and (tmp_path / "restored" / "field_000.tif").is_file()
    assert torch.load(out / "checkpoint.pt", weights_only=True)["iteration"] == 6
