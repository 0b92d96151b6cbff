"""Evaluation with the authors' stochastic token routing: Gumbel repeats, seeded per image.

Why: the authors' evaluation network routes the tokens of its ASSMs with Gumbel noise at test time
too, so each of their published numbers is one draw of a random variable. Scoring the same weights
under N seeded repeats (beside the deterministic argmax routing, this project's default) shows how
much of a gap between a measured and a published number is that noise.

Seeding: each image of each repeat gets its own seed, a hash of (run seed, repeat, image id)
(:func:`image_seed`), set right before the image is restored. An image's result therefore depends
on nothing else: not on which images came before it, nor on how many share a job. Repeat 0 is the
main evaluation's (``evaluate.routing: gumbel``); repeats 1..N are the extra evaluations
(``evaluate.gumbel_repeats``).

CUDA graphs replay one recorded draw: :func:`dgno.inference.cuda_graphs.capturable` refuses a model
routed by Gumbel noise, so these evaluations run eagerly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from torch import nn

from dgno.layers.mambair import ASSM, ROUTINGS
from dgno.models.routing import set_routing


def image_seed(seed: int, repeat: int, image_id: str) -> int:
    """The Gumbel seed of one image in one repeat: 63 bits of SHA-256 of (seed, repeat, id)."""
    digest = hashlib.sha256(f"dgno-gumbel:{int(seed)}:{int(repeat)}:{image_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def has_routing(model: nn.Module) -> bool:
    """Whether the model routes tokens at all (DGNO, GG, LG, MambaIRv2: ASSMs; the other baselines do not)."""
    return any(isinstance(m, ASSM) for m in model.modules())


def routing_hook(model: nn.Module, routing: str, *, seed: int = 0, repeat: int = 0) -> tuple[Callable[[str], None] | None, dict[str, Any]]:
    """(called with each image id before it is restored, the summary's record) for routing `routing`.

    "argmax" needs no hook. "gumbel" on a model without ASSMs is recorded as argmax: there is nothing
    to route, and its score is the deterministic one.
    """
    if routing not in ROUTINGS:
        raise ValueError(f"routing {routing!r}; allowed: {', '.join(map(repr, ROUTINGS))}")
    if routing == "argmax" or not has_routing(model):
        note = "argmax" if routing == "argmax" else "argmax (the model has no ASSM: nothing to route)"
        return None, {"routing": note}

    def reseed(image_id: str) -> None:
        set_routing(model, "gumbel", seed=image_seed(seed, repeat, image_id))

    record = {"routing": "gumbel", "gumbel_seed": int(seed), "gumbel_repeat": int(repeat), "gumbel_seeding": "per image: sha256('dgno-gumbel:<seed>:<repeat>:<image id>')"}
    return reseed, record
