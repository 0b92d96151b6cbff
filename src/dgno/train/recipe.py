"""What a training run is asked to do: the recipe (:class:`TrainConfig`) and the network (:class:`ModelChoice`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Settings that change how fast a step runs, not what it computes (at most float rounding): they are not
# part of a run's fingerprint (a checkpoint resumes whatever their values) nor of the workflow's params
# (changing one does not retrain). dgno.workflow.settings keeps the same list (tests/test_train_step.py ties them).
SPEED_ONLY = ("prefetch", "channels_last", "cudnn_benchmark", "fused_layernorm", "adamw_impl", "compile", "cuda_graphs")
ADAMW_IMPLS = ("default", "foreach", "fused")


@dataclass
class TrainConfig:
    """Training hyper-parameters.

    Every default is the config schema's (workflow/schemas/config.schema.yaml, block ``train``; ``seed`` and
    ``device`` at its top level), which is what a workflow run gets for a key its config leaves out: the
    demo's short recipe. The paper's values are in config/paper.yaml. The schema is the one source: a
    default here that differs from it fails tests/test_schema_constants.py (the schema cannot be read
    here, below the workflow layer, without making the package depend on the checkout's files).
    """

    iterations: int = 300
    batch_size: int = 4
    patch_size: int = 64
    lr: float = 3e-4
    lr_min: float = 1e-6
    flat_fraction: float = 0.5  # share of iterations at constant lr before the cosine decay (rounded to whole steps)
    weight_decay: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    fft_weight: float = 0.1
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    val_every: int = 100
    val_crops: int = 8
    log_every: int = 50
    checkpoint_every: int = 100
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
    # Speed levers of the training step (dgno.train.step), all off by default: see that module.
    channels_last: bool = False  # NHWC weights and batches
    cudnn_benchmark: bool = False  # cuDNN picks its fastest convolution algorithms per shape (CUDA)
    fused_layernorm: bool = False  # channel LayerNorm as one F.layer_norm, per-head norms in one reduction
    adamw_impl: str = "default"  # torch's default AdamW, or its "foreach" / "fused" implementation
    compile: bool = False  # torch.compile of forward + loss (+ their backward)
    cuda_graphs: bool = False  # the whole step replayed from a CUDA graph (CUDA, one process)

    def __post_init__(self) -> None:
        if self.adamw_impl not in ADAMW_IMPLS:
            raise ValueError(f"adamw_impl={self.adamw_impl!r}; allowed: {', '.join(map(repr, ADAMW_IMPLS))}")
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


@dataclass
class StartWeights:
    """Weights a run starts from instead of the network's random initialisation (fine-tuning).

    ``state_dict`` must fit the network of the run's :class:`ModelChoice`; ``source`` says where the
    weights come from (recorded in the model file, e.g. the released network's name or the file's path).
    """

    state_dict: dict[str, Any]
    source: dict[str, Any] = field(default_factory=dict)
