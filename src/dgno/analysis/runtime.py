"""Read the speed/memory benchmark files into one table (report section "runtime / memory").

These file layouts exist under ``benchmarks/results``:

* ``dgno bench`` output: ``{"results": [{kind, model, scale, size, batch, images_per_second |
  iterations_per_second, peak_memory_mb, provenance: {device}}, ...]}``; peak memory is CUDA's
  ``max_memory_allocated`` on GPUs and the process's peak RSS on CPUs;
* ``benchmarks/cpu/models.py`` output: ``{"device", "settings": {"forward_size"}, "models":
  {name: {forward_s, peak_rss_mb}}}``: one paper-scale forward pass per model, peak RSS;
* ``benchmarks/gpu/backends.py`` output: ``{"device", "forward": [{model, size,
  scan_backend, images_per_second, peak_memory_mb}], "train": [dgno bench train rows]}``;
* ``benchmarks/gpu/speed.py`` output: ``{"provenance", "inference": [{model, scan_backend,
  size, batch, dtype, mode, images_per_second, peak_allocated_mb}], "train": [...]}``, where
  ``mode`` says how the pass ran: "eager", "graphs" (CUDA-graph replay), "compile"
  (torch.compile) or "autograd" (eager with autograd recording, the paper's memory protocol), with
  "+cl" for channels-last weights;
* ``benchmarks/gpu/levers_and_evaluation.py`` output: the same layout, whose training steps name their
  speed levers (``levers``; "default" for none), plus whole-test-set evaluations (kind "evaluate": images/s, GPU utilisation in
  ``detail``) and its findings (kind "decision", one sentence each in ``detail``: gradient check, bf16
  gap, torch.compile break-even, the DG layers' share, the settings it recommends).

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
    "peak_memory_mb", "memory", "commit", "recorded_utc", "problem", "detail",
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
    """Rows of a ``benchmarks/gpu/speed.py`` file: forward passes (every mode) and training steps.

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
        levers = r.get("levers")  # levers_and_evaluation.py: "default" or the levers switched on
        rows.append({
            **base, "kind": "train", "model": _model_label(r), "size": int(r["size"]), "batch": int(r["batch"]),
            "amp_bf16": r["dtype"] == "bf16", "mode": "train" + ("+tf32" if r.get("tag") == "tf32_matmul" else "") + ("+levers" if levers else ""),
            "images_per_second": r["batch"] * float(r["iterations_per_second"]), "seconds_per_iteration": float(r["seconds_per_iteration"]),
            "peak_memory_mb": r.get("peak_allocated_mb"), "memory": MODE_MEMORY["train"],
            "detail": None if not levers else ("the default step (no lever)" if levers == "default" else f"levers: {levers}"),
        })  # fmt: skip
    return rows + _evaluation_rows(base, blob) + _finding_rows(base, blob)


def _evaluation_rows(base: dict, blob: dict) -> list[dict]:
    """levers_and_evaluation.py's whole-test-set evaluations: one row per setting, images/s."""
    rows = []
    for e in blob.get("eval_pipeline", []):
        util = e.get("gpu_utilisation_percent")
        util = f"{util:.0f} %" if isinstance(util, int | float) else "n/a"
        frame = "×".join(str(n) for n in reversed(e.get("frame", [])))
        rows.append({
            **base, "kind": "evaluate", "model": str(e["model"]), "size": int(e["tile"]), "batch": int(e["tile_batch"]), "amp_bf16": False,
            "mode": str(e["config"]), "images_per_second": e.get("images_per_second"),
            "detail": f"{e['frames']} frames of {frame} px in {e['tile']}-px tiles, {e['tile_batch']} per pass, CUDA graphs {'on' if e.get('cuda_graphs') else 'off'}, "
            f"overlapped reading/writing {'on' if e.get('overlap_io') else 'off'}; GPU utilisation {util}",
        })  # fmt: skip
    return rows


def _finding_rows(base: dict, blob: dict) -> list[dict]:
    """levers_and_evaluation.py's findings, one sentence each (kind "decision")."""
    found = []
    for g in blob.get("grad_check", []):
        a, floor = g["fastest_vs_default"], g["default_vs_default"]
        found.append(("gradient check", f"{g['model']}, {g['routing']} routing: the step with {g['levers']} against the default step at the same weights and batch: "
                      f"gradients differ by {a['grad_rel_l2']:.1e} (relative L2; the default step against itself: {floor['grad_rel_l2']:.1e}), loss by {a['loss_rel']:.1e}"))
    for b in blob.get("bf16_training", []):
        found.append(("bf16 training", f"{b['model']}, {b['iterations']} iterations from one seed: validation PSNR {b['fp32_val_psnr']:.3f} dB (float32), "
                      f"{b['bf16_val_psnr']:.3f} dB (bf16), gap {b['gap_db_fp32_minus_bf16']:+.3f} dB against the 0.05 dB threshold: train.bf16 "
                      f"{'may be true' if b['bf16_allowed'] else 'stays false'}; {1e3 * b['fp32_seconds_per_iteration']:.0f} vs {1e3 * b['bf16_seconds_per_iteration']:.0f} ms/it"))
    for c in blob.get("compile", []):
        be = c.get("break_even_iterations")
        found.append(("torch.compile", f"{c['model']}, {c['levers']}: compiling took {c['compile_seconds']:.0f} s, then {c['ms_per_it']:.1f} ms/it against "
                      f"{c['reference_ms']:.1f} ms/it without it: " + (f"pays after {be:.0f} iterations" if be else "never pays")))
    for d in blob.get("dg_layers", []):
        share = d.get("share_of_default_step")
        text = f"{d['model']}: the six DG operator layers take {d['total_ms']:.1f} ms forward + backward" + (f", {share:.0%} of the default step" if share else "")
        if d.get("full_res_compiled_fwd_bwd_ms") is not None:
            text += f"; the full-resolution pair compiled: {d['full_res_compiled_fwd_bwd_ms']:.1f} ms against {d['levels'][-1]['fwd_bwd_ms']:.1f} ms eager"
        found.append(("DG layers", text))
    dec = blob.get("decisions") or {}
    if dec:
        found.append(("recommended settings", f"train: {json.dumps(dec.get('train_settings_for_paper_config'), sort_keys=True)} "
                      f"(levers kept: {', '.join(dec.get('train_levers_keep') or []) or 'none'}; gradient check passed: {dec.get('gradient_check_passed')}); "
                      f"evaluate: {json.dumps(dec.get('evaluate_settings_for_paper_config'), sort_keys=True)}"))
    return [{**base, "kind": "decision", "model": topic, "mode": "finding", "detail": text} for topic, text in found]


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
