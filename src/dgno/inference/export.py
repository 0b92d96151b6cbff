"""A restoration network as a file other programs run: TorchScript and ONNX, checked against PyTorch.

Both formats hold the network for one declared tile size (``tile`` × ``tile`` pixels, any batch) and
return the full-resolution restoration only.  Why a fixed size: the network's selective scan is a
recurrence over H·W tokens, written for exporters as a blocked scan whose steps are unrolled
(``dgno.layers.scan_static``): its graph depends on the number of tokens, so a tracer records it for
one size.  (``torch.export`` with symbolic H and W turns the scan's chunk padding into guards it
cannot prove, so a size-generic ONNX graph is not produced.)  Larger images are restored by tiles with
an overlap, smaller ones padded to the tile; :func:`export_record` writes both numbers beside the files,
with the intensity normalisation the network expects, so a viewer plug-in can do the same.

``torch.jit.trace`` records the TorchScript module (what QuPath's Deep Java Library and deepImageJ
load); the TorchScript-based ONNX exporter records the same trace and converts it to ONNX (opset 18;
ONNX Runtime, deepImageJ, the bioimage.io model zoo).  It is the exporter that takes seconds here:
``torch.onnx.export(dynamo=True)`` took minutes for the same network (``torch.export`` then an ONNX
rewrite of several thousand nodes), and produced the same file up to float rounding.  Every file is compared with the
PyTorch network before it is kept (``dgno.inference.parity``): on a batch of two tiles and through the
tiled restoration of an image larger than a tile; a difference above 1e-4 leaves no file behind and
raises :class:`ExportError`.
"""

from __future__ import annotations

import copy
import io
import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from dgno import provenance
from dgno.checkpoint import load_trained, weights_digest
from dgno.inference import normalisation
from dgno.inference.parity import Exported, check_parity, example
from dgno.io import InputError, atomic_path
from dgno.layers.mambair import ASSM
from dgno.models.outputs import as_outputs

OPSET = 18
FORMATS = ("torchscript", "onnx")
# The default tile of an export: a paper-scale network at 256 px took 4 min and 6 GB to export and check on 2
# cores (TorchScript and ONNX); at the authors' 512 px the ONNX check alone ran over 10 min and 12 GB.
EXPORT_TILE = 256
SUFFIX = {"torchscript": ".torchscript.pt", "onnx": ".onnx"}


class ExportError(RuntimeError):
    """An exported file that does not compute what the PyTorch network computes (nothing is written)."""


class FinalOutput(nn.Module):
    """The network's full-resolution restoration only: (B, C, tile, tile) → (B, C, tile, tile)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return as_outputs(self.model(x))[-1]


def exportable(model: nn.Module) -> nn.Module:
    """A float32 eval-mode copy of ``model`` that tracers can record: the static selective scan, final output."""
    model = copy.deepcopy(model).float().eval()
    for module in model.modules():
        if isinstance(module, ASSM):
            module.scan_backend = "static"
    return FinalOutput(model)


def trace(model: nn.Module, *, tile: int, channels: int) -> torch.jit.ScriptModule:
    """The TorchScript trace of ``exportable(model)`` at (1, channels, tile, tile)."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        return torch.jit.trace(exportable(model), (example(1, channels, tile),), check_trace=False)


def onnx_bytes(model: nn.Module, *, tile: int, channels: int) -> bytes:
    """The ONNX model of ``exportable(model)``: input "input" (batch, channels, tile, tile), output "output".

    The TorchScript-based exporter traces the module itself (handed a finished trace, it loses the
    tensors' ranks that some ONNX ops need), then converts the trace op by op.
    """
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter announces its successor on every call
        torch.onnx.export(
            exportable(model),
            (example(1, channels, tile),),
            buffer,
            dynamo=False,
            opset_version=OPSET,
            input_names=["input"],
            output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        )
    return buffer.getvalue()


