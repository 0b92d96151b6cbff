"""Whole-slide restoration on a GPU: end-to-end tiles/s against the bare network's at the same batch size.

Usage (one command on a CUDA machine, from the repository root; ``--smoke`` checks the script on a CPU in
seconds, with a smoke-scale network, a small slide and no GPU):

    python -m benchmarks.gpu.slides [--batch 8] [--side 8192] [--bf16] [--cuda-graphs] [--out benchmarks/results/slides_gpu_<gpu>.json]
    python -m benchmarks.gpu.slides --smoke --out /tmp/slides_smoke.json

1. Bare network: the authors' DGNO_3DHistech_Cell at paper scale (random weights, the speed does not
   depend on them) on batches of ``batch`` random 512² RGB tiles already on the device, ``--warmup``
   untimed then ``--repeats`` timed passes (``dgno.analysis.timing.wall_times``, synchronised): tiles/s
   of the median pass.
2. End to end: ``restore_slide`` with the same network and batch on a synthetic SVS-like slide of
   side² px (H&E-like, JPEG tiles, read through OpenSlide), every tissue tile restored (``restore="all"``):
   reading, network, blending and the pyramid writer running side by side. Reported: tiles/s of the
   streaming stage (restored tiles / its wall time, the writer's tail included) and of the whole call
   (focus scan and pictures included).

The goal: end-to-end (streaming stage) at least 90 % of the bare rate. Results go to a JSON file with
the GPU, the library versions and the host's load average. A few minutes on an H100.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.cpu.slides import machine, paper_network, synthetic_slide
from dgno.analysis.timing import device_sync, wall_times
from dgno.slides.network import SlideNetwork
from dgno.slides.restore import restore_slide

GOAL_RATIO = 0.9
SMOKE = {"side": 768, "batch": 2, "warmup": 1, "repeats": 1, "workers": 2}  # --smoke: sizes for a CPU check of the script


def bare_rate(network: SlideNetwork, *, warmup: int, repeats: int) -> float:
    """Tiles/s of the network alone on batches of its tiles (inputs already on the device), median pass."""
    x = torch.rand(network.batch, network.channels, network.tile, network.tile, device=network.device)
    with torch.no_grad():
        timing = wall_times(lambda: network.forward(x), repeats=repeats, warmup=warmup, sync=device_sync(network.device))
    return network.batch / timing.median


def measure(args: argparse.Namespace) -> dict:
    """The bare rate, then the end-to-end run on the same network and batch (module docstring)."""
    device = "cpu" if args.smoke else "cuda"
    network = paper_network(device, batch=args.batch, scale="smoke" if args.smoke else "paper", cuda_graphs=args.cuda_graphs, bf16=args.bf16)
    bare = bare_rate(network, warmup=args.warmup, repeats=args.repeats)
    print(f"bare network: {bare:.2f} tiles/s at batch {args.batch}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = synthetic_slide(Path(tmp) / "slide.tif", args.side)
        t0 = time.perf_counter()
        summary = restore_slide(src, Path(tmp) / "out", network=network, restore="all", workers=args.workers, progress=True)
        wall = time.perf_counter() - t0
    streaming = summary["tiles_per_second"]
    return {
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else "none (--smoke, CPU)", "batch": args.batch, "side": args.side,
        "bf16": args.bf16, "cuda_graphs": args.cuda_graphs, "network": network.name,
        "bare_tiles_per_second": bare, "end_to_end_tiles_per_second": streaming, "ratio": streaming / bare, "goal_ratio": GOAL_RATIO,
        "whole_call_tiles_per_second": summary["tiles_computed"] / wall, "tiles_restored": summary["tiles_computed"],
        "seconds": summary["seconds"], "seconds_analysis": summary["seconds_analysis"], "seconds_network": summary["seconds_network"],
        "share_outside_network": summary["share_outside_network"], "peak_memory_mb": summary["peak_memory_mb"],
        "host": machine(), "provenance": summary["provenance"], "command": " ".join(["python -m benchmarks.gpu.slides", *sys.argv[1:]]),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--side", type=int, default=8192)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--workers", type=int, default=8, help="threads of the focus scan and of the writer's compression")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--cuda-graphs", action="store_true")
    p.add_argument("--smoke", action="store_true", help="a CPU check of the script: smoke-scale network, small slide, no GPU needed")
    p.add_argument("--out")
    args = p.parse_args()
    if args.smoke:
        vars(args).update(SMOKE, bf16=False, cuda_graphs=False)
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark measures a GPU (python -m benchmarks.cpu.slides measures the CPU; --smoke checks this script)")
    result = measure(args)
    out = Path(args.out or f"benchmarks/results/slides_gpu_{result['gpu'].split()[-1].lower()}.json")
    if args.smoke and args.out is None:
        raise SystemExit("--smoke: pass --out (a smoke run is not a result to record in benchmarks/results)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "provenance"}, indent=1, default=str))


if __name__ == "__main__":
    main()
