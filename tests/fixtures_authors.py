"""The authors' reference fixtures (``tests/fixtures/authors``, provenance in its README) and the
released checkpoints rebuilt from them at toy size.

Shared by the tests of the importer, of the released-checkpoint workflow and of the paper-DAG rehearsal.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml

from dgno.models.authors import regenerate_state_dict, released_networks

AUTHORS_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "authors"


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
    case = json.loads((AUTHORS_FIXTURES / RELEASE_CASES[name] / "weights.json").read_text())
    if name == "DGNO_3DHistech_Cell":
        rgb = {t["key"]: t for t in json.loads((AUTHORS_FIXTURES / "hist_face" / "weights.json").read_text())["tensors"]}
        case["tensors"] = [rgb[t["key"]] if t["key"] in rgb and rgb[t["key"]]["shape"] != t["shape"] else t for t in case["tensors"]]
    return case


def toy_release(folder: Path, names=tuple(RELEASE_CASES)) -> tuple[dict[str, bytes], Path]:
    """({'<name>.pth': checkpoint bytes}, options folder with '<name>.yml') of the released checkpoints, at toy size."""
    options = folder / "options"
    options.mkdir(parents=True, exist_ok=True)
    files = {}
    for name in names:
        state = regenerate_state_dict(_recipe(name))
        path = folder / f"{name}.pth"
        torch.save({"params": state, "params_ema": state}, path)
        files[path.name] = path.read_bytes()
        network = json.loads((AUTHORS_FIXTURES / RELEASE_CASES[name] / "options.json").read_text())["network_g"]
        released = released_networks()[name]
        network = {**{k: v for k, v in network.items() if k not in RELEASE_KEYS}, **{k: released[k] for k in RELEASE_KEYS if k in released}}
        (options / f"{name}.yml").write_text(yaml.safe_dump({"name": name, "network_g": network}))
    return files, options
