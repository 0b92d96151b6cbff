"""Every GPU speed and memory measurement of issue #21 in one run; writes OUT_JSON after each record.

    python benchmarks/bench_gpu_speed.py OUT_JSON [--budget-s 420] [--commit SHA] [--demo DIR]

GPU time is scarce, so one script measures everything, most important first, and stops starting
new work when ``--budget-s`` is spent (what it skipped is listed in the file, never silently
dropped).  Every method is measured in the same process on the same device:

1. ``scan``: the Triton selective scan against the token-loop reference on the GPU (max error,
   forward and gradients), then a sweep of its tile sizes and a timing against the chunked
   PyTorch scan at the paper model's largest scan (96 channels × 65 536 tokens, batch 1 and 8);
   the fastest tile configuration is used for everything after it.
2. ``inference``: forward passes of the paper-scale models (DGNO-Face, DGNO-Cell, Restormer,
   NAFNet, SwinIR, MPT), batch 1 and 8, float32 and bfloat16 autocast, 128² to 1024², eager and
   replayed from CUDA graphs (``dgno.inference.cuda_graphs``); DGNO with the Triton scan, and eager with the
   chunked PyTorch scan as the before-state.  A configuration predicted to take over
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
import contextlib
import functools
import gc
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from dgno import provenance
from dgno.inference.cuda_graphs import GraphedForward
from dgno.io import write_json
from dgno.layers import scan_triton
from dgno.layers.mambair import set_scan_backend
from dgno.layers.selective_scan import selective_scan
from dgno.models.outputs import as_outputs
from dgno.models.registry import build_model
from dgno.train.losses import restoration_loss

MODELS = ("dgno-face", "dgno-cell", "restormer", "nafnet", "swinir", "mpt")
DGNO = ("dgno-face", "dgno-cell")
# ``--dry-run`` (CPU, Triton interpreter) shrinks these to check the script end to end in seconds
SCALE = "paper"
SIZES = {
    "core": (256, 512),
    "sizes": (128, 1024),
    "all": (128, 256, 512, 1024),
    "memory": (256, 512),
    "train": 256,
    "paper": (128, 256, 384, 512),
}
BATCH = 8
SCAN_SHAPE = (96, 65536)  # channels × tokens of the paper DGNO's full-resolution ASSM at 256²


class Run:
    """The result file, rewritten after every record, and the time budget."""

    def __init__(self, out: Path, budget_s: float, device: torch.device, commit: str | None) -> None:
        self.out, self.deadline, self.device = out, time.monotonic() + budget_s, device
        prov = provenance.collect(device)
        if commit:
            prov["git_commit"] = commit
        prov["versions"]["triton"] = getattr(scan_triton.triton, "__version__", None)
        self.blob: dict[str, Any] = {
            "benchmark": "GPU speed and memory (issue #21)",
            "provenance": prov,
            "settings": {
                "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                "tf32_cudnn": torch.backends.cudnn.allow_tf32,
                "cudnn_benchmark": torch.backends.cudnn.benchmark,
                "budget_s": budget_s,
            },
            "scan": [],
            "scan_configs": [],
            "inference": [],
            "memory": [],
            "train": [],
            "bf16_psnr": [],
            "profile": [],
            "skipped": [],
            "errors": [],
        }
        if device.type == "cuda":
            free, total = torch.cuda.mem_get_info(device)
            self.blob["settings"]["device_memory_total_mb"] = total / 2**20
            self.blob["settings"]["device_memory_used_at_start_mb"] = (total - free) / 2**20

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def add(self, section: str, record: dict[str, Any]) -> None:
        self.blob[section].append(record)
        self.save()

    def skip(self, what: str, why: str) -> None:
        self.blob["skipped"].append({"what": what, "why": why})
        self.save()

    def error(self, what: str, exc: BaseException) -> None:
        self.blob["errors"].append(
            {"what": what, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:400], "trace": traceback.format_exc()[-1500:]}
        )
        print(f"error in {what}: {exc}", file=sys.stderr, flush=True)
        self.save()

    def save(self) -> None:
        self.blob["provenance"]["time_utc_end"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_json(self.out, self.blob)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, *, warmup: int = 2, min_repeats: int = 3, target_s: float = 0.6, max_repeats: int = 30) -> list[float]:
    """Synchronised wall times of ``fn()`` after ``warmup`` calls: at least ``min_repeats``, up to ~``target_s`` in all."""
    for _ in range(warmup):
        fn()
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times: list[float] = []
    while len(times) < min_repeats or (sum(times) < target_s and len(times) < max_repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return times


def memory(device: torch.device) -> dict[str, float | None]:
    if device.type != "cuda":
        return {"peak_allocated_mb": None, "peak_reserved_mb": None, "device_used_mb": None}
    free, total = torch.cuda.mem_get_info(device)
    return {
        "peak_allocated_mb": torch.cuda.max_memory_allocated(device) / 2**20,
        "peak_reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20,
        "device_used_mb": (total - free) / 2**20,
    }


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def build(name: str, device: torch.device, scan: str | None) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(name, scale=SCALE).to(device)
    if scan is not None:
        set_scan_backend(model, scan)
    return model


# 1. the scan -----------------------------------------------------------------------------------


def scan_inputs(b: int, d: int, n: int, L: int, device: torch.device, dtype=torch.float32, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator(device="cpu").manual_seed(seed)

    def rnd(*s):
        return torch.randn(*s, generator=g).to(device, dtype)

    return {
        "u": rnd(b, d, L), "delta": rnd(b, d, L) * 0.5 - 2.0, "A": -(torch.rand(d, n, generator=g) * 3 + 0.1).to(device, dtype),
        "B": rnd(b, 1, n, L), "C": rnd(b, 1, n, L), "D": rnd(d), "delta_bias": rnd(d) * 0.3,
    }  # fmt: skip


def scan_call(inp: dict[str, torch.Tensor], backend: str, grad: bool):
    leaves = {k: v.clone().requires_grad_(grad) for k, v in inp.items()}
    y = selective_scan(
        leaves["u"], leaves["delta"], leaves["A"], leaves["B"], leaves["C"], leaves["D"], None, leaves["delta_bias"], True, backend=backend
    )
    if not grad:
        return y.detach(), {}
    w = torch.cos(torch.arange(y.shape[-1], device=y.device, dtype=y.dtype))
    grads = torch.autograd.grad((y * w).sum(), list(leaves.values()))
    return y.detach(), dict(zip(leaves, grads))


def check_scan(run: Run) -> None:
    """Triton vs the token-loop reference (float64 on the GPU) and vs the chunked PyTorch scan."""
    dev = run.device
    inp = scan_inputs(2, 8, 8, 700, dev, torch.float64)
    ref_y, ref_g = scan_call(inp, "reference", True)
    tri_y, tri_g = scan_call({k: v.float() for k, v in inp.items()}, "triton", True)
    rec = {
        "what": "triton float32 vs reference float64 (b=2, d=8, N=8, L=700)",
        "y_max_abs_err": float((tri_y.double() - ref_y).abs().max()),
    }
    rec.update({f"grad_{k}_max_rel_err": float((tri_g[k].double() - g).abs().max() / g.abs().max()) for k, g in ref_g.items()})
    run.add("scan", rec)
    big = scan_inputs(1, *SCAN_SHAPE[:1], 8, SCAN_SHAPE[1], dev)
    ty, tg = scan_call(big, "triton", True)
    cy, cg = scan_call(big, "torch", True)
    rec = {
        "what": f"triton vs chunked torch scan, float32 (b=1, d={SCAN_SHAPE[0]}, N=8, L={SCAN_SHAPE[1]})",
        "y_max_abs_diff": float((ty - cy).abs().max()),
        "y_max_abs": float(cy.abs().max()),
    }
    rec.update({f"grad_{k}_max_rel_diff": float((tg[k] - g).abs().max() / g.abs().max()) for k, g in cg.items()})
    run.add("scan", rec)


def sweep_scan(run: Run) -> None:
    """Tile configurations of the Triton scan, forward and forward + backward, at the model's largest scan."""
    dev = run.device
    candidates = [
        scan_triton.ScanConfig(bl, cb, nw)
        for bl, cb, nw in [(64, 1, 4), (128, 1, 4), (128, 2, 4), (256, 1, 4), (256, 2, 8), (128, 4, 8), (512, 1, 8)]
    ]
    defaults = (scan_triton.CONFIG, scan_triton.FEW_ROWS_CONFIG)
    if SCALE != "paper":  # dry run: the interpreter is slow
        candidates = candidates[:1]
    best: tuple[float, scan_triton.ScanConfig] | None = None
    for batch in (1, BATCH):
        inp = scan_inputs(batch, SCAN_SHAPE[0], 8, SCAN_SHAPE[1], dev)
        for backend, configs in (("torch", [None]), ("triton", candidates)):
            for cfg in configs:
                if cfg is not None:
                    scan_triton.CONFIG = scan_triton.FEW_ROWS_CONFIG = cfg
                try:
                    fwd = statistics.median(timed(functools.partial(scan_call, inp, backend, False), dev, target_s=0.5))
                    both = statistics.median(timed(functools.partial(scan_call, inp, backend, True), dev, target_s=0.5))
                except Exception as exc:  # noqa: BLE001
                    run.error(f"scan sweep {backend} {cfg}", exc)
                    continue
                run.add(
                    "scan_configs",
                    {
                        "backend": backend,
                        "batch": batch,
                        "d": SCAN_SHAPE[0],
                        "L": SCAN_SHAPE[1],
                        "config": None if cfg is None else cfg.__dict__,
                        "forward_ms": 1e3 * fwd,
                        "forward_backward_ms": 1e3 * both,
                    },
                )
                if cfg is not None and batch == BATCH and (best is None or both < best[0]):
                    best = (both, cfg)
    # the model runs use the package's row-count rule (``scan_triton.config_for``), recorded here
    scan_triton.CONFIG, scan_triton.FEW_ROWS_CONFIG = defaults
    run.blob["settings"]["triton_scan_config"] = {"many_rows": scan_triton.CONFIG.__dict__, "few_rows": scan_triton.FEW_ROWS_CONFIG.__dict__, "few_rows_max": scan_triton.FEW_ROWS}
    run.blob["settings"]["triton_scan_sweep_best_batch8"] = best[1].__dict__ if best else None
    run.save()


