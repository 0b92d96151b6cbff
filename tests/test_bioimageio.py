"""The bioimage.io model package: its description, its files, and the format's own check run offline.

Two packages are built once each (slow): a demo-scale DGNO-Cell on 8-bit RGB through ``dgno export``,
and a toy authors' checkpoint (dim 32, with the selective scan) on min-max scaled data. The fast tests
check the parts that need no export: the description's tensors, the architecture callable, the test
tile and the refusals.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import yaml
from fixtures_authors import toy_release

from dgno.checkpoint import CHECKPOINT_VERSION, import_authors, load_trained, weights_digest
from dgno.cli import main
from dgno.inference import bioimageio as pkg
from dgno.inference.bioimageio_check import PackageError, check_package, package_urls
from dgno.inference.export import ExportRecord, FinalOutput, export_model, onnx_session, session_forward
from dgno.io import InputError
from dgno.models.overrides import registry_overrides
from dgno.models.registry import build_model

TILE, OVERLAP = 64, 16


def _model_file(path: Path, *, scale: str, channels: int, normalise: str, overrides: dict | None = None, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    model = build_model("dgno-cell", scale=scale, in_channels=channels, **registry_overrides(overrides or {}))
    spec = {"name": "dgno-cell", "scale": scale, "hparams": model.hparams, "overrides": overrides or {}}
    torch.save({"version": CHECKPOINT_VERSION, "spec": spec, "state_dict": model.state_dict(), "normalise": normalise}, path)
    return path


def _record(**changes) -> ExportRecord:
    base = dict(name="net", files={}, tile=TILE, overlap=OVERLAP, channels=1, normalise="minmax", blend="ramp", weights_sha256="", parity={}, seconds={})
    return ExportRecord(**{**base, **changes})


def _rdf(zip_path: Path) -> dict:
    with zipfile.ZipFile(zip_path) as zf:
        return yaml.safe_load(zf.read("rdf.yaml"))


def _member(zip_path: Path, name: str) -> bytes:
    with zipfile.ZipFile(zip_path) as zf:
        return zf.read(name)


def _array(zip_path: Path, name: str) -> np.ndarray:
    return np.load(io.BytesIO(_member(zip_path, name)))


class _Requests:
    """Every HTTP request bioimageio's libraries try (they use httpx), refused: the check must need none."""

    def __init__(self, monkeypatch) -> None:
        self.urls: list[str] = []

        def refuse(client, request, *args, **kwargs):
            self.urls.append(str(request.url))
            raise httpx.ConnectError("network disabled by the test", request=request)

        monkeypatch.setattr(httpx.Client, "send", refuse)


# --- the parts, without an export ---------------------------------------------------------------


def test_architecture_callable_rebuilds_the_network_of_a_model_file(tmp_path):
    path = _model_file(tmp_path / "m.pt", scale="smoke", channels=1, normalise="minmax", overrides={"T": 1, "tau": 0.5})
    model, blob = load_trained(path)
    kwargs = pkg.architecture_kwargs(blob["spec"])
    assert yaml.safe_load(yaml.safe_dump(kwargs)) == kwargs  # plain YAML, as rdf.yaml holds it
    rebuilt = pkg.restoration_network(**kwargs)
    rebuilt.load_state_dict(FinalOutput(model).state_dict(), strict=True)
    x = torch.rand(1, 1, 40, 48)
    with torch.no_grad():
        assert torch.equal(rebuilt(x), FinalOutput(model.eval())(x))
    assert rebuilt.model.hparams["num_layers"] == 1 and not rebuilt.model.hparams["operator_kwargs"]["learn_tau"]


