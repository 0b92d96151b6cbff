"""Forward-pass phases of ``benchmarks.gpu.speed``: inference in every mode, torch.compile, and the paper's protocol."""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import torch

from benchmarks.gpu.session import Run, autograd_forward, build, eager_forward, memory, release, timed
from dgno.analysis.timing import device_sync
from dgno.inference.cuda_graphs import GraphedForward

MODELS = ("dgno-face", "dgno-cell", "restormer", "nafnet", "swinir", "mpt")
DGNO = ("dgno-face", "dgno-cell")


def _dtype(bf16: bool) -> str:
    return "bf16" if bf16 else "fp32"


def forward_record(run: Run, model, name: str, scan: str | None, size: int, batch: int, bf16: bool, mode: str) -> dict[str, Any]:
    """Images/s and memory of one forward pass, eager or replayed from a CUDA graph."""
    dev = run.device
    x = torch.rand(batch, 1, size, size, device=dev)
    if mode == "graphs":
        step = functools.partial(GraphedForward(model, bf16=bf16, max_graphs=1), x)
    else:
        step = functools.partial(eager_forward, model, x, bf16)
    times = timed(step, dev)
    sec = statistics.median(times)
    return {
        "model": name, "scan_backend": scan, "size": size, "batch": batch, "dtype": _dtype(bf16), "mode": mode,
        "seconds": sec, "images_per_second": batch / sec, **memory(dev), "times": times,
    }  # fmt: skip


def predicted_seconds(run: Run, name: str, scan: str | None, mode: str, batch: int, bf16: bool, size: int) -> float:
    """Seconds per pass extrapolated (∝ pixels × batch) from this model's largest measured smaller pass; 0 if none."""
    done = [
        r
        for r in run.blob["inference"]
        if r["model"] == name and r["scan_backend"] == scan and r["mode"] == mode and r["dtype"] == _dtype(bf16) and r["size"] <= size
    ]
    if not done:
        return 0.0
    ref = max(done, key=lambda r: (r["size"] ** 2 * r["batch"], r["batch"] == batch))
    return ref["seconds"] * (size**2 * batch) / (ref["size"] ** 2 * ref["batch"])


def _measured(run: Run, name: str, scan: str | None, mode: str, batch: int, bf16: bool, size: int) -> bool:
    """Whether an earlier phase already measured this configuration."""
    key = (name, scan, mode, batch, size, _dtype(bf16))
    return any((r["model"], r["scan_backend"], r["mode"], r["batch"], r["size"], r["dtype"]) == key for r in run.blob["inference"])


def _one_pass(run: Run, model, config: tuple, max_forward_s: float, phase: str) -> bool:
    """Measure one (name, scan, mode, bf16, batch, size) unless measured, predicted too slow or out of time; False to stop this mode."""
    name, scan, mode, bf16, batch, size = config
    what = f"inference {name} scan={scan} {mode} {_dtype(bf16)} b{batch} {size}"
    if scan == "torch" and (bf16 or batch != 1 or size not in run.sizes["core"]):
        return True  # the PyTorch scan is the reference without Triton kernels: batch 1, float32, the core sizes suffice
    if _measured(run, name, scan, mode, batch, bf16, size):
        return True
    guess = predicted_seconds(run, name, scan, mode, batch, bf16, size)
    if guess > max_forward_s:
        run.skip(what, f"predicted {guess:.1f} s per pass > {max_forward_s} s")
        return True
    if run.left() < 15:
        run.skip(what, "time budget spent")
        return True
    try:
        rec = forward_record(run, model, name, scan, size, batch, bf16, mode)
        rec["phase"] = phase
        run.add("inference", rec)
    except torch.cuda.OutOfMemoryError as exc:
        run.out_of_memory(what, exc)
    except Exception as exc:  # noqa: BLE001  (recorded; a graph that fails to capture stops its mode)
        run.error(what, exc)
        return mode != "graphs"
    finally:
        release(run.device)
    return True


def inference(run: Run, sizes, batches, dtypes, max_forward_s: float, phase: str, models=MODELS) -> None:
    """Forward passes of ``models`` at every size, batch and precision asked for: eager and CUDA graphs, DGNO on both scans."""
    dev = run.device
    for name in models:
        variants = [("triton", "eager"), ("triton", "graphs"), ("torch", "eager")] if name in DGNO else [(None, "eager"), (None, "graphs")]
        for scan, mode in variants:
            if run.left() < 20:
                run.skip(f"inference {phase} {name} {scan} {mode}", "time budget spent")
                continue
            try:
                model = build(name, dev, scan, scale=run.sizes["scale"]).eval()
            except Exception as exc:  # noqa: BLE001
                run.error(f"build {name}", exc)
                continue
            for bf16 in dtypes:
                for batch in batches:
                    for size in sizes:
                        if not _one_pass(run, model, (name, scan, mode, bf16, batch, size), max_forward_s, phase):
                            break
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
            model = build(name, dev, "triton" if name in DGNO else None, scale=run.sizes["scale"]).eval()
            fast = torch.compile(model, mode="reduce-overhead")
            x = torch.rand(1, 1, size, size, device=dev)
            t0 = time.perf_counter()
            eager_forward(fast, x, False)
            device_sync(dev)()
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


def paper_protocol(run: Run) -> None:
    """Throughput and peak memory of forward passes with autograd on, batch 1, the paper's sizes 128²–512²."""
    dev = run.device
    for name in MODELS:
        scan = "triton" if name in DGNO else None
        model = None
        try:
            model = build(name, dev, scan, scale=run.sizes["scale"]).eval()
            for size in run.sizes["paper"]:
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
                    run.out_of_memory(what, exc)
                    break
                finally:
                    release(dev)
        except Exception as exc:  # noqa: BLE001
            run.error(f"paper protocol {name}", exc)
        finally:
            model = None
            release(dev)
