"""Benchmark every registered method: parameters, CPU forward time / peak memory, demo training speed.

    python -m benchmarks.cpu.models OUT_JSON [--models a,b] [--size 256] [--train-iters 300] [--threads 1]

Per model (each measured in a fresh subprocess, so one model's memory peak cannot hide another's):

* ``params_paper`` / ``params_demo``: trainable parameters at the paper and demo scales (1 channel),
  beside the count the original authors publish (``published``, with its source and whether the
  value was checked against a retrieved document while writing this file);
* ``forward_s``: wall time of one paper-scale forward pass on a 1×1×size×size input (eval mode,
  no autograd) after a small warm-up pass; ``peak_rss_mb``: the process's peak resident memory
  during that pass (VmHWM, reset just before it via /proc/self/clear_refs) and ``forward_extra_mb``
  = that peak minus the resident memory right before the pass (≈ activations + workspace);
* ``train_s``: wall time of ``train_iters`` AdamW steps of batch 4 on 64×64 random patches at the
  demo scale, with the training loop's multi-scale L1 (targets bilinearly resized to each output).

All timings use ``--threads`` intra-op threads (default 1: the demo target is "one CPU core").
The JSON records the device and library versions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dgno.analysis.timing import wall_times
from dgno.io import write_json

ROOT = Path(__file__).resolve().parents[2]  # the repository root, from where ``-m benchmarks...`` imports
DEFAULT_MODELS = [
    "gkmnet", "mimo-unet", "nafnet", "swinir", "mambairv2", "restormer", "mpt",
    "nafnet-dgno", "restormer-dgno", "mpt-dgno", "dgno-face", "dgno-cell",
]  # fmt: skip

# Parameter counts the original authors publish (RGB models), with where the number comes from.
# ``checked``: the value was seen in a document retrieved while writing this benchmark.
PUBLISHED: dict[str, dict[str, Any]] = {
    "nafnet": {
        "params_m": 17.11,
        "source": "NAFNet-width32 GoPro config (Chen et al., ECCV 2022; their repository's options/train/GoPro/NAFNet-width32.yml): "
        "17,111,907 parameters for RGB, as counted in a public reproduction of that config",
        "checked": True,
    },
    "restormer": {
        "params_m": 26.13,
        "source": "Restormer (Zamir et al., CVPR 2022), motion-deblurring model: 26.13 M; "
        "26,126,644 in the converted checkpoint card huggingface.co/mlx-community/Restormer-motion-deblurring-fp32",
        "checked": True,
    },
    "swinir": {
        "params_m": 11.8,
        "source": "SwinIR (Liang et al., ICCVW 2021): ~11.8 M quoted for its 6×6-layer, 180-channel network "
        "(value from the task brief; the paper's table was not retrievable here).  That figure includes the "
        "super-resolution upsampler: the same spandrel architecture counts 11,752,487 (×2) / 11,900,199 (×4) "
        "RGB parameters with it and 11,504,163 in the upscale-1 restoration form used here",
        "checked": False,
    },
    "mimo-unet": {
        "params_m": 6.8,
        "source": "MIMO-UNet (Cho et al., ICCV 2021), Table 1: 6.8 M (MIMO-UNet+ 16.1 M)",
        "checked": False,
    },
    "mpt": {
        "params_m": 19.80,
        "source": "MPT (Zhang et al., CVPR 2024) default model: 19.799356 M, as printed in the authors' "
        "models/MPT.py (github.com/PieceZhang/MPT-CataBlur)",
        "checked": True,
    },
    "gkmnet": {
        "params_m": None,
        "source": "GKMNet (Quan et al., NeurIPS 2021): the paper's parameter count could not be retrieved here",
        "checked": False,
    },
    "mambairv2": {
        "params_m": None,
        "source": "MambaIRv2 (Guo et al., CVPR 2025): no count found for its restoration (denoising/JPEG) "
        "configuration; this network also lacks the window-attention branch (see dgno.models.mambairv2)",
        "checked": False,
    },
    "dgno-cell": {"params_m": 12.79, "source": "DGNO paper (ICML 2026), Sec. 5: 12.79 M", "checked": True},
    "dgno-face": {"params_m": 12.79, "source": "DGNO paper (ICML 2026), Sec. 5: 12.79 M", "checked": True},
}


def _status_kb(field: str) -> int:
    """A ``VmXXX`` field of /proc/self/status in kB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux ≥ 4.0); False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def worker_forward(name: str, size: int) -> dict[str, Any]:
    """Paper-scale parameter count, forward time and memory of one model (run in its own process)."""
    import torch

    from dgno.models.registry import build_model

    model = build_model(name, scale="paper").eval()
    with torch.no_grad():
        model(torch.rand(1, 1, 64, 64))  # warm-up: lazy imports, allocator, kernel selection
        x = torch.rand(1, 1, size, size)
        rss_before = _status_kb("VmRSS")
        reset = _reset_peak_rss()
        timing = wall_times(lambda: model(x), repeats=1)
        out, forward_s = timing.result, timing.best
    peak = _status_kb("VmHWM")
    assert out[-1].shape == x.shape
    return {
        "params_paper": _count(model),
        "forward_s": round(forward_s, 3),
        "peak_rss_mb": round(peak / 1024, 1),
        "forward_extra_mb": round((peak - rss_before) / 1024, 1) if reset else None,
    }