def onnx_session(model: bytes | str | Path, *, threads: int | None = None, device: str = "cpu"):
    """An ONNX Runtime session (CPU, or CUDA when asked and available); ``threads`` intra-op threads."""
    import onnxruntime as ort  # an optional engine: only when ONNX is run

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
    options.log_severity_level = 3  # errors only: its optimiser notes every fused node otherwise
    providers = ["CPUExecutionProvider"]
    if device == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(source, options, providers=providers)


def session_forward(session) -> Callable[[Tensor], Tensor]:
    """x (B, C, tile, tile) float32 → the session's first output, as a CPU tensor."""

    def run(x: Tensor) -> Tensor:
        y = session.run(None, {"input": np.ascontiguousarray(x.detach().cpu().numpy(), dtype=np.float32)})[0]
        return torch.from_numpy(y)

    return run


def with_route_outputs(payload: bytes) -> bytes:
    """A copy of an exported ONNX model whose routing decisions are outputs too (for the parity check).

    The routes are the ArgMax nodes applied to a LogSoftmax (each ASSM's router); their order in the
    graph is the order the ASSMs run in.
    """
    import onnx  # only the check needs the ONNX graph library

    model = onnx.load_from_string(payload)
    producer = {out: node for node in model.graph.node for out in node.output}
    for node in model.graph.node:
        source = producer.get(node.input[0]) if node.input else None
        if node.op_type == "ArgMax" and source is not None and source.op_type == "LogSoftmax":
            model.graph.output.append(onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.INT64, None))
    return model.SerializeToString()


def onnx_exported(payload: bytes) -> Exported:
    """The ONNX model as the parity check runs it: its output and its routing decisions."""
    session = onnx_session(with_route_outputs(payload), threads=torch.get_num_threads())

    def run(x: Tensor) -> tuple[Tensor, list[Tensor]]:
        y, *routes = session.run(None, {"input": np.ascontiguousarray(x.detach().cpu().numpy(), dtype=np.float32)})
        return torch.from_numpy(y), [torch.from_numpy(r) for r in routes]

    return run


@dataclass(frozen=True)
class ExportRecord:
    """What a viewer or another program needs beside an exported file (written as ``<name>.export.json``)."""

    name: str
    files: dict[str, str]
    tile: int
    overlap: int
    channels: int
    normalise: str
    blend: str
    weights_sha256: str
    parity: dict[str, dict[str, float]]
    seconds: dict[str, float]
    route_ties: dict[str, int] = field(default_factory=dict)  # routing ties the parity check met (imposed on PyTorch: parity.py)
    input: str = "float32 (batch, channels, tile, tile), intensities mapped to [0, 1] by 'normalise'"
    output: str = "float32 (batch, channels, tile, tile), the restoration in the same [0, 1] scale"
    versions: dict[str, str] = field(default_factory=provenance.versions)


