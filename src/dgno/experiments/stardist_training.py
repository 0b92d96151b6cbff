"""Training the small StarDist2D of the downstream check on a dataset's sharp training images and masks.

Used when the published ``2D_versatile_fluo`` is not wanted or cannot be downloaded (the demo: no
network). The model directory carries ``dgno_stardist.json`` saying what it was trained on, so the
report names the model beside its AP table (:mod:`dgno.experiments.stardist`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dgno.data.paired import dihedral
from dgno.experiments.stardist import (
    MODEL_INFO,
    PERCENTILES,
    import_stardist,
    keras_noise_filtered,
    load_split_with_labels,
    load_stardist_model,
    normalise_for_stardist,
)
from dgno.io import replace_dir, write_json


def _augment(seed: int):
    """Random dihedral transform (same for image and mask) and a mild intensity gain/offset.

    Nuclei have no orientation and exposure varies between images, so both are free extra data for
    a model that sees only a few training images.
    """
    rng = np.random.default_rng(seed)

    def aug(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = int(rng.integers(8))
        x = np.ascontiguousarray(dihedral(x, k))
        y = np.ascontiguousarray(dihedral(y, k))
        return (x * rng.uniform(0.8, 1.2) + rng.uniform(-0.05, 0.05)).astype(np.float32), y

    return aug


def _training_split(images: Sequence[np.ndarray], masks: Sequence[np.ndarray], patch: int) -> tuple[list, list, list, list, int]:
    """(train images, train masks, validation images, validation masks, number held out), normalised for StarDist.

    One image in five (none when there are fewer than five) is held out; with none held out the
    training lists themselves are returned for validation.
    """
    from stardist import fill_label_holes

    if len(images) != len(masks) or not images:
        raise ValueError(f"need the same non-zero number of images and masks, got {len(images)} and {len(masks)}")
    div = 8  # 2 U-Net poolings × grid 2
    if patch < div or patch % div:
        raise ValueError(f"patch={patch!r}: must be a positive multiple of {div} (U-Net depth 2 × grid 2)")
    for i, (x, y) in enumerate(zip(images, masks)):
        if x.shape[:2] != y.shape or min(y.shape) < patch:
            raise ValueError(
                f"image {i}: shape {x.shape} / mask {y.shape} must match and be at least {patch}×{patch} (the patch)"
            )
    xs = [normalise_for_stardist(x) for x in images]
    ys = [fill_label_holes(np.asarray(y).astype(np.int32)) for y in masks]
    n_val = len(xs) // 5
    train_x, train_y = xs[: len(xs) - n_val], ys[: len(ys) - n_val]
    val_x, val_y = (xs[len(xs) - n_val :], ys[len(ys) - n_val :]) if n_val else (train_x, train_y)
    return train_x, train_y, val_x, val_y, n_val


def _config(*, n_rays: int, patch: int, learning_rate: float, epochs: int, steps_per_epoch: int):
    """The small StarDist2D of the demo: U-Net depth 2, 16 base filters, grid 2×2, batch 4."""
    from stardist.models import Config2D

    return Config2D(
        n_rays=n_rays,
        grid=(2, 2),
        n_channel_in=1,
        unet_n_depth=2,
        unet_n_filter_base=16,
        net_conv_after_unet=64,
        train_patch_size=(patch, patch),
        train_batch_size=4,
        train_learning_rate=learning_rate,
        train_epochs=epochs,
        train_steps_per_epoch=steps_per_epoch,
        train_tensorboard=False,
        train_reduce_lr=None,
    )


def _model_info(model, *, dataset: str, n_train: int, n_val: int, seconds: float, **settings: Any) -> dict[str, Any]:
    """What ``dgno_stardist.json`` says about a model trained here: data, settings, thresholds."""
    return {
        "source": f"StarDist2D trained by dgno on {dataset} train split",
        "dataset": dataset,
        "n_train_images": n_train,
        "n_validation_images": n_val,
        "validation": "held-out training images" if n_val else "the training images themselves (fewer than 5 images)",
        **settings,
        "grid": [2, 2],
        "unet_n_depth": 2,
        "unet_n_filter_base": 16,
        "normalisation": f"csbdeep normalize(img, {PERCENTILES[0]}, {PERCENTILES[1]})",
        "thresholds": dict(model.thresholds._asdict()),
        "train_seconds": round(seconds, 1),
    }


def train_stardist(
    images: Sequence[np.ndarray],
    masks: Sequence[np.ndarray],
    out_dir: str | Path,
    *,
    epochs: int,
    steps_per_epoch: int,
    patch: int,
    seed: int,
    dataset: str,
    n_rays: int = 32,
    learning_rate: float = 1e-3,
) -> tuple[Any, str]:
    """Train a small StarDist2D on sharp images + instance masks and store it at ``out_dir``.

    Small on purpose (U-Net depth 2, 16 base filters, grid 2×2, batch 4): the demo trains it on CPU in
    about a minute. One image in five (none when there are fewer than five) is held out for validation
    and StarDist's probability/NMS threshold tuning; with none held out, the training images serve both
    (recorded in ``dgno_stardist.json``). The directory is built beside ``out_dir`` and renamed into
    place at the end, so an interrupted run leaves no model that looks complete.
    Returns (model loaded from out_dir, description string for the report).
    """
    import_stardist()
    import keras
    import tensorflow as tf
    from stardist.models import StarDist2D

    train_x, train_y, val_x, val_y, n_val = _training_split(images, masks, patch)
    out_dir = Path(out_dir)
    tmp = out_dir.parent / f"{out_dir.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    conf = _config(n_rays=n_rays, patch=patch, learning_rate=learning_rate, epochs=epochs, steps_per_epoch=steps_per_epoch)
    keras.utils.set_random_seed(seed)  # python, numpy and TensorFlow generators (weights, patches)
    tf.config.experimental.enable_op_determinism()  # same seed → same model, so reruns reproduce the table
    log_path = tmp.parent / f"{tmp.name}.log"
    start = time.perf_counter()
    try:
        with log_path.open("w") as log, contextlib.redirect_stdout(log), keras_noise_filtered():
            model = StarDist2D(conf, name=tmp.name, basedir=str(tmp.parent))
            model.train(train_x, train_y, validation_data=(val_x, val_y), augmenter=_augment(seed), seed=seed)
            model.optimize_thresholds(val_x, val_y, predict_kwargs={"show_tile_progress": False}, optimize_kwargs={"verbose": 0})
        shutil.move(log_path, tmp / "train.log")
        settings = dict(epochs=epochs, steps_per_epoch=steps_per_epoch, patch=patch, n_rays=n_rays, learning_rate=learning_rate, seed=seed)
        info = _model_info(model, dataset=dataset, n_train=len(train_x), n_val=n_val, seconds=time.perf_counter() - start, **settings)
        write_json(tmp / MODEL_INFO, info)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        log_path.unlink(missing_ok=True)
        raise
    return load_stardist_model(out_dir)


def train_on_dataset(
    data_dir: str | Path, out_dir: str | Path, *, epochs: int, steps_per_epoch: int, patch: int, seed: int
) -> tuple[Any, str]:
    """:func:`train_stardist` on a dataset's train split (sharp ``gt/`` + ``labels/``): the fallback model
    when the published one cannot be downloaded. The dataset is named by its directory in the description."""
    _, images, masks = load_split_with_labels(data_dir, "train")
    return train_stardist(images, masks, out_dir, epochs=epochs, steps_per_epoch=steps_per_epoch, patch=patch, seed=seed, dataset=Path(data_dir).name)
