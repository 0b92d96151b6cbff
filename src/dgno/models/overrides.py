"""Config-level ablation settings → registry constructor overrides.

The config speaks the paper's language (``T``, ``tau: learnable``); the registry speaks the
constructor's (``num_layers``, ``tau`` + ``learn_tau``). This is the one place that translates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RENAMES = {"T": "num_layers"}


def registry_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """{'T': 3, 'tau': 0.5} → {'num_layers': 3, 'tau': 0.5, 'learn_tau': False}; 'learnable' → learn_tau True."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if key == "tau":
            if value == "learnable":
                out["learn_tau"] = True
            else:
                out["tau"] = float(value)
                out["learn_tau"] = False
        else:
            out[RENAMES.get(key, key)] = value
    return out
