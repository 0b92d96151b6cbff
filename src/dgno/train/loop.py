"""Training loop: AdamW, flat-then-cosine learning rate, multi-scale L1 + FFT-L1, EMA, exact resume.

The loop reads top to bottom (:func:`_loop`, one :func:`_step` per iteration). Everything a run
needs to continue bit-for-bit lives in one checkpoint (model, EMA, optimizer, iteration, sampler
RNG, torch RNG, config), written atomically every ``checkpoint_every`` iterations and on SIGTERM,
which is how SLURM announces a time limit or pre-emption (``dgno.train.resume`` decides whether a
checkpoint belongs to this run). The final ``model.pt`` holds the EMA weights plus the model spec,
so evaluation and ``dgno deblur`` rebuild the network from the file alone
(:func:`dgno.checkpoint.load_trained`), and the dataset's input normalisation (``"normalise"``, from its
manifest), which ``dgno deblur`` applies to users' images. Recording it changes no weight and no score.

Crops are cut by a background thread (``prefetch`` batches ahead, ``dgno.train.batches``) so a GPU
does not wait for numpy. The optimizer step itself, and the levers that speed it up on a GPU
(channels-last, cuDNN autotuning, fused norms and AdamW, torch.compile, CUDA graphs), live in
``dgno.train.step``. Launched by ``torchrun`` with several processes, the same function trains
data-parallel (DistributedDataParallel, ``dgno.train.distributed``): ``batch_size`` stays the batch
of one optimizer step and is split over the ranks: every rank cuts the step's whole batch from one
seeded stream and trains on its share, so a run gives the weights of a one-process run whatever the
number of processes (up to float rounding), and only rank 0 writes files.
"""

from __future__ import annotations

import copy
import csv
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from dgno import provenance
from dgno.checkpoint import CHECKPOINT_VERSION, pick_device, save_checkpoint, weights_digest
from dgno.data.paired import CropSampler, dataset_normalisation, load_pairs, read_split
from dgno.io import InputError, atomic_path
from dgno.models.outputs import as_outputs
from dgno.models.overrides import registry_overrides
from dgno.models.registry import build_model
from dgno.progress import bar as progress_bar
from dgno.train.batches import BatchStream, cut_batch, val_batches
from dgno.train.distributed import Ranks, agree, barrier, gather, leave_distributed, setup_distributed, sync_buffers
from dgno.train.early_stop import BestOnValidation
from dgno.train.launch import check_batches
from dgno.train.recipe import ModelChoice, StartWeights, TrainConfig
from dgno.train.resume import resumable_state, resume_rng, run_fingerprint
from dgno.train.schedule import ema_decay_at, lr_at, progressive_stage
from dgno.train.step import TrainStep, active_levers, backend_flags, make_optimizer, prepare_model

# Exit status of a training stopped by SIGTERM after writing its checkpoint: 128 + SIGTERM, what a
# shell reports for a process the signal ended, so SLURM and Snakemake see a failed job and retry.
INTERRUPTED_EXIT = 143
LOG_COLUMNS = ["iteration", "loss", "lr", "val_psnr", "seconds"]


class Interrupted(RuntimeError):
    """Training stopped by a signal after writing a checkpoint; a rerun resumes from it."""


