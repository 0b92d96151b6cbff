"""A bioimage.io model package of an exported network: one zip that QuPath, deepImageJ, napari and
``bioimageio.core`` read (https://bioimage.io, model description format :data:`FORMAT_VERSION`).

``<name>.bioimageio.zip`` holds

    rdf.yaml                          the description: tensors, tiling, preprocessing, weights, citation
    <name>.state_dict.pt              PyTorch weights of :func:`restoration_network` (the original entry)
    <name>.torchscript.pt, <name>.onnx    the files ``dgno export`` wrote and checked (converted from it)
    test_input.npy, test_output.npy   one tile in the input's stored type, and the exported network's output
    sample_input.tif, sample_output.tif   the same tile as images
    cover.png, README.md, LICENSE.md  what a model zoo shows: picture, documentation, terms of use

The exported files take one tile size, so the input's y and x are fixed at the tile and the output
declares a halo of ``overlap // 2`` pixels: a tool that tiles crops that many pixels from each side of
every output tile, so neighbouring tiles overlap by ``overlap`` as in ``dgno deblur``. The normalisation
the network was trained with becomes the input's preprocessing where the format can say it (per-image
min-max: ``scale_range`` at the 0th and 100th percentiles; a fixed full scale: ``scale_linear``); the
output stays in the network's [0, 1] scale, since no postprocessing step of the format maps a per-image
min-max back (the README inside says so).

The zip is written only after it passes :func:`dgno.inference.bioimageio_check.check_package`: the spec's
own validation, offline, and ``bioimageio.core``'s test that runs the test input through every weight
format and compares with the test output.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import tifffile
import torch
import yaml
from torch import nn

from dgno.checkpoint import load_trained, weights_digest
from dgno.inference import bioimageio_text
from dgno.inference.bioimageio_check import check_package
from dgno.inference.export import OPSET, ExportRecord, FinalOutput, onnx_session, session_forward
from dgno.inference.parity import PARITY_TOLERANCE
from dgno.io import InputError, atomic_path
from dgno.models.overrides import registry_overrides
from dgno.models.registry import build_model

FORMAT_VERSION = "0.5.12"  # the model description format that bioimageio.spec (pinned in pyproject.toml) writes and checks
RDF = "rdf.yaml"
SUFFIX = ".bioimageio.zip"
TEST_INPUT, TEST_OUTPUT, COVER = "test_input.npy", "test_output.npy", "cover.png"
SAMPLE_INPUT, SAMPLE_OUTPUT = "sample_input.tif", "sample_output.tif"  # the test tile as images a person opens
MINMAX_EXAMPLE_RANGE = (100.0, 3100.0)  # the min-max test input's stored range: camera counts, so the preprocessing visibly scales
AXES = ("batch", "channel", "y", "x")


def restoration_network(*, name: str, scale: str, in_channels: int, overrides: dict[str, Any]) -> nn.Module:
    """The network of a model file, returning only its full-resolution restoration (the package's architecture).

    ``name``, ``scale``, ``in_channels`` and ``overrides`` are those of ``dgno.models.registry.build_model``,
    as the model file's spec records them; ``bioimageio.core`` calls this with the kwargs in rdf.yaml and
    loads ``<name>.state_dict.pt`` into the result.
    """
    return FinalOutput(build_model(name, scale=scale, in_channels=in_channels, **overrides)).eval()


def architecture_kwargs(spec: dict[str, Any]) -> dict[str, Any]:
    """The kwargs of :func:`restoration_network` that rebuild the network of a model file's ``spec`` (plain YAML)."""
    overrides = registry_overrides(spec.get("overrides", {}))
    overrides.pop("in_channels", None)
    kwargs = {"name": spec["name"], "scale": spec["scale"], "in_channels": int(spec["hparams"].get("in_channels", 1)), "overrides": overrides}
    return json.loads(json.dumps(kwargs))  # tuples → lists: what YAML and the spec's kwargs hold


def write_package(record: ExportRecord, out_dir: str | Path, *, model_file: str | Path, bits: int = 8, note: Callable[[str], None] | None = None) -> Path:
    """Write ``<name>.bioimageio.zip`` beside the exported files of ``record``; returns its path.

    ``model_file`` is the model file the files were exported from (its weights must be those the record
    names). ``bits``: the bit depth of the data a network with the ``dtype`` normalisation expects (8:
    the authors' 3DHistech networks, RGB slides); the input is declared as unsigned integers of that
    depth, divided by 2^bits − 1. ``note`` receives a progress line before each long step. Raises
    :class:`dgno.inference.bioimageio_check.PackageError`, leaving no zip, when the package fails its check.
    """
    note = note or (lambda line: None)
    out_dir = Path(out_dir)
    model, blob = load_trained(model_file, "cpu")
    if weights_digest(model.state_dict()) != record.weights_sha256:
        raise InputError(f"{model_file}: its weights are not those exported as {record.name} (weights_sha256 differs). Fix: pass the model file the export was made from")
    missing = [f for f in record.files.values() if not (out_dir / f).is_file()]
    if missing:
        raise InputError(f"{out_dir / missing[0]}: exported file missing. Fix: run dgno export again with --out {out_dir}")
    target = out_dir / f"{record.name}{SUFFIX}"
    with tempfile.TemporaryDirectory(prefix=f".{record.name}.bioimageio.", dir=out_dir) as staging:
        staging = Path(staging)
        note(f"{target}: writing the package (weights, test tile, documentation)")
        _stage(record, out_dir, staging, model=model, blob=blob, bits=bits)
        with atomic_path(target) as tmp:
            _zip(staging, tmp)
            note(f"{target}: checking it offline with bioimageio.spec and bioimageio.core (every weight format on the test tile)")
            check_package(tmp)
    return target


def _stage(record: ExportRecord, out_dir: Path, staging: Path, *, model: nn.Module, blob: dict[str, Any], bits: int) -> None:
    """Every file of the package in ``staging``, rdf.yaml last (it holds the others' SHA-256)."""
    for file in record.files.values():
        shutil.copyfile(out_dir / file, staging / file)
    state_file = f"{record.name}.state_dict.pt"
    torch.save(FinalOutput(model.float().eval()).state_dict(), staging / state_file)
    raw, unit = example_input(record, bits=bits)
    output = exported_output(record, out_dir, unit)
    eager = _eager_difference(model, unit, output)
    np.save(staging / TEST_INPUT, raw[None])
    np.save(staging / TEST_OUTPUT, output[None])
    tifffile.imwrite(staging / SAMPLE_INPUT, raw.squeeze(0) if record.channels == 1 else raw)
    tifffile.imwrite(staging / SAMPLE_OUTPUT, output.squeeze(0) if record.channels == 1 else output)
    bioimageio_text.write_cover(staging / COVER, unit, output)
    facts = bioimageio_text.Facts.of(record, blob, model=model, bits=bits, eager_difference=eager, test_source=_test_source(record))
    (staging / "README.md").write_text(bioimageio_text.readme(facts))
    (staging / "LICENSE.md").write_text(bioimageio_text.licence())
    rdf = describe(record, blob, staging=staging, state_file=state_file, facts=facts, bits=bits)
    (staging / RDF).write_text(yaml.safe_dump(rdf, sort_keys=False, allow_unicode=True))


def _zip(staging: Path, path: Path) -> None:
    """The staged files, flat, rdf.yaml first (readers look for it)."""
    names = sorted(p.name for p in staging.iterdir())
    names.sort(key=lambda n: n != RDF)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in names:
            zf.write(staging / name, arcname=name)


def example_input(record: ExportRecord, *, bits: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """(stored, unit): one (C, tile, tile) test tile as the input tensor stores it, and the [0, 1] image the network sees.

    ``minmax``: float32 counts in :data:`MINMAX_EXAMPLE_RANGE` (``scale_range`` maps them to [0, 1]);
    ``dtype``: unsigned integers of ``bits`` bits, the unit image being stored / (2^bits − 1).
    """
    unit = bioimageio_text.example_tile(record.channels, record.tile)
    if record.normalise == "minmax":
        lo, hi = MINMAX_EXAMPLE_RANGE
        stored = (lo + unit * (hi - lo)).astype(np.float32)
        return stored, ((stored - stored.min()) / (stored.max() - stored.min())).astype(np.float32)
    full = 2**bits - 1
    stored = np.round(unit * full).astype(_unsigned(bits))
    return stored, (stored.astype(np.float32) / np.float32(full)).astype(np.float32)


def exported_output(record: ExportRecord, out_dir: Path, unit: np.ndarray) -> np.ndarray:
    """The exported network's (C, tile, tile) output on ``unit``: TorchScript if exported, else ONNX Runtime."""
    x = torch.from_numpy(unit[None].copy())
    if "torchscript" in record.files:
        loaded = torch.jit.load(str(out_dir / record.files["torchscript"]), map_location="cpu")
        with torch.no_grad():
            return loaded(x)[0].numpy().astype(np.float32)
    return session_forward(onnx_session(out_dir / record.files["onnx"]))(x)[0].numpy().astype(np.float32)


def _test_source(record: ExportRecord) -> str:
    return "torchscript" if "torchscript" in record.files else "onnx"


def _eager_difference(model: nn.Module, unit: np.ndarray, output: np.ndarray) -> float:
    """max |PyTorch eager − test output| on the test tile: the state-dict entry's distance to the test tensor."""
    with torch.no_grad():
        eager = FinalOutput(model.float().eval())(torch.from_numpy(unit[None].copy()))[0].numpy()
    return float(np.abs(eager - output).max())


def _unsigned(bits: int) -> type:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if bits <= np.iinfo(dtype).bits:
            return dtype
    raise ValueError(f"bits {bits}: allowed 1 to 32")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def describe(record: ExportRecord, blob: dict[str, Any], *, staging: Path, state_file: str, facts, bits: int) -> dict[str, Any]:
    """The rdf.yaml content (a plain dict) of the staged package."""

    def file(name: str) -> dict[str, str]:
        return {"source": name, "sha256": sha256(staging / name)}

    return {
        "type": "model",
        "format_version": FORMAT_VERSION,
        "name": facts.title,
        "description": facts.summary,
        "authors": [{"name": a, "affiliation": bioimageio_text.AFFILIATION} for a in bioimageio_text.PAPER_AUTHORS],
        "packaged_by": [{"name": "dgno export"}],
        "cite": bioimageio_text.CITATIONS,
        "license": file("LICENSE.md"),
        "documentation": file("README.md"),
        "covers": [file(COVER)],
        "tags": facts.tags,
        "timestamp": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "inputs": [_input(record, file(TEST_INPUT), file(SAMPLE_INPUT), bits=bits)],
        "outputs": [_output(record, file(TEST_OUTPUT), file(SAMPLE_OUTPUT))],
        "weights": _weights(record, blob, file=file, state_file=state_file, facts=facts),
        "config": {
            "bioimageio": {
                "reproducibility_tolerance": [{"absolute_tolerance": PARITY_TOLERANCE, "relative_tolerance": 0.0, "mismatched_elements_per_million": 0}],
                "architecture_type": "neural operator",
                "architecture_description": facts.architecture,
                "model_parameter_count": facts.parameters,
                "task": "defocus deblurring",
            },
            "dgno": {k: v for k, v in json.loads(json.dumps(asdict(record))).items() if k not in ("input", "output")},
        },
    }


def _batch_channel(record: ExportRecord) -> list[dict[str, Any]]:
    """The batch and channel axes, ids spelled out (the format's defaults; Java readers have looked them up by id)."""
    names = ["red", "green", "blue"] if record.channels == 3 else [f"c{i}" for i in range(record.channels)]
    return [{"type": "batch", "id": "batch"}, {"type": "channel", "id": "channel", "channel_names": names}]


def _to_float32() -> dict[str, Any]:
    return {"id": "ensure_dtype", "kwargs": {"dtype": "float32"}}  # a new dict each time: YAML writes no anchors


def _input(record: ExportRecord, test: dict[str, str], sample: dict[str, str], *, bits: int) -> dict[str, Any]:
    """The input tensor: fixed tile, stored type, and the preprocessing that is the network's normalisation."""
    axes = [*_batch_channel(record), *({"type": "space", "id": a, "size": record.tile} for a in ("y", "x"))]
    if record.normalise == "minmax":
        data = {"type": "float32"}
        scale = {"id": "scale_range", "kwargs": {"axes": ["channel", "y", "x"], "min_percentile": 0.0, "max_percentile": 100.0}}
        note = "float32 intensities in any range; each image is min-max scaled to [0, 1]"
    else:
        full = 2**bits - 1
        data = {"type": np.dtype(_unsigned(bits)).name, "range": [0, full]}
        scale = {"id": "scale_linear", "kwargs": {"gain": 1.0 / full, "offset": 0.0}}
        note = f"{bits}-bit intensities, divided by {full}"
    return {"id": "input", "description": note, "axes": axes, "data": data, "test_tensor": test, "sample_tensor": sample, "preprocessing": [_to_float32(), scale, _to_float32()]}


def _output(record: ExportRecord, test: dict[str, str], sample: dict[str, str]) -> dict[str, Any]:
    """The output tensor: the input's size, with a halo of overlap // 2 to crop when tiling (when there is one)."""
    axes = _batch_channel(record)
    halo = record.overlap // 2
    for a in ("y", "x"):
        axis = {"type": "space", "id": a, "size": {"tensor_id": "input", "axis_id": a}}
        axes.append({**axis, "halo": halo} if halo >= 1 else axis)
    return {
        "id": "output",
        "description": "the restoration, float32 in the network's [0, 1] intensity scale",
        "axes": axes,
        "data": {"type": "float32"},
        "test_tensor": test,
        "sample_tensor": sample,
    }


def _weights(record: ExportRecord, blob: dict[str, Any], *, file, state_file: str, facts) -> dict[str, Any]:
    """The three weight entries: the state dict (original), TorchScript and ONNX converted from it."""
    torch_version = torch.__version__.split("+")[0]
    weights: dict[str, Any] = {
        "pytorch_state_dict": {
            **file(state_file),
            "architecture": {"callable": "restoration_network", "import_from": __name__, "kwargs": architecture_kwargs(blob["spec"])},
            "pytorch_version": torch_version,
            "comment": facts.weights_origin + " Needs the dgno package installed (the architecture is imported from it).",
        }
    }
    if "torchscript" in record.files:
        weights["torchscript"] = {**file(record.files["torchscript"]), "pytorch_version": torch_version, "parent": "pytorch_state_dict", "comment": _parity_comment(record, "torchscript")}
    if "onnx" in record.files:
        weights["onnx"] = {**file(record.files["onnx"]), "opset_version": OPSET, "parent": "pytorch_state_dict", "comment": _parity_comment(record, "onnx")}
    return weights


def _parity_comment(record: ExportRecord, fmt: str) -> str:
    worst = max(record.parity[fmt].values())
    return f"traced by dgno export at {record.tile}x{record.tile}; max |difference| to PyTorch {worst:.1e} (limit {PARITY_TOLERANCE:g})"
