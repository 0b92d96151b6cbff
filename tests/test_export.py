"""dgno export: TorchScript and ONNX files that compute what the PyTorch network computes, or no file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures_authors import toy_release
from fixtures_deblur import model_file

from dgno.checkpoint import import_authors, load_trained
from dgno.cli import main as dgno_main
from dgno.inference import export, parity
from dgno.models.registry import build_model

TILE = 64


@pytest.fixture(scope="module")
def toy_model(tmp_path_factory) -> Path:
    """The toy-size DGNO_3DHistech_Face (RGB, the ASSM encoder with its scan and routing), imported."""
    folder = tmp_path_factory.mktemp("toy")
    name = "DGNO_3DHistech_Face"
    _, options = toy_release(folder, names=(name,))
    return import_authors(folder / f"{name}.pth", options / f"{name}.yml", folder / "model.pt")


@pytest.mark.slow
def test_authors_network_exports_and_the_files_compute_it(toy_model, tmp_path):
    """Both files pass the parity check at two image sizes, and each runs on its own: TorchScript in a
    Python without dgno imported, ONNX in ONNX Runtime, on a batch the check never saw."""
    model, _ = load_trained(toy_model)
    record = export.export_model(model, tmp_path, name="hist", tile=TILE, overlap=16, normalise="dtype", blend="crossfade")
    assert set(record.files) == {"torchscript", "onnx"}
    for fmt in record.files:
        assert all(v <= parity.PARITY_TOLERANCE for v in record.parity[fmt].values())
    meta = json.loads((tmp_path / "hist.export.json").read_text())
    assert meta["tile"] == TILE and meta["overlap"] == 16 and meta["normalise"] == "dtype" and meta["channels"] == 3
    x = parity.example(3, 3, TILE, seed=11)
    with torch.no_grad():
        ref = export.exportable(model)(x)
    session = export.onnx_session(tmp_path / "hist.onnx")
    (y,) = session.run(None, {"input": x.numpy()})
    assert np.abs(y - ref.numpy()).mean() < 1e-5  # (a routing tie may move a token: the mean, not the max)
    np.save(tmp_path / "x.npy", x.numpy())
    code = "import sys, numpy, torch; m = torch.jit.load(sys.argv[1]); print(float((m(torch.from_numpy(numpy.load(sys.argv[2]))) ).abs().sum()))"
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "hist.torchscript.pt"), str(tmp_path / "x.npy")], capture_output=True, text=True, check=True)
    assert abs(float(out.stdout) - float(ref.abs().sum())) < 1e-2


def test_a_file_that_computes_something_else_is_not_written(tmp_path, monkeypatch):
    real = export.onnx_exported

    def off_by_a_bit(payload):
        run = real(payload)
        return lambda x: (lambda y, routes: (y + 1e-3, routes))(*run(x))

    monkeypatch.setattr(export, "onnx_exported", off_by_a_bit)
    model = build_model("dgno-cell", scale="smoke").eval()
    with pytest.raises(export.ExportError, match="onnx export of m does not compute what PyTorch computes"):
        export.export_model(model, tmp_path, name="m", tile=TILE, overlap=16, normalise="minmax", formats=("onnx",))
    assert not any(p.suffix == ".onnx" for p in tmp_path.iterdir())


def test_routing_ties_are_told_from_errors():
    """A token routed differently is a tie only when its two largest log-probabilities are within ROUTE_TIE;
    imposing the exported routes makes the PyTorch network route as the file did."""
    result = parity.ParityResult()
    logits = torch.tensor([[[0.0, -1.0], [-0.5, -0.5 - 1e-7], [0.0, -3.0]]])  # (B=1, L=3, routes=2)
    assert parity._ties([logits], [torch.tensor([[0, 1, 0]])], result) == 1 and not result.problems  # token 1: a tie
    assert parity._ties([logits], [torch.tensor([[1, 0, 0]])], result) == 1 and "not a tie" in result.problems[0]
    torch.manual_seed(0)
    model = build_model("dgno-cell", scale="smoke", encoder_block="assm").eval()
    routing = parity._Routing(model)
    x = torch.rand(1, 1, 32, 32)
    with torch.no_grad(), routing.recording() as seen:
        model(x)
    forced = [torch.zeros(lp.shape[:-1], dtype=torch.long) for lp in seen]  # every token to route 0
    with torch.no_grad(), routing.imposing(forced), routing.recording() as seen_again:
        model(x)
    assert all(int(lp.argmax(-1).max()) == 0 for lp in seen_again)


def test_export_command_writes_and_names_problems(tmp_path, capsys):
    path = model_file(tmp_path / "model.pt", normalise="minmax", name="dgno-cell")
    assert dgno_main(["export", "--checkpoint", str(path), "--out", str(tmp_path / "out"), "--tile", "48"]) == 2
    assert "--tile 48: exported networks take tiles whose side is a multiple of 32" in capsys.readouterr().err
    assert dgno_main(["export", "--checkpoint", str(path), "--out", str(tmp_path / "out"), "--tile", "64", "--format", "onnx"]) == 0
    printed = capsys.readouterr().out
    assert "model.onnx  (onnx, 64x64 tiles, max |difference| to PyTorch" in printed
    assert json.loads((tmp_path / "out" / "model.export.json").read_text())["normalise"] == "minmax"


@pytest.mark.e2e
def test_the_workflows_trained_dgno_exports(smoke_run, tmp_path):
    """The smoke workflow's trained DGNO-Cell (the demo's network at test size) exports to both formats."""
    model_pt = next(smoke_run.glob("results/train/*/dgno-cell/model.pt"))
    assert dgno_main(["export", "--checkpoint", str(model_pt), "--out", str(tmp_path), "--tile", "64"]) == 0
    record = json.loads((tmp_path / "model.export.json").read_text())
    assert set(record["files"]) == {"torchscript", "onnx"} and record["tile"] == 64
