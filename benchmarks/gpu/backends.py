"""CUDA checks of every model and the selective-scan backend comparison; writes OUT_JSON.

    python -m benchmarks.gpu.backends OUT_JSON [--sizes 256 512] [--repeats 10] [--train-batch 8]

1. ``cuda_smoke``: every registry model at paper scale, one forward and one backward pass on a
   1×1×128×128 input, in float32 and under bfloat16 autocast; each records success or its error.
   CUDA-only failures (a fused attention kernel that rejects a shape, a dtype mix that only
   autocast produces) show up here and nowhere on a CPU machine.
2. ``forward``: DGNO-Cell and DGNO-Face at paper scale, eval mode, float32, one input per size:
   median forward time, images/s and peak CUDA memory with each scan backend ("torch", the
   chunked PyTorch scan, and "mamba_ssm", the fused kernel, when it imports) on the same weights,
   and the max |difference| between the backends' outputs.
3. ``train``: one training step (forward, multi-scale L1 + FFT loss, backward, AdamW) of
   DGNO-Cell, batch ``--train-batch`` at 256², bfloat16 autocast, with each backend.

Timing is the median of ``--repeats`` runs after warm-up, synchronised; the JSON records the
device, versions and whether ``mamba_ssm`` imported, so a missing backend is visible, not silent.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import traceback
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from dgno import provenance
from dgno.analysis.bench import bench_train, peak_memory_mb, reset_peak_memory
from dgno.analysis.timing import device_sync, wall_times
from dgno.io import write_json
from dgno.layers import mambair
from dgno.layers.mambair import ASSM, set_scan_backend
from dgno.layers.selective_scan import mamba_selective_scan_fn, selective_scan
from dgno.models.outputs import as_outputs
from dgno.models.registry import build_model, list_models
from dgno.train.losses import restoration_loss

DGNO_MODELS = ("dgno-cell", "dgno-face")


def smoke(name: str, dev: torch.device, amp: bool) -> dict[str, Any]:
    """One forward + backward of ``name`` (paper scale) on CUDA; {"ok": bool, "error": str | None, ...}."""
    row: dict[str, Any] = {"model": name, "amp_bf16": amp}
    try:
        torch.manual_seed(0)
        model = build_model(name, scale="paper").to(dev).train()
        x = torch.rand(1, 1, 128, 128, device=dev)
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            outputs = as_outputs(model(x))
            loss = restoration_loss(outputs, x, fft_weight=0.1)
        loss.backward()
        device_sync(dev)()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        finite = all(g is None or bool(torch.isfinite(g).all()) for g in grads)
        row.update(ok=bool(torch.isfinite(loss)) and finite, error=None, seconds=time.perf_counter() - t0, loss=float(loss.detach()))
    except Exception as exc:  # noqa: BLE001  (the point is to record any failure and go on)
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}".splitlines()[0][:500], trace=traceback.format_exc()[-2000:])
    return row


def forward_backends(name: str, size: int, backends: list[str], dev: torch.device, repeats: int) -> list[dict[str, Any]]:
    """Forward time, memory and output of ``name`` with each scan backend on the same weights and input."""
    torch.manual_seed(0)
    model = build_model(name, scale="paper").to(dev).eval()
    x = torch.rand(1, 1, size, size, device=dev)
    rows, outputs = [], {}
    for backend in backends:
        set_scan_backend(model, backend)
        with torch.no_grad():
            outputs[backend] = as_outputs(model(x))[-1]  # the full-resolution restoration
            timing = wall_times(lambda: model(x), repeats=repeats, warmup=1, sync=device_sync(dev), on_warm=lambda: reset_peak_memory(dev))
            sec = timing.median
        rows.append(
            {
                "model": name,
                "size": size,
                "scan_backend": backend,
                "seconds": sec,
                "images_per_second": 1.0 / sec,
                "peak_memory_mb": peak_memory_mb(dev),
            }
        )
    if len(outputs) == 2:
        a, b = outputs.values()
        diff = float((a.float() - b.float()).abs().max())
        checks = backend_agreement(model, x, backends)
        for row in rows:
            row["max_abs_diff_between_backends"] = diff
            row["max_abs_output"] = float(a.abs().max())
            row.update(checks)
    return rows


@contextlib.contextmanager
def _tf32(enabled: bool):
    """TF32 for cuDNN convolutions and cuBLAS matmuls on or off (torch's defaults: convs on, matmuls off)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def backend_agreement(model: torch.nn.Module, x: torch.Tensor, backends: list[str]) -> dict[str, Any]:
    """Where a difference between two backends' model outputs comes from.

    * ``scan_max_abs_diff_in_model``: every scan call of a forward pass is run with both backends on
      the very inputs the model gives it; the largest |difference| of those scan outputs (the
      backends' own disagreement, free of anything downstream);
    * ``route_flips``: tokens whose argmax route differs between the two full forward passes
      (a near-tie in the router flips on a tiny upstream difference and re-sorts the scan);
    * ``max_abs_diff_without_tf32``: the model-output difference with TF32 off for convolutions
      and matmuls (with TF32, a tiny input difference can move a result by a whole TF32 ulp, ~1e-3).
    """
    first, second = backends
    scan_diffs: list[float] = []

    def both(*args, backend, **kwargs):
        y = selective_scan(*args, backend=first, **kwargs)
        scan_diffs.append(float((y - selective_scan(*args, backend=second, **kwargs)).abs().max()))
        return y

    routes: dict[str, list[torch.Tensor]] = {first: [], second: []}
    assms = [m for m in model.modules() if isinstance(m, ASSM)]

    def run(backend: str) -> torch.Tensor:
        set_scan_backend(model, backend)
        originals = [m.routes for m in assms]
        for m, orig in zip(assms, originals, strict=True):
            m.routes = lambda t, _orig=orig: _record(routes[backend], _orig(t))
        try:
            with torch.no_grad():
                return as_outputs(model(x))[-1].float()
        finally:
            for m, orig in zip(assms, originals, strict=True):
                m.routes = orig

    with mock.patch.object(mambair, "selective_scan", both), torch.no_grad():
        model(x)
    out = {b: run(b) for b in backends}
    flips = sum(int((r1.argmax(-1) != r2.argmax(-1)).sum()) for r1, r2 in zip(routes[first], routes[second], strict=True))
    with _tf32(False):
        no_tf32 = [run(b) for b in backends]
    return {
        "scan_max_abs_diff_in_model": max(scan_diffs),
        "scan_calls": len(scan_diffs),
        "route_flips": flips,
        "routed_tokens": sum(r.shape[0] * r.shape[1] for r in routes[first]),
        "max_abs_diff_repeat": float((out[first] - out[second]).abs().max()),
        "max_abs_diff_without_tf32": float((no_tf32[0] - no_tf32[1]).abs().max()),
    }


def _record(store: list[torch.Tensor], routes: torch.Tensor) -> torch.Tensor:
    store.append(routes.detach())
    return routes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_json", type=Path)
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--train-batch", type=int, default=8)
    ap.add_argument("--skip", choices=["smoke", "forward", "train"], action="append", default=[])
    ap.add_argument("--models", nargs="+", help="models of the smoke check (default: every registry model)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a quick dry run of this script")
    ap.add_argument("--compare-with", choices=["mamba_ssm", "reference"], help="second backend (default: mamba_ssm when it imports)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("benchmarks.gpu.backends: no CUDA device; this benchmark is for the GPU environment", file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    backends = ["torch"] + (["mamba_ssm"] if dev.type == "cuda" and mamba_selective_scan_fn() is not None else [])
    if args.compare_with:
        backends = ["torch", args.compare_with]
    result: dict[str, Any] = {"benchmark": "CUDA checks and scan backends", "scan_backends": backends, **provenance.collect(dev)}
    if "smoke" not in args.skip:
        result["cuda_smoke"] = [smoke(name, dev, amp) for name in args.models or list_models() for amp in (False, True)]
        for row in result["cuda_smoke"]:
            print(
                f"smoke {row['model']:<14} bf16={row['amp_bf16']!s:<5} {'ok' if row['ok'] else 'FAILED ' + str(row['error'])}", flush=True
            )
        write_json(args.out_json, result)
    if "forward" not in args.skip:
        result["forward"] = [
            row for name in DGNO_MODELS for size in args.sizes for row in forward_backends(name, size, backends, dev, args.repeats)
        ]
        for row in result["forward"]:
            print(
                f"forward {row['model']} {row['size']}² {row['scan_backend']:<9} {row['images_per_second']:7.2f} img/s  {row['peak_memory_mb'] or 0:7.0f} MB  Δmax {row.get('max_abs_diff_between_backends')}  scan Δmax {row.get('scan_max_abs_diff_in_model')}  "
                f"route flips {row.get('route_flips')}/{row.get('routed_tokens')}  Δmax no-TF32 {row.get('max_abs_diff_without_tf32')}",
                flush=True,
            )
        write_json(args.out_json, result)
    if "train" not in args.skip:
        result["train"] = []
        for backend in backends:
            row = bench_train(
                "dgno-cell",
                scale="paper",
                size=256,
                batch=args.train_batch,
                device=args.device,
                warmup=3,
                repeats=args.repeats,
                amp=dev.type == "cuda",
                scan_backend=backend,
            )
            result["train"].append(row)
            print(
                f"train dgno-cell batch {args.train_batch} 256² bf16 {backend:<9} {row['iterations_per_second']:.2f} it/s  {row['peak_memory_mb']:.0f} MB",
                flush=True,
            )
        write_json(args.out_json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
