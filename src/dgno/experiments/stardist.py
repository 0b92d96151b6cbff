"""StarDist downstream check: does restoring an image make nuclei easier to segment?

The paper's downstream table runs StarDist 2D on the blurred, each method's restored and the sharp
test images and reports the average precision AP_τ = TP / (TP + FP + FN) at IoU τ = 0.5 / 0.7 / 0.9
(``stardist.matching.matching(...).accuracy``) and their mean. Counts are pooled over all images of
a condition before dividing (the dataset-level AP that ``stardist.matching.matching_dataset`` reports),
so one image with few nuclei cannot dominate the mean.

The model is either the published ``2D_versatile_fluo`` (downloaded at run time: cluster only) or a
small StarDist2D that :func:`dgno.experiments.stardist_training.train_stardist` fits on the training split's sharp images and masks; the
model directory carries ``dgno_stardist.json`` saying which, so the report can name the model.

TensorFlow and StarDist are an optional extra (``requirements-stardist.txt``, ``envs/stardist.yaml``):
they are imported inside the functions, so ``import dgno.experiments.stardist`` works without them, and every
entry point fails with :class:`MissingExtraError` naming the install command. TensorFlow's thread pools
are capped on first use (see :func:`configure_tensorflow_threads`) because its default is one thread
per core *per pool*, which starves the other jobs on a small shared machine.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dgno.data.paired import dataset_normalisation, read_split
from dgno.io import InputError, read_image, read_raw_image, write_csv, write_json

THRESHOLDS = (0.5, 0.7, 0.9)
INSTALL_HINT = "pip install -r requirements-stardist.txt"
PRETRAINED_NAME = "2D_versatile_fluo"
# A local copy of the published model (its unpacked folder, with config.json), for machines without
# network: SLURM compute nodes often have none, and the StarDist scoring runs there. Also what the
# paper rehearsal (tests/test_rehearsal.py) points at, a tiny stand-in, since it runs offline.
PRETRAINED_DIR_ENV = "DGNO_STARDIST_PRETRAINED_DIR"
MODEL_INFO = "dgno_stardist.json"  # written beside StarDist's own config.json / weights_best.h5
PERCENTILES = (1.0, 99.8)  # StarDist's standard input normalisation (csbdeep ``normalize``)
COLUMNS = ("condition", "ap50", "ap70", "ap90", "map", "n_images")


class MissingExtraError(ImportError):
    """TensorFlow / StarDist (the optional 'stardist' extra) are not installed."""


def import_stardist() -> None:
    """Import tensorflow, stardist and csbdeep, capping the thread pools before TensorFlow runs; else say how to install."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep C++ info/warnings out of rule logs
    # Load torch's compiler stack (and with it Triton's LLVM) before TensorFlow's: in the other order the
    # first torch optimizer of the process (AdamW imports torch._dynamo, which imports Triton) segfaults,
    # so a session that scores StarDist and then trains (a notebook, one pytest run) would crash.
    # The workflow's StarDist environment (envs/stardist.yaml) has no torch: nothing to order there.
    if importlib.util.find_spec("torch") is not None:
        import torch._dynamo  # noqa: F401

    try:
        import csbdeep  # noqa: F401
        import stardist  # noqa: F401
        import tensorflow  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            f"the StarDist downstream check needs the optional 'stardist' extra (tensorflow-cpu, stardist, csbdeep), "
            f"which is not importable here ({exc}). Fix: {INSTALL_HINT} (from the repository root), "
            "or run the rule with --use-conda (envs/stardist.yaml)"
        ) from exc
    configure_tensorflow_threads()


def default_threads() -> int:
    """TensorFlow intra-op threads: $DGNO_TF_THREADS if set, else min(2, CPUs this process may use)."""
    env = os.environ.get("DGNO_TF_THREADS")
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"DGNO_TF_THREADS={env!r}: must be a positive integer")
        return int(env)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(2, cpus))


def configure_tensorflow_threads(intra: int | None = None, inter: int = 1) -> tuple[int, int]:
    """Cap TensorFlow's intra-op and inter-op pools; return the (intra, inter) sizes in effect.

    TensorFlow fixes its pools when its runtime starts, so this must run before the first op. Later
    calls cannot change them: they report what is in effect and warn if that is uncapped (0 = one
    thread per core) or larger than asked, which happens only when TensorFlow ran before dgno did.
    """
    import tensorflow as tf

    intra = default_threads() if intra is None else intra
    with contextlib.suppress(RuntimeError):  # runtime already initialised: pools are fixed
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    now = tf.config.threading.get_intra_op_parallelism_threads(), tf.config.threading.get_inter_op_parallelism_threads()
    if any(n == 0 or n > want for n, want in zip(now, (intra, inter))):
        warnings.warn(
            f"TensorFlow was started before dgno could cap its thread pools (intra/inter = {now}, wanted "
            f"{(intra, inter)}; 0 means one per core). Import dgno.experiments.stardist's functions before other TensorFlow code.",
            RuntimeWarning,
            stacklevel=2,
        )
    return now


