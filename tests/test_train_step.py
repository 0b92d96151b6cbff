"""The training step's speed levers (dgno.train.step) compute the reference step: same gradients and updated
weights within float64 rounding on a CPU; the CUDA-only levers are checked on a GPU when there is one."""

from __future__ import annotations

import csv
import dataclasses
import os
import signal

import pytest
import torch

from dgno.layers.blocks import LayerNorm2d, group_layer_norm
from dgno.layers.operator import HeadLayerNorm
from dgno.models.outputs import as_outputs
from dgno.models.registry import build_model
from dgno.train import Interrupted, ModelChoice, TrainConfig, train
from dgno.train.losses import restoration_loss
from dgno.train.recipe import SPEED_ONLY
from dgno.train.resume import run_fingerprint
from dgno.train.schedule import lr_at
from dgno.train.step import TrainStep, active_levers, backend_flags, make_optimizer, prepare_model, set_fused_norms

CPU = torch.device("cpu")
# lr decays from the first step on, so a step that froze the learning rate would be caught
RECIPE = dict(iterations=6, lr=1e-3, flat_fraction=0.0, batch_size=2, patch_size=32, device="cpu")


def _cfg(**kw) -> TrainConfig:
    return TrainConfig.from_dict({**RECIPE, **kw})


def _model(block: str, dtype=torch.float64) -> torch.nn.Module:
    """Smoke-scale DGNO-Cell with the CPU demo's conv blocks (LayerNorm2d) or the paper's ASSM blocks."""
    torch.manual_seed(0)
    model = build_model("dgno-cell", scale="smoke", encoder_block=block)
    return model.to(dtype).train()


def _batches(n: int, dtype=torch.float64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.rand(2, 1, 32, 32, generator=g, dtype=dtype), torch.rand(2, 1, 32, 32, generator=g, dtype=dtype)) for _ in range(n)]


def _reference_step(model, opt, blur, gt, it, cfg) -> None:
    """The training step written out plainly, without levers: the specification every lever must match."""
    for g in opt.param_groups:
        g["lr"] = lr_at(it, cfg)
    loss = restoration_loss(list(as_outputs(model(blur))), gt, fft_weight=cfg.fft_weight)
    assert torch.isfinite(loss)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()


def _run(block: str, cfg: TrainConfig, steps: int, *, lever_step: bool, compile_backend: str = "aot_eager"):
    """(gradients of the first step, weights after ``steps`` steps), Gumbel routing seeded alike."""
    model = _model(block)
    batches = _batches(steps)
    torch.manual_seed(5)
    if lever_step:
        prepare_model(model, cfg)
        step = TrainStep(model, model, make_optimizer(model, cfg, CPU), cfg, CPU, compile_backend=compile_backend)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    grads = None
    for it, (blur, gt) in enumerate(batches):
        if lever_step:
            step(blur, gt, it)
        else:
            _reference_step(model, opt, blur, gt, it, cfg)
        if grads is None:
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return grads, {n: p.detach().clone() for n, p in model.named_parameters()}


def _max_rel(a: dict, b: dict) -> float:
    """Largest difference of a tensor relative to its largest entry, floored at 1e-3 of the largest
    entry overall: some gradients are zero up to rounding (a convolution's bias before an instance
    norm), and their rounding noise is not a difference."""
    assert a.keys() == b.keys()
    floor = 1e-3 * max(float(t.abs().max()) for t in b.values())
    return max(float((a[k] - b[k]).abs().max()) / max(float(b[k].abs().max()), floor) for k in a)


@pytest.mark.parametrize("block", ["conv", "assm"])
def test_default_step_is_the_reference_step_bit_for_bit(block):
    """No lever on: TrainStep is the reference step, operation for operation."""
    cfg = _cfg()
    g_new, w_new = _run(block, cfg, 3, lever_step=True)
    g_old, w_old = _run(block, cfg, 3, lever_step=False)
    assert _max_rel(g_new, g_old) == 0.0 and _max_rel(w_new, w_old) == 0.0


LEVER_SETTINGS = {
    "channels_last": dict(channels_last=True),
    "fused_layernorm": dict(fused_layernorm=True),
    "adamw_foreach": dict(adamw_impl="foreach"),
    "adamw_fused": dict(adamw_impl="fused"),
    "compile": dict(compile=True),
    "cuda_only_ignored_on_cpu": dict(cudnn_benchmark=True, cuda_graphs=True),
    "all": dict(channels_last=True, fused_layernorm=True, adamw_impl="fused", compile=True, cudnn_benchmark=True, cuda_graphs=True),
}


SLOW_LEVERS = {("compile", "conv"), ("all", "conv")}  # tracing the conv model takes 35-45 s on a busy 2-core machine