def export_model(
    model: nn.Module,
    out_dir: str | Path,
    *,
    name: str,
    tile: int,
    overlap: int,
    normalise: str,
    blend: str = "ramp",
    formats: tuple[str, ...] = FORMATS,
) -> ExportRecord:
    """Write ``<name>.torchscript.pt`` and/or ``<name>.onnx`` and ``<name>.export.json`` into ``out_dir``.

    Each file is written only after its parity check passes (:func:`check_parity` against ``model``
    in PyTorch); a failing one raises :class:`ExportError` and leaves nothing of itself behind.
    """
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown or not formats:
        raise InputError(f"export format {unknown[0] if unknown else '(none)'!r}; allowed: {', '.join(FORMATS)}")
    if tile % 32 or tile < 32:
        raise InputError(f"--tile {tile}: exports need a multiple of 32 (the network's stride and element grid). Fix: pass e.g. {max(32, tile // 32 * 32)}")
    if not 0 <= overlap < tile:
        raise InputError(f"--overlap {overlap}: tiles of {tile} px need an overlap in [0, {tile}). Fix: pass e.g. --overlap {tile // 4}")
    channels = int(model.hparams.get("in_channels", 1))
    model = model.float().eval()
    reference = exportable(model)  # what the tracer records, run by PyTorch: the static scan, the final output
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    seconds, parity, ties, files = {}, {}, {}, {}
    start = time.perf_counter()
    traced = trace(model, tile=tile, channels=channels)
    seconds["trace"] = time.perf_counter() - start
    for fmt in formats:
        start = time.perf_counter()
        if fmt == "torchscript":
            payload, run = _torchscript_payload(traced)
        else:
            payload = onnx_bytes(model, tile=tile, channels=channels)
            run = onnx_exported(payload)
        seconds[fmt] = time.perf_counter() - start
        result = check_parity(reference, run, tile=tile, channels=channels, overlap=overlap)
        parity[fmt], ties[fmt] = dict(result.checks), result.route_ties
        if not result.ok:
            why = "; ".join(result.problems) or f"max |difference| {result.worst:.2e} > {result.tolerance:g}"
            raise ExportError(f"{fmt} export of {name} does not compute what PyTorch computes ({why}; {result.checks}); no file written")
        path = out_dir / f"{name}{SUFFIX[fmt]}"
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(payload)
        files[fmt] = path.name
    record = ExportRecord(
        name=name, files=files, tile=tile, overlap=overlap, channels=channels, normalise=normalise, blend=blend,
        weights_sha256=weights_digest(model.state_dict()), parity=parity, seconds=seconds, route_ties=ties,
    )  # fmt: skip
    with atomic_path(out_dir / f"{name}.export.json") as tmp:
        Path(tmp).write_text(json.dumps(asdict(record), indent=2) + "\n")
    return record


def _torchscript_payload(traced: torch.jit.ScriptModule) -> tuple[bytes, Exported]:
    """The saved bytes of a traced module, and the module loaded back from them (what a user loads), as the
    parity check runs it (no routing outputs: TorchScript runs PyTorch's kernels, so it routes alike)."""
    buffer = io.BytesIO()
    torch.jit.save(traced, buffer)
    payload = buffer.getvalue()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.load announces torch.export
        loaded = torch.jit.load(io.BytesIO(payload), map_location="cpu")
    return payload, lambda x: (loaded(x.float().cpu()), [])


def cached_onnx(model: nn.Module, *, tile: int, cache: Path) -> Path:
    """The ONNX file of ``model`` at ``tile`` in ``cache`` (exported and parity-checked on first use).

    Keyed by the weights' digest, the tile and the package's export settings, so another network,
    tile or exporter never reuses a file.
    """
    digest = weights_digest(model.state_dict())[:16]
    name = f"{digest}-{tile}-opset{OPSET}-{os.environ.get('DGNO_EXPORT_TAG', 'v1')}"
    path = cache / f"{name}.onnx"
    if not path.exists():
        export_model(model, cache, name=name, tile=tile, overlap=tile // 8, normalise="(engine cache)", formats=("onnx",))
    return path


def export_restoration(
    how,
    out_dir: str | Path,
    *,
    formats: tuple[str, ...] = FORMATS,
    tile: int | None = None,
    overlap: int | None = None,
    name: str | None = None,
) -> ExportRecord:
    """Export the network of a :class:`dgno.inference.authors.Restoration` (a model file, or a released or
    authors' checkpoint resolved by ``dgno.inference.authors``) with its own tile, overlap, blend and
    normalisation unless ``tile`` / ``overlap`` say otherwise."""
    model, blob = load_trained(how.model, "cpu")
    try:
        kind = how.normalise or normalisation.recorded(blob) or normalisation.UNRECORDED
    except ValueError as exc:
        raise InputError(f"{how.model}: {exc}. Fix: retrain or re-import the model") from None
    stem = name or Path(how.name).stem.removesuffix(".pt")
    tile = tile or EXPORT_TILE
    overlap = min(how.overlap, tile // 4) if overlap is None else overlap  # the network's own, unless a small tile cannot hold it
    return export_model(model, out_dir, name=stem, tile=tile, overlap=overlap, normalise=kind, blend=how.blend, formats=formats)
