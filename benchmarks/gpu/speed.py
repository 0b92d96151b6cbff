"""Every GPU speed and memory measurement of the paper-scale models in one run; writes OUT_JSON after each record.

    python -m benchmarks.gpu.speed OUT_JSON [--budget-s 420] [--commit SHA] [--demo DIR]

GPU time is scarce, so one script measures everything, most important first, and stops starting
new work when ``--budget-s`` is spent (what it skipped is listed in the file, never silently
dropped).  Every method is measured in the same process on the same device:

1. ``scan``: the Triton selective scan against the token-loop reference on the GPU (max error,
   forward and gradients), then a sweep of its tile sizes and a timing against the chunked
   PyTorch scan at the paper model's largest scan (96 channels × 65 536 tokens, batch 1 and 8);
   the sweep is recorded, and the model runs use the package's tile rule (``scan_triton.config_for``).
2. ``inference``: forward passes of the paper-scale models (DGNO-Face, DGNO-Cell, Restormer,
   NAFNet, SwinIR, MPT), batch 1 and 8, float32 and bfloat16 autocast, 128² to 1024², eager and
   replayed from CUDA graphs (``dgno.inference.cuda_graphs``); DGNO with the Triton scan, and eager with the
   chunked PyTorch scan as the reference without Triton kernels.  A configuration predicted to take over
   ``--max-forward-s`` per pass (from the model's smaller sizes) is skipped and listed.
3. ``memory``: the candidate protocols for the paper's "memory (GB)" column, batch 1, 256² and 512²:
   peak allocated and peak reserved memory of an inference pass, of a forward pass with autograd
   (train mode), and of a whole training step, plus the device memory in use (driver view,
   context included) after it.  The report compares each protocol's DGNO/Restormer ratio with the
   paper's.
4. ``train``: training steps (forward, multi-scale L1 + FFT loss, backward, AdamW), batch 8, 256²,
   float32 (the authors' options) and bfloat16 autocast, DGNO (both scans) against Restormer and
   NAFNet.
5. ``bf16_psnr``: with ``--demo DIR`` (a folder with demo ``<method>/model.pt`` files and the demo
   dataset under ``data/``), the PSNR of each demo model on its test set in float32 and under
   bfloat16 autocast.

Timing: median of at least 3 synchronised runs after 2 warm-up runs (more runs for fast passes,
up to ~1 s).  Memory: ``torch.cuda`` peak statistics reset before the timed runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from benchmarks.gpu.session import Run
from benchmarks.gpu.speed_forward import DGNO, compiled, inference, paper_protocol
from benchmarks.gpu.speed_scan import check_scan, sweep_scan
from benchmarks.gpu.speed_train import bf16_psnr, memory_protocols, profile, train_steps, train_tf32

SECTIONS = ("scan", "scan_configs", "inference", "memory", "train", "bf16_psnr", "profile")
SIZES = {
    "paper": {
        "scale": "paper", "batch": 8, "scan_shape": (96, 65536),  # channels × tokens of the paper DGNO's full-resolution ASSM at 256²
        "core": (256, 512), "sizes": (128, 1024), "all": (128, 256, 512, 1024), "memory": (256, 512), "train": 256, "paper": (128, 256, 384, 512),
    },
    # ``--dry-run`` (CPU, Triton interpreter): checks the script end to end at toy sizes
    "dry_run": {
        "scale": "smoke", "batch": 2, "scan_shape": (4, 256),
        "core": (32,), "sizes": (16, 48), "all": (16, 32), "memory": (32,), "train": 32, "paper": (16, 32),
    },
}  # fmt: skip


def phases(run: Run, args: argparse.Namespace) -> list[tuple[str, object]]:
    """The phases in the order they run: most important first, the budget decides how far a run gets."""
    sz, cuda, max_s = run.sizes, run.device.type == "cuda", args.max_forward_s
    return [
        ("scan check", lambda: check_scan(run)),
        ("scan sweep", lambda: sweep_scan(run)),
        ("inference core", lambda: inference(run, sz["core"], (1,), (False,), max_s, "core")),
        ("bf16 psnr", lambda: bf16_psnr(run, args.demo) if args.demo else run.skip("bf16_psnr", "no --demo folder")),
        ("memory", lambda: memory_protocols(run)),
        ("train", lambda: train_steps(run)),
        ("inference bf16 core", lambda: inference(run, sz["core"], (1,), (True,), max_s, "bf16")),
        ("inference batch 8 core", lambda: inference(run, sz["core"], (sz["batch"],), (False,), max_s, "batch8")),
        ("compile", lambda: compiled(run) if cuda else run.skip("compile", "CUDA only")),
        ("inference sizes", lambda: inference(run, sz["sizes"], (1,), (False, True), max_s, "sizes")),
        ("inference batch 8 rest", lambda: inference(run, sz["all"], (sz["batch"],), (False, True), max_s, "batch8")),
        ("paper protocol", lambda: paper_protocol(run)),
        ("profile", lambda: profile(run) if cuda else run.skip("profile", "CUDA only")),
        ("train tf32", lambda: train_tf32(run)),
        ("inference bf16 dgno", lambda: inference(run, sz["core"], (1,), (True,), max_s, "bf16_fp32_operator", models=DGNO)),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--commit", help="git commit of the code (the GPU machine gets a copy of the tree without .git)")
    ap.add_argument("--demo", type=Path, help="folder with <method>/model.pt demo models and data/ (the demo test set)")
    ap.add_argument("--max-forward-s", type=float, default=2.0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--phases", nargs="+", help="run only these phases (default: all)")
    ap.add_argument("--dry-run", action="store_true", help="tiny models and sizes (CPU check of the script; set TRITON_INTERPRET=1)")
    args = ap.parse_args(argv)
    sizes = SIZES["dry_run" if args.dry_run else "paper"]
    run = Run(args.out, args.budget_s, torch.device(args.device), args.commit, benchmark="GPU speed and memory", sections=SECTIONS, sizes=sizes)
    steps = phases(run, args)
    if args.phases:
        unknown = set(args.phases) - {label for label, _ in steps}
        if unknown:
            ap.error(f"unknown phase(s) {sorted(unknown)}; allowed: {[label for label, _ in steps]}")
        steps = [(label, step) for label, step in steps if label in args.phases]
    run.run_phases(steps)
    print(json.dumps({k: len(v) for k, v in run.blob.items() if isinstance(v, list)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
