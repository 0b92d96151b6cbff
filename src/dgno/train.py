"""Training loop: AdamW, flat-then-cosine learning rate, multi-scale L1 + FFT-L1, EMA, exact resume.

The loop reads top to bottom. Everything a run needs to continue bit-for-bit lives in one
checkpoint (model, EMA, optimizer, iteration, sampler RNG, torch RNG, config), written
atomically every ``checkpoint_every`` iterations and on SIGTERM, which is how SLURM announces a
time limit or pre-emption. The final ``model.pt`` holds the EMA weights plus the model spec, so
evaluation and ``dgno deblur`` rebuild the network from the file alone.

Crops are cut by a background thread (``prefetch`` batches ahead) so a GPU does not wait for
numpy. Launched by ``torchrun`` with several processes, the same function trains data-parallel
(DistributedDataParallel): ``batch_size`` stays the batch of one optimizer step and is split
over the ranks: every rank cuts the step's whole batch from one seeded stream and trains on its
share, so a run gives the weights of a one-process run whatever the number of processes (up to
float rounding), and only rank 0 writes files.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import math
import os
import queue
import signal
import threading
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
from dgno.launch import check_batches
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
    flat = round(cfg.flat_fraction * cfg.iterations)  # 1/3 of 60 000 is exactly the authors' 20 000
    if it < flat:
        return cfg.lr
    span = max(cfg.iterations - flat, 1)
    t = min((it - flat) / span, 1.0)
    return cfg.lr_min + 0.5 * (cfg.lr - cfg.lr_min) * (1 + math.cos(math.pi * t))


def multiscale_targets(gt: torch.Tensor, outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Ground truth at each output's size: bilinear, no antialiasing (the authors' 1/4, 1/2, 1 targets).

    On sizes divisible by 4 this is the authors' ``interpolate(gt, scale_factor=0.5 | 0.25,
    mode="bilinear")``: a 2-tap (1/2) or 2-tap-at-offset (1/4) sample of the sharp image, so the
    coarse targets keep some aliasing, as theirs do.
    """
    return [gt if o.shape[-2:] == gt.shape[-2:] else F.interpolate(gt, size=o.shape[-2:], mode="bilinear", align_corners=False) for o in outputs]


