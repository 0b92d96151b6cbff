"""Training and memory phases of ``benchmarks.gpu.speed``: training steps, memory protocols, a kernel profile, bf16 PSNR."""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpu.session import Run, build, eager_forward, memory, release, timed, train_step
from dgno.analysis.timing import device_sync
from dgno.checkpoint import load_trained
from dgno.inference.evaluate import model_restorer, score_dataset
from dgno.models.outputs import as_outputs

MODELS = ("dgno-face", "dgno-cell", "restormer", "nafnet", "swinir", "mpt")
TRAIN_PLAN = [("dgno-cell", "triton"), ("dgno-face", "triton"), ("restormer", None), ("nafnet", None), ("dgno-cell", "torch")]


def _scan(name: str) -> str | None:
    return "triton" if name.startswith("dgno") else None


def _top_kernels(prof) -> dict[str, Any]:
    """The 25 CUDA kernels with the most device time in a profile of two steps: per-step ms and share."""
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0) > 0]
    events.sort(key=lambda e: getattr(e, "self_device_time_total", 0), reverse=True)
    total = sum(getattr(e, "self_device_time_total", 0) for e in events)
    rows = [
        {"name": e.key[:120], "calls": e.count, "self_device_ms": getattr(e, "self_device_time_total", 0) / 1e3 / 2,
         "share": getattr(e, "self_device_time_total", 0) / total}
        for e in events[:25]
    ]  # fmt: skip
    return {"device_ms_per_step": total / 1e3 / 2, "kernels": len(events), "top": rows}


def profile(run: Run) -> None:
    """Where the time goes: the 25 most expensive CUDA kernels of a DGNO-Cell training step and of a forward pass."""
    from torch.profiler import ProfilerActivity  # the profiler only on a GPU run (the phase is CUDA only)
    from torch.profiler import profile as torch_profile

    dev, sync = run.device, device_sync(run.device)
    cases = [("train_step b8 256 fp32", run.sizes["train"], run.sizes["batch"], True), ("forward b1 512 fp32 eager", run.sizes["core"][-1], 1, False)]
    for label, size, batch, train in cases:
        if run.left() < 20:
            run.skip(f"profile {label}", "time budget spent")
            continue
        try:
            model = build("dgno-cell", dev, "triton", scale=run.sizes["scale"]).train(train)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            x = torch.rand(batch, 1, size, size, device=dev)
            step = functools.partial(train_step, model, opt, x, x, False) if train else functools.partial(eager_forward, model, x, False)
            for _ in range(2):
                step()
            sync()
            with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(2):
                    step()
                sync()
            run.add("profile", {"case": label, "model": "dgno-cell", "scan_backend": "triton", **_top_kernels(prof)})
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


def _memory_of(model, x: torch.Tensor, protocol: str) -> None:
    """One pass under ``protocol``: an inference pass, a forward pass with autograd (train mode), or a training step."""
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


def memory_protocols(run: Run) -> None:
    """The candidate protocols for the paper's memory column: peak memory of each, batch 1, per model and size."""
    dev = run.device
    for name in MODELS:
        scan = _scan(name)
        for size in run.sizes["memory"]:
            if run.left() < 15:
                run.skip(f"memory {name} {size}", "time budget spent")
                continue
            rec: dict[str, Any] = {"model": name, "scan_backend": scan, "size": size, "batch": 1}
            try:
                model = build(name, dev, scan, scale=run.sizes["scale"])
                x = torch.rand(1, 1, size, size, device=dev)
                release(dev)
                for protocol in ("inference", "forward_autograd", "train_step"):
                    if dev.type == "cuda":
                        torch.cuda.reset_peak_memory_stats(dev)
                    _memory_of(model, x, protocol)
                    device_sync(dev)()
                    rec.update({f"{protocol}_{k}": v for k, v in memory(dev).items()})
                    model.zero_grad(set_to_none=True)
                    release(dev)
                run.add("memory", rec)
            except torch.cuda.OutOfMemoryError as exc:
                run.out_of_memory(f"memory {name} {size}", exc)
            except Exception as exc:  # noqa: BLE001
                run.error(f"memory {name} {size}", exc)
            finally:
                model = None
                release(dev)


def train_steps(run: Run, plan=None, precisions=(False, True), tag: str | None = None) -> None:
    """Training steps (batch 8 at 256² at paper scale) of each (model, scan) in ``plan``, in each precision."""
    dev, size, batch = run.device, run.sizes["train"], run.sizes["batch"]
    for bf16 in precisions:
        for name, scan in plan or TRAIN_PLAN:
            what = f"train {name} scan={scan} {'bf16' if bf16 else 'fp32'} b{batch} {size}"
            if run.left() < 25:
                run.skip(what, "time budget spent")
                continue
            try:
                model = build(name, dev, scan, scale=run.sizes["scale"]).train()
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
                g = torch.Generator().manual_seed(0)
                x = torch.rand(batch, 1, size, size, generator=g).to(dev)
                y = torch.rand(batch, 1, size, size, generator=g).to(dev)
                step = functools.partial(train_step, model, opt, x, y, bf16)
                times = timed(step, dev, warmup=3, min_repeats=5, target_s=2.0, max_repeats=15)
                sec = statistics.median(times)
                run.add("train", {
                    "model": name, "scan_backend": scan, "size": size, "batch": batch, "dtype": "bf16" if bf16 else "fp32",
                    "seconds_per_iteration": sec, "iterations_per_second": 1 / sec, "projected_hours_60k": 60000 * sec / 3600, "tag": tag,
                    **memory(dev), "times": times,
                })  # fmt: skip
            except torch.cuda.OutOfMemoryError as exc:
                run.out_of_memory(what, exc)
            except Exception as exc:  # noqa: BLE001
                run.error(what, exc)
            finally:
                model = opt = None
                release(dev)


def bf16_psnr(run: Run, demo: Path) -> None:
    """PSNR of each demo model on its test set (level z02), float32 and under bfloat16 autocast."""
    dev, data = run.device, demo / "data"
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
