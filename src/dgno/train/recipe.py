"""What a training run is asked to do: the recipe (:class:`TrainConfig`) and the network (:class:`ModelChoice`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainConfig:
    """Training hyper-parameters (paper values in config/paper.yaml; the demo scales them down)."""

    iterations: int = 60000
    batch_size: int = 8
    patch_size: int = 256
    lr: float = 3e-4
    lr_min: float = 1e-6
    flat_fraction: float = 0.5  # share of iterations at constant lr before the cosine decay (rounded to whole steps)
    weight_decay: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    fft_weight: float = 0.1
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    val_every: int = 1000
    val_crops: int = 8
    log_every: int = 100
    checkpoint_every: int = 1000
    seed: int = 0
    device: str = "auto"
    bf16: bool = True  # bfloat16 autocast on CUDA (ignored on CPU, where float32 is faster and exact)
    prefetch: int = 2  # batches cut ahead by a background thread; 0 = in the loop (same batches either way)
    # Which weights model.pt holds, i.e. which are evaluated: "ema" (the running average) or "raw"
    # (the optimizer's weights, which the authors' test scripts load as checkpoint["params"]).
    eval_weights: str = "ema"
    # Progressive training (the authors' 3DHistech recipe): stages {iterations, patch_size, batch_size},
    # run in order; each step cuts its stage's batch and patch out of a full (batch_size, patch_size) batch.
    progressive: list[dict[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.prefetch < 0:
            raise ValueError(f"prefetch={self.prefetch!r}; allowed: an integer >= 0 (0 = no background thread)")
        if self.eval_weights not in ("ema", "raw"):
            raise ValueError(f"eval_weights={self.eval_weights!r}; allowed: 'ema', 'raw'")
        for i, stage in enumerate(self.progressive):
            if set(stage) != {"iterations", "patch_size", "batch_size"}:
                raise ValueError(f"progressive[{i}] = {stage}; needs exactly iterations, patch_size, batch_size")
            if stage["patch_size"] > self.patch_size or stage["batch_size"] > self.batch_size:
                raise ValueError(f"progressive[{i}] = {stage} exceeds patch_size {self.patch_size} / batch_size {self.batch_size}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown training setting(s) {unknown}; allowed: {sorted(known)}")
        d = dict(d)
        if "betas" in d:
            d["betas"] = tuple(d["betas"])
        return cls(**d)


@dataclass
class ModelChoice:
    """Which network to train: a registry name, its scale and config overrides (ablation values)."""

    name: str
    scale: str = "demo"
    overrides: dict[str, Any] = field(default_factory=dict)
