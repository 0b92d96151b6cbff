"""The focus rule of ``dgno deblur-slide`` on generated slides: precision and recall over margins, modalities and σ.

Usage: python -m benchmarks.cpu.slide_focus_threshold [--seeds 4 1 25] [--sigmas 1 1.5 2 3 4]
                                                      [--out benchmarks/results/slide_focus_threshold.json]

For each modality (brightfield H&E-like RGB with JPEG tiles; two-channel 16-bit fluorescence OME-TIFF),
seed and defocus σ (pixels of level 0), a 1600 × 2048 slide is written with three regions blurred by a
Gaussian of that σ (laid on the 256-px / 32-px tile grid of the tests), and its tiles are scored as
``dgno deblur-slide`` scores them (dgno.slides.focus: tissue rule from the thumbnail, block focus scores
over each tile's tissue) at focus downsample 1, 2 and 4. A tile is "blurred" when at least half of it lies
in a blurred region. Recorded per (modality, σ, downsample): the share of blurred blocks of sharp and
blurred tiles at the default margin, and precision / recall / F1 of the decision for margins 0.20 … 0.60
(the margin is the one-channel measure's: brightfield slides get the learned measure, whose rule has no
margin, so their rows repeat one decision).
The default margin was chosen on real tissue (benchmarks/cpu/slide_focus_real.py); :func:`choose` gives
the plateau of margins with the best worst-case F1 here, over both modalities for σ ≥ 2 px at downsample 1,
to check that the default lies on it. Not a test: about three minutes.
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
MARGINS = [round(float(m), 2) for m in np.arange(0.20, 0.601, 0.05)]
SHAPE = (1600, 2048)


def regions(sigma: float) -> list[BlurRegion]:
    return [BlurRegion(r0 * STEP, c0 * STEP, r1 * STEP + OVERLAP, c1 * STEP + OVERLAP, sigma) for r0, c0, r1, c1 in REGIONS]


def write(path: Path, modality: str, seed: int, sigma: float) -> None:
    if modality == "brightfield":
        write_slide(path, brightfield_tissue(SHAPE, seed=seed, regions=regions(sigma)), layout="generic-tiff", mpp=0.25)
    else:
        write_slide(path, fluorescence_tissue(SHAPE, seed=seed, regions=regions(sigma)), layout="ome-tiff", mpp=0.65, channel_names=["DAPI", "Actin"])


def score_tiles(path: Path, downsample: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(tissue shares, cell focus scores, focus measure) of one slide's tiles."""
    with open_slide(path) as slide:
        grid = TileGrid.over(*slide.info.levels[0], tile=TILE, overlap=OVERLAP)
        a = fm.analyse(slide, 0, grid, channel=0, downsample=downsample)
    return a.tissue, a.scores, a.measure


def pr(found: np.ndarray, truth: np.ndarray, margin: float) -> dict:
    tp = int((found & truth).sum())
    precision = tp / max(int(found.sum()), 1)
    recall = tp / max(int(truth.sum()), 1)
    return {"margin": margin, "precision": precision, "recall": recall, "f1": 2 * precision * recall / max(precision + recall, 1e-12)}


def _decided(tissue: np.ndarray, blocks: np.ndarray, margin: float, measure: str) -> fm.Decisions:
    return fm.decide(tissue, blocks, restore="blurry", min_tissue=fm.MIN_TISSUE, threshold=None, margin=margin, measure=measure)


