"""Two concurrent `dgno deblur` runs on this machine's cores against the same two runs one after the other.

Usage: python -m benchmarks.cpu.deblur_concurrency [--images 2] [--size 512] [--repeats 2]
                                                 [--out benchmarks/results/deblur_concurrency.json]

Each run is the real command (`python -m dgno.cli deblur ...`, a fresh process: start-up, model load
and memory probe included) on its own folder of `images` 16-bit `size`² frames, with a demo-scale
DGNO-Cell model (random weights, seeded: the time does not depend on the weights). Scenarios:

* ``sequential``: run A, then run B, default threads (``$OMP_NUM_THREADS`` unset: each takes every
  core this process may use);
* ``concurrent``: A and B started together, default threads (each takes every core, so 2 × cores
  threads compete for the cores; their idle threads sleep, OMP_WAIT_POLICY=PASSIVE as dgno deblur sets);
* ``concurrent_threads_split``: A and B together, ``--threads`` = half the cores each;
* ``concurrent_spinning``: A and B together, default threads, ``OMP_WAIT_POLICY=ACTIVE`` (OpenMP's
  spinning threads, what the command did without its setting).

Goal: each concurrent run is no slower than running the two one after the other (its wall time at
most the sequential pair's). The machine may be shared: the load average before and after each
scenario is recorded beside the times. Writes the device, thread settings and library versions.
Not a test: a few minutes of CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tifffile
import torch

from dgno import provenance
from dgno.checkpoint import CHECKPOINT_VERSION
from dgno.models.registry import build_model

ROOT = Path(__file__).resolve().parents[2]


def write_inputs(root: Path, *, runs: int, images: int, size: int) -> list[Path]:
    """One folder of ``images`` smooth 16-bit frames per run."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(0)
    folders = []
    for r in range(runs):
        folder = root / f"in{r}"
        folder.mkdir(parents=True)
        for i in range(images):
            frame = gaussian_filter(rng.random((size, size)), 3.0)
            frame = (frame - frame.min()) / (frame.max() - frame.min())
            tifffile.imwrite(folder / f"frame{i}.tif", (frame * 4000 + 100).astype(np.uint16))
        folders.append(folder)
    return folders


def write_model(path: Path) -> Path:
    """A demo-scale DGNO-Cell model.pt (seeded random weights, min-max normalisation as the demo's nuclei)."""
    torch.manual_seed(0)
    model = build_model("dgno-cell", scale="demo")
    spec = {"name": "dgno-cell", "scale": "demo", "hparams": model.hparams, "overrides": {}}
    torch.save({"version": CHECKPOINT_VERSION, "spec": spec, "state_dict": model.state_dict(), "normalise": "minmax"}, path)
    return path


def _env(wait_policy: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT / "src")
    if wait_policy:
        env["OMP_WAIT_POLICY"] = wait_policy
    return env


def _start(model: Path, folder: Path, out: Path, *, threads: int | None, wait_policy: str | None) -> tuple[subprocess.Popen, float]:
    cmd = [sys.executable, "-m", "dgno.cli", "deblur", str(folder), "--checkpoint", str(model), "--output", str(out), "--device", "cpu"]
    cmd += ["--threads", str(threads)] if threads else []
    return subprocess.Popen(cmd, env=_env(wait_policy), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), time.perf_counter()


def _finish(proc: subprocess.Popen, started: float) -> dict:
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"dgno deblur failed ({proc.returncode}): {err.strip().splitlines()[-3:]}")
    line = next(s for s in out.splitlines() if s.startswith("deblur:"))
    inner = float(line.split(" failed in ")[1].split(" s")[0])
    return {"wall_s": round(wall, 2), "deblur_s": inner, "summary": line}


def scenario(model: Path, folders: list[Path], out: Path, *, concurrent: bool, threads: int | None, wait_policy: str | None) -> dict:
    """Two runs, together or one after the other; wall time of each, the load average around them."""
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    if concurrent:
        procs = [_start(model, f, out / f"out{k}", threads=threads, wait_policy=wait_policy) for k, f in enumerate(folders)]
        runs = [_finish(*p) for p in procs]
    else:
        runs = [_finish(*_start(model, f, out / f"out{k}", threads=threads, wait_policy=wait_policy)) for k, f in enumerate(folders)]
    total = time.perf_counter() - t0
    threads_used = threads or len(os.sched_getaffinity(0))
    return {"runs": runs, "total_wall_s": round(total, 2), "threads_per_run": threads_used, "omp_wait_policy": wait_policy or "PASSIVE (dgno deblur's)",
            "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip


SCENARIOS = {
    "sequential": dict(concurrent=False, threads=None, wait_policy=None),
    "concurrent": dict(concurrent=True, threads=None, wait_policy=None),
    "concurrent_threads_split": dict(concurrent=True, threads="half", wait_policy=None),
    "concurrent_spinning": dict(concurrent=True, threads=None, wait_policy="ACTIVE"),
}


def _median_runs(trials: list[dict]) -> dict:
    """Per scenario: the median over repeats of each run's wall time and of the total."""
    return {
        "run_wall_s": [statistics.median(t["runs"][k]["wall_s"] for t in trials) for k in range(len(trials[0]["runs"]))],
        "total_wall_s": statistics.median(t["total_wall_s"] for t in trials),
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=2, help="frames per run")
    p.add_argument("--size", type=int, default=512, help="frame side in px (one 512-px tile at the default --tile)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "deblur_concurrency.json"))
    args = p.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="dgno-deblur-bench-") as tmp:
        root = Path(tmp)
        model = write_model(root / "model.pt")
        folders = write_inputs(root, runs=2, images=args.images, size=args.size)
        trials: dict[str, list[dict]] = {name: [] for name in args.scenarios}
        for repeat in range(args.repeats):  # scenarios interleaved, so a change in the machine's load hits all of them
            for name in args.scenarios:
                spec = dict(SCENARIOS[name])
                spec["threads"] = max(1, cores // 2) if spec["threads"] == "half" else spec["threads"]
                trials[name].append(scenario(model, folders, root / f"{name}{repeat}", **spec))
                print(f"{name} #{repeat}: runs {[r['wall_s'] for r in trials[name][-1]['runs']]} s, total {trials[name][-1]['total_wall_s']} s", flush=True)
    medians = {name: _median_runs(t) for name, t in trials.items()}
    sequential_pair = medians.get("sequential", {}).get("total_wall_s")
    goal = {name: max(m["run_wall_s"]) <= sequential_pair for name, m in medians.items() if name.startswith("concurrent")} if sequential_pair else {}
    result = {
        "benchmark": "two concurrent dgno deblur runs vs one after the other",
        "command": "python -m benchmarks.cpu.deblur_concurrency " + " ".join(argv if argv is not None else sys.argv[1:]),
        "workload": {"runs": 2, "images_per_run": args.images, "size": args.size, "dtype": "uint16", "model": "dgno-cell demo (random weights)", "tile": 512, "repeats": args.repeats},
        "cores_allowed": cores,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "provenance": provenance.collect(),
        "torch_parallel": torch.__config__.parallel_info().splitlines()[:6],
        "median": medians,
        "goal_each_concurrent_run_no_slower_than_the_sequential_pair": goal,
        "trials": trials,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"median": medians, "goal": goal}, indent=2))
    return result


if __name__ == "__main__":
    main()
