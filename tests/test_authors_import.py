"""The authors' DGNO, exactly: their checkpoints import strictly and reproduce their network's outputs.

Reference fixtures (``tests/fixtures/authors``, made with the authors' public code; provenance in its
README): per case a recipe that regenerates an authors'-format checkpoint bit-exactly, two inputs and the
authors' outputs at all three scales in float64; plus the key/shape manifest of the six released
configurations.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import tifffile
import torch
from fixtures_authors import AUTHORS_FIXTURES

from dgno.checkpoint import import_authors, load_trained
from dgno.cli import main as dgno_main
from dgno.io import InputError
from dgno.models.authors import convert_state_dict, face_indices, model_from_options, regenerate_state_dict
from dgno.models.overrides import registry_overrides
from dgno.models.registry import build_model

CASES = ["w1_face", "w1_cell", "hist_face"]


def _sha256(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in state.values():
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module", params=CASES)
def imported(request, tmp_path_factory):
    """(case folder, imported model.pt) for each fixture case, through the ``dgno import-authors`` CLI."""
    case = AUTHORS_FIXTURES / request.param
    options = json.loads((case / "options.json").read_text())
    state = regenerate_state_dict(json.loads((case / "weights.json").read_text()))
    assert _sha256(state) == options["recipe"]["state_dict_sha256"]  # the recipe was followed bit-exactly
    work = tmp_path_factory.mktemp(request.param)
    torch.save({"params": state}, work / "authors.pth")
    argv = ["import-authors", str(work / "authors.pth"), "--options", str(case / "options.json"), "--out", str(work / "model.pt")]
    assert dgno_main(argv) == 0
    return case, work / "model.pt"


def test_imported_network_reproduces_the_authors_outputs_in_float64(imported):
    case, model_pt = imported
    model, blob = load_trained(model_pt)
    model = model.double()
    expected = np.load(case / "expected.npz")
    assert blob["authors"]["weights"] == "params"
    for name, suffix in (("input.npy", ""), ("input_96x128.npy", "_96x128")):
        x = torch.from_numpy(np.load(case / name)).double()
        with torch.no_grad():
            outs = model(x)
        for out, key in zip(outs, ("out4", "out2", "out1")):
            ref = expected[key + suffix]
            assert out.shape == ref.shape
            err = float(np.abs(out.numpy() - ref).max())
            assert err <= 1e-9, f"{case.name} {key}{suffix}: max abs diff {err:.2e}"


def test_imported_model_through_dgno_deblur_in_float32(imported, tmp_path):
    case, model_pt = imported
    x = np.load(case / "input_96x128.npy")[0]  # (C, H, W) float32 in [0, 1]
    image = x[0] if x.shape[0] == 1 else np.moveaxis(x, 0, -1)
    tifffile.imwrite(tmp_path / "cells.tif", image, photometric="rgb" if image.ndim == 3 else "minisblack")
    # --normalise dtype: the [0, 1] floats go in as they are (the import records the released network's
    # own normalisation, per-image min-max for the BBBC006 ones, which would rescale them)
    args = ["deblur", str(tmp_path / "cells.tif"), "--checkpoint", str(model_pt), "--output", str(tmp_path / "out"), "--normalise", "dtype"]
    assert dgno_main(args) == 0
    got = tifffile.imread(tmp_path / "out" / "cells.tif")
    ref = np.load(case / "expected.npz")["out1_96x128"][0]
    ref = np.clip(ref[0] if ref.shape[0] == 1 else np.moveaxis(ref, 0, -1), 0.0, 1.0)  # deblur clips to [0, 1]
    assert got.dtype == np.float32 and got.shape == ref.shape
    assert float(np.abs(got - ref).max()) <= 1e-4


def _manifest() -> dict:
    return json.loads((AUTHORS_FIXTURES / "manifest_paper_scale.json").read_text())["configs"]


def _manifest_state(entry: dict) -> dict[str, torch.Tensor]:
    """A state dict with exactly the manifest's keys, shapes and dtypes (values random, face indices real)."""
    g = torch.Generator().manual_seed(0)
    state = {}
    for key, shape, dtype in entry["keys"]:
        if "face_idx_" in key:
            state[key] = face_indices(8)[key.rsplit("_", 1)[1]]
        else:
            state[key] = torch.randn(shape, generator=g, dtype=getattr(torch, dtype))
    return state


