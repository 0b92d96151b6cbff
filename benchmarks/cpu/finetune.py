"""Fine-tuning on one's own z-stacks: held-out PSNR of the starting network against the fine-tuned one.

Usage: python -m benchmarks.cpu.finetune [--threads 2] [--pretrain 2000] [--fields 30]
                                         [--out benchmarks/results/finetune_cpu.json]

Generated z-stacks (``dgno.data.synthetic_stacks``: nuclei fields, 7 planes, the in-focus one drawn per
field, camera noise on every plane), 128 × 128 px:

1. **The start**: a demo-scale DGNO-Cell trained from scratch (``--pretrain`` iterations, learning rate
   1e-3 and 64-px patches as the demo's) on 40 stacks with the demo's Gaussian defocus, through the same
   ``finetune`` call with ``--scratch``. Its time is recorded but is not fine-tuning time (``--start`` reuses
   the start of an earlier run, kept with ``--save-start``).
2. **Other blur**: ``--fields`` stacks of new scenes blurred by the Seidel model (spherical aberration,
   astigmatism and coma on top of the defocus: blur that differs above and below focus, and is elongated),
   fine-tuned from the start at the default settings (``dgno finetune`` with no recipe option).
3. **Own blur**: ``--fields`` stacks of new scenes with the start's own Gaussian defocus, the same call.

For 2 and 3: the wall time of the whole call (preparing the stacks, training, scoring the held-out fields),
the held-out mean PSNR of the input, the start and the fine-tuned network over the held-out pairs, the
paired difference fine-tuned − start with its bootstrap interval over held-out fields (pairs of a field
averaged first: ``dgno.stats``), the iteration kept and where training stopped. Goals: ≥ 1 dB on the other
blur within 10 minutes, no loss beyond 0.1 dB on the own blur. The load average is recorded beside the times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from dgno import provenance, stats
from dgno.data.synthetic_stacks import StackSpec, write_stacks
from dgno.train.finetune import finetune, start_from
from dgno.train.finetune_data import Inputs

SIZE = (128, 128)
PRETRAIN_FIELDS = 40
GOALS = {"other_blur_gain_db": 1.0, "other_blur_minutes": 10.0, "own_blur_loss_db": 0.1}


def _stacks(root: Path, name: str, blur: str, seed: int, fields: int) -> Path:
    folder = root / name
    write_stacks(folder, StackSpec(size=SIZE, planes=7, blur=blur, seed=seed), fields=fields)
    return folder


def _heldout(out: Path) -> dict:
    """Held-out means and the paired difference fine-tuned − start, fields as the resampling unit."""
    pairs = pd.read_csv(out / "data" / "pairs.csv")
    frames = {name: pd.read_csv(out / "eval" / name / "per_image.csv").merge(pairs, on="id") for name in ("input", "start", "finetuned")}
    means = {name: round(float(f["psnr"].mean()), 3) for name, f in frames.items()}
    a, b = (frames[n].rename(columns={"id": "pair", "field": "id"}) for n in ("finetuned", "start"))
    interval = stats.paired_interval(a[["id", "level", "psnr"]], b[["id", "level", "psnr"]], "psnr", names=("finetuned", "start"))
    by_distance = {
        int(d): {name: round(float(f.loc[f["distance"] == d, "psnr"].mean()), 3) for name, f in frames.items()} for d in sorted(pairs["distance"].unique())
    }
    return {"psnr": means, "gain_db": round(interval.estimate, 3), "gain_interval": [round(interval.low, 3), round(interval.high, 3)],
            "interval_method": interval.method, "held_out_fields": interval.n_images, "held_out_pairs": len(frames["input"]), "psnr_by_distance": by_distance}  # fmt: skip


def _run(stacks: Path, out: Path, start, overrides: dict | None, patience: int) -> tuple[dict, float]:
    t0 = time.perf_counter()
    summary = finetune(Inputs(stacks=(str(stacks),)), out, start=start, overrides=overrides, patience=patience, device="cpu", lpips=False, progress=False)
    return summary, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pretrain", type=int, default=2000, help="iterations of the start's training from scratch")
    p.add_argument("--fields", type=int, default=30, help="stacks of each fine-tuning set")
    p.add_argument("--out", default="benchmarks/results/finetune_cpu.json")
    p.add_argument("--start", help="a start model.pt of an earlier run (its --save-start) instead of training one")
    p.add_argument("--save-start", help="keep the trained start here, for a later --start")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    result: dict = {"threads": args.threads, "load_average_start": os.getloadavg(), "size": list(SIZE), "pretrain_iterations": args.pretrain, "fields": args.fields}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start_file = Path(args.start) if args.start else root / "start" / "model.pt"
        if not args.start:
            scratch = start_from(scratch="dgno-cell", scale="demo")
            pre, seconds = _run(_stacks(root, "pretrain", "gaussian", 10, PRETRAIN_FIELDS), root / "start", scratch, {"iterations": args.pretrain, "lr": 1e-3, "patch_size": 64}, patience=0)
            result["start"] = {"seconds": round(seconds, 1), "selection": pre["selection"]}
            if args.save_start:
                shutil.copy(start_file, args.save_start)
        else:
            result["start"] = {"file": args.start, "selection": torch.load(start_file, map_location="cpu", weights_only=True).get("selection")}
        start = start_from(checkpoint=str(start_file))
        for name, blur, seed in (("other_blur", "seidel", 20), ("own_blur", "gaussian", 30)):
            summary, seconds = _run(_stacks(root, name, blur, seed, args.fields), root / name, start, None, patience=6)
            result[name] = {"blur": blur, "wall_seconds": round(seconds, 1), "train_seconds": summary["train_seconds"], "recipe": summary["recipe"],
                            "selection": summary["selection"], **_heldout(root / name)}  # fmt: skip
    other, own = result["other_blur"], result["own_blur"]
    result["goals"] = {
        **GOALS,
        "other_blur_met": other["gain_db"] >= GOALS["other_blur_gain_db"] and other["wall_seconds"] <= 60 * GOALS["other_blur_minutes"],
        "own_blur_met": own["gain_db"] >= -GOALS["own_blur_loss_db"],
    }
    result["load_average_end"] = os.getloadavg()
    result["provenance"] = provenance.collect(torch.device("cpu"))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("goals",)}, indent=1))
    for name in ("other_blur", "own_blur"):
        r = result[name]
        print(f"{name}: start {r['psnr']['start']:.2f} dB, fine-tuned {r['psnr']['finetuned']:.2f} dB, gain {r['gain_db']:+.2f} dB {r['gain_interval']}, {r['wall_seconds']:.0f} s")


if __name__ == "__main__":
    main()
