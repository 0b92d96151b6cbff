"""Training loop: AdamW, flat-then-cosine learning rate, multi-scale L1 + FFT-L1, EMA, exact resume.

The loop reads top to bottom. Everything a run needs to continue bit-for-bit lives in one
checkpoint (model, EMA, optimizer, iteration, sampler RNG, torch RNG, config), written
atomically every ``checkpoint_every`` iterations and on SIGTERM, which is how SLURM announces a
time limit or pre-emption. The final ``model.pt`` holds the EMA weights plus the model spec, so
evaluation and ``dgno deblur`` rebuild the network from the file alone.
"""

from __future__ import annotations

import copy
import csv
import math
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from dgno import provenance
from dgno.data.paired import CropSampler, load_pairs, read_split
from dgno.io import InputError, atomic_path
from dgno.models.overrides import registry_overrides
from dgno.models.registry import build_model

CHECKPOINT_VERSION = 1


@dataclass
class TrainConfig:
    """Training hyper-parameters (paper values in config/paper.yaml; the demo scales them down)."""

    iterations: int = 60000
    batch_size: int = 8
    patch_size: int = 256
    lr: float = 3e-4
    lr_min: float = 1e-6
    flat_fraction: float = 0.5  # share of iterations at constant lr before the cosine decay
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


