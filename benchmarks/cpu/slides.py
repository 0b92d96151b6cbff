"""Whole-slide restoration on this machine: time per megapixel at paper scale, and peak memory against slide area.

Usage: THP_MEM_ALLOC_ENABLE=1 GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776 \
       python -m benchmarks.cpu.slides cpu    [--threads 2] [--side 1024] [--out benchmarks/results/slides_cpu.json]
       python -m benchmarks.cpu.slides memory [--sides 1024 2048 4096] [--out benchmarks/results/slides_memory.json]

``cpu``: the authors' 3DHistech network (DGNO-Cell, 3 channels, paper scale, 12.8 M parameters; random
weights: speed does not depend on them) with their tile protocol (512 px, 32 px overlap, cross-fade,
8-bit / 255), restoring every tissue tile of a synthetic H&E-like slide (SVS-like tiled pyramidal TIFF
with JPEG tiles, read through OpenSlide) with ``restore_slide``. Recorded: seconds per megapixel of
restored tissue, seconds per tile, and the share of the wall time spent outside the network (reading,
focus scan, blending, pyramid, pictures).

``memory``: the same kind of slide at growing sides, each restored (every tissue tile, identity network,
the authors' tiles) in a fresh process; its peak resident memory (VmHWM: ru_maxrss would carry over the
size of this process, which forks it after rendering the slide) and the peak of the
streaming part's own allocations (tracemalloc of the network/writer stage). The goal is a flat line:
peak RSS for 4× the area within 10 %.

Every result records the machine, its load average (before and after) and the library versions. Not a
test: minutes (``cpu`` at side 1024 on 2 cores: about a quarter of an hour). ``benchmarks.gpu.slides``
measures the same on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from dgno import provenance
from dgno.data.slides import BlurRegion, brightfield_tissue, write_slide
from dgno.inference.authors import AUTHORS_TILES
from dgno.inference.engines import build_engine
from dgno.models.authors import model_from_options, released_networks
from dgno.models.overrides import registry_overrides
from dgno.models.registry import build_model
from dgno.slides.network import SlideNetwork
from dgno.slides.restore import restore_slide
from dgno.workflow import jobenv

SRC = Path(__file__).resolve().parents[2] / "src"  # this checkout's package, for the measured child processes


def paper_network(device: str = "cpu", *, batch: int = 1, seed: int = 0, scale: str = "paper", cuda_graphs: bool = False, bf16: bool = False,
                  engine: str = "auto") -> SlideNetwork:  # fmt: skip
    """The authors' DGNO_3DHistech_Cell network (at ``scale``: paper, or smoke for a check of a script) with random
    weights, as ``--authors`` applies it: their tiles, blend and 8-bit / 255 scaling, run by ``engine`` as
    ``dgno deblur-slide --engine`` runs it ("auto": the command's default)."""
    torch.manual_seed(seed)
    name, channels, overrides = model_from_options(released_networks()["DGNO_3DHistech_Cell"])
    dev = torch.device(device)
    widths = registry_overrides(overrides) if scale == "paper" else {}  # the released widths are the paper scale's
    model = build_model(name, scale=scale, in_channels=channels, **widths).to(dev).eval()
    chosen = build_engine(model, dev, engine=engine, tile=AUTHORS_TILES["tile"], cuda_graphs=cuda_graphs, bf16=bf16)
    fwd = chosen.forward
    return SlideNetwork(name=f"DGNO_3DHistech_Cell ({scale} scale, random weights)", channels=channels, forward=lambda x: fwd(x)[-1], device=dev,
                        normalise="dtype", strict_channels=True, batch=batch, identity=f"random-{scale}-{seed}-{chosen.name}", engine=chosen.name,
                        engine_note=chosen.note, **AUTHORS_TILES)  # fmt: skip


def synthetic_slide(path: Path, side: int, *, seed: int = 4) -> Path:
    """An H&E-like slide of side² px, a quarter of it defocused (σ 3 px), written SVS-like (JPEG tiles, pyramid)."""
    img = brightfield_tissue((side, side), seed=seed, regions=[BlurRegion(side // 4, side // 4, 3 * side // 4, 3 * side // 4, 3.0)])
    write_slide(path, img, layout="generic-tiff", mpp=0.25)
    return path


def machine() -> dict:
    """The host and how busy it is (``uptime``'s load averages: a timing on shared cores means little without them)."""
    uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    return {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "load_average_1_5_15": list(os.getloadavg()), "uptime": uptime}


def bench_cpu(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        src = synthetic_slide(Path(tmp) / "slide.tif", args.side)
        before = machine()
        summary = restore_slide(src, Path(tmp) / "out", network=paper_network(scale=args.scale, engine=args.engine), restore="all", workers=args.threads, progress=True)
    keys = ("tiles", "restored_megapixels", "seconds", "seconds_analysis", "seconds_network", "share_outside_network", "tiles_per_second",
            "seconds_per_megapixel", "peak_memory_mb", "tile", "overlap", "blend", "batch", "device")  # fmt: skip
    result = {k: summary[k] for k in keys}
    result["seconds_per_tile_network"] = summary["seconds_network"] / max(summary["tiles_computed"], 1)
    # as the process was started (dgno deblur-slide runs with both: dgno.workflow.jobenv)
    allocator = {k: os.environ.get(k) for k, _ in (jobenv.HUGE_PAGES, jobenv.HEAP_TUNABLES)}
    return {"kind": "cpu", "side": args.side, "threads": args.threads, "scale": args.scale, "engine": summary.get("engine"), "allocator": allocator, **result, "load_before": before, "load_after": machine(), "provenance": summary["provenance"]}


MEMORY_CHILD = r"""
import sys, tracemalloc, torch
from dgno.inference.authors import AUTHORS_TILES
from dgno.slides import restore
from dgno.slides.network import SlideNetwork
torch.set_num_threads(1)
net = SlideNetwork(name="identity", channels=3, forward=lambda x: x.clone(), device=torch.device("cpu"), identity="identity", **AUTHORS_TILES)
streamed = []
def traced(plan, run=restore.run_restoration):
    tracemalloc.start()
    try:
        return run(plan)
    finally:
        streamed.append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
restore.run_restoration = traced
s = restore.restore_slide(sys.argv[1], sys.argv[2], network=net, restore="all", progress=False)
print(restore.peak_memory_mb(), streamed[0], s["seconds"], s["tiles"]["restored"])
"""


def bench_memory(args: argparse.Namespace) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for side in args.sides:
            src = synthetic_slide(Path(tmp) / f"slide{side}.tif", side)
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
            done = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(src), str(Path(tmp) / f"out{side}")], env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(done.stderr[-3000:])
            rss, traced, seconds, tiles = map(float, done.stdout.split()[-4:])
            rows.append({"side": side, "megapixels": side * side / 1e6, "peak_rss_mb": rss, "streaming_peak_traced_mb": traced, "seconds": seconds, "tiles_restored": int(tiles)})
            print(rows[-1], flush=True)
            src.unlink()
    ratios = [b["peak_rss_mb"] / a["peak_rss_mb"] for a, b in zip(rows, rows[1:])]
    return {"kind": "memory", "rows": rows, "rss_ratio_per_4x_area": ratios, "goal": "each ratio <= 1.10", **machine(), "versions": provenance.versions()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=["cpu", "memory"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--side", type=int, default=1024)
    p.add_argument("--engine", default="auto", help="cpu: how the network runs (dgno deblur-slide --engine; default auto, the command's default)")
    p.add_argument("--scale", choices=["paper", "smoke"], default="paper", help="cpu: the network's scale (smoke: a check of the script in seconds)")
    p.add_argument("--sides", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--out")
    args = p.parse_args()
    t0 = time.perf_counter()
    result = bench_cpu(args) if args.kind == "cpu" else bench_memory(args)
    result.update(command=" ".join(["python -m benchmarks.cpu.slides", *sys.argv[1:]]), wall_seconds=time.perf_counter() - t0)
    out = Path(args.out or f"benchmarks/results/slides_{args.kind}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=lambda o: o.item() if isinstance(o, np.generic) else str(o)) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("provenance", "rows")}, indent=1, default=str))


if __name__ == "__main__":
    main()
