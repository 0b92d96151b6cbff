"""Inference engines on a CPU: seconds per megapixel, the share of the machine's peak, export cost, agreement.

    python -m benchmarks.cpu.engines OUT.json [--threads 2] [--size 512] [--repeats 2]
        [--networks dgno-cell:3,dgno-face:3,dgno-cell:1,dgno-face:1] [--engines eager,native,onnxruntime]
        [--allocators plain,dgno] [--export] [--demo-results results] [--int8]

Allocators: ``plain`` is PyTorch as installed; ``dgno`` is what ``dgno`` commands and workflow jobs run with
(``dgno.workflow.jobenv``): ``THP_MEM_ALLOC_ENABLE=1`` (transparent huge pages for torch's CPU allocations)
and glibc's malloc keeping freed memory for reuse (``GLIBC_TUNABLES``).  Both are read at a process's
start, so each network is timed in one child process per allocator, one after the other in this run;
every row records its allocator.

* ``speed``: per network (paper scale, random weights; ``name:channels``, RGB = the 3DHistech networks,
  1 channel = BBBC006) and engine, the wall time of one forward pass over a ``size``² tile with ``threads``
  threads (one warm-up pass, then ``repeats`` timed passes; the best is kept, every time is recorded),
  as seconds per megapixel, GFLOP/s (the FLOPs ``dgno.analysis.cost`` counts: convolutions and matrix
  products) and the share of the machine's peak (``dgno.analysis.machine``). All engines of a network are
  measured in this one run, on the same weights and input; ``speedup_over_eager`` is eager's time over each
  engine's with the same allocator, ``speedup_over_plain_eager`` over eager PyTorch as installed (plain).
* ``export`` (``--export``): seconds to trace and to write TorchScript and ONNX of the first network, the
  files' sizes, and the parity check's differences.
* ``agreement`` (``--demo-results``, a demo run's results folder): the demo's trained DGNO-Cell restores the
  demo's test images through every engine; max |engine − eager| and the PSNR difference against the sharp images.
* ``int8`` (``--int8``, with ``--demo-results``): ONNX Runtime's dynamic int8 quantisation of the same
  network: its speed and its PSNR change on the demo test set (kept only if within 0.05 dB).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.cpu.engines_demo import agreement
from dgno import provenance
from dgno.analysis.cost import count_flops
from dgno.analysis.machine import cpu_peak
from dgno.analysis.timing import wall_times
from dgno.inference import engines, export
from dgno.io import write_json
from dgno.models.registry import build_model
from dgno.workflow import jobenv

DEFAULT_NETWORKS = "dgno-cell:3,dgno-face:3,dgno-cell:1,dgno-face:1"
DEFAULT_ENGINES = "eager,native,onnxruntime"


def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages: how busy the machine was while it was timed."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def speed(name: str, channels: int, engine_names: list[str], *, size: int, repeats: int, peak: float | None) -> list[dict[str, Any]]:
    """One row per engine for network ``name`` with ``channels`` channels."""
    torch.manual_seed(0)
    base = build_model(name, scale="paper", in_channels=channels).eval()
    flops = count_flops(copy.deepcopy(base), size, in_channels=channels)
    x = torch.rand(1, channels, size, size, generator=torch.Generator().manual_seed(1))
    rows, reference = [], None
    for engine in engine_names:
        start = time.perf_counter()
        chosen = engines.build_engine(copy.deepcopy(base), torch.device("cpu"), engine=engine, tile=size)
        setup = time.perf_counter() - start
        with torch.no_grad():
            timing = wall_times(lambda chosen=chosen: chosen.forward(x)[-1], repeats=repeats, warmup=1)
        y = timing.result
        reference = y if reference is None else reference
        gflops = flops / timing.best / 1e9
        rows.append({
            "network": name, "channels": channels, "engine": chosen.name, "size": size, "setup_s": setup,
            "seconds": list(timing.times), "best_s": timing.best, "s_per_megapixel": timing.best / (size * size / 1e6),
            "gflop": flops / 1e9, "gflops_per_s": gflops, "fraction_of_peak": gflops / peak if peak else None,
            "max_abs_vs_first_engine": float((y - reference).abs().max()), "load_average": load_average(),
        })  # fmt: skip
        allocator = "dgno" if os.environ.get(jobenv.HUGE_PAGES[0]) == jobenv.HUGE_PAGES[1] else "plain"
        print(f"{name}:{channels} {chosen.name:12s} {allocator:5s} {timing.best:7.2f} s  {rows[-1]['s_per_megapixel']:7.1f} s/MP  {gflops:6.1f} GFLOP/s", flush=True)
    eager = next((r["best_s"] for r in rows if r["engine"] == "eager"), None)
    for r in rows:
        r["speedup_over_eager"] = eager / r["best_s"] if eager else None
    return rows


def export_cost(name: str, channels: int, *, size: int) -> dict[str, Any]:
    """Trace and write both files of one network; the times, sizes and parity differences."""
    torch.manual_seed(0)
    model = build_model(name, scale="paper", in_channels=channels).eval()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        record = export.export_model(model, tmp, name="net", tile=size, overlap=size // 16, normalise="dtype")
        total = time.perf_counter() - start
        sizes = {fmt: (Path(tmp) / file).stat().st_size for fmt, file in record.files.items()}
    return {"network": name, "channels": channels, "tile": size, "total_s": total, "seconds": record.seconds, "bytes": sizes, "parity": record.parity}


def timed_in_child(spec: str, args: argparse.Namespace, allocator: str) -> list[dict[str, Any]]:
    """The speed rows of one network (``name:channels``) from a child process with ``allocator``'s setting."""
    settings = dict([jobenv.HUGE_PAGES, jobenv.HEAP_TUNABLES])
    env = {k: v for k, v in os.environ.items() if k not in settings}
    if allocator == "dgno":
        env.update(settings)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        command = [sys.executable, "-m", "benchmarks.cpu.engines", str(out), "--child", "--networks", spec, "--engines", args.engines,
                   "--threads", str(args.threads), "--size", str(args.size), "--repeats", str(args.repeats)]  # fmt: skip
        subprocess.run(command, env=env, check=True)
        rows = json.loads(out.read_text())["speed"]
    for row in rows:
        row["allocator"] = allocator
    return rows