# ---------------------------------------------------------------------------------------------- metric


def _ap_key(t: float) -> str:
    return f"ap{round(t * 100)}"


def average_precision(
    gt_labels: np.ndarray | Sequence[np.ndarray],
    pred_labels: np.ndarray | Sequence[np.ndarray],
    thresholds: Sequence[float] = THRESHOLDS,
) -> dict[str, float]:
    """AP_τ = TP/(TP+FP+FN) at each IoU τ, keys ``ap50``, ``ap70``, ``ap90``, plus ``map`` (their mean).

    Accepts one label image or a list of them (same length for GT and prediction); for a list the
    TP/FP/FN counts of ``stardist.matching.matching`` are summed before dividing, which for a single
    image is exactly its ``.accuracy``. Label images are integer arrays, 0 = background.
    """
    import_stardist()
    from stardist.matching import matching

    gts = [gt_labels] if isinstance(gt_labels, np.ndarray) else list(gt_labels)
    preds = [pred_labels] if isinstance(pred_labels, np.ndarray) else list(pred_labels)
    if len(gts) != len(preds) or not gts:
        raise ValueError(f"need the same non-zero number of GT and predicted label images, got {len(gts)} and {len(preds)}")
    thresholds = tuple(float(t) for t in thresholds)
    if not thresholds or not all(0.0 < t <= 1.0 for t in thresholds):
        raise ValueError(f"thresholds={thresholds!r}: need at least one IoU threshold in (0, 1]")
    counts = np.zeros((len(thresholds), 3), dtype=np.int64)  # (τ, [tp, fp, fn])
    for gt, pred in zip(gts, preds):
        for k, m in enumerate(matching(np.asarray(gt), np.asarray(pred), thresh=thresholds)):
            counts[k] += (m.tp, m.fp, m.fn)
    out = {}
    for t, (tp, fp, fn) in zip(thresholds, counts):
        out[_ap_key(t)] = float(tp / (tp + fp + fn)) if tp > 0 else 0.0  # stardist's convention: no TP → 0
    out["map"] = float(np.mean([out[_ap_key(t)] for t in thresholds]))
    return out


# ----------------------------------------------------------------------------------------------- model


@contextlib.contextmanager
def keras_noise_filtered():
    """Hide two harmless warnings Keras 3 emits on every batch with numpy 2 / a Python generator.

    Left in, they bury a rule's log under hundreds of identical lines; real warnings still show.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"__array__ implementation doesn't accept a copy keyword")
        warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed, but will be ignored")
        yield


@contextlib.contextmanager
def _quiet():
    """Send StarDist's informational prints to /dev/null (errors still raise)."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield


def normalise_for_stardist(img: np.ndarray) -> np.ndarray:
    """Percentile normalisation (1 %, 99.8 %) that StarDist models are trained and applied with.

    Applied to every condition alike, so restored, blurred and sharp images enter the network on the
    same intensity footing whatever their stored range.
    """
    from csbdeep.utils import normalize

    return normalize(np.asarray(img, dtype=np.float32), *PERCENTILES, axis=(0, 1)).astype(np.float32)


