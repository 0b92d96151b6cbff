"""Resuming a training run exactly, and never resuming another run by mistake.

A checkpoint carries the run's fingerprint (model spec, recipe, levels, a digest of the data). A
rerun resumes only a checkpoint of the same fingerprint that has not finished; any other is set
aside under a new name (kept, never deleted) and training starts over.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from dgno.train.distributed import Ranks, barrier
from dgno.train.recipe import SPEED_ONLY, TrainConfig


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

    The speed-only settings (``recipe.SPEED_ONLY``: prefetch and the step's levers) are left out: they change
    how fast a step runs, not the batches or the recipe.  A checkpoint resumes only a run with
    the same fingerprint; any change (a new flux, learning rate, seed, level or dataset) trains anew.
    """
    recipe = {k: v for k, v in asdict(cfg).items() if k not in SPEED_ONLY}
    return json.loads(json.dumps({"spec": spec, "train_config": recipe, "levels": list(levels), "data": data_digest(data_dir, levels)}, sort_keys=True, default=list))


def set_aside(path: Path, reason: str) -> Path:
    """Rename a checkpoint that belongs to another run to ``<name>.stale-<n>.pt`` (kept, never deleted)."""
    n = 1
    while (aside := path.with_name(f"{path.stem}.stale-{n}{path.suffix}")).exists():
        n += 1
    path.rename(aside)
    tqdm.write(f"{path}: {reason}; kept as {aside.name}, training from scratch")
    return aside


def fingerprint_change(saved: dict[str, Any] | None, current: dict[str, Any]) -> str:
    """Which parts of the fingerprint differ, as words for the log."""
    if saved is None:
        return "written by an older version (no run fingerprint)"
    parts = [k for k in current if saved.get(k) != current[k]]
    return "written for a different " + " / ".join({"spec": "model", "train_config": "training recipe", "levels": "blur levels", "data": "dataset", "start": "starting weights", "selection": "early-stopping rule"}[k] for k in parts)


def resumable_state(ckpt_path: Path, fingerprint: dict[str, Any], cfg: TrainConfig, ranks: Ranks, device: torch.device) -> dict[str, Any] | None:
    """The checkpoint to resume from, or None.

    Resume only an unfinished checkpoint of the same run (a SLURM retry, a pre-emption). Any other
    checkpoint is set aside (kept) and training starts over: one of a different run, and a finished
    one, since being asked to train again after finishing means a rerun (snakemake -R) is wanted.
    """
    state = torch.load(ckpt_path, map_location=device, weights_only=True) if ckpt_path.exists() else None
    if state is not None and (state.get("fingerprint") != fingerprint or finished(state, cfg)):
        reason = fingerprint_change(state.get("fingerprint"), fingerprint) if state.get("fingerprint") != fingerprint else "already finished (a rerun trains anew)"
        barrier(ranks)  # every rank has read it before rank 0 renames it
        if ranks.main:
            set_aside(ckpt_path, reason)
        state = None
    return state


def finished(state: dict[str, Any], cfg: TrainConfig) -> bool:
    """Whether a checkpoint's run is over: all its iterations done, or stopped early (``dgno.train.early_stop``)."""
    return int(state["iteration"]) >= cfg.iterations or (state.get("selection") or {}).get("stopped_at") is not None


def resume_rng(state: dict[str, Any], ranks: Ranks) -> dict[str, Any] | None:
    """This rank's saved torch RNG state, or None when the checkpoint was written by fewer processes
    (checkpoints from before data parallelism hold rank 0's only). The crop stream is one for all
    ranks: every rank resumes it from ``state["sampler_rng"]``, whatever the number of processes."""
    saved = state.get("ranks") or [{"torch_rng": state["torch_rng"]}]
    return saved[ranks.rank] if ranks.rank < len(saved) else None
