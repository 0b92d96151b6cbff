"""Settings of the non-blind comparison, read from a config: true coefficients, camera noise, restorations.

No torch here, so the report describes the experiment from the same functions that run it. The
defaults for settings a block leaves out are the schema's (``workflow/schemas/config.schema.yaml``),
read from the schema file itself: a validated config already holds them, and code that calls these
functions with a partial block (tests, a notebook) gets the same values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import yaml

from dgno.choices import check_choice
from dgno.optics.aberrations import SeidelCoefficients

LEVEL = "seidel"
MethodName = Literal["wiener", "richardson_lucy", "ring"]
METHODS: tuple[str, ...] = get_args(MethodName)
SCHEMA_PATH = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"

# Moderate aberrations (PSF grid 25 px at q = 2); the paper's Seidel blur on BBBC006 scores 31.07 dB, these
# about 31.7 dB on the demo nuclei.  A starting point for configs, not a value from the paper (it gives none).
REFERENCE_COEFFS = SeidelCoefficients(W040=0.075, W131=0.075, W222=0.06, W220=0.04, W311=0.0, W020=0.05)


def _schema_defaults(*path: str) -> dict[str, Any]:
    """{property: default} of the schema object at ``path`` (a chain of property names and 'additionalProperties')."""
    node = yaml.safe_load(SCHEMA_PATH.read_text())
    for key in path:
        node = node[key] if key == "additionalProperties" else node["properties"][key]
    return {name: prop["default"] for name, prop in node["properties"].items() if "default" in prop}


# The camera noise and the restorations' settings when a block leaves them out (the schema's defaults).
# "auto" regularisation = per_sigma · σ̂, at least min (``resolve_params``).
DEFAULT_NOISE: dict[str, float] = {k: float(v) for k, v in _schema_defaults("datasets", "additionalProperties", "seidel", "noise").items()}
DEFAULT_PARAMS: dict[str, dict[str, Any]] = {m: _schema_defaults("experiments", "nonblind", m) for m in METHODS}


def true_coefficients(seidel: Mapping[str, Any]) -> SeidelCoefficients:
    """The coefficients a config's ``seidel`` block asks for, in this package's convention.

    ``coeffs`` is a mapping ``{W040: …}`` or a list of six numbers in rdmpy's order (its calibration
    output); ``convention`` says whose sign convention they are in ("dgno", default, or "rdmpy": coma and
    distortion flipped, see ``SeidelCoefficients.from_rdmpy``). In this package's convention, terms a
    mapping leaves out keep their ``REFERENCE_COEFFS`` value; in rdmpy's, the given numbers are all of it
    (missing terms are 0), so rdmpy users never get a mixture of the two conventions.
    """
    given = seidel.get("coeffs", {})
    convention = seidel.get("convention", "dgno")
    check_choice("Seidel convention", convention, ("dgno", "rdmpy"))
    if convention == "rdmpy":
        values = given if isinstance(given, Sequence) and not isinstance(given, str) else list(SeidelCoefficients.from_dict(given).as_dict().values())
        return SeidelCoefficients.from_rdmpy(values)
    if isinstance(given, Sequence) and not isinstance(given, str):
        return SeidelCoefficients.from_tensor(given)
    return SeidelCoefficients.from_dict({**REFERENCE_COEFFS.as_dict(), **given})


def noise_settings(seidel: Mapping[str, Any]) -> dict[str, float]:
    """The camera noise a config's ``seidel`` block asks for (``noise: {photons, read_sigma}``), defaults filled."""
    return {k: float(v) for k, v in {**DEFAULT_NOISE, **seidel.get("noise", {})}.items()}


def deconv_params(nonblind: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per-method restoration settings from a config's ``experiments.nonblind`` block, defaults filled."""
    return {m: {**DEFAULT_PARAMS[m], **nonblind.get(m, {})} for m in METHODS}


def estimate_noise_sigma(image: np.ndarray) -> float:
    """σ̂ = median |d| / 0.6745 of the diagonal Haar detail d = (a − b − c + e)/2 of each 2×2 block.

    The robust wavelet estimate (Donoho & Johnstone) with the Haar wavelet, so no PyWavelets is needed:
    a blurred image has almost no diagonal detail of its own, so d is nearly pure noise, and for
    Poisson–Gaussian noise σ̂ is a typical σ over the image.  image: (H, W) or (H, W, C); channels averaged.
    """
    img = np.asarray(image, np.float64)
    img = img[..., None] if img.ndim == 2 else img
    h, w = img.shape[0] // 2 * 2, img.shape[1] // 2 * 2
    if h < 2 or w < 2:
        raise ValueError(f"image {img.shape[:2]} too small to estimate its noise (needs at least 2×2 px)")
    v = img[:h, :w]
    d = (v[0::2, 0::2] - v[0::2, 1::2] - v[1::2, 0::2] + v[1::2, 1::2]) / 2.0
    return float(np.mean([np.median(np.abs(d[..., c])) / 0.6745 for c in range(d.shape[-1])]))


def resolve_params(method: str, params: Mapping[str, Any], sigma_hat: float) -> dict[str, Any]:
    """The settings one image is restored with: "auto" regularisation replaced by max(min, per_sigma · σ̂).

    Why linear in σ̂: on the demo nuclei (brute-force blur, fitted coefficients, 2000 photons + read σ
    0.0025-0.02) the best TV weight λ of ring deconvolution grew from 3e-3 to 1e-2 as σ̂ went from 0.005 to
    0.02, and Wiener's best balance from 1e-2 to 3e-2…1e-1: both ≈ proportional to σ̂, not σ̂² (the data term
    is a mean, and the image's own edges set the scale).  The floors keep noise-free data from losing all
    regularisation.  Numbers given in the config are used as they are.
    """
    check_choice("method", method, METHODS)
    out = dict(params)
    key = {"wiener": "balance", "ring": "tv_weight"}.get(method)
    if key and out.get(key) == "auto":
        out[key] = max(float(out[f"{key}_min"]), float(out[f"{key}_per_sigma"]) * float(sigma_hat))
    return out
