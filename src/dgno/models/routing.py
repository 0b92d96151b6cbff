"""Eval-time token routing of a model's ASSMs: deterministic argmax, or the authors' Gumbel-noise routing.

Why: the authors' evaluation network routes tokens with Gumbel noise at test time too, so each of
their published numbers carries inference noise. Measuring it means evaluating the same weights
with routing "gumbel" under several seeds (beside the deterministic "argmax", this project's
default). The routing is a runtime switch like the selective-scan backend: it is not stored in
checkpoints and does not change the weights.

Reproducibility: one seeded noise stream is shared by all ASSMs of the model, drawn in their call
order, so outputs are fixed by the seed and the sequence of inputs (their order, batching and
tiling). For per-image results independent of the order, call :func:`set_routing` again before each
image with a seed derived from (repeat, image id); that only swaps the generator.
"""

from __future__ import annotations

from torch import nn

from dgno.layers.mambair import ASSM, ROUTINGS, GumbelNoise, Routing


def set_routing(model: nn.Module, mode: Routing, *, seed: int | None = None) -> int:
    """Switch every ASSM of `model` to eval-time routing `mode`; return how many were switched.

    ``"argmax"``: deterministic (no `seed`). ``"gumbel"``: hard Gumbel-softmax routing as in the
    authors' evaluation network, from a fresh generator seeded with `seed` (required), so the same
    seed reproduces the same outputs. Training mode always samples its own straight-through Gumbel
    routes, whatever is set here. Raises ValueError for an unknown mode, a missing or superfluous
    seed, or a model without an ASSM.
    """
    if mode not in ROUTINGS:
        raise ValueError(f"routing {mode!r}; allowed: {', '.join(map(repr, ROUTINGS))}")
    if mode == "gumbel" and seed is None:
        raise ValueError("routing 'gumbel' needs a seed, so that its results reproduce")
    if mode == "argmax" and seed is not None:
        raise ValueError(f"seed={seed!r} given for routing 'argmax', which draws no noise; pass seed only with 'gumbel'")
    modules = [m for m in model.modules() if isinstance(m, ASSM)]
    if not modules:
        raise ValueError(f"{type(model).__name__} has no ASSM modules whose routing could be set")
    noise = GumbelNoise(seed) if mode == "gumbel" else None
    for m in modules:
        m.routing, m.gumbel = mode, noise
    return len(modules)
