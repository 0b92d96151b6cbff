"""Whole-slide restoration on a GPU: end-to-end tiles/s against the bare network's at the same batch size.

Usage (one command on a CUDA machine, from the repository root):

    PYTHONPATH=src python benchmarks/bench_slides_gpu.py [--batch 8] [--side 8192] [--bf16] [--cuda-graphs]
                                                         [--out benchmarks/results/slides_gpu_<gpu>.json]

1. Bare network: the authors' DGNO_3DHistech_Cell at paper scale (random weights, the speed does not
   depend on them) on batches of ``batch`` random 512² RGB tiles, ``--warmup`` untimed then ``--repeats``
   timed passes, synchronised: tiles/s.
2. End to end: ``restore_slide`` with the same network and batch on a synthetic SVS-like slide of
   side² px (H&E-like, JPEG tiles, read through OpenSlide), every tissue tile restored (``restore="all"``):
   reading, network, blending and the pyramid writer running side by side. Reported: tiles/s of the
   streaming stage (restored tiles / its wall time, the writer's tail included) and of the whole call
   (focus scan and pictures included).

The goal: end-to-end (streaming stage) at least 90 % of the bare rate. Results go to a JSON
file with the GPU, the library versions and the load average. Takes a few minutes on an H100.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from bench_slides import machine, paper_network, synthetic_slide  # noqa: E402

from dgno.slides.restore import restore_slide  # noqa: E402


def bare_rate(network, *, warmup: int, repeats: int) -> float:
    """Tiles/s of the network alone on batches of 512² tiles (inputs already on the device)."""
    x = torch.rand(network.batch, network.channels, network.tile, network.tile, device=network.device)
    with torch.no_grad():
        for _ in range(warmup):
            network.forward(x)
        torch.cuda.synchronize(network.device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            network.forward(x)
        torch.cuda.synchronize(network.device)
    return repeats * network.batch / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--side", type=int, default=8192)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--workers", type=int, default=8, help="threads of the focus scan and of the writer's compression")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--cuda-graphs", action="store_true")
    p.add_argument("--out")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark measures a GPU (benchmarks/bench_slides.py measures the CPU)")
    network = paper_network("cuda", batch=args.batch, cuda_graphs=args.cuda_graphs, bf16=args.bf16)
    bare = bare_rate(network, warmup=args.warmup, repeats=args.repeats)
    print(f"bare network: {bare:.2f} tiles/s at batch {args.batch}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = synthetic_slide(Path(tmp) / "slide.tif", args.side)
        t0 = time.perf_counter()
        summary = restore_slide(src, Path(tmp) / "out", network=network, restore="all", workers=args.workers, progress=True)
        wall = time.perf_counter() - t0
    streaming = summary["tiles_per_second"]
    gpu = torch.cuda.get_device_name(0)
    result = {
        "gpu": gpu, "batch": args.batch, "side": args.side, "bf16": args.bf16, "cuda_graphs": args.cuda_graphs,
        "bare_tiles_per_second": bare, "end_to_end_tiles_per_second": streaming, "ratio": streaming / bare, "goal_ratio": 0.9,
        "whole_call_tiles_per_second": summary["tiles_computed"] / wall, "tiles_restored": summary["tiles_computed"],
        "seconds": summary["seconds"], "seconds_analysis": summary["seconds_analysis"], "seconds_network": summary["seconds_network"],
        "share_outside_network": summary["share_outside_network"], "peak_memory_mb": summary["peak_memory_mb"],
        "host": machine(), "provenance": summary["provenance"], "command": " ".join(["python", *sys.argv]),
    }  # fmt: skip
    out = Path(args.out or f"benchmarks/results/slides_gpu_{gpu.split()[-1].lower()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "provenance"}, indent=1, default=str))


if __name__ == "__main__":
    main()
