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


def train_settings(config: Config, dataset: str) -> dict[str, Any]:
    """The training recipe of one dataset: the top-level `train` with the dataset's own settings on
    top (e.g. the authors' 3DHistech schedule). prefetch only changes speed, not results: it is left
    out so that changing it does not retrain; the script reads it from the config."""
    merged = {**config["train"], **config["datasets"][dataset].get("train", {})}
    merged.pop("prefetch", None)
    return canonical(merged)


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


def resampling(config: Config) -> dict[str, Any]:
    """How the tables' and claims' bootstrap intervals are drawn (config ``stats``: coverage, resamples, seed)."""
    s = config.get("stats", {})
    return canonical({k: s[k] for k in ("confidence", "n_resamples", "seed") if k in s})
