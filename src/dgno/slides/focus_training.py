"""How the learned focus measure's shipped weights were made: the project's own defocus of real tissue.

Usage: python -m dgno.slides.focus_training [--slides 100] [--generated 25] [--steps 8000] [--out src/dgno/slides/focus_net.npz]

1. **Slides.** ``--slides`` training slides of ``dgno.data.focus_bench_plan.training_slide``: fragments of
   the dev sources (H&E and IHC; the held-out sources are never read), pale, fat and pen-marked areas,
   up to three regions defocused by any PSF of ``dgno.optics.defocus`` at σ 0.7-4.5 px, sensor noise.
   Beside them, ``--generated`` slides of the project's generated H&E-like tissue
   (``dgno.data.slides.brightfield_tissue``, the tests' and the demo's slides) with Gaussian defocus in
   two or three rectangles: a texture unlike any real source, so the network does not learn defocus
   as "this is not what the dev tissue looks like".
2. **Crops.** ``CROPS_PER_SLIDE`` crops of 128 px where at least a fifth is tissue, each saved as JPEG at
   a quality drawn from 80-95 (scanners compress their tiles), read back as luminance; per 16-px cell,
   the share of its pixels inside a defocused region (the target) and of its tissue (the weight).
3. **Training.** Binary cross-entropy of each tissue cell's logit against its defocused share, Adam
   with a one-cycle learning rate, batches of ``BATCH``, each crop turned by a random multiple of 90°,
   mirrored at random and its contrast scaled by 0.5-1.1 towards the glass (thin sections, pale stain).

Everything draws from fixed seeds; on one core the default run takes about half an hour. Beside the
weights, ``<out>.json`` records the settings, the loss curve and the time.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from skimage.color import rgb2gray

from dgno import provenance
from dgno.data.focus_bench import Built, build
from dgno.data.focus_bench_plan import TRAINING_SIGMA, training_slide
from dgno.data.slides import BlurRegion, brightfield_tissue, tissue_mask
from dgno.slides.focus_net import CELL, WEIGHTS, FocusNet, save_weights

CROP = 128
CROPS_PER_SLIDE = 160
MIN_CROP_TISSUE = 0.2
JPEG_QUALITY = (80, 95)
BATCH = 32
MAX_LR = 3e-3
CONTRAST = (0.5, 1.1)
GLASS_GREY = 245.0
MIN_CELL_TISSUE = 0.05  # a cell with less tissue carries no loss


def _jpeg(rgb: np.ndarray, quality: int) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "JPEG", quality=quality)
    return np.asarray(Image.open(buf))


def _cells(a: np.ndarray) -> np.ndarray:
    """(CROP, CROP) → (CROP/CELL, CROP/CELL) cell means."""
    n = a.shape[0] // CELL
    return a.reshape(n, CELL, n, CELL).mean(axis=(1, 3), dtype=np.float32)


GENERATED_SIZE = (1200, 1200)


def generated_slide(k: int) -> Built:
    """Generated slide ``k``: H&E-like tissue (``brightfield_tissue``) with two or three rectangles of
    200-600 px defocused by Gaussians of σ log-uniform over ``TRAINING_SIGMA``."""
    rng = np.random.default_rng([k, 9902])
    h, w = GENERATED_SIZE
    regions = []
    for _ in range(int(rng.integers(2, 4))):
        rh, rw = (int(v) for v in rng.integers(200, 601, 2))
        y, x = int(rng.integers(0, h - rh)), int(rng.integers(0, w - rw))
        regions.append(BlurRegion(y, x, y + rh, x + rw, float(np.exp(rng.uniform(*np.log(TRAINING_SIGMA))))))
    blurred = np.zeros(GENERATED_SIZE, bool)
    for r in regions:
        blurred[r.y0 : r.y1, r.x0 : r.x1] = True
    seed = 5000 + k
    return Built(brightfield_tissue(GENERATED_SIZE, seed=seed, regions=regions), blurred, tissue_mask(GENERATED_SIZE, seed=seed))


def slide_crops(k: int, generated: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Crops of training slide ``k`` (of generated slide ``k`` when ``generated``): (luminance uint8 (n, CROP, CROP),
    defocused share (n, 8, 8), tissue share (n, 8, 8))."""
    built = generated_slide(k) if generated else build(training_slide(k))
    rng = np.random.default_rng([k, 77 + int(generated)])
    h, w = built.image.shape[:2]
    grey, target, tissue = [], [], []
    for _ in range(20 * CROPS_PER_SLIDE):
        if len(grey) == CROPS_PER_SLIDE:
            break
        y, x = int(rng.integers(0, h - CROP)), int(rng.integers(0, w - CROP))
        t = built.tissue[y : y + CROP, x : x + CROP]
        if t.mean() < MIN_CROP_TISSUE:
            continue
        rgb = _jpeg(built.image[y : y + CROP, x : x + CROP], int(rng.integers(*JPEG_QUALITY, endpoint=True)))
        grey.append(np.rint(rgb2gray(rgb) * 255.0).astype(np.uint8))
        target.append(_cells(built.blurred[y : y + CROP, x : x + CROP].astype(np.float32)))
        tissue.append(_cells(t.astype(np.float32)))
    return np.array(grey), np.array(target), np.array(tissue)


