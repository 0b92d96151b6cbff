"""Fine-tuning a network on a lab's own focal planes: where it starts, its recipe, the run and the held-out scores.

``dgno finetune`` and the workflow's ``finetune`` target call :func:`finetune`, then write the report
(``dgno.report.finetune``). Steps, each a function here or in the modules named:

1. **Start** (:func:`start_from`): the authors' released weights (``--authors NAME``, as ``dgno deblur``
   gets them), any model file (a ``model.pt``, or an authors' ``.pth`` with its options), or a registry
   network from scratch. The start fixes the network, its input channels and the intensity scaling the
   data get (the one its model file records, which ``dgno deblur`` applies).
2. **Data** (``dgno.train.finetune_data``): fields, in-focus planes, input planes, alignment, the split by
   field, written once into ``<out>/data``.
3. **Recipe** (:func:`recipe`): the training loop's recipe (AdamW, flat then cosine learning rate,
   multi-scale L1 + FFT loss, EMA) scaled to fine-tuning and to the data (:data:`DEFAULTS`).
4. **Training** (``dgno.train.loop`` with :mod:`dgno.train.early_stop`): from the starting weights, the
   starting weights scored on the validation fields first, the best validation's weights kept, early
   stopping; checkpoints every ``checkpoint_every`` iterations, so a run killed (even by ``kill -9``)
   resumes where its last checkpoint left it when the same command is run again.
5. **Held-out scores** (:func:`score_heldout`): the test fields' pairs scored as the input, the starting
   network and the fine-tuned one (PSNR, SSIM, LPIPS when its weights are available), each restored with
   the same tiles, by ``dgno.inference.evaluate``; ``finetune.json`` sums the run up.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import imagecodecs
import numpy as np
import pandas as pd
import torch
from scipy import ndimage

from dgno import provenance
from dgno.checkpoint import load_trained, pick_device, released_normalisation
from dgno.inference import authors as released
from dgno.inference import normalisation
from dgno.inference.evaluate import identity_restorer, model_restorer, score_dataset
from dgno.io import InputError, read_image, read_json, write_json
from dgno.lpips_offline import get_lpips_model
from dgno.models.registry import list_models
from dgno.train.early_stop import BestOnValidation
from dgno.train.finetune_data import LEVEL, Inputs, Preparation, prepare
from dgno.train.loop import train
from dgno.train.recipe import ModelChoice, StartWeights, TrainConfig

MODEL_TILES = {"tile": 512, "overlap": 64, "blend": "ramp"}  # dgno deblur's default for a model.pt
# Per device: a short recipe a CPU finishes in minutes at demo size, and the authors' patch and batch on a GPU.
DEFAULTS = {
    "cpu": {"iterations": 400, "patch_size": 96, "batch_size": 4},
    "cuda": {"iterations": 4000, "patch_size": 256, "batch_size": 8},
}
LR_TRAINED, LR_SCRATCH = 1e-4, 3e-4  # from trained weights a third of the authors' 3e-4 (benchmarks/cpu/finetune.py)
PATIENCE = 6  # validations without a better score before stopping
MIN_DELTA_DB = 0.01
VALIDATIONS = 20  # validations over a whole run
EXAMPLE_PX = 128  # side of the report's example crops
RECIPE_KEYS = ("iterations", "patch_size", "batch_size", "lr", "val_every", "checkpoint_every")


@dataclass(frozen=True)
class Start:
    """The network fine-tuning starts from: its registry choice, weights (None: from scratch), the intensity
    scaling of its inputs, its channels, the model file that scores it (None from scratch), its tiles."""

    choice: ModelChoice
    weights: StartWeights | None
    normalise: str
    channels: int
    model_file: Path | None
    tiles: dict[str, Any] = field(default_factory=lambda: dict(MODEL_TILES))
    label: str = ""


def _from_model_file(how: released.Restoration, source: dict[str, Any], normalise: str | None) -> Start:
    _, blob = load_trained(how.model)
    spec = blob["spec"]
    channels = int(spec["hparams"].get("in_channels", 1))
    kind = normalise or how.normalise or normalisation.recorded(blob) or normalisation.UNRECORDED
    choice = ModelChoice(name=spec["name"], scale=spec["scale"], overrides=dict(spec.get("overrides", {})))
    tiles = {"tile": how.tile, "overlap": how.overlap, "blend": how.blend} if how.tile else dict(MODEL_TILES)
    label = source.get("authors") or source.get("file") or how.name
    return Start(choice, StartWeights(blob["state_dict"], {**source, "model_file": str(how.model)}), kind, channels, how.model, tiles, label)


def start_from(*, authors: str | None = None, checkpoint: str | None = None, options: str | None = None, scratch: str | None = None,
               scale: str = "demo", channels: int = 1, normalise: str | None = None) -> Start:  # fmt: skip
    """The :class:`Start` of exactly one of: a released network's name, a model file, a registry network from scratch."""
    given = [k for k, v in (("authors", authors), ("checkpoint", checkpoint), ("scratch", scratch)) if v]
    if len(given) != 1:
        raise InputError(f"starting network: {' and '.join(given) or 'none'} given. Fix: give exactly one of --authors NAME, --checkpoint FILE or --scratch MODEL")
    if authors:
        return _from_model_file(released.released(authors, options=options), {"authors": authors}, normalise)
    if checkpoint:
        return _from_model_file(released.local(checkpoint, options=options), {"file": str(checkpoint)}, normalise)
    if scratch not in list_models():
        raise InputError(f"--scratch {scratch}: not a network of the registry; known: {', '.join(list_models())}. Fix: use one of those names")
    return Start(ModelChoice(name=scratch, scale=scale), None, normalise or released_normalisation(channels), channels, None, dict(MODEL_TILES), f"{scratch} ({scale}, from scratch)")