@pytest.mark.parametrize(
    ("lever", "block"),
    [pytest.param(lever, block, marks=pytest.mark.slow) if (lever, block) in SLOW_LEVERS else (lever, block) for lever in LEVER_SETTINGS for block in ("conv", "assm")],
)
def test_lever_gives_the_reference_gradients_and_weights(lever, block):
    """float64: first-step gradients equal the reference step's to 1e-9 and the weights after 3 steps to 1e-8 (relative
    to each tensor's largest entry, see ``_max_rel``). The weights' bound is looser because AdamW divides by
    √v: a gradient that is zero up to rounding (1e-15) still moves its weight by lr·g/(|g| + ε) ≈ 1e-10.

    compile uses the aot_eager backend here (dynamo + AOTAutograd, no C++ compiler), which checks
    that tracing the network and its backward changes nothing; Inductor's kernels are checked on the GPU.
    """
    cfg = _cfg(**LEVER_SETTINGS[lever])
    if cfg.compile and block == "assm" and not torch.cuda.is_available():
        pytest.skip("tracing the chunked PyTorch scan takes about 2 min on a CPU; test_cuda_lever_follows_the_eager_step compiles the Triton scan")
    g_new, w_new = _run(block, cfg, 3, lever_step=True)
    g_old, w_old = _run(block, cfg, 3, lever_step=False)
    assert _max_rel(g_new, g_old) < 1e-9
    assert _max_rel(w_new, w_old) < 1e-8
    torch._dynamo.reset()


def test_fused_norms_equal_the_reference_norms():
    """The fused LayerNorm2d (one F.layer_norm) and per-head norm (one var_mean) are the same functions,
    constant pixels (zero variance) and channels-last inputs included."""
    torch.manual_seed(0)
    x = torch.randn(2, 12, 5, 7, dtype=torch.float64) * 3 + 1
    x[:, :, 0, 0] = 2.5  # a pixel whose channels are all equal
    ln = LayerNorm2d(12).double()
    hn = HeadLayerNorm(4, 3).double()
    with torch.no_grad():
        for p in [*ln.parameters(), *hn.parameters()]:
            p.normal_()
    for inp in (x, x.contiguous(memory_format=torch.channels_last)):
        for norm in (ln, hn):
            norm.fused = False
            ref = norm(inp)
            norm.fused = True
            torch.testing.assert_close(norm(inp), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ln(x), group_layer_norm(x, 1, ln.weight[None], ln.bias[None], ln.eps), rtol=1e-12, atol=1e-12)
    model = build_model("dgno-cell", scale="smoke")
    assert set_fused_norms(model, True) == sum(isinstance(m, LayerNorm2d | HeadLayerNorm) for m in model.modules()) > 0


def test_graph_step_body_with_a_tensor_learning_rate_equals_the_reference_step():
    """What the CUDA-graph step runs, eagerly on a CPU: the learning rate in one tensor that each
    step overwrites (as a graph replay needs) and the finiteness check after the update."""
    cfg = _cfg(adamw_impl="fused")
    model = _model("conv")
    step = TrainStep(model, model, make_optimizer(model, cfg, CPU), cfg, CPU)
    torch.manual_seed(5)
    for it, (blur, gt) in enumerate(_batches(3)):
        step._set_lr(it)
        step._update(blur, gt, it, check_before=False)
    assert all(g["lr"] is step._lr for g in step.opt.param_groups) and float(step._lr) == pytest.approx(lr_at(2, cfg), rel=1e-6)
    _, w_old = _run("conv", cfg, 3, lever_step=False)
    assert _max_rel({n: p.detach() for n, p in model.named_parameters()}, w_old) < 1e-6  # float32 learning rate


@pytest.mark.parametrize("settings", [{}, pytest.param({"compile": True}, marks=pytest.mark.slow)])
def test_a_non_finite_loss_stops_training_with_the_iteration_named(settings):
    cfg = _cfg(**settings)
    model = _model("conv")
    step = TrainStep(model, model, make_optimizer(model, cfg, CPU), cfg, CPU, compile_backend="aot_eager")
    blur, gt = _batches(1)[0]
    with pytest.raises(FloatingPointError, match="iteration 7"):
        step(blur, gt * float("nan"), 7)
    torch._dynamo.reset()


def test_levers_are_speed_only_settings():
    """They change neither a run's fingerprint (a checkpoint resumes) nor the workflow's params (no retrain)."""
    from dgno.workflow.settings import SPEED_ONLY_TRAIN, train_settings

    assert set(SPEED_ONLY) == set(SPEED_ONLY_TRAIN)
    base = _cfg()
    fast = _cfg(**LEVER_SETTINGS["all"])
    spec = {"name": "dgno-cell"}
    assert run_fingerprint(spec, base, ["a"], _EMPTY) == run_fingerprint(spec, fast, ["a"], _EMPTY)
    config = {"train": dataclasses.asdict(fast), "datasets": {"d": {}}}
    assert not set(train_settings(config, "d")) & set(SPEED_ONLY)
    with pytest.raises(ValueError, match="adamw_impl"):
        _cfg(adamw_impl="sgd")
    assert active_levers(fast, CPU) == ["channels_last", "fused_layernorm", "adamw_impl=fused", "compile"]
    assert active_levers(base, CPU) == []


