"""The settings each workflow job receives as ``params``, taken from the validated config.

Snakemake reruns a job when its params change (compared as text), so each function here returns
exactly what the job's result depends on, key-sorted (:func:`canonical`): a setting that only
changes speed (``train.prefetch``) or key order in a YAML file must not retrain a model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Config = Mapping[str, Any]

# Row labels of the non-blind deconvolution methods in tables and figures.
DECONV_LABELS = {
    "wiener": "Wiener (centre PSF)",
    "richardson_lucy": "Richardson-Lucy (centre PSF)",
    "ring": "Ring deconvolution",
}

# Test images whose operator maps are averaged in the interface-energy statistics (the figure shows the first).
OPERATOR_MAP_IMAGES = 8


def canonical(obj: Any) -> Any:
    """Key-sorted copy of a params dict: Snakemake compares params by their text, so key order
    (which a YAML round trip may change) must not trigger reruns."""
    return json.loads(json.dumps(obj, sort_keys=True))


# Training settings that change speed, not results (prefetch and the step's levers, dgno.train.step);
# dgno.train.recipe.SPEED_ONLY is the same list (kept here too so the DAG need not import torch).
SPEED_ONLY_TRAIN = ("prefetch", "channels_last", "cudnn_benchmark", "fused_layernorm", "adamw_impl", "compile", "cuda_graphs")


def train_settings(config: Config, dataset: str) -> dict[str, Any]:
    """The training recipe of one dataset: the top-level `train` with the dataset's own settings on
    top (e.g. the authors' 3DHistech schedule). The speed-only settings (SPEED_ONLY_TRAIN) are left
    out so that changing one does not retrain; the script reads them from the config."""
    merged = {**config["train"], **config["datasets"][dataset].get("train", {})}
    for key in SPEED_ONLY_TRAIN:
        merged.pop(key, None)
    return canonical(merged)


def speed_only_train(config: Config) -> dict[str, Any]:
    """The speed-only training settings of the config (schema defaults filled in), for the train script."""
    return {key: config["train"][key] for key in SPEED_ONLY_TRAIN if key in config["train"]}


def method_settings(config: Config, dataset: str, method: str) -> dict[str, Any]:
    """A method's spec on one dataset: its overrides plus the dataset's `method_overrides` for it
    (e.g. the authors' DGNO-Face on BBBC006 w2 uses jump + neumann). The label is left out: renaming
    a row of a table must not retrain."""
    spec = {k: v for k, v in config["methods"][method].items() if k != "label"}
    extra = config["datasets"][dataset].get("method_overrides", {}).get(method)
    if extra:
        spec["overrides"] = {**spec.get("overrides", {}), **extra}
    return canonical(spec)


def seidel_data_settings(config: Config, dataset: str) -> dict[str, Any]:
    """What Seidel-blurred data depend on: the true coefficients and the camera noise (not the
    calibration's frame count, which only the calibration reads)."""
    seidel = config["datasets"][dataset].get("seidel", {})
    return canonical({k: seidel[k] for k in ("coeffs", "convention", "noise") if k in seidel})


def seidel_image_size(config: Config, dataset: str) -> list[int]:
    """Calibration frames have the size of the base dataset's images."""
    return config["datasets"][config["datasets"][dataset]["base"]]["size"]


def deconv_settings(config: Config) -> dict[str, Any]:
    """Wiener / Richardson-Lucy / ring settings of experiments.nonblind (schema defaults filled)."""
    nb = config["experiments"].get("nonblind", {})
    return canonical({m: nb.get(m, {}) for m in ("wiener", "richardson_lucy", "ring")})


def photometry_of(config: Config, dataset: str) -> dict[str, Any]:
    """Photometry ranges of a generated nuclei dataset ({} for other kinds, which have none)."""
    ds = config["datasets"][dataset]
    return canonical(ds["photometry"]) if ds["source"] == "demo_nuclei" else {}


def method_labels(config: Config, methods) -> dict[str, str]:
    """{method: its row label in tables and figures} (the method's name where it has no label)."""
    return {m: config["methods"][m].get("label", m) for m in methods}


def bbbc006_settings(config: Config, dataset: str) -> dict[str, Any]:
    """A BBBC006 channel's settings for its prepare job; the split keys only with ``split: authors``, so that
    adding them (with the by-well default) does not re-prepare, and so retrain, an existing by-well dataset."""
    ds = dict(config["datasets"][dataset])
    if ds.get("split", "by_well") == "by_well":
        for key in ("split", "plane_rule", "plane_check", "max_out_of_order"):
            ds.pop(key, None)
    else:
        ds["authors_url"] = config["downloads"]["bbbc006_authors_url"]
    return canonical(ds)


def evaluate_settings(config: Config) -> dict[str, Any]:
    """What an evaluation's scores depend on; the routing only when it is not the default argmax (the scores of
    existing argmax evaluations do not change, so their params must not either)."""
    ev = config["evaluate"]
    out = {k: ev[k] for k in ("tile", "overlap", "blend", "lpips")}
    if ev.get("routing", "argmax") != "argmax":
        out |= {"routing": ev["routing"], "routing_seed": config["seed"]}
    return canonical(out)


def gumbel_settings(config: Config) -> dict[str, Any]:
    """The evaluation's settings, and the repeats and seed of the authors' Gumbel routing (rule evaluate_gumbel)."""
    return {**evaluate_settings(config), "repeats": config["evaluate"]["gumbel_repeats"], "routing_seed": config["seed"]}


def resampling(config: Config) -> dict[str, Any]:
    """How the tables' and claims' bootstrap intervals are drawn (config ``stats``: coverage, resamples, seed)."""
    s = config.get("stats", {})
    return canonical({k: s[k] for k in ("confidence", "n_resamples", "seed") if k in s})