def load_stardist_model(source: str | Path) -> tuple[Any, str]:
    """Return (StarDist2D model, one-line description of where it came from, for the report).

    source: ``"pretrained"`` → the published ``2D_versatile_fluo`` (downloaded from GitHub: needs the
    network) or the path of a model directory (as written by :func:`train_stardist` or StarDist itself).
    """
    import_stardist()
    from stardist.models import StarDist2D

    if str(source) == "pretrained" and os.environ.get(PRETRAINED_DIR_ENV):
        local = Path(os.environ[PRETRAINED_DIR_ENV])
        if not (local / "config.json").is_file():
            raise RuntimeError(
                f"{PRETRAINED_DIR_ENV}={local} has no config.json. Fix: point it at the unpacked {PRETRAINED_NAME!r} folder "
                "(config.json, weights_best.h5, thresholds.json), or unset it to download the model"
            )
        with _quiet():
            model = StarDist2D(None, name=local.name, basedir=str(local.parent))
        return model, f"StarDist2D '{PRETRAINED_NAME}' (published pretrained model, local copy at {local})"
    if str(source) == "pretrained":
        try:
            with _quiet():
                model = StarDist2D.from_pretrained(PRETRAINED_NAME)
        except Exception as exc:  # noqa: BLE001 - any download/unpack failure means the same to the user
            raise RuntimeError(
                f"could not fetch the pretrained StarDist model {PRETRAINED_NAME!r} ({type(exc).__name__}: {exc}); it is "
                "downloaded from GitHub at run time and needs network access. Fix: run where the network is reachable, "
                "or train a local model (dgno.experiments.stardist.train_stardist) and pass its directory"
            ) from exc
        if model is None:
            raise RuntimeError(f"StarDist does not know the pretrained model {PRETRAINED_NAME!r} (stardist version mismatch?)")
        return model, f"StarDist2D '{PRETRAINED_NAME}' (published pretrained model)"
    path = Path(source)
    if not (path / "config.json").is_file():
        raise ValueError(
            f"StarDist model source {str(source)!r} is neither 'pretrained' nor a model directory with config.json; "
            "allowed: 'pretrained' or the path of a trained StarDist2D model directory"
        )
    with _quiet():  # StarDist prints which thresholds it loaded
        model = StarDist2D(None, name=path.name, basedir=str(path.parent))
    info = path / MODEL_INFO
    desc = json.loads(info.read_text())["source"] if info.is_file() else f"StarDist2D model at {path}"
    return model, desc


# ------------------------------------------------------------------------------------------ evaluation


def predict_labels(model: Any, image: np.ndarray) -> np.ndarray:
    """StarDist instance labels (uint16-compatible int array, 0 = background) for one (H, W) image."""
    with keras_noise_filtered():
        labels, _ = model.predict_instances(normalise_for_stardist(image), show_tile_progress=False, verbose=False)
    return labels


def evaluate_stardist(model: Any, images: dict[str, Sequence[np.ndarray]], gt_masks: Sequence[np.ndarray]):
    """One row per condition (condition, ap50, ap70, ap90, map, n_images) of images {condition: images in gt_masks' order}."""
    return ap_table(predict_conditions(model, images, gt_masks), gt_masks)


def predict_conditions(model: Any, images: dict[str, Sequence[np.ndarray]], gt_masks: Sequence[np.ndarray]) -> dict[str, list[np.ndarray]]:
    """StarDist labels of every image of every condition (checked to match the masks in number)."""
    import_stardist()
    preds = {}
    for condition, imgs in images.items():
        if len(imgs) != len(gt_masks):
            raise ValueError(f"condition {condition!r}: {len(imgs)} images but {len(gt_masks)} ground-truth masks")
        preds[condition] = [predict_labels(model, img) for img in imgs]
    return preds


def ap_table(preds: dict[str, list[np.ndarray]], gt_masks: Sequence[np.ndarray]):
    """AP of each condition's predictions, counts pooled over its images (:func:`average_precision`)."""
    import pandas as pd

    rows = [{"condition": c, **average_precision(list(gt_masks), p, THRESHOLDS), "n_images": len(p)} for c, p in preds.items()]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def count_table(preds: dict[str, list[np.ndarray]], gt_masks: Sequence[np.ndarray], ids: Sequence[str], level: str):
    """Per-image matching counts, rows (condition, level, id, iou, tp, fp, fn): AP pools counts over images, so its
    interval resamples images with their counts (dgno.report.comparisons.stardist_stats)."""
    import pandas as pd
    from stardist.matching import matching

    rows = []
    for condition, labels in preds.items():
        for image_id, gt, pred in zip(ids, gt_masks, labels):
            for t, m in zip(THRESHOLDS, matching(np.asarray(gt), np.asarray(pred), thresh=THRESHOLDS)):
                rows.append({"condition": condition, "level": level, "id": image_id, "iou": t, "tp": int(m.tp), "fp": int(m.fp), "fn": int(m.fn)})
    return pd.DataFrame(rows, columns=["condition", "level", "id", "iou", "tp", "fp", "fn"])


def load_split_with_labels(data_dir: str | Path, split: str) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """(ids, sharp images float32 [0, 1], label masks) of one split, read in the dataset's normalisation."""
    data_dir = Path(data_dir)
    ids = read_split(data_dir).get(split, [])
    if not ids:
        raise InputError(f"{data_dir / 'split.csv'}: no images in split {split!r}. Fix: regenerate the split")
    norm = dataset_normalisation(data_dir)
    images = [read_image(data_dir / "gt" / f"{i}.tif", normalise=norm) for i in ids]
    masks = [_read_labels(data_dir / "labels" / f"{i}.tif") for i in ids]
    return ids, images, masks


