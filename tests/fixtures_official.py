"""The authors' golden fixtures (``../shared/official``): where they are, and their checkpoints regenerated.

Shared by the tests of the importer, of the official-checkpoint workflow and of the paper-DAG rehearsal.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

OFFICIAL = Path(os.environ.get("DGNO_OFFICIAL_FIXTURES", Path(__file__).resolve().parents[2] / "shared" / "official"))


def fixture_dir() -> Path:
    """The fixture folder; in CI (which always has ../shared) a missing folder is a failure, not a skip."""
    if not (OFFICIAL / "manifest_paper_scale.json").exists():
        if os.environ.get("CI"):
            pytest.fail(f"golden fixtures missing at {OFFICIAL}")
        pytest.skip(f"golden fixtures not found at {OFFICIAL} (set DGNO_OFFICIAL_FIXTURES)")
    return OFFICIAL


def regenerate_state_dict(recipe: dict) -> dict[str, torch.Tensor]:
    """The authors'-format state dict from a fixture's weights.json (recipe in the fixtures' README)."""
    state = {}
    for t in recipe["tensors"]:
        init, shape = t["init"], tuple(t["shape"])
        if init["kind"] == "normal":
            x = np.random.default_rng(init["seed"]).standard_normal(size=shape)
            x = (x * init["std"] + init["mean"]).astype(np.float32)
        elif t["dtype"] == "int64":
            x = np.asarray(init["values"], dtype=np.int64).reshape(shape)
        else:
            x = np.asarray(init["values"], dtype=np.float64).astype(np.float32).reshape(shape)
        state[t["key"]] = torch.from_numpy(np.array(x, copy=True))  # (ascontiguousarray would make 0-d tensors 1-d)
    return state
