"""What produced a result: git commit, library versions, device. Stored in every checkpoint and results file."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any

PACKAGES = ("dgno", "torch", "numpy", "scikit-image", "snakemake", "spandrel", "lpips", "tifffile", "stardist", "tensorflow", "onnx", "onnxruntime")


def git_commit(cwd: str | Path | None = None) -> str:
    """The repository's HEAD commit, with '+dirty' when the tree has local changes; 'unknown' outside git."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def device_name(device: Any = None) -> str:
    """Human-readable device: the GPU model for CUDA, the CPU model and core count otherwise."""
    import torch

    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda" and torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(dev)}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu: {cpu} ({torch.get_num_threads()} threads)"


def collect(device: Any = None) -> dict[str, Any]:
    return {
        "git_commit": git_commit(),
        "versions": versions(),
        "device": device_name(device),
        "host": platform.node(),
        "time_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
