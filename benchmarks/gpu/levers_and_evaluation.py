"""Training-step levers, bf16, inference ratios and whole-test-set evaluation on one GPU in one run.

    python -m benchmarks.gpu.levers_and_evaluation OUT_JSON --commit SHA [--budget-s 420]
    python -m benchmarks.gpu.levers_and_evaluation OUT_JSON --smoke --device cpu   # toy sizes: checks the script

One process measures everything in the same run on the same device, writes OUT_JSON after every record,
and stops starting new work when ``--budget-s`` is spent (what it skipped, and why, is in the file). The
step timed is the training loop's own (``dgno.train.step.TrainStep`` + the EMA update), the evaluation is
``dgno.inference.evaluate.evaluate_checkpoint``; only the data are synthetic (``dgno.data.demo`` nuclei).
"default" names the step (or evaluation) with no lever switched on.

  levers        training step, DGNO-Cell and DGNO-Face, 8 crops of 256², float32: the default step, each lever
                alone, the combination of those that paid (≥ 2 %) and all of them: ms/it and peak memory.
  grad_check    the fastest step's gradients against the default step's at the same weights and batch (relative
                L2), with deterministic routing (argmax in place of Gumbel noise: the decisive check) and with
                Gumbel noise from the same seed; the default step against itself gives the noise floor.
  bf16          two short trainings of DGNO-Cell (``dgno.train.train``, same seed, the levers that paid):
                float32 and bf16 autocast; validation PSNR of each, the gap, step times.
  inference     batch 1, DGNO-Cell / DGNO-Face / Restormer at 256² and 512²: eager, CUDA graphs, each with
                channels-last weights; best mode each and the ratios to Restormer; the paper's protocol
                (eager, autograd on) with peak memory.
  evaluation    a test set of 696×520 frames in 512-px tiles (crossfade, the authors' protocol): the default
                settings, 4 tiles per pass, CUDA graphs, and reading/writing overlapped: images/s, GPU
                utilisation, and whether the scores stay identical.
  compile       torch.compile of the step (with the levers that paid, then alone): first-step (compile)
                time, ms/it, break-even iterations. Late, because its duration is the least predictable.
  dg_layers     forward + backward of the six DG operator layers at the training shapes (their share of
                the step) and, with time left, of the full-resolution pair compiled (what fusing could gain).

``decisions`` sums up: the levers to keep (faster by ≥ 2 % on both models, gradient check passed), the
``train:`` / ``evaluate:`` settings to put in config/paper.yaml, whether ``train.bf16`` may be true
(gap ≤ 0.05 dB), and the inference ratios against the paper's 2.45 (256²) and 3.33 (512²).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpu.levers_effects import BF16_GAP_DB, bf16_training, dg_layers, evaluation, inference
from benchmarks.gpu.levers_step import DGNO, LEVERS, PAYS, compile_step, grad_check, levers, merge
from benchmarks.gpu.session import Run

PAPER_RATIO = {256: 2.45, 512: 3.33}
SIZES = {
    "paper": dict(scale="paper", batch=8, crop=256, grad_batch=4, infer=(256, 512), bf16_its=300, bf16_patch=128, bf16_train=24,
                  frame=(520, 696), frames=32, unique_frames=8, tile=512, overlap=32, tile_batch=4, compile_backend="inductor", target_s=1.5, time_scale=1.0, warmup=3, repeats=5),
    "smoke": dict(scale="smoke", batch=2, crop=32, grad_batch=2, infer=(32,), bf16_its=4, bf16_patch=32, bf16_train=4,
                  frame=(72, 80), frames=6, unique_frames=2, tile=32, overlap=8, tile_batch=2, compile_backend="eager", target_s=0.05, time_scale=0.02, warmup=1, repeats=2),
}  # fmt: skip
SECTIONS = ("inference", "train", "grad_check", "bf16_training", "eval_pipeline", "dg_layers", "compile")
PHASES = ("levers", "grad_check", "bf16", "inference", "evaluation", "compile", "dg_layers")


def _inference_ratios(blob: dict, sizes) -> dict[str, dict[str, float | None]]:
    """Best-mode images/s of each DGNO over Restormer's, per size, with the paper's ratio."""
    best: dict[tuple, float] = {}
    for r in blob["inference"]:
        if r["mode"] != "autograd":
            key = (r["model"], r["size"])
            best[key] = max(best.get(key, 0.0), r["images_per_second"])
    return {f"{m} {s}": {"measured": best[(m, s)] / best[("restormer", s)], "paper": PAPER_RATIO.get(s)}
            for m in DGNO for s in sizes if (m, s) in best and ("restormer", s) in best}  # fmt: skip


def decide(run: Run) -> None:
    """What the numbers say for config/paper.yaml (written after every phase, so a cut run still has them)."""
    summary, blob = run.blob["lever_summary"], run.blob
    measured = [m for m in DGNO if m in summary]
    keep = [n for n in LEVERS if measured and all(summary[m]["alone_speedup"].get(n, 0) >= 1 / PAYS for m in measured)]
    checks = [g for g in blob["grad_check"] if g["routing"] == "deterministic"]
    grads_ok = bool(checks) and all(g["fastest_vs_default"]["grad_rel_l2"] <= max(1e-2, 10 * g["default_vs_default"]["grad_rel_l2"]) for g in checks)
    compiled = [c for c in blob["compile"] if c["break_even_iterations"] is not None]
    bf16 = blob["bf16_training"][-1] if blob["bf16_training"] else None
    fastest_eval = max(blob["eval_pipeline"], key=lambda e: e["images_per_second"] or 0, default=None)
    blob["decisions"] = {
        "train_levers_keep": keep,
        "gradient_check_passed": grads_ok if checks else "not measured",
        "train_settings_for_paper_config": {**merge(keep), **({"compile": True} if any(c["break_even_iterations"] < 3000 for c in compiled) else {})},
        "compile_break_even_iterations": {c["levers"]: c["break_even_iterations"] for c in blob["compile"]},
        "bf16": {"gap_db_fp32_minus_bf16": bf16["gap_db_fp32_minus_bf16"], "threshold_db": BF16_GAP_DB, "train.bf16 may be true": bf16["bf16_allowed"],
                 "step_ratio_bf16_over_fp32": bf16["bf16_seconds_per_iteration"] / bf16["fp32_seconds_per_iteration"]} if bf16 else "not measured",
        "inference_ratio_best_mode": _inference_ratios(blob, run.sizes["infer"]),
        "evaluate_settings_for_paper_config": fastest_eval["settings"] if fastest_eval else "not measured",
        "default_train_ms": {m: summary[m]["default_ms"] for m in measured},
        "fastest_train_ms": {m: {"levers": summary[m]["fastest"], "ms": summary[m]["fastest_ms"]} for m in measured},
        "goal_train_ms": 200,
    }  # fmt: skip
    run.save()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--commit", help="git commit of the code (the GPU machine gets a copy of the tree without .git)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true", help="toy sizes and smoke-scale models (a CPU check of the script)")
    ap.add_argument("--phases", nargs="+", choices=PHASES, help="run only these phases (a rerun of what a cut run missed)")
    args = ap.parse_args(argv)
    sizes: dict[str, Any] = SIZES["smoke" if args.smoke else "paper"]
    run = Run(args.out, args.budget_s, torch.device(args.device), args.commit, sections=SECTIONS, sizes=sizes,
              benchmark="Training-step levers, bf16, inference ratios, whole-test-set evaluation")  # fmt: skip
    run.blob["settings"].update({"sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in sizes.items()}, "pays_below": PAYS})
    run.blob["lever_summary"] = {}
    tmp = Path(tempfile.mkdtemp(prefix="levers_", dir=os.environ.get("TMPDIR")))
    steps = {
        "levers": lambda: levers(run),
        "grad_check": lambda: grad_check(run),
        "bf16": lambda: bf16_training(run, tmp),
        "inference": lambda: inference(run),
        "evaluation": lambda: evaluation(run, tmp),
        "compile": lambda: compile_step(run),
        "dg_layers": lambda: dg_layers(run),
    }
    try:
        run.run_phases([(label, steps[label]) for label in args.phases or PHASES], after=lambda: decide(run))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print({k: len(v) for k, v in run.blob.items() if isinstance(v, list)}, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
