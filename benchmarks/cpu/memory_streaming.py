"""Peak memory of training and evaluation with N and 10 N images: streamed (bounded cache) vs all held.

Usage: python -m benchmarks.cpu.memory_streaming [--n 150] [--size 256] [--cache-mb 64]
                                                [--out benchmarks/results/memory_streaming_cpu.json]

Writes two synthetic datasets of 16-bit grayscale TIFF pairs (N and 10 N pairs in each of the train
and test splits, `size`² pixels), then measures, each in a fresh Python process, the peak resident
memory (ru_maxrss) of

* training: `dgno.train.train` on the train split, a few iterations of the smoke-scale GG model;
* evaluation: `dgno.inference.evaluate.score_dataset` of the test split (identity restorer, PSNR/SSIM);

once with the streaming cache at `cache_mb` (DGNO_IMAGE_CACHE_MB) and once with a budget larger
than the data, which holds every decoded image (memory that follows the data). The goal is
that streamed peak memory grows by at most 20 % from N to 10 N images. N is chosen so that even
the N dataset exceeds the cache: below that, the cache holds everything and memory follows the data
up to the budget (baseline + budget is the bound). Not a test: minutes of CPU and ~1 GB of disk.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tifffile

ROOT = Path(__file__).resolve().parents[2]

# One measurement: run in a fresh interpreter, print peak RSS in MB as the last line.
CHILD = r"""
import resource, sys
from pathlib import Path
kind, data = sys.argv[1], Path(sys.argv[2])
if kind == "train":
    from dgno.train import ModelChoice, TrainConfig, train
    cfg = TrainConfig.from_dict({"iterations": 5, "batch_size": 4, "patch_size": 64, "val_every": 10**9,
                                 "log_every": 10**9, "checkpoint_every": 10**9, "device": "cpu", "seed": 0})
    train(data, data.parent / ("run_" + data.name), model_choice=ModelChoice(name="gg", scale="smoke"),
          levels=["a"], cfg=cfg, progress=False, install_signal_handlers=False)
else:
    from dgno.inference.evaluate import identity_restorer, score_dataset
    score_dataset(identity_restorer, data, "a", data.parent / ("eval_" + data.name), method="input",
                  with_lpips=False, save_restored=False, progress=False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def write_dataset(root: Path, n: int, size: int, seed: int) -> Path:
    """n train and n test pairs of smooth random 16-bit images (blur = a box-filtered copy)."""
    from scipy.ndimage import gaussian_filter, uniform_filter

    rng = np.random.default_rng(seed)
    (root / "gt").mkdir(parents=True)
    (root / "blur" / "a").mkdir(parents=True)
    rows = ["id,split"]
    for i in range(2 * n):
        gt = gaussian_filter(rng.random((size, size)), 2.0)
        gt = (gt - gt.min()) / (gt.max() - gt.min())
        tifffile.imwrite(root / "gt" / f"img{i:05d}.tif", (gt * 65535).astype(np.uint16))
        tifffile.imwrite(root / "blur" / "a" / f"img{i:05d}.tif", (uniform_filter(gt, 5) * 65535).astype(np.uint16))
        rows.append(f"img{i:05d},{'train' if i < n else 'test'}")
    (root / "split.csv").write_text("\n".join(rows) + "\n")
    return root


def peak_rss_mb(kind: str, data: Path, cache_mb: float) -> tuple[float, float]:
    env = {**os.environ, "DGNO_IMAGE_CACHE_MB": str(cache_mb), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, kind, str(data)], env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} on {data} failed:\n{proc.stderr[-3000:]}")
    return float(proc.stdout.strip().splitlines()[-1]), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=150, help="pairs per split of the small dataset (the large one has 10×)")
    ap.add_argument("--size", type=int, default=256, help="image side in pixels")
    ap.add_argument("--cache-mb", type=float, default=64.0, help="streaming cache budget (DGNO_IMAGE_CACHE_MB)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "memory_streaming_cpu.json"))
    args = ap.parse_args()

    decoded_mb = {n: 2 * n * args.size**2 * 4 / 1e6 for n in (args.n, 10 * args.n)}  # float32 gt + blur, one split
    results = []
    with tempfile.TemporaryDirectory(prefix="dgno_mem_") as tmp:
        sets = {n: write_dataset(Path(tmp) / f"n{n}", n, args.size, seed=n) for n in (args.n, 10 * args.n)}
        for kind in ("train", "evaluate"):
            for mode, budget in (("streamed", args.cache_mb), ("all_held", 10 * decoded_mb[10 * args.n])):
                for n, data in sets.items():
                    rss, seconds = peak_rss_mb(kind, data, budget)
                    results.append({"kind": kind, "mode": mode, "pairs": n, "decoded_data_mb": round(decoded_mb[n], 1),
                                    "cache_mb": budget, "peak_rss_mb": round(rss, 1), "seconds": round(seconds, 1)})  # fmt: skip
                    print(json.dumps(results[-1]), flush=True)
    growth = {}
    for kind in ("train", "evaluate"):
        for mode in ("streamed", "all_held"):
            small, large = (r["peak_rss_mb"] for r in results if r["kind"] == kind and r["mode"] == mode)
            growth[f"{kind}_{mode}"] = round(100 * (large / small - 1), 1)
    out = {
        "benchmark": "peak RSS of training (5 iterations, GG smoke) and evaluation (identity, PSNR/SSIM), N vs 10 N pairs",
        "command": "python -m benchmarks.cpu.memory_streaming " + " ".join(sys.argv[1:]),
        "image_size": args.size,
        "goal": "streamed growth from N to 10 N <= 20 %",
        "growth_percent": growth,
        "goal_met": all(growth[f"{k}_streamed"] <= 20 for k in ("train", "evaluate")),
        "results": results,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "python": platform.python_version()},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(growth))


if __name__ == "__main__":
    main()
