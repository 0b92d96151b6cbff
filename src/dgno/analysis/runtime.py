"""Read the speed/memory benchmark files into one table (report section "runtime / memory").

Two file layouts exist under ``benchmarks/results``:

* ``dgno bench`` output: ``{"results": [{kind, model, scale, size, batch, images_per_second |
  iterations_per_second, peak_memory_mb, provenance: {device}}, ...]}``; peak memory is CUDA's
  ``max_memory_allocated`` on GPUs and the process's peak RSS on CPUs;
* ``benchmarks/bench_models.py`` output: ``{"device", "settings": {"forward_size"}, "models":
  {name: {forward_s, peak_rss_mb}}}``: one paper-scale forward pass per model, peak RSS.

Both become rows with the file and device named, so no number is shown without its context.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

COLUMNS = ["file", "device", "kind", "model", "scale", "size", "batch", "amp_bf16", "images_per_second", "peak_memory_mb", "memory"]


def _memory_kind(device: str) -> str:
    return "CUDA max_memory_allocated" if device.startswith("cuda") else "process peak RSS (VmHWM)"


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
                "model": r["model"],
                "scale": r.get("scale"),
                "size": int(r["size"]),
                "batch": int(r.get("batch", 1)),
                "amp_bf16": bool(r.get("amp_bf16", False)),
                "images_per_second": float(ips),
                "peak_memory_mb": r.get("peak_memory_mb"),
                "memory": _memory_kind(device),
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
        }
        for name, m in blob["models"].items()
        if m.get("forward_s")
    ]


def load_bench_results(paths: Iterable[str | Path]) -> pd.DataFrame:
    """All benchmark rows of the given JSON files; files of neither layout are skipped with a message."""
    rows: list[dict] = []
    for p in sorted(Path(x) for x in paths):
        try:
            blob = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"{p}: skipped, not readable JSON ({exc})")
            continue
        if isinstance(blob, dict) and isinstance(blob.get("results"), list):
            rows += _bench_rows(p, blob)
        elif isinstance(blob, dict) and isinstance(blob.get("models"), dict):
            rows += _models_rows(p, blob)
        else:
            print(f"{p}: skipped, neither 'dgno bench' nor bench_models.py layout")
    return pd.DataFrame(rows, columns=COLUMNS)
