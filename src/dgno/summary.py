"""Parameter and FLOP counts of registry models (``dgno summary``).

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode`` on one real forward pass, so they
count what the implementation executes (matrix products and convolutions; element-wise work
is not counted, as in the papers that report GFLOPs).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from dgno.models.overrides import registry_overrides
from dgno.models.registry import build_model


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
