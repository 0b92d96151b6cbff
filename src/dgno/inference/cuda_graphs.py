"""Inference replayed from CUDA graphs: one captured forward pass per input shape.

Why: at batch 1 a paper-scale DGNO forward is a few thousand small kernels (14 ASSM blocks, 6
operator layers, each many element-wise steps).  Launched from Python, their launch cost exceeds
their run time up to about 256² (the PyTorch-scan DGNO ran at the same 14 img/s at 128² and 256²
on an H200).  A CUDA graph records the launches once and replays them with one call.

Constraints, checked or documented:
  * the forward pass must not synchronise with the host: the "torch" selective scan does (it
    checks exponent ranges on the host), so graphs need the "triton" or "mamba_ssm" scan, and
    ``GraphedForward`` refuses a model whose ASSMs would run the PyTorch scan;
  * shapes are static: one graph per (shape, dtype) key, at most ``max_graphs`` of them (tiled
    inference uses one tile shape, so one graph serves a whole dataset); all graphs share one
    memory pool;
  * eval mode, no autograd, argmax routing: ASSM routing is then deterministic, so replay equals
    eager; a model switched to Gumbel routing (``dgno.models.routing``) is not capturable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from dgno.layers import scan_triton
from dgno.layers.mambair import ASSM
from dgno.layers.selective_scan import mamba_selective_scan_fn
from dgno.models.outputs import as_outputs


def capturable(model: nn.Module, device: torch.device) -> tuple[bool, str]:
    """(ok, why not): whether ``model``'s forward on ``device`` can be captured in a CUDA graph."""
    if device.type != "cuda":
        return False, f"CUDA graphs need a CUDA device, got {device}"
    for module in model.modules():
        if not isinstance(module, ASSM):
            continue
        if module.routing != "argmax":  # a replay would reuse the one draw recorded at capture
            return False, f"routing {module.routing!r} draws new noise on every call; a CUDA graph would replay one draw (evaluate it eagerly)"
        backend = module.scan_backend
        if backend == "auto":
            backend = "mamba_ssm" if mamba_selective_scan_fn() is not None else ("triton" if scan_triton.available(device) else "torch")
        if backend not in ("triton", "mamba_ssm"):
            return False, f"the {backend!r} selective scan synchronises with the host; use scan backend 'triton' or 'mamba_ssm'"
    return True, ""


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    inputs: Tensor
    outputs: list[Tensor]


class GraphedForward:
    """Callable x → model(x) (a list of tensors, as ``dgno.models.outputs.as_outputs``), replayed from CUDA graphs.

    ``bf16``: run under bfloat16 autocast (outputs are cast back to x's dtype).  Outputs are
    copies, so a caller may keep them across calls.
    """

    def __init__(self, model: nn.Module, *, bf16: bool = False, max_graphs: int = 4, warmup: int = 2) -> None:
        device = next(model.parameters()).device
        ok, why = capturable(model, device)
        if not ok:
            raise ValueError(f"cannot capture {type(model).__name__} in a CUDA graph: {why}")
        self.model, self.bf16, self.max_graphs, self.warmup = model.eval(), bf16, max_graphs, warmup
        self.device = device
        self._graphs: dict[tuple, _Graph] = {}
        self._pool = torch.cuda.graph_pool_handle()

    def _eager(self, x: Tensor) -> list[Tensor]:
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.bf16):
            return [o.to(x.dtype) for o in as_outputs(self.model(x))]

    def _capture(self, x: Tensor) -> _Graph:
        static = x.detach().clone()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):  # warm-up off the default stream: JIT, cuDNN plans, allocator
            for _ in range(self.warmup):
                self._eager(static)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            outputs = self._eager(static)
        return _Graph(graph, static, outputs)

    def __call__(self, x: Tensor) -> list[Tensor]:
        key = (tuple(x.shape), x.dtype)
        entry = self._graphs.get(key)
        if entry is None:
            if len(self._graphs) >= self.max_graphs:
                return self._eager(x)  # a rare extra shape (e.g. one odd-sized image) runs eagerly
            entry = self._graphs[key] = self._capture(x)
        entry.inputs.copy_(x)
        entry.graph.replay()
        return [o.clone() for o in entry.outputs]


def forward_fn(
    model: nn.Module, device: torch.device, *, cuda_graphs: bool = False, bf16: bool = False
) -> Callable[[Tensor], list[Tensor]]:
    """x → list of outputs: eager (optionally bf16 autocast), or replayed from CUDA graphs."""
    if cuda_graphs:
        return GraphedForward(model, bf16=bf16)

    def run(x: Tensor) -> list[Tensor]:
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            return [o.to(x.dtype) for o in as_outputs(model(x))]

    return run