class _StopFlag:
    """Set by SIGTERM/SIGINT; the loop checkpoints and exits at the next iteration boundary."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        self.signum = signum


@torch.no_grad()
def ema_update(ema: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    """ema ← decay·ema + (1 − decay)·model, for parameters and floating buffers.

    One multi-tensor lerp for all floating tensors (the same values as a lerp per tensor, in a few
    kernels instead of one per tensor on a GPU); integer buffers are copied.
    """
    floats: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
    for e, m in zip(ema.state_dict().values(), model.state_dict().values()):
        if e.dtype.is_floating_point:
            floats[0].append(e)
            floats[1].append(m)
        else:
            e.copy_(m)
    if floats[0]:
        torch._foreach_lerp_(floats[0], floats[1], 1.0 - decay)


@dataclass
class _Run:
    """One process's training run: its networks, optimizer, sampler, recipe and output folder."""

    model: torch.nn.Module
    ema: torch.nn.Module
    net: torch.nn.Module  # the network called in the loop: the model, DDP-wrapped when distributed
    opt: torch.optim.Optimizer
    stepper: TrainStep
    sampler: CropSampler
    val: tuple[np.ndarray, np.ndarray] | None
    spec: dict[str, Any]
    fingerprint: dict[str, Any]
    cfg: TrainConfig
    ranks: Ranks
    device: torch.device
    out_dir: Path
    normalise: str  # the dataset's input normalisation, recorded in model.pt for dgno deblur
    log_rows: list[list[str]] = field(default_factory=list)
    selection: BestOnValidation | None = None  # best-validation weights and early stopping (fine-tuning)
    start: dict[str, Any] | None = None  # where the starting weights came from, when not from scratch

    @property
    def ckpt_path(self) -> Path:
        return self.out_dir / "checkpoint.pt"

    @property
    def metrics_path(self) -> Path:
        return self.out_dir / "train_metrics.csv"


def _load_training_data(data_dir: Path, levels: list[str], ranks: Ranks, progress: bool):
    """(training pairs, validation pairs, channels); decoded first, so a bad file fails by name before any compute."""
    split = read_split(data_dir)
    train_ids = split.get("train", [])
    if not train_ids:
        raise InputError(f"{data_dir / 'split.csv'}: no training images. Fix: regenerate the split")
    val_ids = split.get("val", [])
    pairs = load_pairs(data_dir, split="train", levels=levels, ids=train_ids, progress=progress)
    val_pairs = load_pairs(data_dir, split="val", levels=levels, ids=val_ids) if val_ids and ranks.main else []
    channels = 1 if len(pairs[0].shape) == 2 else pairs[0].shape[-1]
    return pairs, val_pairs, channels


def _build_networks(model_choice: ModelChoice, channels: int, cfg: TrainConfig, ranks: Ranks, device: torch.device, start: StartWeights | None = None):
    """(model, its EMA copy, the network to call — DDP-wrapped when distributed —, AdamW); the model holds
    ``start``'s weights when given (the EMA, a copy, starts from them too)."""
    model = build_model(model_choice.name, scale=model_choice.scale, in_channels=channels, **registry_overrides(model_choice.overrides)).to(device)
    if start is not None:
        try:
            model.load_state_dict(start.state_dict)
        except RuntimeError as exc:
            raise InputError(f"{start.source.get('file', 'the starting weights')}: do not fit network {model_choice.name} ({str(exc).splitlines()[0]}). Fix: start from a model file of that network") from exc
    prepare_model(model, cfg)  # memory format and norm kernels (speed levers), copied into the EMA
    ema = copy.deepcopy(model).eval()  # copied before DDP attaches its gradient hooks to the parameters
    for p in ema.parameters():
        p.requires_grad_(False)
    net: torch.nn.Module = model
    if ranks.distributed:
        # Wrapping broadcasts rank 0's initial weights and buffers; gradients are averaged in backward.
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        ema.load_state_dict(model.state_dict())  # start the EMA from the broadcast weights
    return model, ema, net, make_optimizer(model, cfg, device)


def _write_log(path: Path, rows: list[list[str]]) -> None:
    """The whole training curve as CSV (rewritten from the checkpoint's copy on resume)."""
    with atomic_path(path) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(LOG_COLUMNS)
        writer.writerows(rows)


@torch.no_grad()
def _validate(model: torch.nn.Module, val: tuple[np.ndarray, np.ndarray], device: torch.device) -> float:
    model.eval()
    blur, gt = (torch.from_numpy(a).to(device) for a in val)
    pred = as_outputs(model(blur))[-1].clamp(0, 1)
    mse = ((pred - gt) ** 2).flatten(1).mean(1).clamp_min(1e-12)
    return float((10 * torch.log10(1.0 / mse)).mean())


