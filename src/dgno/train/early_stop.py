"""Keep the best weights on validation, and stop when validation stops improving.

Fine-tuning a network that already works can make it worse: a short run on a few fields overfits, and
a network used on its own blur has little to gain. So a run that starts from trained weights is scored
on the validation fields before its first step, every validation after that is compared with the best so
far, and the model file holds the weights of the best validation, the starting weights included. When
``patience`` validations in a row fail to beat the best by ``min_delta`` dB, training stops. On the
validation fields the result is never worse than the start; the held-out fields say whether that holds
beyond them (the fine-tuning report).

The state (best score, its iteration, its weights, the count since) lives in the training checkpoint,
so a run killed and resumed selects exactly as one that was not.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class BestOnValidation:
    """Best-validation weights and early stopping (module docstring); ``patience`` 0 never stops early."""

    patience: int = 0
    min_delta: float = 0.0
    best_psnr: float = float("-inf")
    best_iteration: int = -1
    start_psnr: float | None = None
    since_best: int = 0
    stopped_at: int | None = None
    best_state: dict[str, torch.Tensor] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.patience < 0 or self.min_delta < 0:
            raise ValueError(f"patience={self.patience!r}, min_delta={self.min_delta!r}: both must be >= 0")

    def settings(self) -> dict[str, Any]:
        """What changes the selected weights (part of the run's fingerprint)."""
        return {"patience": self.patience, "min_delta": self.min_delta}

    def observe(self, iteration: int, psnr: float, weights: torch.nn.Module) -> bool:
        """Record the validation PSNR of ``weights`` after ``iteration`` steps; True when training should stop."""
        if iteration == 0:
            self.start_psnr = psnr
        if psnr > self.best_psnr + (self.min_delta if self.best_iteration >= 0 else 0.0):
            self.best_psnr, self.best_iteration, self.since_best = psnr, iteration, 0
            self.best_state = {k: v.detach().clone() for k, v in weights.state_dict().items()}
        else:
            self.since_best += 1
        if self.patience and self.since_best >= self.patience:
            self.stopped_at = iteration
        return self.stopped_at is not None

    def state(self) -> dict[str, Any]:
        """What a checkpoint holds to resume the selection exactly."""
        return {k: (copy.copy(v) if k != "best_state" else v) for k, v in self.__dict__.items()}

    def load_state(self, state: dict[str, Any] | None) -> None:
        for key, value in (state or {}).items():
            setattr(self, key, value)

    def record(self) -> dict[str, Any]:
        """What the model file says about the selection (no weights)."""
        return {k: v for k, v in self.__dict__.items() if k != "best_state"}
