"""Model registry: name + scale → constructor kwargs → ``nn.Module``.

Configs, training and evaluation only ever say ``build_model("dgno-cell", scale="paper")``;
the registry is the single place that maps such a name to a class and its sizes, so a
checkpoint ``{"name", "scale", "hparams"}`` can always be rebuilt.

Scales: "paper" = the sizes and best settings of the paper; "demo" = a CPU-minutes
network; "smoke" = the smallest network that still exercises every code path (tests).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from dgno.choices import check_choice
from dgno.models.dgno import DGNO


@dataclass(frozen=True)
class _Entry:
    factory: Callable[..., nn.Module]
    scales: dict[str, dict[str, Any]]


_MODELS: dict[str, _Entry] = {}


def register(name: str, *, factory: Callable[..., nn.Module], scales: dict[str, dict[str, Any]]) -> None:
    """Register ``factory(**scales[scale], in_channels=...)`` under ``name``.

    The factory must accept ``in_channels`` and return a module with ``.hparams``
    (the kwargs that rebuild it).
    """
    if name in _MODELS:
        raise ValueError(f"model {name!r} is already registered")
    if not scales:
        raise ValueError(f"model {name!r} needs at least one scale")
    _MODELS[name] = _Entry(factory=factory, scales=copy.deepcopy(scales))


def list_models() -> list[str]:
    """Registered model names, sorted."""
    return sorted(_MODELS)


def _entry(name: str) -> _Entry:
    check_choice("model", name, list_models())
    return _MODELS[name]


def model_spec(name: str, scale: str = "demo") -> dict[str, Any]:
    """The constructor kwargs of ``name`` at ``scale`` (a fresh copy, safe to edit)."""
    entry = _entry(name)
    check_choice(f"scale for model {name!r}", scale, sorted(entry.scales))
    return copy.deepcopy(entry.scales[scale])


def _apply_overrides(spec: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Apply ``overrides`` to ``spec``; a key may also name an entry of a nested dict.

    Dict-valued entries (``operator_kwargs``) are merged, not replaced, and their keys
    can be given flat, e.g. ``flux="central"``, so ablation grids stay one-level.
    """
    nested = {k: top for top, v in spec.items() if isinstance(v, dict) for k in v}
    for key, value in overrides.items():
        if key in spec and isinstance(spec[key], dict) and isinstance(value, Mapping):
            unknown = sorted(set(value) - set(spec[key]))
            if unknown:
                check_choice(f"key in {key}", unknown[0], sorted(spec[key]))
            spec[key].update(value)
        elif key in spec:
            spec[key] = value
        elif key in nested:
            spec[nested[key]][key] = value
        else:
            check_choice("override", key, sorted(set(spec) | set(nested)))
    return spec


def resolved_spec(name: str, scale: str = "demo", **overrides: Any) -> dict[str, Any]:
    """The constructor kwargs ``build_model(name, scale, **overrides)`` would use (without building).

    Two (name, overrides) pairs with equal resolved specs build the same network: an ablation grid
    point that repeats a configured method's settings can reuse its training.
    """
    return _apply_overrides(model_spec(name, scale), overrides)


def build_model(name: str, scale: str = "demo", in_channels: int = 1, **overrides: Any) -> nn.Module:
    """``factory(**model_spec(name, scale) | overrides, in_channels=in_channels)``.

    Unknown names, scales and override keys raise ``ValueError`` listing the allowed ones.
    """
    spec = resolved_spec(name, scale, **overrides)
    spec["in_channels"] = in_channels
    return _entry(name).factory(**spec)


def from_checkpoint(ckpt: Mapping[str, Any]) -> nn.Module:
    """Rebuild a model from ``{"name", "scale", "hparams"}`` (+ optional ``"state_dict"``).

    ``hparams`` is the model's own ``.hparams`` (complete constructor kwargs), so the
    rebuild does not depend on the current scale defaults; ``scale`` is only recorded.
    When the dict carries ``state_dict`` the weights are loaded too.
    """
    missing = [k for k in ("name", "scale", "hparams") if k not in ckpt]
    if missing:
        raise ValueError(f"checkpoint lacks {missing}; needs 'name', 'scale', 'hparams'")
    model = _entry(ckpt["name"]).factory(**copy.deepcopy(dict(ckpt["hparams"])))
    if "state_dict" in ckpt:
        model.load_state_dict(ckpt["state_dict"])
    return model


# --- DGNO family --------------------------------------------------------------------

_PAPER = {
    "encoder_block": "assm",
    "encoder_channels": [48, 96, 192, 384],
    "encoder_blocks": [2, 4, 6, 2],
    "decoder_channels": [192, 96, 48],
    "heads": 16,
    "num_layers": 2,
}
# Demo: 4 heads on 48/24/12 decoder channels give the paper's per-head dims 12/6/3;
# ~100 ms per training step of batch 4 at 64×64 on one CPU core (300 steps ≈ 30 s).
_DEMO = {
    "encoder_block": "conv",
    "encoder_channels": [12, 24, 48, 96],
    "encoder_blocks": [1, 1, 1, 1],
    "decoder_channels": [48, 24, 12],
    "heads": 4,
    "num_layers": 2,
}
_SMOKE = {
    "encoder_block": "conv",
    "encoder_channels": [8, 16, 32, 64],
    "encoder_blocks": [1, 1, 1, 1],
    "decoder_channels": [32, 16, 8],
    "heads": 2,
    "num_layers": 2,
}

# Operator settings per model.  DG fluxes/boundaries are the paper's best (table
# "flux_boundary"): DGNO-Face avg-jump + Dirichlet (37.09 dB), DGNO-Cell jump + Neumann
# (37.22 dB); a learnable τ (init 0.25) wins the penalty ablation (table "Penalty");
# 8×8 elements with T = 2 is best in "tab:sensitivity_win_t".
_OPERATORS: dict[str, dict[str, Any]] = {
    "gg": {"operator": "gg", "operator_kwargs": {}},
    "lg": {"operator": "lg", "operator_kwargs": {"element_size": 8}},
    "dgno-face": {
        "operator": "dg",
        "operator_kwargs": {
            "element_size": 8,
            "variant": "face",
            "flux": "avg_jump",
            "boundary": "dirichlet",
            "tau": 0.25,
            "learn_tau": True,
        },
    },
    "dgno-cell": {
        "operator": "dg",
        "operator_kwargs": {
            "element_size": 8,
            "variant": "cell",
            "flux": "jump",
            "boundary": "neumann",
            "tau": 0.25,
            "learn_tau": True,
        },
    },
}

for _name, _op in _OPERATORS.items():
    register(
        _name,
        factory=DGNO,
        scales={
            scale: {**base, **copy.deepcopy(_op)}
            for scale, base in (("paper", _PAPER), ("demo", _DEMO), ("smoke", _SMOKE))
        },
    )

import dgno.models.baselines  # noqa: E402,F401  registers the baselines