def _read_labels(path: Path) -> np.ndarray:
    """An instance label mask: an integer 2-D image (0 = background)."""
    if not path.exists():
        raise InputError(f"{path}: label mask missing. Fix: the StarDist check needs labels/<id>.tif for every test image")
    arr = read_raw_image(path)
    if arr.ndim != 2 or arr.dtype.kind not in "ui":
        raise InputError(f"{path}: expected a 2-D integer label mask, got {arr.dtype} {arr.shape}. Fix: store uint16 labels")
    return arr


def run_downstream(
    data_dir: str | Path,
    eval_root: str | Path,
    level: str,
    methods: Sequence[str],
    model_dir: str | Path,
    out_csv: str | Path,
    per_image_csv: str | Path | None = None,
):
    """StarDist AP on the test split: blurred (level), each method's restored images, sharp → CSV.

    Reads ``labels/<id>.tif`` (GT), ``gt/<id>.tif``, ``blur/<level>/<id>.tif`` and ``<eval_root>/<method>/<level>/restored/<id>.tif``.
    model_dir: a model directory or "pretrained". The CSV adds ``level`` and ``model`` (where the StarDist model came from);
    a sibling ``<out_csv stem>.json`` holds that provenance, ``per_image_csv`` the per-image counts (:func:`count_table`).
    """
    data_dir, eval_root = Path(data_dir), Path(eval_root)
    ids, sharp, masks = load_split_with_labels(data_dir, "test")
    conditions = _conditions(data_dir, eval_root, level, methods, ids, sharp, masks)
    model, description = load_stardist_model(model_dir)
    preds = predict_conditions(model, conditions, masks)
    frame = ap_table(preds, masks)
    frame.insert(1, "level", level)
    frame["model"] = description
    write_csv(out_csv, frame)
    if per_image_csv:
        write_csv(per_image_csv, count_table(preds, masks, ids, level))
    write_json(
        Path(out_csv).with_suffix(".json"),
        {"model": description, "model_dir": str(model_dir), "level": level, "dataset": str(data_dir), "test_ids": ids},
    )
    return frame


def _conditions(data_dir: Path, eval_root: Path, level: str, methods: Sequence[str], ids, sharp, masks) -> dict[str, list[np.ndarray]]:
    """{blurred, each method, sharp: test images in split order}, each checked against its label mask's shape."""
    norm = dataset_normalisation(data_dir)
    conditions = {"blurred": [read_image(data_dir / "blur" / level / f"{i}.tif", normalise=norm) for i in ids]}
    for method in methods:
        if method in ("blurred", "sharp"):
            raise ValueError(f"method name {method!r} clashes with a reference condition ('blurred', 'sharp'); rename it")
        folder = eval_root / method / level / "restored"
        conditions[method] = [read_image(folder / f"{i}.tif", normalise=norm) for i in ids]
    conditions["sharp"] = sharp
    for name, imgs in conditions.items():
        for i, img, mask in zip(ids, imgs, masks):
            if img.shape[:2] != mask.shape:
                raise InputError(f"{name} image {i}: shape {img.shape} differs from its label mask {mask.shape}. Fix: regenerate it")
    return conditions


def unmeasurable(data_dir: str | Path) -> str | None:
    """Why StarDist AP cannot be measured on a dataset's test split (label masks missing), else None.

    The authors' BBBC006 archive has no masks of its own: they come from the Broad labels archive,
    mapped by file name; when no name maps, its test images have none (the manifest says why).
    """
    data_dir = Path(data_dir)
    ids = read_split(data_dir).get("test", [])
    missing = [i for i in ids if not (data_dir / "labels" / f"{i}.tif").exists()]
    if not missing:
        return None
    manifest = data_dir / "manifest.json"
    why = json.loads(manifest.read_text()).get("broad", {}).get("description", "") if manifest.exists() else ""
    return f"{data_dir}: no label mask for {len(missing)} of {len(ids)} test image(s) (e.g. {missing[0]}){'; ' + why if why else ''}"


def write_unmeasured(out_csv: str | Path, why: str) -> None:
    """A StarDist table with no rows, and the reason beside it (``<stem>.json``), for a check that cannot run."""
    import pandas as pd

    write_csv(out_csv, pd.DataFrame(columns=list(COLUMNS)))
    write_json(Path(out_csv).with_suffix(".json"), {"not_measured": why})