class _Empty:  # a data folder without files, for run_fingerprint
    def __truediv__(self, name):
        return self

    def exists(self):
        return False

    def is_dir(self):
        return False

    @property
    def name(self):
        return "empty"


_EMPTY = _Empty()


def test_training_with_levers_follows_the_same_curve_and_resumes_across_them(tiny_dataset, tmp_path, monkeypatch):
    """Through dgno.train.train (float32): the levers on give the loss curve of a run without them, and a
    run stopped (SIGTERM) with them off resumes with them on (speed-only settings)."""
    import dgno.train.loop as loop

    small = dict(iterations=8, batch_size=2, patch_size=32, val_every=4, log_every=1, checkpoint_every=100, val_crops=2, device="cpu")
    choice = ModelChoice(name="dgno-cell", scale="smoke")
    fast = TrainConfig(**small, channels_last=True, fused_layernorm=True, adamw_impl="foreach")
    train(tiny_dataset, tmp_path / "plain", model_choice=choice, levels=["a"], cfg=TrainConfig(**small), progress=False)
    train(tiny_dataset, tmp_path / "fast", model_choice=choice, levels=["a"], cfg=fast, progress=False)
    real_ema_update, calls = loop.ema_update, []

    def ema_then_signal(*args):
        real_ema_update(*args)
        calls.append(1)
        if len(calls) == 4:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(loop, "ema_update", ema_then_signal)
    with pytest.raises(Interrupted):
        train(tiny_dataset, tmp_path / "half", model_choice=choice, levels=["a"], cfg=TrainConfig(**small), progress=False)
    monkeypatch.setattr(loop, "ema_update", real_ema_update)
    train(tiny_dataset, tmp_path / "half", model_choice=choice, levels=["a"], cfg=fast, progress=False)

    def losses(run):
        with (tmp_path / run / "train_metrics.csv").open() as fh:
            return [float(r["loss"]) for r in csv.DictReader(fh)]

    assert len(losses("plain")) == len(losses("fast")) == len(losses("half")) == 8
    for run in ("fast", "half"):
        assert losses(run) == pytest.approx(losses("plain"), rel=1e-4)


def test_cudnn_flag_is_restored_after_training():
    before = torch.backends.cudnn.benchmark
    with backend_flags(_cfg(cudnn_benchmark=True)):
        assert torch.backends.cudnn.benchmark
    assert torch.backends.cudnn.benchmark == before


# --- CUDA ------------------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _gpu_run(cfg: TrainConfig, steps: int, block: str, seed: int = 5):
    """Smoke-scale DGNO-Cell on the GPU, float32 (ASSM blocks with the Triton scan); (losses, weights)."""
    from dgno.layers.mambair import set_scan_backend

    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = build_model("dgno-cell", scale="smoke", encoder_block=block).to(dev).train()
    if block == "assm":
        set_scan_backend(model, "triton")
    prepare_model(model, cfg)
    step = TrainStep(model, model, make_optimizer(model, cfg, dev), cfg, dev, warmup=2)
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)
    losses = [float(step(b.float().to(dev), g.float().to(dev), it)) for it, (b, g) in enumerate(_batches(steps))]
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


@cuda
@pytest.mark.parametrize("block", ["conv", "assm"])
@pytest.mark.parametrize("lever", ["cuda_graphs", "channels_last", "cudnn_benchmark", "adamw_fused", "compile", "all"])
def test_cuda_lever_follows_the_eager_step(lever, block):
    """On the GPU (float32, TF32 convolutions): the losses and weights of the eager step through warm-up,
    capture and replays. With ASSM blocks the Gumbel routing draws from the seeded CUDA generator; a
    replayed graph draws other numbers than eager kernels may, so the bound there is looser."""
    settings = {"bf16": False, **LEVER_SETTINGS.get(lever, {lever: True})}
    base_losses, base_w = _gpu_run(_cfg(bf16=False), 6, block)
    with backend_flags(_cfg(**settings)):
        losses, w = _gpu_run(_cfg(**settings), 6, block)
    tol = 1e-3 if block == "conv" else 5e-2
    assert losses == pytest.approx(base_losses, rel=tol)
    assert _max_rel(w, base_w) < 10 * tol
    torch._dynamo.reset()


@cuda
def test_cuda_graph_step_recaptures_on_a_new_batch_shape():
    """A progressive stage changes the batch shape: the step warms up and captures again."""
    dev = torch.device("cuda")
    cfg = _cfg(cuda_graphs=True, bf16=False)
    model = build_model("dgno-cell", scale="smoke").to(dev).train()
    step = TrainStep(model, model, make_optimizer(model, cfg, dev), cfg, dev, warmup=1)
    for it, size in enumerate([32, 32, 32, 16, 16, 16]):
        x = torch.rand(2, 1, size, size, device=dev)
        assert torch.isfinite(step(x, x, it))
    assert step._static[0].shape[-1] == 16
