"""How a restoration network runs: the inference engines of ``dgno deblur``, ``deblur-slide`` and evaluation.

* ``eager``       the network as written, in PyTorch (on a GPU optionally bf16 or replayed from CUDA
                  graphs: ``dgno.inference.cuda_graphs``);
* ``native``      CPU: the same network rewired for the CPU (``dgno.layers.native_modules``: channels-last
                  maps, 1×1 convolutions as matrix products, compiled kernels for the depth-wise
                  convolutions and the selective scan); needs a C compiler on first use;
* ``onnxruntime`` the network exported to ONNX at a fixed tile size (``dgno.inference.export``, cached in
                  ``$DGNO_CACHE/onnx``), run by ONNX Runtime: on the CPU, or on CUDA with
                  ``onnxruntime-gpu``; tiles smaller than the export are reflect-padded to it;
* ``auto``        the fastest engine measured on the device that works here (``AUTO_ORDER``; the
                  measurements: ``benchmarks/cpu/engines.py``, ``benchmarks/results/engines_cpu.json``).

Every engine computes the same function as ``eager`` up to float rounding (≤ 1e-4 on [0, 1] images,
checked by the tests and, for ONNX, by every export). An engine that cannot run here is named with the
reason: ``auto`` then notes it and takes the next one; an engine asked for by name is an error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgno.choices import check_choice
from dgno.inference import export
from dgno.inference.cuda_graphs import forward_fn
from dgno.inference.engine_names import ENGINES
from dgno.io import InputError
from dgno.layers import native_kernels, native_modules

# Fastest first, per device type, as measured (benchmarks/results/engines_cpu.json; on CUDA only eager
# has been measured, with the mamba_ssm / Triton scans and CUDA graphs). ONNX Runtime is left out of auto:
# at the paper networks' 512-px tiles its first use (export and check) ran over 10 min and 12 GB on 2 cores
# before it was stopped, and at small tiles it was no faster than eager; it runs when asked for by name.
AUTO_ORDER = {"cpu": ("native", "eager"), "cuda": ("eager",)}


@dataclass(frozen=True)
class Engine:
    """A ready network: ``forward`` maps (B, C, h, w) float32 on ``device`` to its list of outputs (the
    full-resolution restoration last).  ``note``: why another engine than the one asked for runs ("")."""

    name: str
    forward: Callable[[Tensor], list[Tensor]]
    device: torch.device
    note: str = ""


class EngineUnavailable(RuntimeError):
    """An engine that cannot run on this machine or device; the message says why."""


def build_engine(
    model: nn.Module,
    device: torch.device,
    *,
    engine: str = "auto",
    tile: int | None = None,
    cuda_graphs: bool = False,
    bf16: bool = False,
) -> Engine:
    """The engine ``engine`` for ``model`` on ``device`` (``model`` may be changed in place by ``native``).

    ``tile``: the tile size the caller restores with (ONNX Runtime runs a file exported for it; a model
    restored in one pass uses export.EXPORT_TILE). ``cuda_graphs`` / ``bf16`` are eager-engine options on a GPU: with
    them ``auto`` is eager. Raises :class:`~dgno.io.InputError` for an engine that cannot run here.
    """
    check_choice("engine", engine, ENGINES)
    if engine == "auto":
        return _first_available(model, device, tile=tile, cuda_graphs=cuda_graphs, bf16=bf16)
    if engine != "eager" and (cuda_graphs or bf16):
        raise InputError(f"--engine {engine}: CUDA graphs and bf16 are options of the eager engine. Fix: use --engine eager (or auto) with them")
    try:
        return _build(engine, model, device, tile=tile, cuda_graphs=cuda_graphs, bf16=bf16)
    except EngineUnavailable as exc:
        raise InputError(f"--engine {engine}: {exc}. Fix: use --engine auto (it picks an engine that runs here) or eager") from None


def _first_available(model: nn.Module, device: torch.device, *, tile: int | None, cuda_graphs: bool, bf16: bool) -> Engine:
    if cuda_graphs or bf16:
        return _build("eager", model, device, tile=tile, cuda_graphs=cuda_graphs, bf16=bf16)
    notes = []
    for name in AUTO_ORDER.get(device.type, ("eager",)):
        try:
            engine = _build(name, model, device, tile=tile, cuda_graphs=False, bf16=False)
        except EngineUnavailable as exc:
            notes.append(f"engine {name} unavailable ({exc})")
            continue
        return Engine(engine.name, engine.forward, engine.device, "; ".join(notes))
    raise AssertionError("the eager engine is always available")


def _build(name: str, model: nn.Module, device: torch.device, *, tile: int | None, cuda_graphs: bool, bf16: bool) -> Engine:
    if name == "eager":
        return Engine("eager", forward_fn(model, device, cuda_graphs=cuda_graphs, bf16=bf16), device)
    if name == "native":
        if device.type != "cpu":
            raise EngineUnavailable(f"it runs on a CPU, not on {device}")
        if not native_kernels.available():
            raise EngineUnavailable(native_kernels.unavailable_reason())
        native_modules.to_native(model)
        return Engine("native", forward_fn(model, device), device)
    return _onnxruntime(model, device, tile=tile or DEFAULT_ONNX_TILE)


DEFAULT_ONNX_TILE = export.EXPORT_TILE  # what a one-pass restoration is tiled at


def onnx_cache_dir() -> Path:
    """Where exported engine files are kept: ``$DGNO_CACHE/onnx``, default ``~/.cache/dgno/onnx``."""
    root = os.environ.get("DGNO_CACHE") or Path.home() / ".cache" / "dgno"
    return Path(root) / "onnx"


def _onnxruntime(model: nn.Module, device: torch.device, *, tile: int) -> Engine:
    try:
        import onnxruntime  # noqa: F401  (whether the optional engine is installed)
    except ImportError:
        raise EngineUnavailable("onnxruntime is not installed (pip install onnxruntime)") from None
    tile = -(-tile // 32) * 32  # exports take multiples of 32
    path = export.cached_onnx(model, tile=tile, cache=onnx_cache_dir())
    session = export.session_forward(export.onnx_session(path, threads=torch.get_num_threads(), device=device.type))

    def run(x: Tensor) -> list[Tensor]:
        h, w = x.shape[-2:]
        if h > tile or w > tile:
            raise ValueError(f"the ONNX engine was exported for {tile}x{tile} tiles, got a {h}x{w} input")
        mode = "reflect" if tile - h < h and tile - w < w else "replicate"  # reflect needs pad < size
        padded = F.pad(x, (0, tile - w, 0, tile - h), mode=mode) if (h, w) != (tile, tile) else x
        return [session(padded)[..., :h, :w].to(device=x.device, dtype=x.dtype)]

    return Engine("onnxruntime", run, device)
