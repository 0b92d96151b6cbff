"""Speed and memory benchmarks of registry models (``dgno bench``): forward pass and training step.

Fixed seed, warm-up runs, then timed runs with device synchronisation around each; the result
records the device, library versions and git commit, so a number never travels without its
context. Peak memory is CUDA's max_memory_allocated on GPUs and the process's peak resident set
(VmHWM, reset before the timed runs) on CPUs.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import torch

from dgno import provenance
from dgno.analysis.timing import device_sync, wall_times
from dgno.checkpoint import pick_device
from dgno.io import write_json
from dgno.layers.mambair import set_scan_backend
from dgno.models.outputs import as_outputs
from dgno.models.registry import build_model
from dgno.train.losses import restoration_loss


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak for :func:`peak_memory_mb`: CUDA's counters, or the process's peak RSS (Linux)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:  # "5" resets the kernel's peak RSS counter of this process (Linux)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_memory_mb(device: torch.device) -> float | None:
    """Peak memory since the last reset, MB: CUDA's max_memory_allocated, or the process's peak RSS (VmHWM) on a CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _timed(fn, device: torch.device, *, warmup: int, repeats: int) -> list[float]:
    """Synchronised wall times (s) of ``repeats`` calls after ``warmup``; the peak-memory counter covers the timed calls."""
    return list(wall_times(fn, repeats=repeats, warmup=warmup, sync=device_sync(device), on_warm=lambda: reset_peak_memory(device)).times)


def _build(name: str, scale: str, dev: torch.device, scan_backend: str | None) -> torch.nn.Module:
    """The registry model on ``dev``, its ASSMs switched to ``scan_backend`` when one is given."""
    torch.manual_seed(0)
    model = build_model(name, scale=scale).to(dev)
    if scan_backend is not None:
        set_scan_backend(model, scan_backend)
    return model


def bench_forward(
    name: str,
    *,
    scale: str = "paper",
    size: int = 256,
    batch: int = 1,
    device: str = "auto",
    warmup: int = 1,
    repeats: int = 3,
    amp: bool = False,
    scan_backend: str | None = None,
) -> dict[str, Any]:
    """Seconds per forward pass (median) and peak memory for a (batch, 1, size, size) input."""
    dev = pick_device(device)
    model = _build(name, scale, dev, scan_backend).eval()
    x = torch.rand(batch, 1, size, size, device=dev)

    def step():
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            model(x)

    times = _timed(step, dev, warmup=warmup, repeats=repeats)
    sec = statistics.median(times)
    return {
        "kind": "forward",
        "model": name,
        "scale": scale,
        "size": size,
        "batch": batch,
        "amp_bf16": amp,
        "scan_backend": scan_backend,
        "seconds": sec,
        "images_per_second": batch / sec,
        "peak_memory_mb": peak_memory_mb(dev),
        "times": times,
        "provenance": provenance.collect(dev),
    }


def bench_train(
    name: str,
    *,
    scale: str = "demo",
    size: int = 128,
    batch: int = 1,
    device: str = "auto",
    warmup: int = 2,
    repeats: int = 5,
    amp: bool = False,
    scan_backend: str | None = None,
) -> dict[str, Any]:
    """Training iterations per second (forward + multi-scale loss + backward + AdamW step)."""
    dev = pick_device(device)
    model = _build(name, scale, dev, scan_backend).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.rand(batch, 1, size, size, device=dev)
    y = torch.rand(batch, 1, size, size, device=dev)

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = restoration_loss(as_outputs(model(x)), y, fft_weight=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    times = _timed(step, dev, warmup=warmup, repeats=repeats)
    sec = statistics.median(times)
    return {
        "kind": "train",
        "model": name,
        "scale": scale,
        "size": size,
        "batch": batch,
        "amp_bf16": amp,
        "scan_backend": scan_backend,
        "seconds_per_iteration": sec,
        "iterations_per_second": 1.0 / sec,
        "projected_hours_60k": 60000 * sec / 3600,
        "peak_memory_mb": peak_memory_mb(dev),
        "times": times,
        "provenance": provenance.collect(dev),
    }


def write_results(rows: list[dict[str, Any]], out: str | Path) -> None:
    write_json(out, {"results": rows})