def fft_l1(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """mean over every frequency of ½(|Δ Re F| + |Δ Im F|), F = 2-D FFT (full spectrum, unnormalised).

    The authors' FFT term: real and imaginary parts stacked and compared by a mean L1. It penalises
    missing high frequencies that a pixel L1 barely sees, which is the point of deblurring.
    """
    diff = torch.fft.fft2(out.float()) - torch.fft.fft2(target.float())
    return torch.view_as_real(diff).abs().mean()


def restoration_loss(outputs: list[torch.Tensor], gt: torch.Tensor, *, fft_weight: float) -> torch.Tensor:
    """Σ_scales  L1(ŷ_s, y_s) + λ · fft_l1(ŷ_s, y_s)  (the authors' loss, λ = 0.1).

    Single-output models pass a one-element list.
    """
    total = gt.new_zeros(())
    for out, target in zip(outputs, multiscale_targets(gt, outputs)):
        total = total + F.l1_loss(out, target)
        if fft_weight:
            total = total + fft_weight * fft_l1(out, target)
    return total


def progressive_stage(it: int, cfg: TrainConfig) -> tuple[int, int]:
    """(patch_size, batch_size) of step ``it``: the stage it falls in, the last stage after the end."""
    end = 0
    for stage in cfg.progressive:
        end += stage["iterations"]
        if it < end:
            return stage["patch_size"], stage["batch_size"]
    last = cfg.progressive[-1] if cfg.progressive else {"patch_size": cfg.patch_size, "batch_size": cfg.batch_size}
    return last["patch_size"], last["batch_size"]


def cut_batch(blur: torch.Tensor, gt: torch.Tensor, *, patch: int, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random ``batch`` of the crops and a random ``patch``×``patch`` window of them (same for blur and gt).

    The authors' progressive training: the loader cuts full-size crops and each step keeps a random
    subset and sub-window.  Seeded by step, so a resumed run cuts the same windows.
    """
    if patch == blur.shape[-1] and batch == blur.shape[0]:
        return blur, gt
    g = torch.Generator().manual_seed(seed)
    keep = torch.randperm(blur.shape[0], generator=g)[:batch].sort().values.to(blur.device)
    y, x = (int(torch.randint(blur.shape[d] - patch + 1, (1,), generator=g)) for d in (-2, -1))
    window = (keep, slice(None), slice(y, y + patch), slice(x, x + patch))
    return blur[window], gt[window]


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


class BatchStream:
    """Training batches from a CropSampler, optionally cut ahead of time by one background thread.

    The thread calls ``sampler.next_batch()`` in order, so the sequence of batches is exactly the
    sampler's, whatever the timing; numpy releases the GIL while it copies crops, so the thread
    runs while the model steps. :meth:`state` is the sampler state *after the last batch handed
    out*, not the live one: a checkpoint written with it makes a resumed run regenerate the
    batches that were cut but never used, so resume stays exact. With ``depth=0`` batches are cut
    on demand in the caller's thread. ``pin_device`` (a CUDA device) page-locks the batches so
    that their copy to that GPU can overlap with compute.
    """

    def __init__(self, sampler: CropSampler, *, depth: int, pin_device: torch.device | None = None):
        self.sampler, self.pin_device = sampler, pin_device
        self._state = sampler.state()
        self._queue: queue.Queue | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if depth > 0:
            self._queue = queue.Queue(maxsize=depth)
            self._thread = threading.Thread(target=self._fill, name="dgno-batches", daemon=True)
            self._thread.start()

    def _cut(self) -> tuple[tuple[torch.Tensor, torch.Tensor], dict]:
        blur, gt = (torch.from_numpy(a) for a in self.sampler.next_batch())  # (B, C, P, P) each
        if self.pin_device is not None:
            blur, gt = blur.pin_memory(), gt.pin_memory()
        return (blur, gt), self.sampler.state()

    def _fill(self) -> None:
        """Producer: cut batches until stopped; an error is passed on to be raised by the consumer."""
        assert self._queue is not None
        if self.pin_device is not None and self.pin_device.index is not None:
            # A new thread starts on the default GPU; pinning from there would give every rank of a
            # multi-GPU run a context on GPU 0. (A bare "cuda" device is that default anyway.)
            torch.cuda.set_device(self.pin_device)
        while not self._stop.is_set():
            try:
                item: Any = self._cut()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the training thread
                item = exc
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next (blur, gt) batch as CPU tensors, (B, C, P, P) float32."""
        if self._queue is None:
            batch, self._state = self._cut()
            return batch
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        batch, self._state = item
        return batch

    def state(self) -> dict:
        """Sampler state after the last batch returned by :meth:`next` (what a checkpoint must hold)."""
        return self._state

    def close(self) -> None:
        """Stop the producer thread (idempotent); the batches it cut ahead are dropped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


@dataclass(frozen=True)
class Ranks:
    """Where this process stands in a data-parallel run (world 1 = an ordinary single process).

    ``torchrun`` sets WORLD_SIZE, RANK and LOCAL_RANK; everything else follows from them.
    """

    world: int = 1
    rank: int = 0
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Ranks:
        return cls(world=int(os.environ.get("WORLD_SIZE", "1")), rank=int(os.environ.get("RANK", "0")), local_rank=int(os.environ.get("LOCAL_RANK", "0")))

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        """Rank 0 alone writes checkpoints, metrics, the model file and progress output."""
        return self.rank == 0

    def share(self, batch: int) -> slice:
        """This rank's part of a step's batch (check_batches makes it split evenly)."""
        per = batch // self.world
        return slice(self.rank * per, (self.rank + 1) * per)


def _setup_distributed(ranks: Ranks, device: torch.device) -> tuple[torch.device, bool]:
    """Join the process group (NCCL on CUDA, gloo on CPU); return this rank's device and whether we
    created the group (and so must destroy it). Each rank drives the GPU numbered by its local rank."""
    import torch.distributed as dist

    if device.type == "cuda":
        device = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(device)
    if dist.is_initialized():
        return device, False
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return device, True


def _sync_buffers(model: torch.nn.Module, ranks: Ranks) -> None:
    """Copy rank 0's buffers (BatchNorm running statistics) to every rank after a step.

    Gradients are averaged by DDP, so the weights agree; running statistics are updated from each
    rank's own crops and would not. DDP broadcasts them only at the start of the next forward;
    doing it before the EMA update keeps the EMA, and so model.pt, identical on every rank. One
    broadcast per dtype, of all buffers flattened (models without buffers skip it).
    """
    import torch.distributed as dist

    if not ranks.distributed:
        return
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for b in model.buffers():
        by_dtype.setdefault(b.dtype, []).append(b)
    for bufs in by_dtype.values():
        flat = torch.cat([b.reshape(-1) for b in bufs])
        dist.broadcast(flat, src=0)
        offset = 0
        for b in bufs:
            b.copy_(flat[offset : offset + b.numel()].view_as(b))
            offset += b.numel()


def _agree(loss: torch.Tensor, stop: bool, ranks: Ranks) -> tuple[float, bool]:
    """(mean loss over ranks, whether any rank was signalled): one all-reduce per iteration.

    Every rank must checkpoint and stop at the same iteration, because checkpoints are collective
    and a rank that leaves early makes torchrun kill the others (possibly mid-write).
    """
    if not ranks.distributed:
        return loss.item(), stop
    import torch.distributed as dist

    both = torch.stack([loss.detach().float(), loss.new_tensor(float(stop), dtype=torch.float32)])
    dist.all_reduce(both)
    total, stops = both.tolist()
    return total / ranks.world, stops > 0


def _gather(obj: Any, ranks: Ranks) -> list[Any]:
    """[obj of rank 0, obj of rank 1, ...] on every rank (just [obj] in a single process)."""
    if not ranks.distributed:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * ranks.world
    dist.all_gather_object(out, obj)
    return out


def _barrier(ranks: Ranks) -> None:
    if ranks.distributed:
        import torch.distributed as dist

        dist.barrier()


def weights_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """SHA-256 of a state dict's names, dtypes, shapes and bytes: equal digests mean equal weights."""
    h = hashlib.sha256()
    for name, t in state_dict.items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _val_batches(val_pairs, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """A fixed set of held-out crops (same every evaluation), so validation curves are comparable."""
    if not val_pairs:
        return None
    patch = min(cfg.patch_size, *(min(p.shape[:2]) for p in val_pairs))
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

    Under ``torchrun`` (WORLD_SIZE > 1) every process calls this function: it joins the process
    group (NCCL on CUDA, gloo on CPU), trains with DistributedDataParallel on ``batch_size /
    WORLD_SIZE`` crops per process, and leaves the group again if it created it.
    """
    ranks = Ranks.from_env()
    device = pick_device(cfg.device)
    if ranks.distributed:
        check_batches(ranks.world, cfg.batch_size, cfg.progressive)
    own_group = False
    if ranks.distributed:
        device, own_group = _setup_distributed(ranks, device)
        if ranks.main:  # the job log says how the run was split (a one-process run says nothing)
            import torch.distributed as dist

            tqdm.write(
                f"data-parallel training: world size {ranks.world} ({dist.get_backend()}), {cfg.batch_size} crops per step "
                f"= {cfg.batch_size // ranks.world} per process"
            )
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
        )
    finally:
        if own_group:
            import torch.distributed as dist

            dist.destroy_process_group()


def _resume_rng(state: dict[str, Any], ranks: Ranks) -> dict[str, Any] | None:
    """This rank's saved torch RNG state, or None when the checkpoint was written by fewer processes
    (checkpoints from before data parallelism hold rank 0's only). The crop stream is one for all
    ranks: every rank resumes it from ``state["sampler_rng"]``, whatever the number of processes."""
    saved = state.get("ranks") or [{"torch_rng": state["torch_rng"]}]
    return saved[ranks.rank] if ranks.rank < len(saved) else None


LOG_COLUMNS = ["iteration", "loss", "lr", "val_psnr", "seconds"]


def data_digest(data_dir: Path, levels: list[str]) -> str:
    """SHA-256 of what a run trains on: split.csv, manifest.json and each image's name, size and mtime.

    Not the image bytes: re-hashing a 100 GB dataset on every resume would cost more than the check is
    worth.  A re-generated or re-downloaded image gets a new modification time, so it counts as new
    data (a plain copy of a dataset folder does too: that retrains, it never resumes wrongly).
    """
    h = hashlib.sha256()
    for name in ("split.csv", "manifest.json"):
        path = data_dir / name
        h.update(name.encode() + (path.read_bytes() if path.exists() else b"<none>"))
    for folder in [data_dir / "gt", *(data_dir / "blur" / lvl for lvl in levels)]:
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            st = path.stat()
            h.update(f"{folder.name}/{path.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def run_fingerprint(spec: dict[str, Any], cfg: TrainConfig, levels: list[str], data_dir: Path) -> dict[str, Any]:
    """Everything a checkpoint's training depends on: model spec, recipe (incl. seed and device), levels, data.

    ``prefetch`` is left out: it changes speed, not the batches.  A checkpoint resumes only a run with
    the same fingerprint; any change (a new flux, learning rate, seed, level or dataset) trains anew.
    """
    recipe = {k: v for k, v in asdict(cfg).items() if k != "prefetch"}
    return json.loads(json.dumps({"spec": spec, "train_config": recipe, "levels": list(levels), "data": data_digest(data_dir, levels)}, sort_keys=True, default=list))


def _set_aside(path: Path, reason: str) -> Path:
    """Rename a checkpoint that belongs to another run to ``<name>.stale-<n>.pt`` (kept, never deleted)."""
    n = 1
    while (aside := path.with_name(f"{path.stem}.stale-{n}{path.suffix}")).exists():
        n += 1
    path.rename(aside)
    tqdm.write(f"{path}: {reason}; kept as {aside.name}, training from scratch")
    return aside


def _fingerprint_change(saved: dict[str, Any] | None, current: dict[str, Any]) -> str:
    """Which parts of the fingerprint differ, as words for the log."""
    if saved is None:
        return "written by an older version (no run fingerprint)"
    parts = [k for k in current if saved.get(k) != current[k]]
    return "written for a different " + " / ".join({"spec": "model", "train_config": "training recipe", "levels": "blur levels", "data": "dataset"}[k] for k in parts)


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


def _build_networks(model_choice: ModelChoice, channels: int, cfg: TrainConfig, ranks: Ranks, device: torch.device):
    """(model, its EMA copy, the network to call — DDP-wrapped when distributed —, AdamW)."""
    model = build_model(model_choice.name, scale=model_choice.scale, in_channels=channels, **registry_overrides(model_choice.overrides)).to(device)
    ema = copy.deepcopy(model).eval()  # copied before DDP attaches its gradient hooks to the parameters
    for p in ema.parameters():
        p.requires_grad_(False)
    net: torch.nn.Module = model
    if ranks.distributed:
        # Wrapping broadcasts rank 0's initial weights and buffers; gradients are averaged in backward.
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        ema.load_state_dict(model.state_dict())  # start the EMA from the broadcast weights
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    return model, ema, net, opt


def _write_log(path: Path, rows: list[list[str]]) -> None:
    """The whole training curve as CSV (rewritten from the checkpoint's copy on resume)."""
    with atomic_path(path) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(LOG_COLUMNS)
        writer.writerows(rows)


def _train(
    data_dir: Path,
    out_dir: Path,
    *,
    model_choice: ModelChoice,
    levels: list[str],
    cfg: TrainConfig,
    ranks: Ranks,
    device: torch.device,
    progress: bool,
    install_signal_handlers: bool,
) -> Path:
    """The training run of one process (see :func:`train`); collectives are no-ops in a single process."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path, metrics_path, final_path = out_dir / "checkpoint.pt", out_dir / "train_metrics.csv", out_dir / "model.pt"
    torch.manual_seed(cfg.seed)

    pairs, val_pairs, channels = _load_training_data(data_dir, levels, ranks, progress)
    model, ema, net, opt = _build_networks(model_choice, channels, cfg, ranks, device)
    # The whole step's batch on every rank, from the same seed: each rank trains on its share of it.
    sampler = CropSampler(pairs, patch=cfg.patch_size, batch_size=cfg.batch_size, seed=cfg.seed)
    val = _val_batches(val_pairs, cfg)
    spec = {"name": model_choice.name, "scale": model_choice.scale, "hparams": model.hparams, "overrides": model_choice.overrides}
    fingerprint = run_fingerprint(spec, cfg, levels, data_dir)

    # Resume only an unfinished checkpoint of the same run (a SLURM retry, a pre-emption). Any other
    # checkpoint is set aside (kept) and training starts over: one of a different run, and a finished
    # one, since being asked to train again after finishing means a rerun (snakemake -R) is wanted.
    start, log_rows = 0, []
    state = torch.load(ckpt_path, map_location=device, weights_only=True) if ckpt_path.exists() else None
    if state is not None and (state.get("fingerprint") != fingerprint or int(state["iteration"]) >= cfg.iterations):
        reason = _fingerprint_change(state.get("fingerprint"), fingerprint) if state.get("fingerprint") != fingerprint else "already finished (a rerun trains anew)"
        _barrier(ranks)  # every rank has read it before rank 0 renames it
        if ranks.main:
            _set_aside(ckpt_path, reason)
        state = None
    if state is not None:
        model.load_state_dict(state["model"])
        ema.load_state_dict(state["ema"])
        opt.load_state_dict(state["optimizer"])
        sampler.load_state(state["sampler_rng"])
        rng = _resume_rng(state, ranks)
        if rng is not None:
            torch.set_rng_state(rng["torch_rng"].cpu())  # map_location may have moved it to the GPU
        start, log_rows = int(state["iteration"]), [list(r) for r in state.get("log", [])]
        if ranks.main:
            tqdm.write(f"resuming {out_dir} from iteration {start}")
    if ranks.main:
        _write_log(metrics_path, log_rows)  # the curve up to the checkpoint, even if Snakemake deleted the CSV

    def checkpoint(it: int) -> None:
        """Collective: every rank hands in its RNG states, rank 0 writes, all wait for the write
        (a rank exiting early, e.g. on SIGTERM, would make torchrun kill rank 0 mid-write)."""
        per_rank = _gather({"sampler_rng": batches.state(), "torch_rng": torch.get_rng_state()}, ranks)
        if ranks.main:
            save_checkpoint(
                ckpt_path,
                {
                    "version": CHECKPOINT_VERSION,
                    "spec": spec,
                    "fingerprint": fingerprint,
                    "iteration": it,
                    "model": model.state_dict(),
                    "ema": ema.state_dict(),
                    "optimizer": opt.state_dict(),
                    "sampler_rng": per_rank[0]["sampler_rng"],
                    "torch_rng": per_rank[0]["torch_rng"],
                    "ranks": per_rank,
                    "train_config": asdict(cfg),
                    "log": log_rows,
                },
            )
        _barrier(ranks)

    stop = _StopFlag()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)} if install_signal_handlers else {}
    log_fh = metrics_path.open("a", newline="") if ranks.main else None
    log = csv.writer(log_fh) if log_fh else None
    t0 = time.perf_counter()
    bar = tqdm(range(start, cfg.iterations), initial=start, total=cfg.iterations, desc=f"train {model_choice.name}", disable=not progress, mininterval=1.0)
    # Started after the resume, so that it cuts from the restored sampler state; closed in finally.
    batches = BatchStream(sampler, depth=cfg.prefetch, pin_device=device if device.type == "cuda" else None)
    try:
        net.train()
        for it in bar:
            for g in opt.param_groups:
                g["lr"] = lr_at(it, cfg)
            blur, gt = batches.next()  # the step's whole batch, the same on every rank
            if cfg.progressive:
                patch, stage_batch = progressive_stage(it, cfg)
                blur, gt = (t.to(device, non_blocking=True) for t in (blur, gt))
                blur, gt = cut_batch(blur, gt, patch=patch, batch=stage_batch, seed=(cfg.seed * 1_000_003 + it) * 97)
            share = ranks.share(blur.shape[0])
            blur, gt = (t[share].to(device, non_blocking=True) for t in (blur, gt))
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.bf16 and device.type == "cuda"):
                outputs = as_outputs(net(blur))
            loss = restoration_loss([o.float() for o in outputs], gt, fft_weight=cfg.fft_weight)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss became {loss.item()} at iteration {it}; lower train.lr or check the data")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            _sync_buffers(model, ranks)
            ema_update(ema, model, ema_decay_at(it, cfg.ema_decay))
            loss_value, stopping = _agree(loss, stop.signum is not None, ranks)
            done = it + 1
            bar.set_postfix(loss=f"{loss_value:.4f}", lr=f"{lr_at(it, cfg):.1e}", refresh=False)
            if log is not None:
                val_psnr = ""
                if val is not None and (done % cfg.val_every == 0 or done == cfg.iterations):
                    val_psnr = f"{_validate(ema, val, device):.4f}"
                if done % cfg.log_every == 0 or val_psnr or done == cfg.iterations:
                    row = [str(done), f"{loss_value:.6f}", f"{lr_at(it, cfg):.3e}", val_psnr, f"{time.perf_counter() - t0:.2f}"]
                    log_rows.append(row)
                    log.writerow(row)
                    log_fh.flush()
            if done % cfg.checkpoint_every == 0 or done == cfg.iterations:
                checkpoint(done)
            if stopping:
                checkpoint(done)
                raise Interrupted(f"received signal {stop.signum or 'on another rank'} at iteration {done}; checkpoint written to {ckpt_path}")
    finally:
        batches.close()
        bar.close()
        if log_fh is not None:
            log_fh.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return _write_model(final_path, model if cfg.eval_weights == "raw" else ema, spec=spec, cfg=cfg, levels=levels, data_dir=data_dir, ranks=ranks, device=device)


def _write_model(path: Path, evaluated: torch.nn.Module, *, spec, cfg: TrainConfig, levels, data_dir: Path, ranks: Ranks, device) -> Path:
    """model.pt: the evaluated weights (EMA or raw) with the spec and the recipe that made them.

    The weights follow the synchronised ones, so they must agree on every rank; a mismatch would mean
    model.pt depends on which rank wrote it.
    """
    digests = _gather(weights_digest(evaluated.state_dict()), ranks)
    if len(set(digests)) != 1:
        raise RuntimeError(f"{cfg.eval_weights} weights differ between the {ranks.world} processes (digests {digests}); model.pt not written")
    if ranks.main:
        final = {
            "version": CHECKPOINT_VERSION,
            "spec": spec,
            "state_dict": evaluated.state_dict(),
            "weights": cfg.eval_weights,
            "weights_sha256": digests[0],
            "world_size": ranks.world,
            "iterations": cfg.iterations,
            "train_config": asdict(cfg),
            "levels": levels,
            "data_dir": str(data_dir),
            "provenance": provenance.collect(device),
        }
        save_checkpoint(path, final)
    _barrier(ranks)
    return path


def load_trained(path: str | Path, device: torch.device | str = "cpu") -> tuple[torch.nn.Module, dict[str, Any]]:
    """Rebuild a network from a ``model.pt`` written by :func:`train` (no flags needed)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: checkpoint does not exist. Fix: train the model first (snakemake ... model.pt)")
    try:
        # weights_only: a model file is data; full unpickling would run code from a shared file
        blob = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise InputError(
            f"{path}: not a readable checkpoint, or one holding objects other than tensors and plain data "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). Fix: retrain or re-copy it; never load model files from untrusted sources"
        ) from exc
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
