"""Expected GPU time of `snakemake --profile slurm authors`, from the recorded H100 forward-pass benchmarks.

    python -m benchmarks.estimates.authors_gpu_time [benchmarks/results/gpu_speed_h100.json] [--fields 154] [--repeats 5]

How: every restoration the target runs is counted in 512-px tiles and divided by the measured
throughput of DGNO at 512² on the H100 (fp32, Triton scan, eager: the evaluation does not use CUDA
graphs, and Gumbel routing cannot). A 520 × 696 BBBC006 frame is 2 × 2 = 4 tiles (512 px, 32 px
overlap, ``dgno.inference.tiling.tile_starts``); the evaluation passes the 4 tiles of a frame through
the network together (tile batch 8 on a GPU), so the time lies between the batch-1 and the batch-8
throughputs, both printed. Restorations: 2 channels × 2 released networks × 6 levels (z02, z06, z10,
z01, z05, z13) × test fields per channel × (1 argmax + N Gumbel repeats). The authors' test split has
about a fifth of BBBC006's 768 fields per channel (the paper's BBBC006 w1 test set has 153 images):
``--fields`` sets it. Not counted: loading models and data per job, LPIPS, StarDist (CPU), 3DHistech.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dgno.inference.tiling import tile_starts

FRAME = (520, 696)
TILE, OVERLAP = 512, 32
MODELS = ("dgno-face", "dgno-cell")


def throughput(records: list[dict], model: str, batch: int) -> float:
    """Measured 512² images per second, fp32, Triton scan, eager, at the given batch."""
    for r in records:
        if (r.get("model"), r.get("size"), r.get("batch"), r.get("dtype"), r.get("mode"), r.get("scan_backend")) == (model, TILE, batch, "fp32", "eager", "triton"):
            return float(r["images_per_second"])
    raise SystemExit(f"no fp32 eager Triton record of {model} at {TILE} px, batch {batch}")


def estimate(records: list[dict], *, fields: int, repeats: int, levels: int = 6, channels: int = 2) -> dict:
    tiles = len(tile_starts(FRAME[0], TILE, OVERLAP)) * len(tile_starts(FRAME[1], TILE, OVERLAP))
    frames = channels * levels * fields * (1 + repeats)  # per released network
    out = {"tiles_per_frame": tiles, "frames_per_network": frames, "seconds": {}}
    for batch in (1, 8):
        out["seconds"][batch] = sum(frames * tiles / throughput(records, m, batch) for m in MODELS)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default=str(Path(__file__).resolve().parents[1] / "results" / "gpu_speed_h100.json"))
    parser.add_argument("--fields", type=int, default=154, help="test fields per channel in the authors' split (default 154 = 768 / 5)")
    parser.add_argument("--repeats", type=int, default=5, help="Gumbel repeats (evaluate.gumbel_repeats; 5 in config/paper.yaml)")
    args = parser.parse_args()
    doc = json.loads(Path(args.results).read_text())
    est = estimate(doc["inference"], fields=args.fields, repeats=args.repeats)
    device = doc.get("provenance", {}).get("device", "?")
    print(f"{args.results} ({device}): {est['tiles_per_frame']} tiles per {FRAME[0]}x{FRAME[1]} frame, "
          f"{est['frames_per_network']} frames per released network ({args.fields} fields x 2 channels x 6 levels x (1 + {args.repeats}))")  # fmt: skip
    for batch, seconds in est["seconds"].items():
        print(f"  at the batch-{batch} throughput: {seconds / 60:.0f} min of GPU forward passes (both networks)")
    without = estimate(doc["inference"], fields=args.fields, repeats=0)
    print(f"  argmax only (gumbel_repeats: 0): {without['seconds'][8] / 60:.0f}-{without['seconds'][1] / 60:.0f} min")


if __name__ == "__main__":
    main()
