"""What every GPU benchmark script shares: its result file, its time budget and the passes it times.

GPU time is lent in short sessions, so a script measures the most important things first, rewrites its
JSON after every record (a run cut short keeps what it measured) and stops starting new work when the
budget is spent, listing what it skipped and why. The helpers below are the forward passes and the
training step that the scripts time, with the same seeds and settings in every script.
"""

from __future__ import annotations

import gc
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from dgno import provenance
from dgno.analysis.timing import device_sync, wall_times
from dgno.io import write_json
from dgno.layers import scan_triton
from dgno.layers.mambair import set_scan_backend
from dgno.models.outputs import as_outputs
from dgno.models.registry import build_model
from dgno.train.losses import restoration_loss


class Run:
    """The result file (``benchmark`` label, provenance, settings, one list per section), rewritten after every record, and the time budget.

    ``sizes`` are the script's sizes and scale (paper, or toy sizes for a CPU check of the script).
    """

    def __init__(self, out: Path, budget_s: float, device: torch.device, commit: str | None, *, benchmark: str, sections: tuple[str, ...], sizes: dict[str, Any]) -> None:
        self.out, self.deadline, self.device, self.sizes = out, time.monotonic() + budget_s, device, sizes
        prov = provenance.collect(device)
        if commit:
            prov["git_commit"] = commit
        prov["versions"]["triton"] = getattr(scan_triton.triton, "__version__", None)
        self.blob: dict[str, Any] = {
            "benchmark": benchmark,
            "provenance": prov,
            "settings": {
                "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                "tf32_cudnn": torch.backends.cudnn.allow_tf32,
                "cudnn_benchmark": torch.backends.cudnn.benchmark,
                "budget_s": budget_s,
            },
            **{section: [] for section in (*sections, "skipped", "errors")},
        }
        if device.type == "cuda":
            free, total = torch.cuda.mem_get_info(device)
            self.blob["settings"]["device_memory_total_mb"] = total / 2**20
            self.blob["settings"]["device_memory_used_at_start_mb"] = (total - free) / 2**20

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def has_time(self, seconds: float, what: str, why: str = "time budget spent") -> bool:
        """Whether ``seconds`` (at paper scale; ``sizes["time_scale"]`` shrinks them for toy sizes) are left; if not, ``what`` is skipped."""
        if self.left() >= seconds * self.sizes.get("time_scale", 1.0):
            return True
        self.skip(what, why)
        return False

    def add(self, section: str, record: dict[str, Any]) -> None:
        self.blob[section].append(record)
        self.save()

    def skip(self, what: str, why: str) -> None:
        self.blob["skipped"].append({"what": what, "why": why})
        self.save()

    def out_of_memory(self, what: str, exc: BaseException) -> None:
        """A configuration that does not fit is a result (listed as skipped), not an error."""
        self.skip(what, f"out of memory: {str(exc).splitlines()[0][:200]}")

    def error(self, what: str, exc: BaseException) -> None:
        self.blob["errors"].append(
            {"what": what, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:400], "trace": traceback.format_exc()[-1500:]}
        )
        print(f"error in {what}: {exc}", file=sys.stderr, flush=True)
        self.save()

    def save(self) -> None:
        self.blob["provenance"]["time_utc_end"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_json(self.out, self.blob)

    def run_phases(self, phases: list[tuple[str, Any]], after=None) -> None:
        """Each (label, callable) in order, its seconds in ``phase_seconds``; an error is recorded and the next phase runs."""
        for label, phase in phases:
            t0 = time.monotonic()
            print(f"[{time.strftime('%H:%M:%S')}] {label} ({self.left():.0f} s left)", file=sys.stderr, flush=True)
            try:
                phase()
            except Exception as exc:  # noqa: BLE001  (one failing phase must not cost the others)
                self.error(label, exc)
            self.blob.setdefault("phase_seconds", {})[label] = time.monotonic() - t0
            if after is not None:
                after()
            self.save()


def timed(fn, device: torch.device, *, warmup: int = 2, min_repeats: int = 3, target_s: float = 0.6, max_repeats: int = 30) -> list[float]:
    """Synchronised wall times of ``fn()`` after ``warmup`` calls: at least ``min_repeats``, more up to about ``target_s`` in all.

    CUDA's peak-memory counters are reset after the warm-up, so ``memory`` afterwards describes the timed calls.
    """

    def reset_peak() -> None:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    timing = wall_times(fn, repeats=min_repeats, warmup=warmup, sync=device_sync(device), target_s=target_s, max_repeats=max_repeats, on_warm=reset_peak)
    return list(timing.times)


def memory(device: torch.device) -> dict[str, float | None]:
    """Peak allocated and reserved memory since the last reset, and the device memory in use (driver view), MB."""
    if device.type != "cuda":
        return {"peak_allocated_mb": None, "peak_reserved_mb": None, "device_used_mb": None}
    free, total = torch.cuda.mem_get_info(device)
    return {
        "peak_allocated_mb": torch.cuda.max_memory_allocated(device) / 2**20,
        "peak_reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20,
        "device_used_mb": (total - free) / 2**20,
    }


def release(device: torch.device) -> None:
    """Free what the last measurement held, so the next one starts from an empty device."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def build(name: str, device: torch.device, scan: str | None, *, scale: str) -> torch.nn.Module:
    """The registry model at ``scale``, seeded, on ``device``; its selective scans on ``scan`` when one is given."""
    torch.manual_seed(0)
    model = build_model(name, scale=scale).to(device)
    if scan is not None:
        set_scan_backend(model, scan)
    return model


def eager_forward(model, x: torch.Tensor, bf16: bool):
    """An inference pass: no autograd, bfloat16 autocast when ``bf16``."""
    with torch.no_grad(), torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        return model(x)


def autograd_forward(model, x: torch.Tensor) -> None:
    """model(x) with autograd recording (no ``torch.no_grad``): the protocol that reproduces the paper's memory."""
    outs = as_outputs(model(x))
    del outs


def train_step(model, opt, x: torch.Tensor, y: torch.Tensor, bf16: bool) -> None:
    """Forward, multi-scale L1 + FFT loss, backward, AdamW: one training iteration."""
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        loss = restoration_loss(as_outputs(model(x)), y, fft_weight=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
