"""Apply a trained model to a microscopist's own images (``dgno deblur``).

Images keep their dtype, channel layout and value range: an 8/16-bit input is scaled to [0, 1]
by its dtype maximum, restored, and written back in the same dtype, so downstream tools see a
file of the same kind. RGB images are restored per channel by a 1-channel model (or jointly by a
3-channel one). One bad file never stops the batch: its error is collected and reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from dgno.checkpoint import load_trained, pick_device
from dgno.inference.evaluate import default_tile_batch, model_restorer
from dgno.io import InputError, read_raw_image, to_unit_float, write_tiff


def _channel_refusal(path: Path, channels: int, in_channels: int, model_name: str) -> InputError:
    """An image whose channel count does not fit the model: named, with the model and the fix."""
    kind = {1: "grayscale", 3: "RGB"}.get(channels, f"{channels}-channel")
    if in_channels == 1:
        fix = "pass a single-channel image (e.g. the nuclear stain's channel, or the image converted to grayscale), or a 3-channel model (DGNO_3DHistech_Cell / DGNO_3DHistech_Face) for RGB"
    else:
        fix = "pass an RGB image, or a 1-channel model (DGNO_BBBC006_w1_Cell, ..._w2_Face ...) for grayscale fluorescence"
    return InputError(f"{path}: a {kind} image ({channels} channel(s)), but model {model_name} restores {in_channels}-channel images. Fix: {fix}")


def _to_unit(raw: np.ndarray, path: Path, normalise: str) -> tuple[np.ndarray, tuple[float, float] | None]:
    """The image in [0, 1] (colour channels only) and, for ``minmax``, the (min, max) to map the result back."""
    if normalise != "minmax":
        img = to_unit_float(raw, path=path)
        return (img[..., :3] if img.ndim == 3 and img.shape[-1] == 4 else img), None
    x = raw[..., :3].astype(np.float64) if raw.ndim == 3 and raw.shape[-1] == 4 else raw.astype(np.float64)
    lo, hi = float(x.min()), float(x.max())
    return ((x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)).astype(np.float32), (lo, hi)


def _restore_array(raw: np.ndarray, restore, in_channels: int, path: Path, *, normalise: str = "dtype", strict_channels: bool = False, model_name: str = "") -> np.ndarray:
    """Restore one stored image (any dtype) and return it in the same dtype and shape.

    ``normalise`` "minmax": the image is scaled by its own minimum and maximum (the authors' BBBC006
    protocol) and the result mapped back to that range. ``strict_channels``: a 1-channel model refuses
    RGB instead of restoring each colour channel apart (the authors' networks saw one kind of image).
    """
    img, span = _to_unit(raw, path, normalise)
    channels = 1 if img.ndim == 2 else img.shape[-1]
    if channels == in_channels:
        out = restore(img)
    elif in_channels == 1 and channels == 3 and not strict_channels:
        out = np.stack([restore(img[..., c]) for c in range(3)], axis=-1)
    else:
        raise _channel_refusal(path, channels, in_channels, model_name or "this checkpoint")
    out = np.clip(out, 0.0, 1.0)
    if span is not None:
        out = out * (span[1] - span[0]) + span[0]
    if raw.ndim == 3 and raw.shape[-1] == 4:  # keep alpha untouched
        alpha = to_unit_float(raw[..., 3:], path=path) if span is None else raw[..., 3:].astype(np.float64)
        out = np.concatenate([out, alpha], axis=-1)
    if raw.dtype.kind in "ui":
        scale = 1 if span is not None else np.iinfo(raw.dtype).max
        return np.round(out * scale).astype(raw.dtype)
    return out.astype(raw.dtype)


def output_paths(inputs: Sequence[Path], output_dir: Path) -> tuple[dict[Path, Path], list[tuple[Path, str]]]:
    """({input: output_dir/<stem>.tif}, refusals): never an output onto an input file, never two inputs onto one output.

    An output folder that is the input folder would replace ``a.tif`` by its restoration, and ``a.png``
    and ``a.tif`` would both become ``a.tif``: those inputs are refused, by name, before any work.
    """
    resolved_inputs = {p.resolve(): p for p in inputs}
    targets: dict[Path, Path] = {}
    claimed: dict[Path, Path] = {}
    refusals = []
    for path in inputs:
        out = output_dir / f"{path.stem}.tif"
        key = out.resolve()
        if key in resolved_inputs:
            refusals.append((path, f"{path}: its output {out} would overwrite the input file {resolved_inputs[key]}. Fix: choose another --output folder"))
        elif key in claimed:
            refusals.append((path, f"{path}: its output {out} is also the output of {claimed[key]} (same name). Fix: rename one of them or restore them separately"))
        else:
            claimed[key] = path
            targets[path] = out
    return targets, refusals


def deblur_files(
    inputs: Sequence[str | Path],
    output_dir: str | Path,
    *,
    checkpoint: str | Path,
    tile: int | None = 512,
    overlap: int = 64,
    device: str = "auto",
    tile_batch: int | None = None,
    cuda_graphs: bool = False,
    bf16: bool = False,
    blend: str = "ramp",
    normalise: str = "dtype",
    strict_channels: bool = False,
    model_name: str | None = None,
) -> list[tuple[Path, str]]:
    """Restore each input into ``output_dir/<name>.tif``; return [(path, error message)] of failures.

    GPU options (``dgno.inference.cuda_graphs``): ``tile_batch`` tiles per pass (default 8 on CUDA, 1 on
    CPU), ``cuda_graphs`` replays the forward from CUDA graphs, ``bf16`` uses bfloat16 autocast.
    ``blend``, ``normalise``, ``strict_channels``: see :func:`_restore_array` (the authors' released
    checkpoints set them: dgno.inference.official); ``model_name`` names the model in errors.
    """
    dev = pick_device(device)
    model, _ = load_trained(checkpoint, dev)
    in_channels = int(model.hparams.get("in_channels", 1))
    restore = model_restorer(
        model, dev, tile=tile, overlap=overlap, blend=blend, tile_batch=default_tile_batch(dev, tile_batch), cuda_graphs=cuda_graphs, bf16=bf16
    )
    how = dict(normalise=normalise, strict_channels=strict_channels, model_name=model_name or Path(checkpoint).name)
    output_dir = Path(output_dir)
    paths = [Path(p) for p in inputs]
    targets, failures = output_paths(paths, output_dir)
    for path in tqdm([p for p in paths if p in targets], desc="deblur", unit="image"):
        try:
            raw = read_raw_image(path)
            out = _restore_array(raw, restore, in_channels, path, **how)
            write_tiff(targets[path], out)
        except InputError as exc:
            message = str(exc)
            failures.append((path, message if str(path) in message else f"{path}: {message}"))
        except RuntimeError as exc:  # e.g. out of memory on a huge tile
            failures.append((path, f"{path}: restoration failed ({exc}). Fix: lower --tile"))
    return failures

