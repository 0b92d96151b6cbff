"""The demo's trained DGNO-Cell on the demo's test images through every engine (``benchmarks.cpu.engines``).

Each engine scores the test images exactly as the workflow's evaluation does (``score_dataset``: whole
images, the same PSNR), into a folder of its own; the restored images and per-image PSNRs are then
compared with eager PyTorch's.  int8: ONNX Runtime's dynamic quantisation of the same ONNX file
(weights to int8, activations quantised per call), run the same way.
"""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import tifffile
import torch

from dgno.checkpoint import load_trained
from dgno.inference import engines, export
from dgno.inference.evaluate import model_restorer, score_dataset

DATASET, METHOD, LEVEL = "nuclei", "dgno-cell", "z06"
TILE = 128  # the ONNX file's tile (the demo's images are 128-256 px)


def _scored(restore, data_dir: Path, out: Path) -> tuple[pd.DataFrame, dict[str, np.ndarray], float]:
    start = time.perf_counter()
    score_dataset(restore, data_dir, LEVEL, out, method=METHOD, with_lpips=False, progress=False)
    seconds = time.perf_counter() - start
    images = {p.stem: tifffile.imread(p) for p in sorted((out / "restored").glob("*.tif"))}
    return pd.read_csv(out / "per_image.csv"), images, seconds


def _int8_restorer(model, tmp: Path):
    """model → ONNX (parity-checked) → dynamic int8 → a tiled restorer like the ONNX engine's."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = export.cached_onnx(model, tile=TILE, cache=tmp)
    int8 = tmp / "int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    session = export.session_forward(export.onnx_session(int8, threads=torch.get_num_threads()))
    chosen = engines.Engine("onnxruntime-int8", lambda x: [session(x)], torch.device("cpu"))
    return chosen, int8.stat().st_size


def agreement(results: Path, engine_names: list[str], *, int8: bool) -> dict[str, Any]:
    model_pt = results / "train" / DATASET / METHOD / "model.pt"
    data_dir = results / "data" / DATASET
    if not model_pt.exists():
        return {"skipped": f"{model_pt} not found: run the demo first (snakemake --cores all)"}
    base, _ = load_trained(model_pt)
    rows: dict[str, Any] = {"model": str(model_pt), "level": LEVEL, "engines": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        outputs = {}
        for name in ["eager", *[e for e in engine_names if e != "eager"]]:
            restore = model_restorer(copy.deepcopy(base), torch.device("cpu"), tile=TILE, overlap=32, engine=name)
            outputs[name] = _scored(restore, data_dir, tmp / name)
        if int8:
            chosen, size = _int8_restorer(copy.deepcopy(base), tmp)
            restore = model_restorer(base, torch.device("cpu"), tile=TILE, overlap=32, engine=chosen)
            outputs["onnxruntime-int8"] = _scored(restore, data_dir, tmp / "int8")
            rows["int8_bytes"] = size
    psnr0, images0, _ = outputs["eager"]
    for name, (psnr, images, seconds) in outputs.items():
        diff = max(float(np.abs(images[k] - images0[k]).max()) for k in images0)
        rows["engines"][name] = {
            "images": len(images), "seconds": seconds, "max_abs_vs_eager": diff,
            "psnr_mean": float(psnr["psnr"].mean()), "psnr_minus_eager_mean": float((psnr["psnr"] - psnr0["psnr"]).mean()),
            "psnr_minus_eager_max_abs": float((psnr["psnr"] - psnr0["psnr"]).abs().max()),
        }  # fmt: skip
    return rows
