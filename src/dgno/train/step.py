"""One optimizer step of the training loop, and the levers that make it faster on a GPU.

    loss = L1 + FFT-L1 over the scales of net(blur);  backward;  clip ‖g‖ ≤ grad_clip;  AdamW

:class:`TrainStep` runs that step (the loop around it adds the batches, the EMA and the buffers of
a data-parallel run). Every lever is a ``train:`` setting, off by default, and none changes the
recipe: each changes at most the rounding of a float, which the CPU tests bound
(``tests/test_train_step.py``, float64 against the step without levers). They are speed-only settings
(``recipe.SPEED_ONLY``), so a run resumes and the workflow does not retrain when one is switched.

  channels_last     weights and batches in NHWC memory format. cuDNN's convolutions (the depth-wise
                    ones too) then need no layout transforms, and the ASSM blocks' (B, H·W, C) token
                    view of a feature map is contiguous instead of a transposing copy.
  cudnn_benchmark   cuDNN times its algorithms once per convolution shape and keeps the fastest. The
                    H100 profile put the depth-wise weight gradient at 18 % of the float32 step with
                    the default heuristics. No effect on a CPU.
  fused_layernorm   the channel LayerNorm2d (Restormer's "WithBias" norm) as one ``F.layer_norm`` over
                    a channels-last view; the operator layers' per-head norms from one ``var_mean``.
  adamw_impl        "foreach" (a few multi-tensor kernels) or "fused" (one kernel) AdamW instead of
                    torch's default, which is "foreach" on CUDA and a loop over parameters on a CPU.
  compile           ``torch.compile`` of forward + loss; AOTAutograd compiles their backward with
                    them. The first step pays the compilation: :attr:`TrainStep.first_step_seconds`.
  cuda_graphs       the whole step (forward, loss, backward, gradient clipping, AdamW) captured once
                    in a CUDA graph and replayed (CUDA, one process). See :class:`TrainStep`.

Without cuda_graphs and compile the step is the plain one, operation for operation: it checks the loss for
NaN/Inf before the backward pass (a host synchronisation). The graphed and compiled steps check it
right after the step instead, so the GPU never waits for the host inside a step; a non-finite loss
then stops training one optimizer update later, before any checkpoint is written.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from dgno.inference.cuda_graphs import capturable
from dgno.layers.blocks import LayerNorm2d, at_least_fp32
from dgno.layers.operator import HeadLayerNorm
from dgno.models.outputs import as_outputs
from dgno.train.losses import restoration_loss
from dgno.train.recipe import TrainConfig
from dgno.train.schedule import lr_at

LEVERS = ("channels_last", "cudnn_benchmark", "fused_layernorm", "adamw_impl", "compile", "cuda_graphs")


def active_levers(cfg: TrainConfig, device: torch.device) -> list[str]:
    """The levers of ``cfg`` that take effect on ``device`` (CUDA-only ones are dropped on a CPU), as words."""
    cuda_only = {"cudnn_benchmark", "cuda_graphs"}
    out = []
    for name in LEVERS:
        value = getattr(cfg, name)
        if name == "adamw_impl":
            if value != "default":
                out.append(f"adamw_impl={value}")
        elif value and (device.type == "cuda" or name not in cuda_only):
            out.append(name)
    return out


def set_fused_norms(model: nn.Module, fused: bool) -> int:
    """Switch every LayerNorm2d and per-head norm of ``model`` to the fused (or reference) form; how many."""
    modules = [m for m in model.modules() if isinstance(m, LayerNorm2d | HeadLayerNorm)]
    for m in modules:
        m.fused = fused
    return len(modules)


def prepare_model(model: nn.Module, cfg: TrainConfig) -> nn.Module:
    """Apply the model-side levers (memory format, fused norms) in place; returns the model."""
    if cfg.channels_last:
        model.to(memory_format=torch.channels_last)
    if cfg.fused_layernorm:
        set_fused_norms(model, True)
    return model


def make_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with the recipe's settings, in the implementation ``cfg.adamw_impl`` asks for.

    A graphed step needs a capturable optimizer (its step counters live on the GPU) and a learning
    rate held in a GPU tensor that each step overwrites (a Python float would be frozen into the graph).
    """
    graphs = cfg.cuda_graphs and device.type == "cuda"
    impl = cfg.adamw_impl if cfg.adamw_impl != "default" or not graphs else "foreach"
    options: dict = {"foreach": True} if impl == "foreach" else {"fused": True} if impl == "fused" else {}
    lr: float | Tensor = cfg.lr
    if graphs:
        options["capturable"] = True
        lr = torch.tensor(cfg.lr, dtype=torch.float32, device=device)
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay, **options)