def recipe(*, trained: bool, device: torch.device, smallest_side: int, seed: int, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """The fine-tuning recipe: :data:`DEFAULTS` for the device, the patch no larger than the smallest field
    (a multiple of 16), a lower learning rate from trained weights, about :data:`VALIDATIONS` validations."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = sorted(set(overrides) - set(RECIPE_KEYS))
    if unknown:
        raise ValueError(f"recipe setting(s) {unknown}; allowed: {', '.join(RECIPE_KEYS)}")
    base = dict(DEFAULTS["cuda" if device.type == "cuda" else "cpu"])
    base.update({k: v for k, v in overrides.items() if k in base})
    patch = min(base["patch_size"], smallest_side // 16 * 16)
    if patch < 32:
        raise InputError(f"the smallest prepared field is {smallest_side} px across; fine-tuning needs fields of at least 32 px. Fix: give larger fields")
    iterations = int(base["iterations"])
    val_every = int(overrides.get("val_every") or max(5, iterations // VALIDATIONS))
    return TrainConfig(
        iterations=iterations, batch_size=int(base["batch_size"]), patch_size=patch, lr=float(overrides.get("lr") or (LR_TRAINED if trained else LR_SCRATCH)),
        val_every=val_every, val_crops=32, log_every=val_every, checkpoint_every=int(overrides.get("checkpoint_every") or val_every),
        seed=seed, device=device.type,
    )  # fmt: skip


def with_lpips(wanted: bool) -> tuple[bool, str]:
    """(whether LPIPS is scored, why not / its weights' source): only when asked and its weights are available."""
    if not wanted:
        return False, "not asked for"
    model, source = get_lpips_model()
    return model is not None, source


def score_heldout(data_dir: Path, eval_dir: Path, start: Start, model_path: Path, *, device: torch.device, lpips: bool, progress: bool) -> dict[str, Path]:
    """Score the held-out pairs as the input, the starting network and the fine-tuned one; {name: per_image.csv}."""
    restorers = {"input": identity_restorer}
    for name, path in (("start", start.model_file), ("finetuned", model_path)):
        if path is not None:
            model, _ = load_trained(path, device)
            restorers[name] = model_restorer(model, device, **start.tiles)
    out = {}
    for name, restore in restorers.items():
        score_dataset(restore, data_dir, LEVEL, eval_dir / name, method=name, with_lpips=lpips, save_restored=False, progress=progress, device=device)
        out[name] = eval_dir / name / "per_image.csv"
    base = "start" if "start" in out else "input"
    scores = {k: pd.read_csv(out[k]).set_index("id")["psnr"] for k in (base, "finetuned")}
    gains = pd.read_csv(data_dir / "pairs.csv").set_index("id").loc[scores["finetuned"].index].reset_index()
    gains["gain"] = (scores["finetuned"] - scores[base]).to_numpy()
    write_json(eval_dir / "examples.json", write_examples(data_dir, eval_dir / "examples", restorers, gains))
    return out


def _crop_box(gt: np.ndarray, side: int) -> tuple[int, int, int]:
    """(y, x, side) of the square of ``gt`` with the most detail (gradient energy): where a restoration shows."""
    side = min(side, *gt.shape[:2])
    gray = gt.mean(axis=-1) if gt.ndim == 3 else gt
    energy = ndimage.uniform_filter(ndimage.sobel(gray, 0) ** 2 + ndimage.sobel(gray, 1) ** 2, side, mode="constant")
    half = side // 2
    inner = energy[half : gt.shape[0] - side + half + 1, half : gt.shape[1] - side + half + 1]
    y, x = np.unravel_index(int(np.argmax(inner)), inner.shape)
    return int(y), int(x), side


def write_examples(data_dir: Path, out_dir: Path, restorers: dict[str, Any], gains: pd.DataFrame, *, side: int = EXAMPLE_PX) -> list[dict[str, Any]]:
    """One PNG per distance: input | start | fine-tuned | sharp on the most detailed square of the held-out pair
    whose gain (fine-tuned − start PSNR) is the median at that distance; what the report shows."""
    out_dir.mkdir(parents=True, exist_ok=True)
    examples = []
    for _, group in gains.groupby("distance", sort=True, dropna=False):
        row = group.sort_values("gain", kind="stable").iloc[len(group) // 2]
        blurred = read_image(data_dir / "blur" / LEVEL / f"{row['id']}.tif")
        gt = read_image(data_dir / "gt" / f"{row['id']}.tif")
        y, x, n = _crop_box(gt, side)
        panels = {"input": blurred, **{k: r(blurred) for k, r in restorers.items() if k != "input"}, "sharp": gt}
        crops = [np.clip(p[y : y + n, x : x + n], 0, 1) for p in panels.values()]
        gap = np.ones((n, 4) + crops[0].shape[2:], np.float32)
        strip = np.concatenate([c for crop in crops for c in (crop, gap)][:-1], axis=1)
        name = f"{row['id']}.png"
        (out_dir / name).write_bytes(imagecodecs.png_encode(np.rint(strip * 255).astype(np.uint8)))
        examples.append({"file": name, "pair": row["id"], "field": row["field"], "level": row["level"], "box": [y, x, n], "panels": list(panels), "gain_db": round(float(row["gain"]), 3)})
    return examples


def _smallest_side(data_dir: Path) -> int:
    fields = pd.read_csv(data_dir / "fields.csv")
    return int(min(fields["height"].min(), fields["width"].min()))


def finetune(
    inputs: Inputs, out_dir: str | Path, *, start: Start, preparation: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None,
    patience: int = PATIENCE, device: str = "auto", seed: int = 0, lpips: bool = True, progress: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Prepare, train, score (module docstring); returns and writes ``<out_dir>/finetune.json``.

    ``preparation``: keyword arguments of :class:`~dgno.train.finetune_data.Preparation` (the start's
    normalisation and channels are the start's); ``overrides``: :data:`RECIPE_KEYS`.
    """
    out_dir, dev = Path(out_dir), pick_device(device)
    prep = Preparation(normalise=start.normalise, in_channels=start.channels, seed=seed, network=start.label, **(preparation or {}))
    data_dir = prepare(inputs, prep, out_dir / "data", progress=progress)
    cfg = recipe(trained=start.weights is not None, device=dev, smallest_side=_smallest_side(data_dir), seed=seed, overrides=overrides)
    t0 = time.perf_counter()
    model_path = train(data_dir, out_dir, model_choice=start.choice, levels=[LEVEL], cfg=cfg, start=start.weights,
                       selection=BestOnValidation(patience=patience, min_delta=MIN_DELTA_DB), progress=progress)  # fmt: skip
    train_s = time.perf_counter() - t0
    scored, lpips_why = with_lpips(lpips)
    per_image = score_heldout(data_dir, out_dir / "eval", start, model_path, device=dev, lpips=scored, progress=progress)
    blob = torch.load(model_path, map_location="cpu", weights_only=True)
    summary = {
        "start": {"label": start.label, "network": asdict(start.choice), "source": start.weights.source if start.weights else {"scratch": True}, "normalise": start.normalise, "channels": start.channels, "tiles": start.tiles},
        "inputs": {"kind": inputs.kind, "paths": inputs.paths()},
        "data": {k: v for k, v in read_json(data_dir / "manifest.json").items() if k in ("fields", "pairs", "split_by", "preparation")},
        "recipe": asdict(cfg),
        "selection": blob.get("selection"),
        "train_seconds": round(train_s, 1),
        "lpips": lpips_why,
        "per_image": {k: str(v.relative_to(out_dir)) for k, v in per_image.items()},
        "examples": "eval/examples.json",
        "model": str(model_path),
        "provenance": provenance.collect(dev),
    }  # fmt: skip
    write_json(out_dir / "finetune.json", summary)
    return summary