def test_tensors_declare_the_tile_the_halo_and_the_normalisation():
    minmax = pkg._input(_record(), {"source": "t.npy"}, {"source": "s.tif"}, bits=8)
    assert [a.get("size") for a in minmax["axes"][2:]] == [TILE, TILE]
    assert [p["id"] for p in minmax["preprocessing"]] == ["ensure_dtype", "scale_range", "ensure_dtype"]
    assert minmax["preprocessing"][1]["kwargs"] == {"axes": ["channel", "y", "x"], "min_percentile": 0.0, "max_percentile": 100.0}
    assert minmax["data"] == {"type": "float32"}
    twelve = pkg._input(_record(normalise="dtype", channels=3), {}, {}, bits=12)
    assert twelve["data"] == {"type": "uint16", "range": [0, 4095]}
    assert twelve["preprocessing"][1] == {"id": "scale_linear", "kwargs": {"gain": 1 / 4095, "offset": 0.0}}
    assert twelve["axes"][1]["channel_names"] == ["red", "green", "blue"]
    output = pkg._output(_record(), {}, {})
    assert [a["halo"] for a in output["axes"][2:]] == [OVERLAP // 2] * 2
    assert output["axes"][2]["size"] == {"tensor_id": "input", "axis_id": "y"}
    assert all("halo" not in a for a in pkg._output(_record(overlap=1), {}, {})["axes"])
    with pytest.raises(ValueError, match="bits 40"):
        pkg._input(_record(normalise="dtype"), {}, {}, bits=40)


def test_the_test_tile_is_stored_as_the_data_and_seen_in_zero_one():
    stored, unit = pkg.example_input(_record(), bits=8)
    assert stored.dtype == np.float32 and stored.shape == (1, TILE, TILE)
    lo, hi = pkg.MINMAX_EXAMPLE_RANGE
    assert lo <= stored.min() and stored.max() <= hi and stored.max() - stored.min() > (hi - lo) / 2
    np.testing.assert_allclose(unit, (stored - stored.min()) / (stored.max() - stored.min()), atol=1e-6)
    assert (unit.min(), unit.max()) == pytest.approx((0.0, 1.0), abs=1e-6)
    stored, unit = pkg.example_input(_record(normalise="dtype", channels=3), bits=8)
    assert stored.dtype == np.uint8 and stored.shape == (3, TILE, TILE) and stored.max() > 200
    np.testing.assert_array_equal(unit, stored.astype(np.float32) / np.float32(255))


def test_a_model_file_other_than_the_exported_one_is_refused(tmp_path):
    path = _model_file(tmp_path / "m.pt", scale="smoke", channels=1, normalise="minmax")
    other = weights_digest(build_model("dgno-cell", scale="smoke").state_dict())
    with pytest.raises(InputError, match=r"m\.pt: its weights are not those exported as net.*Fix"):
        pkg.write_package(_record(weights_sha256=other), tmp_path, model_file=path)
    model, _ = load_trained(path)
    with pytest.raises(InputError, match=r"net\.onnx: exported file missing.*Fix"):
        pkg.write_package(_record(weights_sha256=weights_digest(model.state_dict()), files={"onnx": "net.onnx"}), tmp_path, model_file=path)
    assert not list(tmp_path.glob("*.zip"))


def test_urls_of_a_description_are_found_for_offline_validation(tmp_path):
    rdf = {"cite": [{"text": "a", "url": "https://a.example/x"}], "git_repo": "http://b.example", "name": "n", "tags": ["https-less"]}
    with zipfile.ZipFile(tmp_path / "p.zip", "w") as zf:
        zf.writestr("rdf.yaml", yaml.safe_dump(rdf))
    assert package_urls(tmp_path / "p.zip") == ["http://b.example", "https://a.example/x"]
    with zipfile.ZipFile(tmp_path / "q.zip", "w") as zf:
        zf.writestr("other.yaml", "a: 1")
    with pytest.raises(PackageError, match="no rdf.yaml"):
        package_urls(tmp_path / "q.zip")


# --- a demo-scale network through dgno export ---------------------------------------------------


@pytest.fixture(scope="module")
def demo_package(tmp_path_factory):
    """`dgno export --format torchscript onnx bioimageio` of a demo-scale DGNO-Cell on 8-bit RGB, with the network off."""
    folder = tmp_path_factory.mktemp("bioimageio_demo")
    model = _model_file(folder / "model.pt", scale="demo", channels=3, normalise="dtype", seed=3)
    out = folder / "export"
    with pytest.MonkeyPatch.context() as mp:
        requests = _Requests(mp)
        argv = ["export", "--checkpoint", str(model), "--out", str(out), "--format", "torchscript", "onnx", "bioimageio"]
        assert main([*argv, "--tile", str(TILE), "--overlap", str(OVERLAP), "--name", "demo-cell", "--threads", "1"]) == 0
    return {"zip": out / "demo-cell.bioimageio.zip", "out": out, "model": model, "requests": requests.urls}


@pytest.mark.slow
def test_demo_package_is_written_and_passed_its_check_offline(demo_package):
    assert demo_package["zip"].is_file() and demo_package["requests"] == []
    rdf = _rdf(demo_package["zip"])
    from bioimageio.spec.model.v0_5 import ModelDescr  # the format the installed library implements

    assert rdf["format_version"] == pkg.FORMAT_VERSION == ModelDescr.implemented_format_version
    assert set(rdf["weights"]) == {"pytorch_state_dict", "torchscript", "onnx"}
    assert rdf["weights"]["torchscript"]["parent"] == rdf["weights"]["onnx"]["parent"] == "pytorch_state_dict"
    assert rdf["weights"]["pytorch_state_dict"]["architecture"]["import_from"] == "dgno.inference.bioimageio"
    assert rdf["inputs"][0]["data"]["type"] == "uint8" and rdf["inputs"][0]["preprocessing"][1]["id"] == "scale_linear"
    for entry in [*rdf["weights"].values(), rdf["inputs"][0]["test_tensor"], rdf["outputs"][0]["test_tensor"], rdf["documentation"], *rdf["covers"]]:
        assert hashlib.sha256(_member(demo_package["zip"], entry["source"])).hexdigest() == entry["sha256"]
    readme = _member(demo_package["zip"], "README.md").decode()
    assert "## Validation" in readme and "halo of 8 pixels" in readme and "divided by 255" in readme
    assert list(demo_package["out"].glob(".*")) == []  # no staging folder or temporary zip left


@pytest.mark.slow
def test_demo_test_tensors_reproduce_through_onnx_runtime_torchscript_and_the_state_dict(demo_package):
    zip_path = demo_package["zip"]
    stored, expected = _array(zip_path, pkg.TEST_INPUT), _array(zip_path, pkg.TEST_OUTPUT)
    assert stored.dtype == np.uint8 and stored.shape == expected.shape == (1, 3, TILE, TILE)
    x = torch.from_numpy(stored.astype(np.float32) / np.float32(255))
    rdf = _rdf(zip_path)
    with torch.no_grad():
        onnx = session_forward(onnx_session(_member(zip_path, rdf["weights"]["onnx"]["source"])))(x).numpy()
        script = torch.jit.load(io.BytesIO(_member(zip_path, rdf["weights"]["torchscript"]["source"])))(x).numpy()
        entry = rdf["weights"]["pytorch_state_dict"]
        network = pkg.restoration_network(**entry["architecture"]["kwargs"])
        network.load_state_dict(torch.load(io.BytesIO(_member(zip_path, entry["source"])), weights_only=True))
        eager = network(x).numpy()
    for name, out in {"onnx": onnx, "torchscript": script, "pytorch_state_dict": eager}.items():
        assert np.abs(out - expected).max() <= 1e-4, name
    assert np.abs(expected - x.numpy()).max() > 1e-2  # the network changed the tile: the test could fail


@pytest.mark.slow
def test_bioimageio_core_restores_an_image_larger_than_a_tile_by_tiles(demo_package):
    from bioimageio.core import load_model_description, predict

    descr = load_model_description(demo_package["zip"], perform_io_checks=False)
    image = np.random.default_rng(0).integers(0, 256, (1, 3, 100, 90), dtype=np.uint8)
    restored = predict(model=descr, inputs=image, input_block_shape={"input": {"y": TILE, "x": TILE}}).members["output"].data.to_numpy()
    assert restored.shape == (1, 3, 100, 90) and np.isfinite(restored).all()


@pytest.mark.slow
def test_a_package_whose_files_do_not_match_its_description_fails_the_check(demo_package, tmp_path, monkeypatch):
    requests = _Requests(monkeypatch)
    source = demo_package["zip"]
    rdf = _rdf(source)
    weights = rdf["weights"]["onnx"]["source"]
    _rewrite(source, tmp_path / "weights.zip", {weights: _member(source, weights) + b"\0"})
    with pytest.raises(PackageError, match=r"weights\.zip: bioimage\.io check failed: .*(sha|SHA)"):
        check_package(tmp_path / "weights.zip")
    wrong = _array(source, pkg.TEST_OUTPUT) + np.float32(0.01)
    buffer = io.BytesIO()
    np.save(buffer, wrong)
    rdf["outputs"][0]["test_tensor"]["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    _rewrite(source, tmp_path / "output.zip", {pkg.TEST_OUTPUT: buffer.getvalue(), "rdf.yaml": yaml.safe_dump(rdf, sort_keys=False).encode()})
    with pytest.raises(PackageError, match=r"Reproduce test outputs from test inputs \((onnx|torchscript|pytorch_state_dict)\)"):
        check_package(tmp_path / "output.zip")
    assert requests.urls == []


def _rewrite(source: Path, target: Path, replaced: dict[str, bytes]) -> None:
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for name in zin.namelist():
            zout.writestr(name, replaced.get(name, zin.read(name)))


# --- a toy authors' checkpoint, with the selective scan -----------------------------------------


@pytest.mark.slow
def test_a_toy_authors_checkpoint_packages_and_passes_the_check(tmp_path, monkeypatch):
    name = "DGNO_BBBC006_w1_Cell"
    _, options = toy_release(tmp_path, names=(name,))
    model_file = import_authors(tmp_path / f"{name}.pth", options / f"{name}.yml", tmp_path / "model.pt")
    model, blob = load_trained(model_file)
    assert blob["normalise"] == "minmax" and model.hparams["encoder_block"] == "assm"
    record = export_model(model, tmp_path / "out", name=name, tile=TILE, overlap=OVERLAP, normalise=blob["normalise"])
    requests = _Requests(monkeypatch)
    zip_path = pkg.write_package(record, tmp_path / "out", model_file=model_file)
    assert requests.urls == []
    rdf = _rdf(zip_path)
    assert rdf["inputs"][0]["preprocessing"][1]["id"] == "scale_range" and "released checkpoint" in rdf["description"]
    stored = _array(zip_path, pkg.TEST_INPUT)
    unit = (stored - stored.min()) / (stored.max() - stored.min())
    session = onnx_session(tmp_path / "out" / record.files["onnx"])
    restored = session_forward(session)(torch.from_numpy(unit.astype(np.float32))).numpy()
    assert np.abs(restored - _array(zip_path, pkg.TEST_OUTPUT)).max() <= 1e-4
    assert json.loads(json.dumps(rdf["config"]["dgno"]))["weights_sha256"] == weights_digest(model.state_dict())

