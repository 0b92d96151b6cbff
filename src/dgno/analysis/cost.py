"""Parameters and FLOPs of registry models (``dgno summary``), and against input resolution (the paper's Fig. 1, right).

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode`` on one real forward pass, so they
count what the implementation executes (matrix products and convolutions; element-wise work
is not counted, as in the papers that report GFLOPs). Each method is built once per size, so the
counts include whatever the implementation does at that size (padding to the element grid,
window partitions), which a closed-form ``FLOPs ∝ H·W`` extrapolation would miss for
attention-type models.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import torch
from torch.utils.flop_counter import FlopCounterMode

from dgno.models.overrides import registry_overrides
from dgno.models.registry import build_model, list_models


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@torch.no_grad()
def _forward_flops(model: torch.nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter:
        model(x)
    return int(counter.get_total_flops())


@torch.no_grad()
def count_flops(model: torch.nn.Module, size: int | tuple[int, int], in_channels: int = 1) -> int:
    """FLOPs of one forward pass on a (1, C, H, W) input (multiply-add = 2 FLOPs).

    The pass runs on a copy of the model on the ``meta`` device first: FLOPs depend only on shapes,
    and skipping the arithmetic makes paper-scale counts take seconds instead of minutes. A model
    whose forward needs real values (a data-dependent branch) falls back to a real CPU pass.
    """
    h, w = (size, size) if isinstance(size, int) else size
    model.eval()
    try:
        return _forward_flops(copy.deepcopy(model).to("meta"), torch.empty(1, in_channels, h, w, device="meta"))
    except (RuntimeError, NotImplementedError):
        return _forward_flops(model, torch.rand(1, in_channels, h, w))


def summarize(name: str, *, scale: str = "paper", size: int = 256, in_channels: int = 1, **overrides: Any) -> dict[str, Any]:
    """{'params', 'params_m', 'gflops', 'gmacs', 'size', 'in_channels'} of one size×size forward pass.

    gmacs = gflops / 2 (one multiply-accumulate = 2 FLOPs). Restoration papers usually print MACs
    under the heading "FLOPs"; the report compares the paper's numbers with gmacs and says so.
    """
    torch.manual_seed(0)
    model = build_model(name, scale=scale, in_channels=in_channels, **registry_overrides(overrides))
    n = count_parameters(model)
    flops = count_flops(model, size, in_channels)
    return {"params": n, "params_m": n / 1e6, "gflops": flops / 1e9, "gmacs": flops / 2e9, "size": size, "in_channels": in_channels}


def summary_rows(model: str, *, scale: str, size: int, in_channels: int) -> list[dict[str, Any]]:
    """``dgno summary``'s rows: one per registry model (``model="all"``) or for the one named, each
    with its name, scale and :func:`summarize`'s counts."""
    names = list_models() if model == "all" else [model]
    return [{"model": n, "scale": scale, **summarize(n, scale=scale, size=size, in_channels=in_channels)} for n in names]


def summarize_on(name: str, *, scale: str, size: int, device: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`summarize` on CPU; on a GPU the same count with model and input moved there.

    FlopCounterMode counts aten operations, which do not depend on the device; a GPU only makes
    the 1024² paper-scale passes of the slow baselines (MambaIRv2's scan, SwinIR) take seconds
    instead of tens of minutes.
    """
    if device == "cpu":
        return summarize(name, scale=scale, size=size, **dict(overrides))
    torch.manual_seed(0)
    model = build_model(name, scale=scale, **registry_overrides(dict(overrides))).to(device).eval()
    n = count_parameters(model)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.rand(1, 1, size, size, device=device))
    flops = int(counter.get_total_flops())
    return {"params": n, "params_m": n / 1e6, "gflops": flops / 1e9, "gmacs": flops / 2e9, "size": size, "in_channels": 1}


def cost_table(methods: Mapping[str, Mapping[str, Any]], *, sizes: Sequence[int], scale: str, device: str = "cpu") -> pd.DataFrame:
    """One row per (method, size): params, params_m, gflops, gmacs (GMACs = GFLOPs / 2).

    methods: {method: config entry with 'model' and optional 'overrides'} as in the workflow config.
    """
    if not sizes:
        raise ValueError("cost_table needs at least one image size")
    rows = []
    for method, spec in methods.items():
        for size in sizes:
            s = summarize_on(spec["model"], scale=scale, size=int(size), device=device, overrides=spec.get("overrides", {}))
            rows.append({"method": method, "model": spec["model"], "scale": scale, "device": device, **s})
            print(f"{method:<16} {size:>5}px  {s['params_m']:.3f} M  {s['gmacs']:.3f} GMACs", flush=True)
    return pd.DataFrame(rows)