def plain_eager_ratios(rows: list[dict[str, Any]]) -> None:
    """Add ``speedup_over_plain_eager`` to every row: eager PyTorch with the plain allocator over the row."""
    plain = {(r["network"], r["channels"]): r["best_s"] for r in rows if r["engine"] == "eager" and r.get("allocator") == "plain"}
    for r in rows:
        base = plain.get((r["network"], r["channels"]))
        r["speedup_over_plain_eager"] = base / r["best_s"] if base else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--networks", default=DEFAULT_NETWORKS)
    p.add_argument("--engines", default=DEFAULT_ENGINES)
    p.add_argument("--allocators", default="plain,dgno", help="plain, dgno or both (each in its own child process)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # time in this process, as it was started
    p.add_argument("--export", action="store_true")
    p.add_argument("--demo-results", type=Path)
    p.add_argument("--int8", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    names = [e for e in args.engines.split(",") if e]
    peak = cpu_peak(args.threads)
    out: dict[str, Any] = {"benchmark": "engines_cpu", "threads": args.threads, "size": args.size, "peak": peak,
                           "allocators": {"plain": "PyTorch's allocator as installed", "dgno": " ".join("=".join(kv) for kv in (jobenv.HUGE_PAGES, jobenv.HEAP_TUNABLES))},
                           "provenance": provenance.collect("cpu"), "load_average_start": load_average(), "speed": []}  # fmt: skip
    for spec in args.networks.split(","):
        name, _, channels = spec.partition(":")
        if args.child:
            out["speed"] += speed(name, int(channels or 1), names, size=args.size, repeats=args.repeats, peak=peak["peak_gflops"])
        else:
            for allocator in args.allocators.split(","):
                out["speed"] += timed_in_child(spec, args, allocator)
            plain_eager_ratios(out["speed"])
        write_json(args.out, out)  # after every network: an interrupted run keeps what it measured
    if args.export:
        name, _, channels = args.networks.split(",")[0].partition(":")
        out["export"] = export_cost(name, int(channels or 1), size=args.size)
    if args.demo_results:
        out["agreement"] = agreement(args.demo_results, names, int8=args.int8)
    out["load_average_end"] = load_average()
    write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
