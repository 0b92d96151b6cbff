"""Model files for ``dgno deblur`` tests, written in a second: a smoke-scale network, random or the identity.

A network whose every weight is zero returns its input unchanged (each output head adds the input), so
the identity model isolates what ``dgno deblur`` does around the network: normalisation and its exact
inverse, axes, metadata, files. The random one checks that something is restored at all.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dgno.checkpoint import CHECKPOINT_VERSION
from dgno.models.registry import build_model


def model_file(path: Path, *, normalise: str | None = "dtype", identity: bool = False, in_channels: int = 1, name: str = "nafnet", seed: int = 0) -> Path:
    """A ``model.pt`` as training writes it (spec + state dict), recording ``normalise`` unless None."""
    torch.manual_seed(seed)
    model = build_model(name, scale="smoke", in_channels=in_channels)
    if identity:
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
    blob = {"version": CHECKPOINT_VERSION, "spec": {"name": name, "scale": "smoke", "hparams": model.hparams, "overrides": {}}, "state_dict": model.state_dict()}
    if normalise is not None:
        blob["normalise"] = normalise
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(blob, path)
    return path
