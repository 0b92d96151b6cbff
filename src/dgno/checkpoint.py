"""Model files: write, fingerprint, read back and rebuild; and the authors' checkpoints turned into one.

A ``model.pt`` is a plain dict of tensors and data (``{"version", "spec", "state_dict", ...}``):
``spec`` is the registry name, scale, ``hparams`` and config overrides, so :func:`load_trained`
rebuilds the network from the file alone, with no flags. Training (``dgno.train``) writes such
files and its resume checkpoints through :func:`save_checkpoint`; :func:`import_authors` writes
one from a BasicSR checkpoint of the authors' DGNO. Everything that runs a trained model
(``dgno.inference``, ``dgno.analysis``, the experiments) loads it here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from dgno import provenance
from dgno.data.download import sha256_file
from dgno.io import InputError, atomic_path, check_model_path
from dgno.models.authors import convert_state_dict, load_authors_state, model_from_options, read_network_options
from dgno.models.overrides import registry_overrides
from dgno.models.registry import build_model

CHECKPOINT_VERSION = 1


def released_normalisation(in_channels: int) -> str:
    """The input normalisation of the authors' networks, by kind (recorded as a model file's ``"normalise"``).

    Their BBBC006 networks (1 channel) were trained on each image scaled by its own minimum and maximum,
    their 3DHistech networks (RGB) on 8-bit values / 255 (``dgno.inference.normalisation``).
    """
    return "minmax" if int(in_channels) == 1 else "dtype"


def pick_device(name: str) -> torch.device:
    """'auto' → CUDA when available, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"device={name!r}; allowed: 'auto', 'cpu', 'cuda'")
    return torch.device(name)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """torch.save through a temporary file + rename: a crash mid-write keeps the last good checkpoint."""
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def weights_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """SHA-256 of a state dict's names, dtypes, shapes and bytes: equal digests mean equal weights."""
    h = hashlib.sha256()
    for name, t in state_dict.items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _read_blob(path: Path, device: torch.device | str) -> dict[str, Any]:
    """The dict stored in a model or checkpoint file, read as data only."""
    check_model_path(path, missing_fix="check the path; a model this workflow trained is results/train/<dataset>/<method>/model.pt")
    try:
        # weights_only: a model file is data; full unpickling would run code from a shared file
        blob = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise InputError(
            f"{path}: not a readable checkpoint, or one holding objects other than tensors and plain data "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). Fix: retrain or re-copy it; never load model files from untrusted sources"
        ) from exc
    return blob if isinstance(blob, dict) else {}


def _build(path: Path, spec: dict[str, Any], state_dict: dict[str, torch.Tensor], device: torch.device | str) -> torch.nn.Module:
    try:
        model = build_model(spec["name"], scale=spec["scale"], **_rebuild_kwargs(spec))
        model.load_state_dict(state_dict)
    except (ValueError, RuntimeError, KeyError) as exc:
        raise InputError(f"{path}: its model spec does not match this version of dgno ({exc}). Fix: retrain with this version") from exc
    return model.to(device).eval()


def load_trained(path: str | Path, device: torch.device | str = "cpu") -> tuple[torch.nn.Module, dict[str, Any]]:
    """Rebuild a network from a ``model.pt`` written by training or :func:`import_authors` (no flags needed)."""
    path = Path(path)
    return _from_model_file(path, _read_blob(path, device), device)


def _from_model_file(path: Path, blob: dict[str, Any], device: torch.device | str) -> tuple[torch.nn.Module, dict[str, Any]]:
    if "spec" not in blob or "state_dict" not in blob:
        hint = " (a training's resume checkpoint: dgno evaluate scores it)" if "iteration" in blob else ""
        raise InputError(f"{path}: not a dgno model file (no model spec inside){hint}. Fix: use the model.pt written by 'dgno train'")
    version = blob.get("version", CHECKPOINT_VERSION)
    if not isinstance(version, int) or version > CHECKPOINT_VERSION:
        raise InputError(f"{path}: model file format version {version!r}; this dgno reads versions up to {CHECKPOINT_VERSION}. Fix: update dgno, or retrain with this version")
    return _build(path, blob["spec"], blob["state_dict"], device), blob


def load_evaluated(path: str | Path, device: torch.device | str = "cpu") -> tuple[torch.nn.Module, dict[str, Any]]:
    """A network to score, from a ``model.pt`` or from a training's ``checkpoint.pt`` at its iteration.

    Why a checkpoint: a training that is still running, or was interrupted, leaves only checkpoint.pt;
    scoring it at its iteration is how test PSNR is followed against iterations before the end. The
    weights are those model.pt would hold (``train_config.eval_weights``: the EMA, or the raw weights).
    Returns (model, description): the file's dict for a model.pt; for a checkpoint its spec, ``weights``,
    ``iteration`` (done so far), ``iterations`` (planned) and ``in_progress`` (iteration < iterations).
    """
    path = Path(path)
    blob = _read_blob(path, device)
    if "state_dict" in blob or not {"spec", "model", "ema", "iteration"} <= set(blob):
        return _from_model_file(path, blob, device)
    recipe = blob.get("train_config", {})
    weights = recipe.get("eval_weights", "ema")
    model = _build(path, blob["spec"], blob["ema" if weights == "ema" else "model"], device)
    iteration, planned = int(blob["iteration"]), recipe.get("iterations")
    described = {
        "spec": blob["spec"],
        "weights": weights,
        "iteration": iteration,
        "iterations": planned,
        "in_progress": planned is None or iteration < int(planned),
        "train_config": recipe,
    }
    return model, described


def _rebuild_kwargs(spec: dict[str, Any]) -> dict[str, Any]:
    """Constructor kwargs for build_model from a saved spec: channels + overrides (hparams are the result)."""
    kwargs = registry_overrides(spec.get("overrides", {}))
    kwargs["in_channels"] = spec["hparams"].get("in_channels", 1)
    return kwargs


def import_authors(
    checkpoint: str | Path,
    options: str | Path,
    out: str | Path,
    *,
    weights: str = "params",
) -> Path:
    """Write a project ``model.pt`` holding the authors' weights from ``checkpoint``.

    ``options`` is the authors' option file (or the name of a released network); the network it
    describes is built here and filled by the strict renaming of :mod:`dgno.models.authors`.
    """
    checkpoint, options, out = Path(checkpoint), Path(options), Path(out)
    network_g = read_network_options(options)
    name, channels, overrides = model_from_options(network_g, source=str(options))
    model = build_model(name, scale="paper", in_channels=channels, **registry_overrides(overrides))
    theirs = load_authors_state(checkpoint, weights=weights)
    try:
        state = convert_state_dict(theirs, model.state_dict(), element_size=overrides["element_size"])
    except ValueError as exc:
        raise InputError(f"{checkpoint}: does not match {options} ({exc})") from exc
    model.load_state_dict(state, strict=True)
    blob = {
        "version": CHECKPOINT_VERSION,
        "spec": {"name": name, "scale": "paper", "hparams": model.hparams, "overrides": overrides},
        "state_dict": model.state_dict(),
        "weights_sha256": weights_digest(model.state_dict()),
        "normalise": released_normalisation(channels),
        "authors": {
            "checkpoint": str(checkpoint),
            "checkpoint_sha256": sha256_file(checkpoint),
            "weights": weights,
            "options": str(options),
            "network_g": json.loads(json.dumps(network_g)),
        },
        "provenance": provenance.collect(torch.device("cpu")),
    }
    save_checkpoint(out, blob)
    return out
