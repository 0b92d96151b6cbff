"""Shared fixtures: a tiny dataset on disk in the layout of docs/CONVENTIONS.md."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def patient(seconds: float) -> float:
    """A subprocess's time limit on this machine now: ``seconds`` on an idle machine, stretched by the load
    per core (a shared machine at load 10 on 2 cores runs a job about five times slower). A limit only
    stops a hung process; pytest's own timeout (pyproject) bounds every test."""
    return seconds * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def write_tiny_dataset(root: Path, *, n_train=3, n_val=1, n_test=2, size=(40, 44), levels=("a",), seed=0) -> Path:
    """Random smooth blobs as GT, a box blur as 'blur' — enough structure for the loops to run."""
    from scipy.ndimage import gaussian_filter, uniform_filter

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, split in enumerate(["train"] * n_train + ["val"] * n_val + ["test"] * n_test):
        image_id = f"img{i:02d}"
        gt = gaussian_filter(rng.random(size), 2.0)
        gt = (gt - gt.min()) / (gt.max() - gt.min())
        (root / "gt").mkdir(exist_ok=True)
        tifffile.imwrite(root / "gt" / f"{image_id}.tif", (gt * 65535).astype(np.uint16))
        for lvl in levels:
            (root / "blur" / lvl).mkdir(parents=True, exist_ok=True)
            tifffile.imwrite(root / "blur" / lvl / f"{image_id}.tif", (uniform_filter(gt, 5) * 65535).astype(np.uint16))
        rows.append((image_id, split))
    with (root / "split.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "split"])
        w.writerows(rows)
    return root


@pytest.fixture
def tiny_dataset(tmp_path) -> Path:
    return write_tiny_dataset(tmp_path / "tiny")


def snakemake(workdir: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Snakemake on the smoke config in ``workdir``. No limit of its own by default: a workflow run's time
    grows with the machine's load, and pytest's timeout (pyproject) ends a hung one."""
    cmd = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir), "--configfile", str(ROOT / "tests" / "smoke.yaml"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("smoke")
    snakemake(workdir, "--cores", "2")
    return workdir


