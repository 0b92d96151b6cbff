"""Gumbel-routing repeats of one evaluation, in one job: the model is loaded once, each repeat scored apart.

Layout under ``out_dir`` (``results/eval/<dataset>/<method>/<level>/gumbel/``)::

    r1/summary.json, r1/per_image.csv, ..., rN/...     each repeat, exactly as an evaluation writes them
    summary.json                                       the repeats' means, and their mean and sd per metric

Each repeat seeds every image from (seed, repeat, image id) (:mod:`dgno.inference.gumbel`), so a
repeat's scores do not depend on the other repeats or on the order of the images.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from dgno import metric_spec, provenance
from dgno.checkpoint import load_trained, pick_device
from dgno.inference.evaluate import default_tile_batch, model_restorer, score_dataset
from dgno.inference.gumbel import has_routing, routing_hook
from dgno.io import InputError, write_json


def evaluate_repeats(
    checkpoint: str | Path,
    data_dir: str | Path,
    level: str,
    out_dir: str | Path,
    *,
    repeats: int,
    seed: int,
    tile: int | None = None,
    overlap: int = 32,
    blend: str = "ramp",
    device: str = "auto",
    method: str | None = None,
    with_lpips: bool = True,
    progress: bool = True,
) -> dict:
    """Score ``checkpoint`` ``repeats`` times with the authors' Gumbel routing (repeats 1..N); return the summary."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats!r}: expected at least 1")
    out_dir, dev = Path(out_dir), pick_device(device)
    model, blob = load_trained(checkpoint, dev)
    if not has_routing(model):
        raise InputError(f"{checkpoint}: {blob['spec']['name']} has no ASSM, so Gumbel routing changes nothing. Fix: evaluate Gumbel repeats of DGNO, GG, LG or MambaIRv2 only")
    restore = model_restorer(model, dev, tile=tile, overlap=overlap, blend=blend, tile_batch=default_tile_batch(dev, None))
    min_size = int(model.hparams.get("operator_kwargs", {}).get("element_size", 1))
    name = method or blob["spec"]["name"]
    runs = []
    for r in range(1, repeats + 1):
        hook, routed = routing_hook(model, "gumbel", seed=seed, repeat=r)
        extra = {"checkpoint": str(checkpoint), "weights": blob.get("weights", "ema"), "tile": tile, "overlap": overlap, "blend": blend, **routed}
        runs.append(score_dataset(restore, data_dir, level, out_dir / f"r{r}", method=name, with_lpips=with_lpips, save_restored=False, progress=progress, extra=extra, min_size=min_size, before_image=hook, device=dev))
    summary = {
        "method": name,
        "level": level,
        "dataset": Path(data_dir).name,
        "routing": "gumbel",
        "repeats": repeats,
        "gumbel_seed": seed,
        "per_repeat": [{"repeat": r, "n_images": s["n_images"], **{m: s.get(m) for m in metric_spec.metric_names()}} for r, s in enumerate(runs, 1)],
        "provenance": provenance.collect(dev),
    }
    for m in metric_spec.metric_names():
        values = [s[m] for s in runs if s.get(m) is not None]
        summary[f"{m}_mean"] = statistics.fmean(values) if values else None
        summary[f"{m}_sd"] = statistics.stdev(values) if len(values) > 1 else None
    write_json(out_dir / "summary.json", summary)
    return summary