def training_set(slides: int, generated: int, workers: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The crops of training slides 0 … ``slides`` − 1 and generated slides 0 … ``generated`` − 1, built ``workers`` at a time."""
    jobs = [(k, False) for k in range(slides)] + [(k, True) for k in range(generated)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(slide_crops, *zip(*jobs)))
    return tuple(torch.from_numpy(np.concatenate([p[i] for p in parts])) for i in range(3))  # type: ignore[return-value]


def _batch(rng: np.random.Generator, grey: torch.Tensor, target: torch.Tensor, tissue: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A batch of crops turned, mirrored and with their contrast scaled (module docstring)."""
    idx = torch.from_numpy(rng.integers(0, len(grey), BATCH))
    x, y, m = grey[idx].float()[:, None], target[idx], tissue[idx]
    k = int(rng.integers(0, 4))
    x, y, m = torch.rot90(x, k, (2, 3)), torch.rot90(y, k, (1, 2)), torch.rot90(m, k, (1, 2))
    if rng.random() < 0.5:
        x, y, m = x.flip(3), y.flip(2), m.flip(2)
    scale = torch.from_numpy(rng.uniform(*CONTRAST, (BATCH, 1, 1, 1)).astype(np.float32))
    return GLASS_GREY - (GLASS_GREY - x) * scale, y, m


def train(grey: torch.Tensor, target: torch.Tensor, tissue: torch.Tensor, *, steps: int, seed: int = 0, log_every: int = 100) -> tuple[FocusNet, list[float]]:
    """Train a :class:`FocusNet` (module docstring); returns it and the smoothed loss every ``log_every`` steps."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = FocusNet()
    opt = torch.optim.Adam(net.parameters(), lr=MAX_LR)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=MAX_LR, total_steps=steps)
    curve, smooth = [], None
    for step in range(steps):
        x, y, m = _batch(rng, grey, target, tissue)
        weight = (m >= MIN_CELL_TISSUE).float()
        loss = (F.binary_cross_entropy_with_logits(net(x), y, reduction="none") * weight).sum() / weight.sum().clamp(min=1.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        smooth = float(loss.detach()) if smooth is None else 0.98 * smooth + 0.02 * float(loss.detach())
        if step % log_every == 0 or step == steps - 1:
            curve.append(round(smooth, 5))
            print(f"step {step:>6} of {steps}: loss {smooth:.4f}", flush=True)
    return net.eval(), curve


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slides", type=int, default=100)
    p.add_argument("--generated", type=int, default=25)
    p.add_argument("--steps", type=int, default=8000)
    p.add_argument("--workers", type=int, default=2, help="processes building the training slides")
    p.add_argument("--threads", type=int, default=1, help="torch threads while training")
    p.add_argument("--out", type=Path, default=WEIGHTS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    grey, target, tissue = training_set(args.slides, args.generated, args.workers)
    t1 = time.perf_counter()
    print(f"{len(grey)} crops of {args.slides} + {args.generated} slides in {t1 - t0:.0f} s; defocused share {float(target.mean()):.3f}", flush=True)
    net, curve = train(grey, target, tissue, steps=args.steps)
    save_weights(net, args.out)
    record = {"what": __doc__.splitlines()[0], "command": f"python -m dgno.slides.focus_training --slides {args.slides} --generated {args.generated} --steps {args.steps}",
              "slides": args.slides, "generated": args.generated, "crops": len(grey), "steps": args.steps, "batch": BATCH, "max_lr": MAX_LR, "loss_every_100_steps": curve,
              "seconds_data": round(t1 - t0, 1), "seconds_training": round(time.perf_counter() - t1, 1), "threads": args.threads,
              "provenance": provenance.collect()}  # fmt: skip
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