def _prepare(data_dir: Path, out_dir: Path, *, model_choice: ModelChoice, levels: list[str], cfg: TrainConfig, ranks: Ranks, device: torch.device, progress: bool,
             start: StartWeights | None = None, selection: BestOnValidation | None = None) -> _Run:  # fmt: skip
    """Data, networks, sampler and fingerprint of a new run, in the order that fixes its random numbers."""
    torch.manual_seed(cfg.seed)
    pairs, val_pairs, channels = _load_training_data(data_dir, levels, ranks, progress)
    if selection is not None and not val_pairs:
        raise InputError(f"{data_dir / 'split.csv'}: no validation images, which choosing the best weights needs. Fix: give the split a 'val' part")
    model, ema, net, opt = _build_networks(model_choice, channels, cfg, ranks, device, start)
    stepper = TrainStep(model, net, opt, cfg, device)
    # The whole step's batch on every rank, from the same seed: each rank trains on its share of it.
    sampler = CropSampler(pairs, patch=cfg.patch_size, batch_size=cfg.batch_size, seed=cfg.seed)
    val = val_batches(val_pairs, cfg)
    spec = {"name": model_choice.name, "scale": model_choice.scale, "hparams": model.hparams, "overrides": model_choice.overrides}
    fingerprint = run_fingerprint(spec, cfg, levels, data_dir)
    if start is not None:
        fingerprint["start"] = weights_digest(start.state_dict)
    if selection is not None:
        fingerprint["selection"] = selection.settings()
    return _Run(model, ema, net, opt, stepper, sampler, val, spec, fingerprint, cfg, ranks, device, out_dir, dataset_normalisation(data_dir),
                selection=selection, start=start.source if start is not None else None)  # fmt: skip


def _resume(run: _Run) -> int:
    """Load this run's unfinished checkpoint, if there is one; return the iteration to start from."""
    state = resumable_state(run.ckpt_path, run.fingerprint, run.cfg, run.ranks, run.device)
    if state is None:
        return 0
    run.model.load_state_dict(state["model"])
    run.ema.load_state_dict(state["ema"])
    run.opt.load_state_dict(state["optimizer"])
    run.sampler.load_state(state["sampler_rng"])  # one crop stream for all ranks
    rng = resume_rng(state, run.ranks)
    if rng is not None:
        torch.set_rng_state(rng["torch_rng"].cpu())  # map_location may have moved it to the GPU
    run.log_rows = [list(r) for r in state.get("log", [])]
    if run.selection is not None:
        run.selection.load_state(state.get("selection"))
    if run.ranks.main:
        tqdm.write(f"resuming {run.out_dir} from iteration {int(state['iteration'])}")
    return int(state["iteration"])


def _checkpoint(run: _Run, batches: BatchStream, it: int) -> None:
    """Collective: every rank hands in its RNG states, rank 0 writes, all wait for the write
    (a rank exiting early, e.g. on SIGTERM, would make torchrun kill rank 0 mid-write)."""
    per_rank = gather({"sampler_rng": batches.state(), "torch_rng": torch.get_rng_state()}, run.ranks)
    if run.ranks.main:
        save_checkpoint(
            run.ckpt_path,
            {
                "version": CHECKPOINT_VERSION,
                "spec": run.spec,
                "fingerprint": run.fingerprint,
                "iteration": it,
                "model": run.model.state_dict(),
                "ema": run.ema.state_dict(),
                "optimizer": run.opt.state_dict(),
                "sampler_rng": per_rank[0]["sampler_rng"],
                "torch_rng": per_rank[0]["torch_rng"],
                "ranks": per_rank,
                "train_config": asdict(run.cfg),
                "normalise": run.normalise,
                "log": run.log_rows,
                "selection": run.selection.state() if run.selection is not None else None,
            },
        )
    barrier(run.ranks)


def _step(run: _Run, batches: BatchStream, it: int) -> torch.Tensor:
    """One optimizer step on the next batch (``dgno.train.step``), then the buffers and the EMA; returns this rank's loss."""
    cfg, ranks, device = run.cfg, run.ranks, run.device
    blur, gt = batches.next()  # the step's whole batch, the same on every rank
    if cfg.progressive:
        patch, stage_batch = progressive_stage(it, cfg)
        blur, gt = (t.to(device, non_blocking=True) for t in (blur, gt))
        blur, gt = cut_batch(blur, gt, patch=patch, batch=stage_batch, seed=(cfg.seed * 1_000_003 + it) * 97)
    share = ranks.share(blur.shape[0])
    blur, gt = (t[share].to(device, non_blocking=True) for t in (blur, gt))
    loss = run.stepper(blur, gt, it)
    sync_buffers(run.model, ranks)
    ema_update(run.ema, run.model, ema_decay_at(it, cfg.ema_decay))
    return loss