def worker_train(name: str, iters: int) -> dict[str, Any]:
    """Demo-scale training speed: ``iters`` AdamW steps, batch 4, 64×64 (run in its own process)."""
    import torch
    import torch.nn.functional as F

    from dgno.models.registry import build_model

    torch.manual_seed(0)
    model = build_model(name, scale="demo").train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), weight_decay=1e-4)
    gen = torch.Generator().manual_seed(0)

    def step() -> float:
        gt = torch.rand(4, 1, 64, 64, generator=gen)
        blur = F.avg_pool2d(gt, 5, stride=1, padding=2, count_include_pad=False)
        outs = model(blur)
        loss = sum(
            F.l1_loss(o, F.interpolate(gt, size=o.shape[-2:], mode="bilinear", antialias=True) if o.shape != gt.shape else gt)
            for o in outs
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss)

    timing = wall_times(step, repeats=iters, warmup=1)  # one untimed step first: first-call overheads
    last, train_s = timing.result, sum(timing.times)
    return {
        "params_demo": _count(model),
        "train_iters": iters,
        "train_s": round(train_s, 2),
        "train_ms_per_iter": round(1000 * train_s / iters, 1),
        "final_loss": round(last, 5),
    }


def _run_worker(task: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter with ``args.threads`` threads; its last stdout line is JSON."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    cmd = [sys.executable, "-m", "benchmarks.cpu.models", "--worker", task, "--name", name, "--size", str(args.size),
           "--train-iters", str(args.train_iters), "--threads", str(args.threads)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, cwd=ROOT)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _environment(threads: int) -> dict[str, Any]:
    """Provenance (commit, versions, device) plus what makes CPU timings comparable or not."""
    from importlib.metadata import version

    from dgno import provenance

    env = provenance.collect("cpu")
    env["versions"]["spandrel-extra-arches"] = version("spandrel-extra-arches")
    env["cpu"] = {"logical_cores": os.cpu_count(), "threads_used": threads, "load_avg_1_5_15": list(os.getloadavg())}
    return env


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_json", type=Path, nargs="?")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated registry names")
    ap.add_argument("--size", type=int, default=256, help="forward input side (paper scale)")
    ap.add_argument("--train-iters", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip", choices=["forward", "train"], action="append", default=[])
    ap.add_argument("--worker", choices=["forward", "train"], help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        fn = worker_forward if args.worker == "forward" else worker_train
        result = fn(args.name, args.size) if args.worker == "forward" else fn(args.name, args.train_iters)
        print(json.dumps(result))
        return

    if args.out_json is None:
        ap.error("OUT_JSON is required")
    env_start = _environment(args.threads)  # load average before the runs
    results: dict[str, Any] = {}
    for name in args.models.split(","):
        row: dict[str, Any] = {"published": PUBLISHED.get(name)}
        for task in ("forward", "train"):
            if task not in args.skip:
                t0 = time.perf_counter()
                got = _run_worker(task, name, args)
                row.update(got)
                print(f"{name:15s} {task:8s} {time.perf_counter() - t0:7.1f} s  {got}", file=sys.stderr, flush=True)
        results[name] = row
    report = {
        **env_start,
        "load_avg_at_end": list(os.getloadavg()),
        "settings": {"forward_size": args.size, "train_iters": args.train_iters, "train_batch": 4, "train_patch": 64},
        "models": results,
    }
    write_json(args.out_json, report)


if __name__ == "__main__":
    main()