# 2. inference ----------------------------------------------------------------------------------


def eager_forward(model, x: torch.Tensor, bf16: bool):
    with torch.no_grad(), torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        return model(x)


def train_step(model, opt, x: torch.Tensor, y: torch.Tensor, bf16: bool) -> None:
    """Forward, multi-scale L1 + FFT loss, backward, AdamW: one training iteration."""
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        loss = restoration_loss(as_outputs(model(x)), y, fft_weight=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def forward_record(run: Run, model, name: str, scan: str | None, size: int, batch: int, bf16: bool, mode: str) -> dict[str, Any] | None:
    dev = run.device
    x = torch.rand(batch, 1, size, size, device=dev)
    if mode == "graphs":
        step = functools.partial(GraphedForward(model, bf16=bf16, max_graphs=1), x)
    else:
        step = functools.partial(eager_forward, model, x, bf16)
    times = timed(step, dev)
    sec = statistics.median(times)
    rec = {
        "model": name, "scan_backend": scan, "size": size, "batch": batch, "dtype": "bf16" if bf16 else "fp32", "mode": mode,
        "seconds": sec, "images_per_second": batch / sec, **memory(dev), "times": times,
    }  # fmt: skip
    return rec


def predicted_seconds(run: Run, name: str, scan: str | None, mode: str, batch: int, bf16: bool, size: int) -> float:
    """Seconds per pass extrapolated (∝ pixels × batch) from this model's largest measured smaller pass; 0 if none."""
    dtype = "bf16" if bf16 else "fp32"
    done = [
        r
        for r in run.blob["inference"]
        if r["model"] == name and r["scan_backend"] == scan and r["mode"] == mode and r["dtype"] == dtype and r["size"] <= size
    ]
    if not done:
        return 0.0
    ref = max(done, key=lambda r: (r["size"] ** 2 * r["batch"], r["batch"] == batch))
    return ref["seconds"] * (size**2 * batch) / (ref["size"] ** 2 * ref["batch"])


def inference(run: Run, sizes, batches, dtypes, max_forward_s: float, phase: str, models=MODELS) -> None:
    dev = run.device
    for name in models:
        variants = [("triton", "eager"), ("triton", "graphs"), ("torch", "eager")] if name in DGNO else [(None, "eager"), (None, "graphs")]
        for scan, mode in variants:
            if run.left() < 20:
                run.skip(f"inference {phase} {name} {scan} {mode}", "time budget spent")
                continue
            try:
                model = build(name, dev, scan).eval()
            except Exception as exc:  # noqa: BLE001
                run.error(f"build {name}", exc)
                continue
            for bf16 in dtypes:
                for batch in batches:
                    for size in sizes:
                        what = f"inference {name} scan={scan} {mode} {'bf16' if bf16 else 'fp32'} b{batch} {size}"
                        if scan == "torch" and (bf16 or batch != 1 or size not in SIZES["core"]):
                            continue  # the before-state: batch 1, float32, 256² and 512² suffice
                        if any(
                            r["model"] == name
                            and r["scan_backend"] == scan
                            and r["mode"] == mode
                            and r["batch"] == batch
                            and r["size"] == size
                            and r["dtype"] == ("bf16" if bf16 else "fp32")
                            for r in run.blob["inference"]
                        ):
                            continue  # measured in an earlier phase
                        guess = predicted_seconds(run, name, scan, mode, batch, bf16, size)
                        if guess > max_forward_s:
                            run.skip(what, f"predicted {guess:.1f} s per pass > {max_forward_s} s")
                            continue
                        if run.left() < 15:
                            run.skip(what, "time budget spent")
                            continue
                        try:
                            rec = forward_record(run, model, name, scan, size, batch, bf16, mode)
                            rec["phase"] = phase
                            run.add("inference", rec)
                        except torch.cuda.OutOfMemoryError as exc:
                            run.skip(what, f"out of memory: {str(exc).splitlines()[0][:200]}")
                        except Exception as exc:  # noqa: BLE001
                            run.error(what, exc)
                            if mode == "graphs":
                                break
                        finally:
                            release(dev)
            del model
            release(dev)


def compiled(run: Run, size: int = 256) -> None:
    """torch.compile(mode="reduce-overhead"): Inductor's fusions plus CUDA graphs, DGNO-Cell vs Restormer, batch 1."""
    dev = run.device
    for name in ("dgno-cell", "restormer"):
        what = f"compile {name} {size}"
        if run.left() < 150:
            run.skip(what, "time budget spent (compiling takes minutes)")
            continue
        try:
            model = build(name, dev, "triton" if name in DGNO else None).eval()
            fast = torch.compile(model, mode="reduce-overhead")
            x = torch.rand(1, 1, size, size, device=dev)
            t0 = time.perf_counter()
            eager_forward(fast, x, False)
            sync(dev)
            compile_s = time.perf_counter() - t0
            times = timed(functools.partial(eager_forward, fast, x, False), dev, warmup=3)
            sec = statistics.median(times)
            run.add("inference", {
                "model": name, "scan_backend": "triton" if name in DGNO else None, "size": size, "batch": 1, "dtype": "fp32",
                "mode": "compile", "phase": "compile", "compile_seconds": compile_s, "seconds": sec, "images_per_second": 1 / sec,
                **memory(dev), "times": times,
            })  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            run.error(what, exc)
        finally:
            model = fast = None
            torch._dynamo.reset()
            release(dev)


def autograd_forward(model, x: torch.Tensor) -> None:
    """model(x) with autograd recording (no ``torch.no_grad``): the protocol that reproduces the paper's memory."""
    outs = as_outputs(model(x))
    del outs


def paper_protocol(run: Run) -> None:
    """Throughput and peak memory of forward passes with autograd on, batch 1, the paper's sizes 128²–512²."""
    dev = run.device
    for name in MODELS:
        scan = "triton" if name in DGNO else None
        model = None
        try:
            model = build(name, dev, scan).eval()
            for size in SIZES["paper"]:
                what = f"paper protocol {name} {size}"
                if run.left() < 10:
                    run.skip(what, "time budget spent")
                    continue
                try:
                    x = torch.rand(1, 1, size, size, device=dev)
                    times = timed(functools.partial(autograd_forward, model, x), dev)
                    sec = statistics.median(times)
                    run.add("inference", {
                        "model": name, "scan_backend": scan, "size": size, "batch": 1, "dtype": "fp32", "mode": "autograd",
                        "phase": "paper_protocol", "seconds": sec, "images_per_second": 1 / sec, **memory(dev), "times": times,
                    })  # fmt: skip
                except torch.cuda.OutOfMemoryError as exc:
                    run.skip(what, f"out of memory: {str(exc).splitlines()[0][:200]}")
                    break
                finally:
                    release(dev)
        except Exception as exc:  # noqa: BLE001
            run.error(f"paper protocol {name}", exc)
        finally:
            model = None
            release(dev)


def profile(run: Run) -> None:
    """Where the time goes: the 25 most expensive CUDA kernels of a DGNO-Cell training step and of a forward pass."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    dev = run.device
    cases = [("train_step b8 256 fp32", SIZES["train"], BATCH, True), ("forward b1 512 fp32 eager", SIZES["core"][-1], 1, False)]
    for label, size, batch, train in cases:
        if run.left() < 20:
            run.skip(f"profile {label}", "time budget spent")
            continue
        try:
            model = build("dgno-cell", dev, "triton").train(train)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            x = torch.rand(batch, 1, size, size, device=dev)
            step = functools.partial(train_step, model, opt, x, x, False) if train else functools.partial(eager_forward, model, x, False)
            for _ in range(2):
                step()
            sync(dev)
            with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(2):
                    step()
                sync(dev)
            events = [e for e in prof.key_averages() if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0) > 0]
            events.sort(key=lambda e: getattr(e, "self_device_time_total", 0), reverse=True)
            total = sum(getattr(e, "self_device_time_total", 0) for e in events)
            rows = [
                {
                    "name": e.key[:120],
                    "calls": e.count,
                    "self_device_ms": getattr(e, "self_device_time_total", 0) / 1e3 / 2,
                    "share": getattr(e, "self_device_time_total", 0) / total,
                }
                for e in events[:25]
            ]
            run.add(
                "profile",
                {
                    "case": label,
                    "model": "dgno-cell",
                    "scan_backend": "triton",
                    "device_ms_per_step": total / 1e3 / 2,
                    "kernels": len(events),
                    "top": rows,
                },
            )
        except Exception as exc:  # noqa: BLE001
            run.error(f"profile {label}", exc)
        finally:
            model = opt = None
            release(dev)


def train_tf32(run: Run) -> None:
    """Training steps in float32 with TF32 matrix multiplies allowed (cuDNN convolutions use TF32 already)."""
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        train_steps(run, plan=[("dgno-cell", "triton"), ("dgno-face", "triton"), ("nafnet", None)], precisions=(False,), tag="tf32_matmul")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


# 3. memory protocols ---------------------------------------------------------------------------


def memory_protocols(run: Run) -> None:
    dev = run.device
    sizes = SIZES["memory"]
    for name in MODELS:
        scan = "triton" if name in DGNO else None
        for size in sizes:
            if run.left() < 15:
                run.skip(f"memory {name} {size}", "time budget spent")
                continue
            rec: dict[str, Any] = {"model": name, "scan_backend": scan, "size": size, "batch": 1}
            try:
                model = build(name, dev, scan)
                x = torch.rand(1, 1, size, size, device=dev)
                release(dev)
                for protocol in ("inference", "forward_autograd", "train_step"):
                    if dev.type == "cuda":
                        torch.cuda.reset_peak_memory_stats(dev)
                    if protocol == "inference":
                        model.eval()
                        with torch.no_grad():
                            model(x)
                    elif protocol == "forward_autograd":
                        model.train()
                        outs = as_outputs(model(x))
                        del outs
                    else:
                        model.train()
                        train_step(model, torch.optim.AdamW(model.parameters(), lr=1e-4), x, x, False)
                    sync(dev)
                    mem = memory(dev)
                    rec.update({f"{protocol}_{k}": v for k, v in mem.items()})
                    model.zero_grad(set_to_none=True)
                    release(dev)
                run.add("memory", rec)
            except torch.cuda.OutOfMemoryError as exc:
                run.skip(f"memory {name} {size}", f"out of memory: {str(exc).splitlines()[0][:200]}")
            except Exception as exc:  # noqa: BLE001
                run.error(f"memory {name} {size}", exc)
            finally:
                model = None
                release(dev)


# 4. training steps -----------------------------------------------------------------------------


def train_steps(run: Run, plan=None, precisions=(False, True), tag: str | None = None) -> None:
    dev, size, batch = run.device, SIZES["train"], BATCH
    plan = plan or [("dgno-cell", "triton"), ("dgno-face", "triton"), ("restormer", None), ("nafnet", None), ("dgno-cell", "torch")]
    for bf16 in precisions:
        for name, scan in plan:
            what = f"train {name} scan={scan} {'bf16' if bf16 else 'fp32'} b{batch} {size}"
            if run.left() < 25:
                run.skip(what, "time budget spent")
                continue
            try:
                model = build(name, dev, scan).train()
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
                g = torch.Generator().manual_seed(0)
                x = torch.rand(batch, 1, size, size, generator=g).to(dev)
                y = torch.rand(batch, 1, size, size, generator=g).to(dev)

                times = timed(
                    functools.partial(train_step, model, opt, x, y, bf16), dev, warmup=3, min_repeats=5, target_s=2.0, max_repeats=15
                )
                sec = statistics.median(times)
                run.add("train", {
                    "model": name, "scan_backend": scan, "size": size, "batch": batch, "dtype": "bf16" if bf16 else "fp32",
                    "seconds_per_iteration": sec, "iterations_per_second": 1 / sec, "projected_hours_60k": 60000 * sec / 3600, "tag": tag,
                    **memory(dev), "times": times,
                })  # fmt: skip
            except torch.cuda.OutOfMemoryError as exc:
                run.skip(what, f"out of memory: {str(exc).splitlines()[0][:200]}")
            except Exception as exc:  # noqa: BLE001
                run.error(what, exc)
            finally:
                model = opt = None
                release(dev)


# 5. bf16 PSNR on the demo test set -------------------------------------------------------------


def bf16_psnr(run: Run, demo: Path) -> None:
    from dgno.checkpoint import load_trained
    from dgno.inference.evaluate import model_restorer, score_dataset

    dev = run.device
    data = demo / "data"
    for ckpt in sorted(demo.glob("*/model.pt")):
        if run.left() < 10:
            run.skip(f"bf16_psnr {ckpt.parent.name}", "time budget spent")
            continue
        try:
            model, _ = load_trained(ckpt, dev)
            rec: dict[str, Any] = {"method": ckpt.parent.name, "dataset": data.name}
            for bf16 in (False, True):
                restore = model_restorer(model, dev, tile=None, overlap=32, bf16=bf16)
                with contextlib.redirect_stdout(sys.stderr):
                    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"bf16_{ckpt.parent.name}_{bf16}"
                    summary = score_dataset(
                        restore, data, "z02", out, method=ckpt.parent.name, with_lpips=False, save_restored=False, progress=False
                    )
                rec["psnr_bf16" if bf16 else "psnr_fp32"] = summary["psnr"]
            rec["delta_db"] = rec["psnr_bf16"] - rec["psnr_fp32"]
            run.add("bf16_psnr", rec)
        except Exception as exc:  # noqa: BLE001
            run.error(f"bf16_psnr {ckpt}", exc)
        finally:
            release(dev)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--commit", help="git commit of the code (the GPU machine gets a copy of the tree without .git)")
    ap.add_argument("--demo", type=Path, help="folder with <method>/model.pt demo models and data/ (the demo test set)")
    ap.add_argument("--max-forward-s", type=float, default=2.0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--phases", nargs="+", help="run only these phases (default: all but the follow-up ones)")
    ap.add_argument("--dry-run", action="store_true", help="tiny models and sizes (CPU check of the script; set TRITON_INTERPRET=1)")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    if args.dry_run:
        global SCALE, SIZES, BATCH, SCAN_SHAPE
        SCALE, BATCH, SCAN_SHAPE = "smoke", 2, (4, 256)
        SIZES = {"core": (32,), "sizes": (16, 48), "all": (16, 32), "memory": (32,), "train": 32, "paper": (16, 32)}
    run = Run(args.out, args.budget_s, dev, args.commit)
    steps = [
        ("scan check", lambda: check_scan(run)),
        ("scan sweep", lambda: sweep_scan(run)),
        ("inference core", lambda: inference(run, SIZES["core"], (1,), (False,), args.max_forward_s, "core")),
        ("bf16 psnr", lambda: bf16_psnr(run, args.demo) if args.demo else run.skip("bf16_psnr", "no --demo folder")),
        ("memory", lambda: memory_protocols(run)),
        ("train", lambda: train_steps(run)),
        ("inference bf16 core", lambda: inference(run, SIZES["core"], (1,), (True,), args.max_forward_s, "bf16")),
        ("inference batch 8 core", lambda: inference(run, SIZES["core"], (BATCH,), (False,), args.max_forward_s, "batch8")),
        ("compile", lambda: compiled(run) if dev.type == "cuda" else run.skip("compile", "CUDA only")),
        ("inference sizes", lambda: inference(run, SIZES["sizes"], (1,), (False, True), args.max_forward_s, "sizes")),
        ("inference batch 8 rest", lambda: inference(run, SIZES["all"], (BATCH,), (False, True), args.max_forward_s, "batch8")),
    ]
    steps += [
        ("paper protocol", lambda: paper_protocol(run)),
        ("profile", lambda: profile(run) if dev.type == "cuda" else run.skip("profile", "CUDA only")),
        ("train tf32", lambda: train_tf32(run)),
        (
            "inference bf16 dgno",
            lambda: inference(run, SIZES["core"], (1,), (True,), args.max_forward_s, "bf16_fp32_operator", models=DGNO),
        ),
    ]
    if args.phases:
        unknown = set(args.phases) - {label for label, _ in steps}
        if unknown:
            ap.error(f"unknown phase(s) {sorted(unknown)}; allowed: {[label for label, _ in steps]}")
        steps = [(label, step) for label, step in steps if label in args.phases]
    for label, step in steps:
        t0 = time.monotonic()
        print(f"[{time.strftime('%H:%M:%S')}] {label} ({run.left():.0f} s left)", file=sys.stderr, flush=True)
        try:
            step()
        except Exception as exc:  # noqa: BLE001
            run.error(label, exc)
        run.blob.setdefault("phase_seconds", {})[label] = time.monotonic() - t0
        run.save()
    print(json.dumps({k: len(v) for k, v in run.blob.items() if isinstance(v, list)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
