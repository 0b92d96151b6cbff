"""Does an exported network compute what the PyTorch network computes?  The check every export passes.

    max |exported(x) − pytorch(x)| ≤ 1e-4   on [0, 1] images, at two image sizes

One discontinuity needs care: an ASSM routes each token to the argmax of its router's logits
(``dgno.layers.mambair``).  Where the two largest logits are within float rounding of each other, two
correct float32 programs (PyTorch with MKL, ONNX Runtime with MLAS) may route the token differently,
which moves it to another place in the scan and changes the output near it by up to ~1e-3.  That is a
tie, not an error of the export, so the check compares like with like:

1. the exported file runs once with its routing decisions as extra outputs (a copy of the ONNX
   graph whose ArgMax-over-routes values are also graph outputs);
2. PyTorch runs the same network, recording its own routes and the gap between each token's two
   largest log-probabilities;
3. every decision the two disagree on must be a tie (gap ≤ ``ROUTE_TIE``), else the check fails;
4. PyTorch runs again with the exported file's routes imposed, and the outputs are compared.

The number of ties met is part of the result.  TorchScript runs PyTorch's own kernels in the same
order, so its check is a direct comparison.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgno.inference.tiling import tiled_apply
from dgno.layers.mambair import ASSM

PARITY_TOLERANCE = 1e-4  # max |exported − PyTorch| on [0, 1] images
# Two routing log-probabilities this close are a tie at float32 precision: ONNX Runtime and PyTorch sum the
# routing logits in different orders, and at the paper's widths the two differed by up to 1.5e-4 on a token
# whose outputs then agreed to 4e-6 (a paper-scale DGNO-Cell at 256 px); a wrong graph moves them by O(0.1).
ROUTE_TIE = 1e-3

# An exported network for the check: x → (restoration, [route indices (B, L) per ASSM, in call order]).
Exported = Callable[[Tensor], tuple[Tensor, list[Tensor]]]


@dataclass
class ParityResult:
    """Max |exported − PyTorch| per check, the routing ties met, and what failed (empty when all passed)."""

    checks: dict[str, float] = field(default_factory=dict)
    route_ties: int = 0
    problems: list[str] = field(default_factory=list)
    tolerance: float = PARITY_TOLERANCE

    @property
    def worst(self) -> float:
        return max(self.checks.values(), default=0.0)

    @property
    def ok(self) -> bool:
        within = all(np.isfinite(v) and v <= self.tolerance for v in self.checks.values())
        return within and not self.problems


class _Routing:
    """Forward hooks on every ASSM router of a network: record its logits, or impose given routes.

    Hooks, not code in the network: the check observes and steers the PyTorch network from outside.
    """

    def __init__(self, model: nn.Module) -> None:
        self.routers = [m.route for m in model.modules() if isinstance(m, ASSM)]
        self.logits: list[Tensor] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[Tensor]]:
        """Collect each router call's log-probabilities (B, L, routes), in call order."""
        self.logits = []
        hooks = [r.register_forward_hook(lambda _m, _i, out: self.logits.append(F.log_softmax(out, dim=-1))) for r in self.routers]
        try:
            yield self.logits
        finally:
            for h in hooks:
                h.remove()

    @contextlib.contextmanager
    def imposing(self, routes: list[Tensor]) -> Iterator[None]:
        """Make router call k choose ``routes[k]`` (B, L): its logits become 0 there and −1e4 elsewhere."""
        pending = list(routes)

        def hook(_m, _i, out: Tensor) -> Tensor:
            chosen = pending.pop(0).to(out.device).long().view(*out.shape[:-1], 1)
            return torch.full_like(out, -1e4).scatter_(-1, chosen, 0.0)

        hooks = [r.register_forward_hook(hook) for r in self.routers]
        try:
            yield
        finally:
            for h in hooks:
                h.remove()


def compare(reference: nn.Module, exported: Exported, x: Tensor, result: ParityResult) -> tuple[Tensor, Tensor]:
    """(exported output, PyTorch output under the same routes) for one input; ties and problems into ``result``."""
    routing = _Routing(reference)
    with torch.no_grad():
        y_exported, routes = exported(x)
        with routing.recording() as logits:
            y_reference = reference(x)
        if routes:
            if len(routes) != len(logits):
                result.problems.append(f"{len(routes)} routing outputs for {len(logits)} ASSM calls")
                return y_exported, y_reference
            ties = _ties(logits, routes, result)
            if ties:
                result.route_ties += ties
                with routing.imposing(routes):
                    y_reference = reference(x)
    return y_exported, y_reference


def _ties(logits: list[Tensor], routes: list[Tensor], result: ParityResult) -> int:
    """How many routing decisions differ; each must be a tie (else a problem is recorded)."""
    differing = 0
    for k, (lp, chosen) in enumerate(zip(logits, routes)):
        chosen = chosen.to(lp.device).long().view(lp.shape[:-1])
        ours = lp.argmax(-1)
        where = ours != chosen
        if not where.any():
            continue
        differing += int(where.sum())
        gap = lp.gather(-1, ours.unsqueeze(-1)) - lp.gather(-1, chosen.unsqueeze(-1))  # ≥ 0: ours is the max
        worst = float(gap[where].max())
        if worst > ROUTE_TIE:
            result.problems.append(f"ASSM call {k}: a token routed differently with a log-probability gap of {worst:.2e} (> {ROUTE_TIE:g}, not a tie)")
    return differing


def check_parity(reference: nn.Module, exported: Exported, *, tile: int, channels: int, overlap: int) -> ParityResult:
    """Compare an exported network with its PyTorch ``reference`` (both (B, C, tile, tile) → same).

    Two sizes: a batch of two different tiles, and an image of 1.5 × 1.25 tiles restored by blended tiles
    (the routes of each tile imposed on the reference's pass over that tile).
    """
    result = ParityResult()
    batch = torch.cat([example(1, channels, tile, seed=1), example(1, channels, tile, seed=2)])
    y_exp, y_ref = compare(reference, exported, batch, result)
    result.checks[f"batch of 2 at {tile}x{tile}"] = float((y_exp - y_ref).abs().max())
    image = example(1, channels, tile * 3 // 2, seed=3)[..., : tile * 5 // 4]
    pairs: list[tuple[Tensor, Tensor]] = []

    def both(x: Tensor) -> Tensor:
        pairs.append(compare(reference, exported, x, result))
        return pairs[-1][0]

    with torch.no_grad():
        out_exp = tiled_apply(both, image, tile=tile, overlap=overlap)
        calls = iter(pairs)
        out_ref = tiled_apply(lambda _x: next(calls)[1], image, tile=tile, overlap=overlap)
    result.checks[f"tiled {image.shape[-2]}x{image.shape[-1]}"] = float((out_exp - out_ref).abs().max())
    return result


def example(batch: int, channels: int, size: int, *, seed: int = 0) -> Tensor:
    """A smooth random image in [0, 1], (batch, channels, size, size): what tracers and checks see."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(batch, channels, max(2, size // 8), max(2, size // 8), generator=g)
    x = F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)
    return (x + 0.05 * torch.rand(x.shape, generator=g)).clamp(0, 1)
