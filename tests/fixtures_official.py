"""The authors' golden fixtures (``../shared/official``): where they are, and their checkpoints regenerated.

Shared by the tests of the importer, of the official-checkpoint workflow and of the paper-DAG rehearsal.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

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


# The six released checkpoints at toy size: the fixture networks (dim 32, one block per level) with each
# release's own settings (variant, flux, boundary, channels). No fixture holds a 3-channel Cell network:
# DGNO_3DHistech_Cell is the w1_cell recipe with hist_face's tensors where the channel count enters.
RELEASE_CASES = {
    "DGNO_BBBC006_w1_Face": "w1_face",
    "DGNO_BBBC006_w1_Cell": "w1_cell",
    "DGNO_BBBC006_w2_Face": "w1_face",
    "DGNO_BBBC006_w2_Cell": "w1_cell",
    "DGNO_3DHistech_Face": "hist_face",
    "DGNO_3DHistech_Cell": "w1_cell",
}
RELEASE_KEYS = ("variant", "inp_channels", "out_channels", "flux_mode", "boundary_type", "win_dg", "learnable_tau", "init_tau")


def _recipe(name: str) -> dict:
    case = json.loads((fixture_dir() / RELEASE_CASES[name] / "weights.json").read_text())
    if name == "DGNO_3DHistech_Cell":
        rgb = {t["key"]: t for t in json.loads((fixture_dir() / "hist_face" / "weights.json").read_text())["tensors"]}
        case["tensors"] = [rgb[t["key"]] if t["key"] in rgb and rgb[t["key"]]["shape"] != t["shape"] else t for t in case["tensors"]]
    return case


def toy_release(folder: Path, names=tuple(RELEASE_CASES)) -> tuple[dict[str, bytes], Path]:
    """({'<name>.pth': checkpoint bytes}, options folder with '<name>.yml') of the released checkpoints, at toy size."""
    from dgno.models.official import released_networks

    options = folder / "options"
    options.mkdir(parents=True, exist_ok=True)
    files = {}
    for name in names:
        state = regenerate_state_dict(_recipe(name))
        path = folder / f"{name}.pth"
        torch.save({"params": state, "params_ema": state}, path)
        files[path.name] = path.read_bytes()
        network = json.loads((fixture_dir() / RELEASE_CASES[name] / "options.json").read_text())["network_g"]
        released = released_networks()[name]
        network = {**{k: v for k, v in network.items() if k not in RELEASE_KEYS}, **{k: released[k] for k in RELEASE_KEYS if k in released}}
        (options / f"{name}.yml").write_text(yaml.safe_dump({"name": name, "network_g": network}))
    return files, options
