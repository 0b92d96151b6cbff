"""The GPU script of the training-step levers and the evaluation pipeline (benchmarks/gpu/levers_and_evaluation.py)
runs end to end on a CPU at toy size, so the scarce GPU minutes are never spent finding a bug in it: every phase
writes its records, nothing errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, patient


@pytest.mark.slow
def test_smoke_run_writes_every_phase_and_the_decisions(tmp_path):
    out = tmp_path / "levers.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "benchmarks.gpu.levers_and_evaluation", str(out), "--smoke", "--device", "cpu", "--budget-s", "600", "--commit", "abc123"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=patient(280), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    blob = json.loads(out.read_text())
    assert blob["errors"] == [], blob["errors"]
    assert blob["provenance"]["git_commit"] == "abc123" and blob["provenance"]["device"].startswith("cpu")
    # only the CUDA-only levers are skipped on a CPU, and they say so
    assert sorted(s["what"] for s in blob["skipped"]) == ["lever cuda_graphs", "lever cudnn_benchmark"]
    for model in ("dgno-cell", "dgno-face"):
        labels = {r["levers"] for r in blob["train"] if r["model"] == model}
        assert {"default", "channels_last", "fused_layernorm", "adamw_fused"} <= labels
    assert {g["routing"] for g in blob["grad_check"]} == {"deterministic", "gumbel"}
    assert all(g["default_vs_default"]["grad_rel_l2"] == 0 and g["fastest_vs_default"]["grad_rel_l2"] < 1e-4 for g in blob["grad_check"])
    (bf16,) = blob["bf16_training"]
    assert bf16["gap_db_fp32_minus_bf16"] == 0  # bf16 autocast is ignored on a CPU
    assert {r["model"] for r in blob["inference"]} == {"dgno-cell", "dgno-face", "restormer"}
    assert {e["config"] for e in blob["eval_pipeline"]} == {"default", "tile_batch=2", "graphs", "graphs+overlap_io"}
    assert blob["settings"]["eval_overlap_identical_scores"] is True
    assert all(e["gpu_utilisation_percent"] == "n/a" for e in blob["eval_pipeline"])
    assert blob["dg_layers"][0]["total_ms"] > 0 and len(blob["compile"]) == 1
    decisions = blob["decisions"]
    assert decisions["gradient_check_passed"] is True and "dgno-cell 32" in decisions["inference_ratio_best_mode"]
    assert set(blob["phase_seconds"]) == {"levers", "grad_check", "bf16", "inference", "evaluation", "dg_layers", "compile"}