def study(seeds: list[int], sigmas: list[float], folder: Path) -> dict:
    pooled: dict[tuple[str, float, int], list] = {}
    for modality in ("brightfield", "fluorescence"):
        for seed in seeds:
            for sigma in sigmas:
                path = folder / f"{modality}-{seed}-{sigma}.tif"
                write(path, modality, seed, sigma)
                for ds in (1, 2, 4):
                    tissue, blocks, measure = score_tiles(path, ds)
                    keep = tissue >= fm.MIN_TISSUE
                    with open_slide(path) as slide:
                        grid = TileGrid.over(*slide.info.levels[0], tile=TILE, overlap=OVERLAP)
                    truth = np.array([[blurred_share(regions(sigma), (y, x, TILE, TILE)) >= 0.5 for x in grid.xs] for y in grid.ys])[keep]
                    found = {m: _decided(tissue, blocks, m, measure).restored[keep] for m in MARGINS}
                    shares = np.nan_to_num(_decided(tissue, blocks, fm.FOCUS_MARGIN, measure).shares[keep], nan=0.0)
                    pooled.setdefault((modality, sigma, ds), []).append((truth, found, shares))
                path.unlink()
    rows = []
    for (modality, sigma, ds), parts in sorted(pooled.items()):
        tr = np.concatenate([p[0] for p in parts])
        sh = np.concatenate([p[2] for p in parts])
        rows.append({
            "modality": modality, "sigma_px": sigma, "focus_downsample": ds, "tiles": int(tr.size), "blurred_tiles": int(tr.sum()),
            "sharp_blurred_share": {q: float(np.percentile(sh[~tr], p)) for q, p in (("median", 50), ("p95", 95), ("max", 100))},
            "blurred_blurred_share": {q: float(np.percentile(sh[tr], p)) for q, p in (("min", 0), ("p5", 5), ("median", 50))},
            "by_margin": [pr(np.concatenate([p[1][m] for p in parts]), tr, m) for m in MARGINS],
        })  # fmt: skip
    return {"rows": rows}


def choose(rows: list[dict]) -> dict:
    """The plateau of margins whose worst-case F1 (over modalities, σ ≥ 2 px, downsample 1) is within 0.005 of
    the best, its middle, and the worst-case F1 of the default margin (chosen on real tissue)."""
    target = [r for r in rows if r["focus_downsample"] == 1 and r["sigma_px"] >= 2]
    worst = {float(m): min(next(b["f1"] for b in r["by_margin"] if b["margin"] == m) for r in target) for m in MARGINS}
    best = max(worst.values())
    plateau = sorted(m for m, f in worst.items() if f >= best - 0.005)
    margin = plateau[(len(plateau) - 1) // 2]
    default = min(MARGINS, key=lambda m: abs(m - fm.FOCUS_MARGIN))
    return {"margin": margin, "plateau": plateau, "worst_f1_sigma_ge_2": worst[margin], "default_margin": fm.FOCUS_MARGIN,
            "default_worst_f1_sigma_ge_2": worst[default], "worst_f1_by_margin": worst}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[4, 1, 25])
    p.add_argument("--sigmas", type=float, nargs="+", default=[1.0, 1.5, 2.0, 3.0, 4.0])
    p.add_argument("--out", default="benchmarks/results/slide_focus_threshold.json")
    args = p.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result = study(args.seeds, args.sigmas, Path(tmp))
    result.update(chosen=choose(result["rows"]), reference_percentile=fm.REFERENCE_PERCENTILE, decision=fm.DECISION, min_tissue=fm.MIN_TISSUE, tile=TILE, overlap=OVERLAP,
                  seeds=args.seeds, seconds=time.perf_counter() - t0, machine=platform.processor() or platform.machine(), command=" ".join(["python -m benchmarks.cpu.slide_focus_threshold", *sys.argv[1:]]))  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for r in result["rows"]:
        best = max(r["by_margin"], key=lambda b: b["f1"])
        print(f"{r['modality']:<12} σ {r['sigma_px']:<4} ds {r['focus_downsample']}: sharp tiles' blurred share p95 {r['sharp_blurred_share']['p95']:.2f}, "
              f"blurred tiles' p5 {r['blurred_blurred_share']['p5']:.2f}, best F1 {best['f1']:.2f} at margin {best['margin']}")  # fmt: skip
    print("chosen:", {k: v for k, v in result["chosen"].items() if k != "worst_f1_by_margin"})


if __name__ == "__main__":
    main()
