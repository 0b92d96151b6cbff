"""Read the speed/memory benchmark files into one table (report section "runtime / memory").

Two file layouts exist under ``benchmarks/results``:

* ``dgno bench`` output: ``{"results": [{kind, model, scale, size, batch, images_per_second |
  iterations_per_second, peak_memory_mb, provenance: {device}}, ...]}``; peak memory is CUDA's
  ``max_memory_allocated`` on GPUs and the process's peak RSS on CPUs;
* ``benchmarks/bench_models.py`` output: ``{"device", "settings": {"forward_size"}, "models":
  {name: {forward_s, peak_rss_mb}}}``: one paper-scale forward pass per model, peak RSS;
* ``benchmarks/bench_gpu_backends.py`` output: ``{"device", "forward": [{model, size,
  scan_backend, images_per_second, peak_memory_mb}], "train": [dgno bench train rows]}``;
* ``benchmarks/bench_gpu_speed.py`` output: ``{"provenance", "inference": [{model, scan_backend,
  size, batch, dtype, mode, images_per_second, peak_allocated_mb}], "train": [...]}``, where
  ``mode`` says how the pass ran: "eager", "graphs" (CUDA-graph replay), "compile"
  (torch.compile) or "autograd" (eager with autograd recording, the paper's memory protocol).

All become rows with the file and device named, so no number is shown without its context.  A row
timed with an explicit selective-scan backend names it after the model ("dgno-cell [scan:
mamba_ssm]"), so the two backends of one model are two rows, never averaged together.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

COLUMNS = [
    "file", "device", "kind", "model", "scale", "size", "batch", "amp_bf16", "mode", "images_per_second", "seconds_per_iteration",
    "peak_memory_mb", "memory", "commit", "recorded_utc", "problem",
]  # fmt: skip


def _memory_kind(device: str) -> str:
    return "CUDA max_memory_allocated" if device.startswith("cuda") else "process peak RSS (VmHWM)"


def _model_label(r: dict) -> str:
    backend = r.get("scan_backend")
    return f"{r['model']} [scan: {backend}]" if backend else str(r["model"])


def _origin(record: dict) -> dict[str, str]:
    """commit and time a result was recorded with (its own provenance, else the file's), "unknown" if not stated."""
    prov = record.get("provenance", record)
    return {"commit": str(prov.get("git_commit") or "unknown"), "recorded_utc": str(prov.get("time_utc") or "unknown")}


def _bench_rows(path: Path, blob: dict) -> list[dict]:
    rows = []
    for r in blob["results"]:
        device = r.get("provenance", {}).get("device", "unknown")
        if r.get("kind") == "train":
            ips = r["batch"] * r["iterations_per_second"]
        else:
            ips = r["images_per_second"]
        rows.append(
            {
                "file": path.name,
                "device": device,
                "kind": r.get("kind", "forward"),
                "model": _model_label(r),
                "scale": r.get("scale"),
                "size": int(r["size"]),
                "batch": int(r.get("batch", 1)),
                "amp_bf16": bool(r.get("amp_bf16", False)),
                "images_per_second": float(ips),
                "peak_memory_mb": r.get("peak_memory_mb"),
                "memory": _memory_kind(device),
                **_origin(r if "provenance" in r else blob),
            }
        )
    return rows


def _models_rows(path: Path, blob: dict) -> list[dict]:
    device = blob.get("device", "unknown")
    size = int(blob.get("settings", {}).get("forward_size", 256))
    return [
        {
            "file": path.name,
            "device": device,
            "kind": "forward",
            "model": name,
            "scale": "paper",
            "size": size,
            "batch": 1,
            "amp_bf16": False,
            "images_per_second": 1.0 / m["forward_s"],
            "peak_memory_mb": m.get("peak_rss_mb"),
            "memory": _memory_kind(device),
            **_origin(blob),
        }
        for name, m in blob["models"].items()
        if m.get("forward_s")
    ]


def _backend_rows(path: Path, blob: dict) -> list[dict]:
    device = blob.get("device", "unknown")
    forward = [
        {
            "file": path.name,
            "device": device,
            "kind": "forward",
            "model": _model_label(r),
            "scale": "paper",
            "size": int(r["size"]),
            "batch": 1,
            "amp_bf16": False,
            "images_per_second": float(r["images_per_second"]),
            "peak_memory_mb": r.get("peak_memory_mb"),
            "memory": _memory_kind(device),
            **_origin(blob),
        }
        for r in blob["forward"]
    ]
    return forward + _bench_rows(path, {"results": blob.get("train", []), **_origin(blob)})


MODE_MEMORY = {
    "eager": "CUDA max_memory_allocated, no autograd",
    "autograd": "CUDA max_memory_allocated, forward with autograd on",
    "train": "CUDA max_memory_allocated, training step",
}


def _speed_rows(path: Path, blob: dict) -> list[dict]:
    """Rows of a ``bench_gpu_speed.py`` file: forward passes (every mode) and training steps.

    CUDA-graph and compiled passes have no peak memory here: their memory is taken when the
    graph is captured, before the benchmark resets the peak counter, so the recorded peak would
    understate it.
    """
    prov = blob["provenance"]
    base = {
        "file": path.name,
        "device": prov.get("device", "unknown"),
        "scale": "paper",
        "commit": str(prov.get("git_commit") or "unknown"),
        "recorded_utc": str(prov.get("time_utc") or "unknown"),
    }
    rows = []
    for r in blob.get("inference", []):
        mode = r["mode"]
        rows.append({
            **base, "kind": "forward", "model": _model_label(r), "size": int(r["size"]), "batch": int(r["batch"]),
            "amp_bf16": r["dtype"] == "bf16", "mode": mode, "images_per_second": float(r["images_per_second"]),
            "peak_memory_mb": r.get("peak_allocated_mb") if mode in MODE_MEMORY else None, "memory": MODE_MEMORY.get(mode, "not recorded (see docstring)"),
        })  # fmt: skip
    for r in blob.get("train", []):
        rows.append({
            **base, "kind": "train", "model": _model_label(r), "size": int(r["size"]), "batch": int(r["batch"]),
            "amp_bf16": r["dtype"] == "bf16", "mode": "train" + ("+tf32" if r.get("tag") == "tf32_matmul" else ""),
            "images_per_second": r["batch"] * float(r["iterations_per_second"]), "seconds_per_iteration": float(r["seconds_per_iteration"]),
            "peak_memory_mb": r.get("peak_allocated_mb"), "memory": MODE_MEMORY["train"],
        })  # fmt: skip
    return rows


def load_bench_results(paths: Iterable[str | Path]) -> pd.DataFrame:
    """All benchmark rows of the given JSON files.

    A file that cannot be read, or holds a runtime layout with missing fields, is not dropped: it gets a
    row of kind "unreadable" whose ``problem`` says why, and the report lists it.  Files of other
    benchmarks (scan, ring, sigma blur, ... : no throughput per image size) get kind "other".
    """
    rows: list[dict] = []
    for p in sorted(Path(x) for x in paths):
        try:
            blob = json.loads(p.read_text())
            if isinstance(blob, dict) and isinstance(blob.get("inference"), list) and "provenance" in blob:
                rows += _speed_rows(p, blob)
            elif isinstance(blob, dict) and isinstance(blob.get("results"), list) and all("model" in r for r in blob["results"]):
                rows += _bench_rows(p, blob)
            elif isinstance(blob, dict) and isinstance(blob.get("models"), dict):
                rows += _models_rows(p, blob)
            elif isinstance(blob, dict) and isinstance(blob.get("forward"), list) and "scan_backends" in blob:
                rows += _backend_rows(p, blob)
            else:
                rows.append({"file": p.name, "kind": "other", "problem": "not a runtime/memory layout (another benchmark)"})
        except (OSError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
            problem = f"{type(exc).__name__}: {exc}"
            print(f"{p}: not read ({problem})", flush=True)
            rows.append({"file": p.name, "kind": "unreadable", "problem": problem})
    return pd.DataFrame(rows, columns=COLUMNS)