def _log_step(run: _Run, log, log_fh, it: int, loss_value: float | None, t0: float) -> bool:
    """Append iteration ``it``'s row to the curve when it is a log or validation step (rank 0 only); True
    when the early-stopping rule says stop. ``it`` = −1 with no loss: the starting weights, before any step."""
    cfg, done = run.cfg, it + 1
    val_psnr, stop = "", False
    if run.val is not None and (done % cfg.val_every == 0 or done == cfg.iterations):
        psnr = _validate(run.ema, run.val, run.device)
        val_psnr = f"{psnr:.4f}"
        stop = run.selection is not None and run.selection.observe(done, psnr, run.ema)
    if done % cfg.log_every == 0 or val_psnr or done == cfg.iterations:
        loss = "" if loss_value is None else f"{loss_value:.6f}"
        row = [str(done), loss, f"{lr_at(max(it, 0), cfg):.3e}", val_psnr, f"{time.perf_counter() - t0:.2f}"]
        run.log_rows.append(row)
        log.writerow(row)
        log_fh.flush()
    return stop


def _loop(run: _Run, start: int, *, desc: str, progress: bool, install_signal_handlers: bool) -> None:
    """Iterations ``start`` … ``iterations − 1``, checkpointing on schedule and on SIGTERM/SIGINT."""
    cfg, ranks = run.cfg, run.ranks
    stop = _StopFlag()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)} if install_signal_handlers else {}
    log_fh = run.metrics_path.open("a", newline="") if ranks.main else None
    log = csv.writer(log_fh) if log_fh else None
    t0 = time.perf_counter()
    bar = progress_bar(range(start, cfg.iterations), initial=start, total=cfg.iterations, desc=desc, unit="step", enabled=progress, mininterval=1.0)
    # Started after the resume, so that it cuts from the restored sampler state; closed in finally.
    batches = BatchStream(run.sampler, depth=cfg.prefetch, pin_device=run.device if run.device.type == "cuda" else None)
    try:
        if run.selection is not None and start == 0 and log is not None:
            _log_step(run, log, log_fh, -1, None, t0)  # the starting weights' validation: the score to beat
        run.net.train()
        for it in bar:
            loss = _step(run, batches, it)
            loss_value, stopping = agree(loss, stop.signum is not None, ranks)
            done = it + 1
            bar.set_postfix(loss=f"{loss_value:.4f}", lr=f"{lr_at(it, cfg):.1e}", refresh=False)
            early = _log_step(run, log, log_fh, it, loss_value, t0) if log is not None else False
            if done % cfg.checkpoint_every == 0 or done == cfg.iterations or early:
                _checkpoint(run, batches, done)
            if early:
                tqdm.write(f"validation PSNR has not improved for {run.selection.patience} validations: stopped at iteration {done}, keeping iteration {run.selection.best_iteration}")
                break
            if stopping:
                _checkpoint(run, batches, done)
                raise Interrupted(f"received signal {stop.signum or 'on another rank'} at iteration {done}; checkpoint written to {run.ckpt_path}")
    finally:
        batches.close()
        bar.close()
        if log_fh is not None:
            log_fh.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _write_model(run: _Run, levels: list[str], data_dir: Path) -> Path:
    """model.pt: the evaluated weights (EMA or raw) with the spec and the recipe that made them.

    The weights follow the synchronised ones, so they must agree on every rank; a mismatch would mean
    model.pt depends on which rank wrote it.
    """
    cfg, ranks, path = run.cfg, run.ranks, run.out_dir / "model.pt"
    evaluated = (run.model if cfg.eval_weights == "raw" else run.ema).state_dict()
    if run.selection is not None and run.selection.best_state is not None:
        evaluated = run.selection.best_state  # the best validation's weights (the EMA's)
    digests = gather(weights_digest(evaluated), ranks)
    if len(set(digests)) != 1:
        raise RuntimeError(f"{cfg.eval_weights} weights differ between the {ranks.world} processes (digests {digests}); model.pt not written")
    if ranks.main:
        final = {
            "version": CHECKPOINT_VERSION,
            "spec": run.spec,
            "state_dict": evaluated,
            "weights": cfg.eval_weights,
            "weights_sha256": digests[0],
            "world_size": ranks.world,
            "iterations": cfg.iterations,
            "train_config": asdict(cfg),
            "levels": levels,
            "data_dir": str(data_dir),
            "normalise": run.normalise,
            "provenance": provenance.collect(run.device),
            "fingerprint": run.fingerprint,
        }
        if run.selection is not None:
            final.update(selection=run.selection.record(), start=run.start)
        save_checkpoint(path, final)
    barrier(ranks)
    return path


