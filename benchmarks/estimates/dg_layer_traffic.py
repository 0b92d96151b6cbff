"""How much of a paper-scale training step could fusing the DG operator layers save? An estimate without a GPU.

    OMP_NUM_THREADS=1 python -m benchmarks.estimates.dg_layer_traffic benchmarks/results/dg_layer_traffic_cpu.json

The six DG-Cell layers of paper-scale DGNO (two each at 1/4, 1/2 and full resolution: 192, 96 and 48
channels, 16 heads, 8×8 elements) run forward + backward under the CPU profiler at a reduced size. Every
operation that launches a kernel (views excluded) is counted with the elements it reads, split into the
two 1×1 convolutions of a layer (cuDNN/GEMM work that fusion would not remove) and everything else: the
per-head norms, the element cuts (rearrange copies), Kᵀ V and Q K_e, the flux assembly, the GELU and the
residual sums — what a fused kernel (or torch.compile) could merge. Element-wise work is memory-bound, so
its GPU time is about bytes moved ÷ bandwidth; each kernel also costs at least a few microseconds.
Scaled to the training shapes (8 crops of 256²), that bounds what fusing can save from the 323 ms
float32 step recorded on the H100 (benchmarks/results/gpu_speed_h100.json). It is an estimate; the
GPU script (benchmarks/gpu/levers_and_evaluation.py, phase "dg_layers") measures the layers' share and a compiled
version directly.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from dgno import provenance
from dgno.layers.operator import DGOperatorLayer
from dgno.models.registry import model_spec

VIEWS = {
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::permute", "aten::transpose", "aten::t", "aten::expand",
    "aten::narrow", "aten::slice", "aten::select", "aten::unbind", "aten::chunk", "aten::split", "aten::unsqueeze",
    "aten::squeeze", "aten::detach", "aten::alias", "aten::as_strided", "aten::unflatten", "aten::flatten", "aten::lift_fresh",
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::resolve_conj", "aten::resolve_neg", "aten::view_as",
    "aten::_unsafe_view", "detach", "aten::result_type", "aten::contiguous", "aten::to", "aten::_to_copy", "aten::zero_",
}  # fmt: skip
CONV = ("aten::conv2d", "aten::convolution", "aten::_convolution", "aten::convolution_backward")
STEP_MS_H100 = 322.7  # float32 DGNO-Cell step, batch 8 at 256² (gpu_speed_h100.json, train)
HBM_TB_S = 3.0  # H100 device-to-device copy, bytes read + written (KINDS.md of the GPU machines)
MIN_KERNEL_US = 2.5  # a small kernel's time on the GPU, launch latency hidden


def _working(e) -> bool:
    return e.name.startswith("aten::") and e.name not in VIEWS


def _kernel_ops(prof) -> tuple[list, list]:
    """(convolution ops, other ops) that do work themselves: not a view, and no working op below them
    (so a composite such as mean = sum + div counts as its parts). Ops under a convolution are the convolution's."""
    conv, rest = [], []
    for e in prof.events():
        if not _working(e) or any(_working(c) for c in e.cpu_children):
            continue
        parent, in_conv = e, False
        while parent is not None:
            in_conv = in_conv or parent.name in CONV
            parent = parent.cpu_parent
        (conv if in_conv else rest).append(e)
    return conv, rest


def _elements(event) -> int:
    return sum(math.prod(s) for s in (event.input_shapes or []) if isinstance(s, list | tuple) and s and all(isinstance(d, int) for d in s))


def layer_traffic(dim: int, size: int, heads: int, batch: int) -> dict:
    """Kernels and elements read by one DG-Cell layer's forward + backward on (batch, dim, size, size)."""
    torch.manual_seed(0)
    layer = DGOperatorLayer(dim=dim, heads=heads, element_size=8, variant="cell", flux="jump", boundary="neumann")
    x = torch.randn(batch, dim, size, size, requires_grad=True)
    layer(x).square().mean().backward()  # warm-up
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        layer(x).square().mean().backward()
    conv, rest = _kernel_ops(prof)
    return {
        "dim": dim, "size": size, "batch": batch, "heads": heads,
        "fusible_kernels": len(rest), "fusible_elements_read": sum(_elements(e) for e in rest),
        "conv_kernels": len(conv), "conv_elements_read": sum(_elements(e) for e in conv),
        "ops": sorted({e.name for e in rest}),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--shrink", type=int, default=4, help="profile at 1/shrink of the training side length, batch 1")
    args = ap.parse_args(argv)
    spec = model_spec("dgno-cell", "paper")
    heads, train_batch, train_size = spec["heads"], 8, 256
    levels = [(d, train_size // f) for d, f in zip(spec["decoder_channels"], (4, 2, 1))]
    t0 = time.perf_counter()
    rows = []
    for dim, side in levels:
        small = side // args.shrink
        rec = layer_traffic(dim, small, heads, 1)
        scale = train_batch * (side / small) ** 2  # element-wise work grows with the pixels
        rec["train_side"], rec["scale_to_training"] = side, scale
        rec["layers"] = spec["num_layers"]
        rows.append(rec)
    kernels = sum(r["fusible_kernels"] * r["layers"] for r in rows)
    # bytes moved ≈ elements read + one output of the same size written, float32
    gbytes = sum(2 * 4 * r["fusible_elements_read"] * r["scale_to_training"] * r["layers"] for r in rows) / 1e9
    est_ms = 1e3 * gbytes / (HBM_TB_S * 1e3) + kernels * MIN_KERNEL_US / 1e3
    blob = {
        "benchmark": "DG operator layers: fusible traffic, forward + backward, paper-scale DGNO-Cell",
        "provenance": provenance.collect(torch.device("cpu")),
        "assumptions": {"hbm_tb_per_s": HBM_TB_S, "min_kernel_us": MIN_KERNEL_US, "step_ms_h100_fp32": STEP_MS_H100, "profile_shrink": args.shrink},
        "levels": rows,
        "fusible_kernels_per_step": kernels,
        "fusible_gbytes_per_step": gbytes,
        "fusible_ms_estimate_h100": est_ms,
        "fusible_share_of_step": est_ms / STEP_MS_H100,
        "seconds": time.perf_counter() - t0,
    }
    args.out.write_text(json.dumps(blob, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: blob[k] for k in ("fusible_kernels_per_step", "fusible_gbytes_per_step", "fusible_ms_estimate_h100", "fusible_share_of_step")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
