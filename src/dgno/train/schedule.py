"""What changes with the iteration number: learning rate, EMA decay and the progressive-training stage."""

from __future__ import annotations

import math

from dgno.train.recipe import TrainConfig


def lr_at(it: int, cfg: TrainConfig) -> float:
    """Learning rate at iteration `it`: constant `lr` for the first flat_fraction of the run, then
    cosine decay to `lr_min` at the last iteration (the paper's schedule)."""
    flat = round(cfg.flat_fraction * cfg.iterations)  # 1/3 of 60 000 is exactly the authors' 20 000
    if it < flat:
        return cfg.lr
    span = max(cfg.iterations - flat, 1)
    t = min((it - flat) / span, 1.0)
    return cfg.lr_min + 0.5 * (cfg.lr - cfg.lr_min) * (1 + math.cos(math.pi * t))


def ema_decay_at(it: int, decay: float) -> float:
    """Warm-up of the EMA decay, min(decay, (1+t)/(10+t)): short runs would otherwise evaluate
    weights dominated by the random initialisation."""
    return min(decay, (1.0 + it) / (10.0 + it))


def progressive_stage(it: int, cfg: TrainConfig) -> tuple[int, int]:
    """(patch_size, batch_size) of step ``it``: the stage it falls in, the last stage after the end."""
    end = 0
    for stage in cfg.progressive:
        end += stage["iterations"]
        if it < end:
            return stage["patch_size"], stage["batch_size"]
    last = cfg.progressive[-1] if cfg.progressive else {"patch_size": cfg.patch_size, "batch_size": cfg.batch_size}
    return last["patch_size"], last["batch_size"]