def _train(data_dir: Path, out_dir: Path, *, model_choice: ModelChoice, levels: list[str], cfg: TrainConfig, ranks: Ranks, device: torch.device, progress: bool, install_signal_handlers: bool,
           start: StartWeights | None = None, selection: BestOnValidation | None = None) -> Path:  # fmt: skip
    """The training run of one process (see :func:`train`); collectives are no-ops in a single process."""
    out_dir.mkdir(parents=True, exist_ok=True)
    run = _prepare(data_dir, out_dir, model_choice=model_choice, levels=levels, cfg=cfg, ranks=ranks, device=device, progress=progress, start=start, selection=selection)
    start = _resume(run)
    levers = active_levers(cfg, device)
    if ranks.main:
        _write_log(run.metrics_path, run.log_rows)  # the curve up to the checkpoint, even if Snakemake deleted the CSV
        if levers:
            tqdm.write(f"training step levers: {', '.join(levers)}")
    with backend_flags(cfg):
        _loop(run, start, desc=f"train {model_choice.name}", progress=progress, install_signal_handlers=install_signal_handlers)
    if ranks.main and cfg.compile and run.stepper.first_step_seconds is not None:
        tqdm.write(f"torch.compile: the first step took {run.stepper.first_step_seconds:.1f} s (compilation included)")
    return _write_model(run, levels, data_dir)


def train(
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    model_choice: ModelChoice,
    levels: list[str],
    cfg: TrainConfig,
    progress: bool = True,
    install_signal_handlers: bool = True,
    start: StartWeights | None = None,
    selection: BestOnValidation | None = None,
) -> Path:
    """Train one model on (blur level, gt) pairs of the training split; return the path of model.pt.

    Writes ``checkpoint.pt`` (resume state), ``train_metrics.csv`` (one row per log/val step) and,
    at the end, ``model.pt`` (EMA weights + model spec + provenance). A rerun with the same
    out_dir resumes from ``checkpoint.pt``.

    Under ``torchrun`` (WORLD_SIZE > 1) every process calls this function: it joins the process
    group (NCCL on CUDA, gloo on CPU), trains with DistributedDataParallel on ``batch_size /
    WORLD_SIZE`` crops per process, and leaves the group again if it created it.

    ``start``: begin from these weights instead of a random initialisation (fine-tuning).
    ``selection``: validate the starting weights too, keep the best validation's weights in model.pt and
    stop early by its rule (:mod:`dgno.train.early_stop`); one process only.
    """
    ranks = Ranks.from_env()
    if selection is not None and ranks.distributed:
        raise ValueError("selecting the best validation's weights needs a single training process (validation runs on rank 0 only); train with one process")
    device = pick_device(cfg.device)
    if ranks.distributed:
        check_batches(ranks.world, cfg.batch_size, cfg.progressive)
    own_group = False
    if ranks.distributed:
        device, own_group = setup_distributed(ranks, device, cfg.batch_size)
    try:
        return _train(
            Path(data_dir),
            Path(out_dir),
            model_choice=model_choice,
            levels=levels,
            cfg=cfg,
            ranks=ranks,
            device=device,
            progress=progress and ranks.main,
            install_signal_handlers=install_signal_handlers,
            start=start,
            selection=selection,
        )
    finally:
        if own_group:
            leave_distributed()