def pick_device(name: str) -> torch.device:
    """'auto' → CUDA when available, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"device={name!r}; allowed: 'auto', 'cpu', 'cuda'")
    return torch.device(name)


def lr_at(it: int, cfg: TrainConfig) -> float:
    """Learning rate at iteration `it`: constant `lr` for the first flat_fraction of the run, then
    cosine decay to `lr_min` at the last iteration (the paper's schedule)."""
    flat = int(cfg.flat_fraction * cfg.iterations)
    if it < flat:
        return cfg.lr
    span = max(cfg.iterations - flat, 1)
    t = min((it - flat) / span, 1.0)
    return cfg.lr_min + 0.5 * (cfg.lr - cfg.lr_min) * (1 + math.cos(math.pi * t))


def multiscale_targets(gt: torch.Tensor, outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Bilinear-downsampled ground truth matching each output's size (the paper's 1/4, 1/2, 1 targets)."""
    return [gt if o.shape[-2:] == gt.shape[-2:] else F.interpolate(gt, size=o.shape[-2:], mode="bilinear", align_corners=False, antialias=True) for o in outputs]


def restoration_loss(outputs: list[torch.Tensor], gt: torch.Tensor, *, fft_weight: float) -> torch.Tensor:
    """Σ_scales  L1(ŷ_s, y_s) + λ · L1(FFT ŷ_s, FFT y_s).

    The FFT term penalises missing high frequencies that a pixel L1 barely sees, which is the
    whole point of deblurring. Single-output models pass a one-element list.
    """
    total = gt.new_zeros(())
    for out, target in zip(outputs, multiscale_targets(gt, outputs)):
        total = total + F.l1_loss(out, target)
        if fft_weight:
            fo, ft = torch.fft.rfft2(out.float()), torch.fft.rfft2(target.float())
            total = total + fft_weight * (fo - ft).abs().mean()
    return total


def as_outputs(y: torch.Tensor | list[torch.Tensor]) -> list[torch.Tensor]:
    return list(y) if isinstance(y, (list, tuple)) else [y]


@torch.no_grad()
def ema_update(ema: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    """ema ← decay·ema + (1 − decay)·model, for parameters and floating buffers."""
    for e, m in zip(ema.state_dict().values(), model.state_dict().values()):
        if e.dtype.is_floating_point:
            e.lerp_(m, 1.0 - decay)
        else:
            e.copy_(m)


def ema_decay_at(it: int, decay: float) -> float:
    """Warm-up of the EMA decay, min(decay, (1+t)/(10+t)): short runs would otherwise evaluate
    weights dominated by the random initialisation."""
    return min(decay, (1.0 + it) / (10.0 + it))


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """torch.save through a temporary file + rename: a crash mid-write keeps the last good checkpoint."""
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


class _StopFlag:
    """Set by SIGTERM/SIGINT; the loop checkpoints and exits at the next iteration boundary."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        self.signum = signum


class Interrupted(RuntimeError):
    """Training stopped by a signal after writing a checkpoint; a rerun resumes from it."""


def _val_batches(val_pairs, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """A fixed set of held-out crops (same every evaluation), so validation curves are comparable."""
    if not val_pairs:
        return None
    patch = min(cfg.patch_size, *(min(p.gt.shape[:2]) for p in val_pairs))
    sampler = CropSampler(val_pairs, patch=patch, batch_size=cfg.val_crops, seed=cfg.seed + 12345, augment=False)
    return sampler.next_batch()


@torch.no_grad()
def _validate(model: torch.nn.Module, val: tuple[np.ndarray, np.ndarray], device: torch.device) -> float:
    model.eval()
    blur, gt = (torch.from_numpy(a).to(device) for a in val)
    pred = as_outputs(model(blur))[-1].clamp(0, 1)
    mse = ((pred - gt) ** 2).flatten(1).mean(1).clamp_min(1e-12)
    return float((10 * torch.log10(1.0 / mse)).mean())


def train(
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    model_choice: ModelChoice,
    levels: list[str],
    cfg: TrainConfig,
    progress: bool = True,
    install_signal_handlers: bool = True,
) -> Path:
    """Train one model on (blur level, gt) pairs of the training split; return the path of model.pt.

    Writes ``checkpoint.pt`` (resume state), ``train_metrics.csv`` (one row per log/val step) and,
    at the end, ``model.pt`` (EMA weights + model spec + provenance). A rerun with the same
    out_dir resumes from ``checkpoint.pt``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path, metrics_path, final_path = out_dir / "checkpoint.pt", out_dir / "train_metrics.csv", out_dir / "model.pt"
    device = pick_device(cfg.device)
    torch.manual_seed(cfg.seed)

    split = read_split(data_dir)
    train_ids = split.get("train", [])
    if not train_ids:
        raise InputError(f"{Path(data_dir) / 'split.csv'}: no training images. Fix: regenerate the split")
    val_ids = split.get("val", [])
    # Decode everything first: a bad file fails here, by name, before any compute is spent.
    pairs = load_pairs(data_dir, split="train", levels=levels, ids=train_ids, progress=progress)
    val_pairs = load_pairs(data_dir, split="val", levels=levels, ids=val_ids) if val_ids else []
    in_channels = 1 if pairs[0].gt.ndim == 2 else pairs[0].gt.shape[-1]

    model = build_model(model_choice.name, scale=model_choice.scale, in_channels=in_channels, **registry_overrides(model_choice.overrides)).to(device)
    ema = copy.deepcopy(model).eval()
    for p in ema.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    sampler = CropSampler(pairs, patch=cfg.patch_size, batch_size=cfg.batch_size, seed=cfg.seed)
    val = _val_batches(val_pairs, cfg)
    spec = {"name": model_choice.name, "scale": model_choice.scale, "hparams": model.hparams, "overrides": model_choice.overrides}

    start = 0
    if ckpt_path.exists():
        state = torch.load(ckpt_path, map_location=device, weights_only=False)
        if state.get("spec") != spec:
            raise InputError(
                f"{ckpt_path}: checkpoint was written for a different model/config ({state.get('spec')}). "
                "Fix: delete it to start over, or restore the config it was trained with"
            )
        model.load_state_dict(state["model"])
        ema.load_state_dict(state["ema"])
        opt.load_state_dict(state["optimizer"])
        sampler.load_state(state["sampler_rng"])
        torch.set_rng_state(state["torch_rng"])
        start = int(state["iteration"])
        tqdm.write(f"resuming {out_dir} from iteration {start}")
    elif metrics_path.exists():
        metrics_path.unlink()  # stale log of a run whose checkpoint is gone

    def checkpoint(it: int) -> None:
        save_checkpoint(
            ckpt_path,
            {
                "version": CHECKPOINT_VERSION,
                "spec": spec,
                "iteration": it,
                "model": model.state_dict(),
                "ema": ema.state_dict(),
                "optimizer": opt.state_dict(),
                "sampler_rng": sampler.state(),
                "torch_rng": torch.get_rng_state(),
                "train_config": asdict(cfg),
            },
        )

    stop = _StopFlag()
    previous = {}
    if install_signal_handlers:
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, stop)

    new_log = not metrics_path.exists()
    log_fh = metrics_path.open("a", newline="")
    log = csv.writer(log_fh)
    if new_log:
        log.writerow(["iteration", "loss", "lr", "val_psnr", "seconds"])
    t0 = time.perf_counter()
    bar = tqdm(range(start, cfg.iterations), initial=start, total=cfg.iterations, desc=f"train {model_choice.name}", disable=not progress, mininterval=1.0)
    try:
        model.train()
        for it in bar:
            for g in opt.param_groups:
                g["lr"] = lr_at(it, cfg)
            blur, gt = (torch.from_numpy(a).to(device) for a in sampler.next_batch())
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.bf16 and device.type == "cuda"):
                outputs = as_outputs(model(blur))
            loss = restoration_loss([o.float() for o in outputs], gt, fft_weight=cfg.fft_weight)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss became {loss.item()} at iteration {it}; lower train.lr or check the data")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            ema_update(ema, model, ema_decay_at(it, cfg.ema_decay))
            done = it + 1
            bar.set_postfix(loss=f"{loss.item():.4f}", lr=f"{lr_at(it, cfg):.1e}", refresh=False)
            val_psnr = ""
            if val is not None and (done % cfg.val_every == 0 or done == cfg.iterations):
                val_psnr = f"{_validate(ema, val, device):.4f}"
            if done % cfg.log_every == 0 or val_psnr or done == cfg.iterations:
                log.writerow([done, f"{loss.item():.6f}", f"{lr_at(it, cfg):.3e}", val_psnr, f"{time.perf_counter() - t0:.2f}"])
                log_fh.flush()
            if done % cfg.checkpoint_every == 0 or done == cfg.iterations:
                checkpoint(done)
            if stop.signum is not None:
                checkpoint(done)
                raise Interrupted(f"received signal {stop.signum} at iteration {done}; checkpoint written to {ckpt_path}")
    finally:
        bar.close()
        log_fh.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    final = {
        "version": CHECKPOINT_VERSION,
        "spec": spec,
        "state_dict": ema.state_dict(),
        "iterations": cfg.iterations,
        "train_config": asdict(cfg),
        "levels": levels,
        "data_dir": str(data_dir),
        "provenance": provenance.collect(device),
    }
    save_checkpoint(final_path, final)
    return final_path


def load_trained(path: str | Path, device: torch.device | str = "cpu") -> tuple[torch.nn.Module, dict[str, Any]]:
    """Rebuild a network from a ``model.pt`` written by :func:`train` (no flags needed)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: checkpoint does not exist. Fix: train the model first (snakemake ... model.pt)")
    try:
        blob = torch.load(path, map_location=device, weights_only=False)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {exc}). Fix: retrain or re-copy it") from exc
    if not isinstance(blob, dict) or "spec" not in blob or "state_dict" not in blob:
        raise InputError(f"{path}: not a dgno model file (no model spec inside). Fix: use the model.pt written by 'dgno train'")
    spec = blob["spec"]
    try:
        model = build_model(spec["name"], scale=spec["scale"], **_rebuild_kwargs(spec))
        model.load_state_dict(blob["state_dict"])
    except (ValueError, RuntimeError, KeyError) as exc:
        raise InputError(f"{path}: its model spec does not match this version of dgno ({exc}). Fix: retrain with this version") from exc
    return model.to(device).eval(), blob


def _rebuild_kwargs(spec: dict[str, Any]) -> dict[str, Any]:
    """Constructor kwargs for build_model from a saved spec: channels + overrides (hparams are the result)."""
    kwargs = registry_overrides(spec.get("overrides", {}))
    kwargs["in_channels"] = spec["hparams"].get("in_channels", 1)
    return kwargs