@contextlib.contextmanager
def backend_flags(cfg: TrainConfig) -> Iterator[None]:
    """cuDNN's autotuner on for the training when asked, and restored afterwards (the flag is process-wide)."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = before or cfg.cudnn_benchmark
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def check_finite(loss: Tensor, it: int) -> None:
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss became {loss.item()} at iteration {it}; lower train.lr or check the data")


class TrainStep:
    """``step(blur, gt, it) -> loss``: one optimizer step at iteration ``it``, with the levers of ``cfg``.

    ``net`` is the network the loop calls (the model, DDP-wrapped when distributed); ``model`` owns
    the parameters that are clipped and updated by ``opt`` (from :func:`make_optimizer`).

    CUDA graphs: the first ``warmup`` steps (for each batch shape) run eagerly on a side stream, so
    cuDNN plans, Triton kernels and the allocator settle; the next step is captured and every step
    after it replays the graph. The batch is copied into the graph's input tensors and the learning
    rate into its GPU tensor; nothing in the captured step reads the host, so shapes are static
    (a progressive stage's new batch shape re-captures, dropping the previous graph). ASSM routing's
    Gumbel noise comes from the default CUDA generator, which a graph advances at every replay.
    """

    def __init__(
        self, model: nn.Module, net: nn.Module, opt: torch.optim.Optimizer, cfg: TrainConfig, device: torch.device,
        *, compile_backend: str = "inductor", warmup: int = 3,
    ) -> None:  # fmt: skip
        self.model, self.net, self.opt, self.cfg, self.device = model, net, opt, cfg, device
        self.graphs = cfg.cuda_graphs and device.type == "cuda"
        if self.graphs and net is not model:
            raise ValueError("train.cuda_graphs needs a single training process (a DistributedDataParallel step cannot be captured here); set it to false")
        if self.graphs:
            ok, why = capturable(model, device)
            if not ok:
                raise ValueError(f"train.cuda_graphs: the training step cannot be captured: {why}")
        self.warmup = warmup
        self.loss_fn = torch.compile(self.forward_loss, backend=compile_backend) if cfg.compile else self.forward_loss
        self.first_step_seconds: float | None = None  # the first step's wall time (holds the compilation)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static: tuple[Tensor, Tensor, Tensor] | None = None  # blur, gt, loss of the captured step
        self._lr: Tensor | None = None
        self._eager_steps = 0  # eager steps taken since the batch shape last changed (graph warm-up)

    def forward_loss(self, blur: Tensor, gt: Tensor) -> Tensor:
        """The training loss of one batch (what ``compile`` compiles)."""
        on_cuda = self.device.type == "cuda"
        # a graph must not reuse autocast's cast cache across replays
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.cfg.bf16 and on_cuda, cache_enabled=not self.graphs):
            outputs = as_outputs(self.net(blur))
        return restoration_loss([at_least_fp32(o) for o in outputs], gt, fft_weight=self.cfg.fft_weight)

    def __call__(self, blur: Tensor, gt: Tensor, it: int) -> Tensor:
        t0 = time.perf_counter() if self.first_step_seconds is None else None
        if self.cfg.channels_last:
            blur, gt = blur.contiguous(memory_format=torch.channels_last), gt.contiguous(memory_format=torch.channels_last)
        if self.graphs:
            loss = self._graphed(blur, gt, it)
        else:
            for g in self.opt.param_groups:
                g["lr"] = lr_at(it, self.cfg)
            loss = self._update(blur, gt, it, check_before=not self.cfg.compile)
        if t0 is not None:
            check_finite(loss, it)  # also waits for the GPU, so the time is the step's
            self.first_step_seconds = time.perf_counter() - t0
        return loss

    def _update(self, blur: Tensor, gt: Tensor, it: int, *, check_before: bool) -> Tensor:
        """forward + loss, backward, clipping, AdamW; the loss is checked before the backward (the plain
        step's order, a host sync) or after the update."""
        loss = self.loss_fn(blur, gt)
        if check_before:
            check_finite(loss, it)
        self.opt.zero_grad(set_to_none=True)
        self._backward_and_update(loss)
        if not check_before and not self.graphs:
            check_finite(loss, it)
        return loss

    def _backward_and_update(self, loss: Tensor) -> None:
        loss.backward()
        if self.cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.opt.step()

    def _set_lr(self, it: int) -> None:
        """The schedule's learning rate into the one GPU tensor every parameter group reads."""
        if self._lr is None:  # a resumed optimizer state may have brought its own lr value or tensor
            self._lr = torch.tensor(lr_at(it, self.cfg), dtype=torch.float32, device=self.device)
            for g in self.opt.param_groups:
                g["lr"] = self._lr
        self._lr.fill_(lr_at(it, self.cfg))

    def _graphed(self, blur: Tensor, gt: Tensor, it: int) -> Tensor:
        self._set_lr(it)
        if self._static is not None and self._static[0].shape != blur.shape:
            self._graph, self._static, self._eager_steps = None, None, 0  # a new progressive stage
        if self._graph is None and self._eager_steps < self.warmup:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                loss = self._update(blur, gt, it, check_before=False)
            torch.cuda.current_stream(self.device).wait_stream(side)
            self._eager_steps += 1
        else:
            if self._graph is None:
                self._capture(blur, gt)
            static_blur, static_gt, static_loss = self._static
            static_blur.copy_(blur)
            static_gt.copy_(gt)
            self._graph.replay()
            loss = static_loss.detach().clone()
        check_finite(loss, it)
        return loss

    def _capture(self, blur: Tensor, gt: Tensor) -> None:
        """Record one whole step on the graph's input tensors (nothing runs until it is replayed)."""
        static_blur, static_gt = blur.clone(), gt.clone()
        self.opt.zero_grad(set_to_none=True)  # backward then allocates the gradients inside the graph
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = self.loss_fn(static_blur, static_gt)
            self._backward_and_update(static_loss)
        self._graph, self._static = graph, (static_blur, static_gt, static_loss)