@pytest.mark.parametrize(
    "config",
    ["DGNO_BBBC006_w1_Cell", "DGNO_BBBC006_w1_Face", "DGNO_BBBC006_w2_Cell", "DGNO_BBBC006_w2_Face", "DGNO_3DHistech_Cell", "DGNO_3DHistech_Face"],
)
def test_every_released_configuration_imports(config, tmp_path):
    entry = _manifest()[config]
    network_g = {"type": "DGNO", **entry["constructor_kwargs"]}
    (tmp_path / "options.yml").write_text(json.dumps({"name": config, "network_g": network_g}))
    state = _manifest_state(entry)
    torch.save({"params": state, "params_ema": state}, tmp_path / "ckpt.pth")
    out = import_authors(tmp_path / "ckpt.pth", tmp_path / "options.yml", tmp_path / "model.pt", weights="params_ema")
    model, blob = load_trained(out)
    assert sum(p.numel() for p in model.parameters()) == entry["total_parameters"]
    assert blob["spec"]["name"] == ("dgno-face" if network_g["variant"] == "face" else "dgno-cell")
    op = model.ops1[0]
    assert (op.flux, op.boundary) == (network_g["flux_mode"], network_g["boundary_type"])
    # every float tensor of the checkpoint is in the model, unchanged (up to the documented reshapes)
    assert_weight = model.state_dict()["enc4.1.assm.x_proj.weight"]
    assert torch.equal(assert_weight, state["latent.1.attn.selectiveScan.x_proj_weight"][0])
    assert torch.equal(model.state_dict()["ops4.1.k_norm.weight"], state["conv111.kln.weight"][:, 0])


def test_paper_scale_registry_models_have_the_authors_parameter_counts():
    for name in ("dgno-face", "dgno-cell"):
        for channels, count in ((1, 12_794_888), (3, 12_803_100)):
            model = build_model(name, scale="paper", in_channels=channels)
            assert sum(p.numel() for p in model.parameters()) == count


def _w1_face() -> tuple[dict, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    entry = _manifest()["DGNO_BBBC006_w1_Face"]
    name, channels, overrides = model_from_options({"type": "DGNO", **entry["constructor_kwargs"]})
    model = build_model(name, scale="paper", in_channels=channels, **registry_overrides(overrides))
    return entry, _manifest_state(entry), model.state_dict()


def test_strict_import_names_the_offending_key():
    _, state, expected = _w1_face()
    missing = dict(state)
    del missing["conv11.vln.bias"]
    with pytest.raises(ValueError, match=r"lacks 1 tensor.*ops2\.1\.v_norm\.bias"):
        convert_state_dict(missing, expected)
    extra = {**state, "conv1.kappa": torch.tensor(1.0)}
    with pytest.raises(ValueError, match=r"conv1\.kappa: not a tensor of the authors' DGNO"):
        convert_state_dict(extra, expected)
    wrong = {**state, "reduce_chan_level2.weight": torch.zeros(96, 190, 1, 1)}
    with pytest.raises(ValueError, match=r"reduce_chan_level2\.weight: shape \(96, 190, 1, 1\)"):
        convert_state_dict(wrong, expected)
    faces = {**state, "conv0.face_idx_left": face_indices(8)["right"]}
    with pytest.raises(ValueError, match=r"conv0\.face_idx_left: face indices"):
        convert_state_dict(faces, expected)


def test_import_errors_name_file_and_fix(tmp_path):
    entry = _manifest()["DGNO_BBBC006_w1_Cell"]
    options = tmp_path / "DGNO_BBBC006_w1_Cell.yml"
    options.write_text("name: x\nnetwork_g:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in {"type": "DGNO", **entry["constructor_kwargs"]}.items()))
    torch.save({"params_ema": _manifest_state(entry)}, tmp_path / "ema_only.pth")
    with pytest.raises(InputError, match=r"ema_only\.pth: no 'params' state dict inside .*params_ema"):
        import_authors(tmp_path / "ema_only.pth", options, tmp_path / "m.pt")
    bad = tmp_path / "bad.yml"
    bad.write_text(options.read_text().replace("ffn_expansion_factor: 2.66", "ffn_expansion_factor: 3.0"))
    with pytest.raises(InputError, match=r"bad\.yml: network_g\.ffn_expansion_factor = 3\.0 is not supported"):
        import_authors(tmp_path / "ema_only.pth", bad, tmp_path / "m.pt", weights="params_ema")
    # the command line reports it as one line with exit status 2, no traceback
    assert dgno_main(["import-authors", str(tmp_path / "ema_only.pth"), "--options", str(options), "--out", str(tmp_path / "m.pt")]) == 2
    assert not (tmp_path / "m.pt").exists()
