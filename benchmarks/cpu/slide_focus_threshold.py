"""How the default focus rule of ``dgno deblur-slide`` was chosen: scores of sharp and blurred tiles on synthetic slides.

Usage: python -m benchmarks.cpu.slide_focus_threshold [--seeds 4 1 25] [--sigmas 1 1.5 2 3 4]
                                                      [--out benchmarks/results/slide_focus_threshold.json]

For each modality (brightfield H&E-like RGB with JPEG tiles; two-channel 16-bit fluorescence OME-TIFF),
seed and defocus σ (pixels of level 0), a 1600 × 2048 slide is written with three regions blurred by a
Gaussian of that σ (laid on the 256-px / 32-px tile grid of the tests), and its tiles are scored as
``dgno deblur-slide`` scores them (dgno.slides.focus: tissue rule from the thumbnail, blur effect over
each tile's tissue) at focus downsample 1, 2 and 4. A tile is "blurred" when at least half of it lies in
a blurred region. Recorded per (modality, σ, downsample): the scores' excess over the slide's in-focus
reference (25th percentile of the tissue tiles) for sharp and blurred tiles, and precision / recall /
F1 of the rule "excess ≥ margin" for margins 0.02 … 0.20. The default margin is the middle of the margins
with the best worst-case F1 over both modalities for σ ≥ 2 px at downsample 1 (:func:`choose`). Not a
test: about three minutes.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dgno.data.slides import BlurRegion, blurred_share, brightfield_tissue, fluorescence_tissue, write_slide
from dgno.slides import focus as fm
from dgno.slides.grid import TileGrid
from dgno.slides.reader import open_slide

TILE, OVERLAP, STEP = 256, 32, 224
REGIONS = [(2, 2, 4, 4), (5, 1, 7, 3), (1, 6, 3, 8)]  # tile rows/cols [r0, r1) × [c0, c1)
MARGINS = [round(float(m), 2) for m in np.arange(0.02, 0.201, 0.01)]
SHAPE = (1600, 2048)


def regions(sigma: float) -> list[BlurRegion]:
    return [BlurRegion(r0 * STEP, c0 * STEP, r1 * STEP + OVERLAP, c1 * STEP + OVERLAP, sigma) for r0, c0, r1, c1 in REGIONS]


def write(path: Path, modality: str, seed: int, sigma: float) -> None:
    if modality == "brightfield":
        write_slide(path, brightfield_tissue(SHAPE, seed=seed, regions=regions(sigma)), layout="generic-tiff", mpp=0.25)
    else:
        write_slide(path, fluorescence_tissue(SHAPE, seed=seed, regions=regions(sigma)), layout="ome-tiff", mpp=0.65, channel_names=["DAPI", "Actin"])


def score_tiles(path: Path, downsample: int) -> tuple[np.ndarray, np.ndarray]:
    """(excess over the in-focus reference, truth) of the tissue tiles of one slide."""
    with open_slide(path) as slide:
        grid = TileGrid.over(*slide.info.levels[0], tile=TILE, overlap=OVERLAP)
        thumb = fm.thumbnail(slide, 0, tile=TILE)
        rule = fm.tissue_rule(thumb, photometric=slide.info.photometric, channel=0, dtype=slide.info.dtype)
        tissue = fm.tissue_fractions(fm.tissue_mask(thumb, rule, photometric=slide.info.photometric), thumb, grid)
        scores = fm.focus_scores(slide, 0, grid, tissue > 0, channel=0, rule=rule, downsample=downsample)
    d = fm.decide(tissue, scores, restore="blurry", min_tissue=fm.MIN_TISSUE, threshold=None, margin=0.0)
    keep = tissue >= fm.MIN_TISSUE
    return scores[keep] - d.reference, keep


def pr(excess: np.ndarray, truth: np.ndarray, margin: float) -> dict:
    found = excess >= margin
    tp = int((found & truth).sum())
    precision = tp / max(int(found.sum()), 1)
    recall = tp / max(int(truth.sum()), 1)
    return {"margin": margin, "precision": precision, "recall": recall, "f1": 2 * precision * recall / max(precision + recall, 1e-12)}


def study(seeds: list[int], sigmas: list[float], folder: Path) -> dict:
    pooled: dict[tuple[str, float, int], tuple[list, list]] = {}
    for modality in ("brightfield", "fluorescence"):
        for seed in seeds:
            for sigma in sigmas:
                path = folder / f"{modality}-{seed}-{sigma}.tif"
                write(path, modality, seed, sigma)
                for ds in (1, 2, 4):
                    excess, keep = score_tiles(path, ds)
                    with open_slide(path) as slide:
                        grid = TileGrid.over(*slide.info.levels[0], tile=TILE, overlap=OVERLAP)
                    truth = np.array([[blurred_share(regions(sigma), (y, x, TILE, TILE)) >= 0.5 for x in grid.xs] for y in grid.ys])[keep]
                    ex, tr = pooled.setdefault((modality, sigma, ds), ([], []))
                    ex.extend(excess.tolist())
                    tr.extend(truth.tolist())
                path.unlink()
    rows = []
    for (modality, sigma, ds), (ex, tr) in sorted(pooled.items()):
        ex, tr = np.array(ex), np.array(tr, bool)
        rows.append({
            "modality": modality, "sigma_px": sigma, "focus_downsample": ds, "tiles": int(tr.size), "blurred_tiles": int(tr.sum()),
            "sharp_excess": {q: float(np.percentile(ex[~tr], p)) for q, p in (("median", 50), ("p95", 95), ("max", 100))},
            "blurred_excess": {q: float(np.percentile(ex[tr], p)) for q, p in (("min", 0), ("p5", 5), ("median", 50))},
            "by_margin": [pr(ex, tr, m) for m in MARGINS],
        })  # fmt: skip
    return {"rows": rows}


def choose(rows: list[dict]) -> dict:
    """The middle of the plateau of margins whose worst-case F1 (over modalities, σ ≥ 2 px, downsample 1) is
    within 0.005 of the best: the margin furthest from failing on either side, for tissue unlike these."""
    target = [r for r in rows if r["focus_downsample"] == 1 and r["sigma_px"] >= 2]
    worst = {float(m): min(next(b["f1"] for b in r["by_margin"] if b["margin"] == m) for r in target) for m in MARGINS}
    best = max(worst.values())
    plateau = sorted(m for m, f in worst.items() if f >= best - 0.005)
    margin = plateau[(len(plateau) - 1) // 2]
    return {"margin": margin, "plateau": plateau, "worst_f1_sigma_ge_2": worst[margin], "worst_f1_by_margin": worst}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[4, 1, 25])
    p.add_argument("--sigmas", type=float, nargs="+", default=[1.0, 1.5, 2.0, 3.0, 4.0])
    p.add_argument("--out", default="benchmarks/results/slide_focus_threshold.json")
    args = p.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result = study(args.seeds, args.sigmas, Path(tmp))
    result.update(chosen=choose(result["rows"]), reference_percentile=fm.REFERENCE_PERCENTILE, min_tissue=fm.MIN_TISSUE, tile=TILE, overlap=OVERLAP,
                  seeds=args.seeds, seconds=time.perf_counter() - t0, machine=platform.processor() or platform.machine(), command=" ".join(["python -m benchmarks.cpu.slide_focus_threshold", *sys.argv[1:]]))  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for r in result["rows"]:
        best = max(r["by_margin"], key=lambda b: b["f1"])
        print(f"{r['modality']:<12} σ {r['sigma_px']:<4} ds {r['focus_downsample']}: sharp excess p95 {r['sharp_excess']['p95']:.3f}, "
              f"blurred excess p5 {r['blurred_excess']['p5']:.3f}, best F1 {best['f1']:.2f} at margin {best['margin']}")  # fmt: skip
    print("chosen:", {k: v for k, v in result["chosen"].items() if k != "worst_f1_by_margin"})


if __name__ == "__main__":
    main()
