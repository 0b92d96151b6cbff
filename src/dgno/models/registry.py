"""Model registry: name + scale → constructor kwargs → ``nn.Module``.

Configs, training and evaluation only ever say ``build_model("dgno-cell", scale="paper")``;
the registry is the single place that maps such a name to its network and its sizes, so a
checkpoint ``{"name", "scale", "overrides"}`` can always be rebuilt. One :class:`Entry` per name
holds both: the network class (``"module:Class"``) and its constructor kwargs at every scale.
Two tables, one per family: :data:`DGNO_FAMILY` (the DGNO network with its GG / LG / DG operator
layer, and DGNO-Cell with another encoder block for the lifting ablation) and :data:`BASELINES`
(the other restoration networks, one file each in ``dgno/models/``; adding one is its file and an
entry here, docs/extending.md).

Names and specs are plain data: this module imports no torch. Building the workflow's DAG reads
them (config validation, and whether an ablation grid point builds a configured method's
network), and that must not pay for torch or build a network. Only :func:`build_model` imports a
network's module, when it is called.

Scales: "paper" = the sizes and best settings of the paper; "demo" = a CPU-minutes
network; "smoke" = the smallest network that still exercises every code path (tests).
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dgno.choices import check_choice

if TYPE_CHECKING:
    from torch import nn

SCALES = ("paper", "demo", "smoke")


@dataclass(frozen=True)
class Entry:
    """One registry name: its network (``"module:Class"``, or a function building it) and its constructor
    kwargs per scale (every one of :data:`SCALES`)."""

    network: str
    scales: Mapping[str, Mapping[str, Any]]

    def __post_init__(self) -> None:
        if ":" not in self.network:
            raise ValueError(f"registry entry network {self.network!r} is not 'module:Class'")
        missing = [s for s in SCALES if s not in self.scales]
        if missing:
            raise ValueError(f"registry entry {self.network!r} lacks scale(s) {', '.join(missing)}")

    def network_class(self) -> Any:
        """The network's class (importing its module: torch)."""
        module, _, name = self.network.partition(":")
        return getattr(importlib.import_module(module), name)

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

# --- baselines (dgno.models.baselines documents each network and its source) ------------------
# paper: the published restoration configurations; demo: ≤ ~1 min for 300 steps of batch 4 at 64²
# on one CPU core (benchmarks/cpu/models.py measures it); smoke: tiny.

# MPT's per-block pyramid factors of the published model (dgno.models.mpt.PAPER_FACTORS, its
# constructor default; tests/test_baselines.py ties the two).
MPT_PAPER_FACTORS = [[8, 8, 4, 4, 1, 1], [4, 4, 2, 2, 1, 1], [2, 2, 2, 2, 1, 1], [2, 2, 2, 2, 1, 1]]

BASELINES: dict[str, Entry] = {
    "nafnet": Entry("dgno.models.baselines:NAFNetRestorer", {
        "paper": {"width": 32, "middle_blocks": 1, "encoder_blocks": [1, 1, 1, 28], "decoder_blocks": [1, 1, 1, 1]},
        "demo": {"width": 16, "middle_blocks": 2, "encoder_blocks": [1, 1, 1, 2], "decoder_blocks": [1, 1, 1, 1]},
        "smoke": {"width": 4, "middle_blocks": 1, "encoder_blocks": [1, 1], "decoder_blocks": [1, 1]},
    }),
    "swinir": Entry("dgno.models.baselines:SwinIRRestorer", {
        "paper": {"img_size": 128, "window_size": 8, "depths": [6] * 6, "num_heads": [6] * 6, "embed_dim": 180,
                  "mlp_ratio": 2.0, "drop_path_rate": 0.1},
        "demo": {"img_size": 64, "window_size": 8, "depths": [2], "num_heads": [2], "embed_dim": 24,
                 "mlp_ratio": 2.0, "drop_path_rate": 0.0},
        "smoke": {"img_size": 32, "window_size": 4, "depths": [1], "num_heads": [1], "embed_dim": 8,
                  "mlp_ratio": 2.0, "drop_path_rate": 0.0},
    }),
    "restormer": Entry("dgno.models.baselines:RestormerRestorer", {
        "paper": {"dim": 48, "num_blocks": [4, 6, 6, 8], "num_refinement_blocks": 4, "heads": [1, 2, 4, 8],
                  "ffn_expansion": 2.66, "bias": False, "layer_norm": "WithBias"},
        "demo": {"dim": 8, "num_blocks": [1, 1, 1, 1], "num_refinement_blocks": 0, "heads": [1, 1, 1, 1],
                 "ffn_expansion": 2.66, "bias": False, "layer_norm": "WithBias"},
        "smoke": {"dim": 4, "num_blocks": [1, 1, 1, 1], "num_refinement_blocks": 1, "heads": [1, 1, 1, 1],
                  "ffn_expansion": 2.66, "bias": False, "layer_norm": "WithBias"},
    }),
    "gkmnet": Entry("dgno.models.gkmnet:GKMNet", {
        "paper": {"channels": [32, 64, 128], "num_kernels": 21, "sigma_step": 0.25, "kernel_size": 21, "lstm_kernel": 5},
        "demo": {"channels": [8, 12, 16], "num_kernels": 9, "sigma_step": 0.5, "kernel_size": 21, "lstm_kernel": 3},
        "smoke": {"channels": [4, 8, 8], "num_kernels": 3, "sigma_step": 0.5, "kernel_size": 5, "lstm_kernel": 3},
    }),
    "mimo-unet": Entry("dgno.models.mimo_unet:MIMOUNet", {
        "paper": {"base_channels": 32, "num_res": 8},
        "demo": {"base_channels": 12, "num_res": 2},
        "smoke": {"base_channels": 8, "num_res": 1},
    }),
    "mpt": Entry("dgno.models.mpt:MPT", {
        "paper": {"dim": 40, "factors": MPT_PAPER_FACTORS, "heads": [1, 2, 4, 8], "window": 8, "ffn_expansion": 2.6},
        "demo": {"dim": 8, "factors": [[4], [2], [2], [2]], "heads": [1, 1, 2, 2], "window": 4, "ffn_expansion": 2.6},
        "smoke": {"dim": 4, "factors": [[2, 1], [2], [1], [1]], "heads": [1, 1, 1, 1], "window": 4, "ffn_expansion": 2.0},
    }),
    "mambairv2": Entry("dgno.models.mambairv2:MambaIRv2", {
        "paper": {"embed_dim": 174, "depths": [6] * 6, "d_state": 16, "num_tokens": 128, "inner_rank": 64,
                  "expand": 2.0, "ffn_expansion": 2.0},
        "demo": {"embed_dim": 12, "depths": [1, 1], "d_state": 4, "num_tokens": 16, "inner_rank": 8,
                 "expand": 1.0, "ffn_expansion": 2.0},
        "smoke": {"embed_dim": 6, "depths": [1], "d_state": 4, "num_tokens": 4, "inner_rank": 4,
                  "expand": 1.0, "ffn_expansion": 2.0},
    }),
}

# --- lifting ablation: DGNO-Cell at each scale, only the encoder block swapped ------------------
# registry name → encoder block (dgno.models.lifting registers the blocks and builds these networks).
# At demo scale the full-resolution level gets no
# lifting block: the transformer blocks at 64² cost up to ~0.5× a whole DGNO demo step on CPU each,
# which pushed a 300-step demo run past a minute.
LIFTING_BLOCKS = {"nafnet-dgno": "nafblock", "restormer-dgno": "restormer_block", "mpt-dgno": "mpt_block"}
_LIFTING_DEMO_BLOCKS = [0, 1, 1, 1]


def _dgno_scales(operator: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {scale: {**base, **copy.deepcopy(dict(operator))} for scale, base in zip(SCALES, (_PAPER, _DEMO, _SMOKE))}


def _lifting_scales(block: str) -> dict[str, dict[str, Any]]:
    """DGNO-Cell's scales with ``encoder_block`` = ``block`` (demo: see ``_LIFTING_DEMO_BLOCKS``)."""
    scales = {s: {**spec, "encoder_block": block} for s, spec in _dgno_scales(_OPERATORS["dgno-cell"]).items()}
    scales["demo"]["encoder_blocks"] = list(_LIFTING_DEMO_BLOCKS)
    return scales


DGNO_FAMILY: dict[str, Entry] = {
    **{name: Entry("dgno.models.dgno:DGNO", _dgno_scales(op)) for name, op in _OPERATORS.items()},
    # the lifting module registers the encoder blocks these networks name
    **{name: Entry("dgno.models.lifting:dgno_with_lifting", _lifting_scales(block)) for name, block in LIFTING_BLOCKS.items()},
}
_ENTRIES: dict[str, Entry] = {**DGNO_FAMILY, **BASELINES}


def list_models() -> list[str]:
    """Registered model names, sorted."""
    return sorted(_ENTRIES)


def model_spec(name: str, scale: str = "demo") -> dict[str, Any]:
    """The constructor kwargs of ``name`` at ``scale`` (a fresh copy, safe to edit)."""
    check_choice("model", name, list_models())
    check_choice(f"scale for model {name!r}", scale, sorted(_ENTRIES[name].scales))
    return copy.deepcopy(dict(_ENTRIES[name].scales[scale]))


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


def registry_entry(name: str) -> Entry:
    """The entry of ``name`` (ValueError listing the registered names otherwise)."""
    check_choice("model", name, list_models())
    return _ENTRIES[name]


def build_model(name: str, scale: str = "demo", in_channels: int = 1, **overrides: Any) -> nn.Module:
    """``<the entry's network>(**model_spec(name, scale) | overrides, in_channels=in_channels)``.

    The network's constructor records these kwargs in ``.hparams``. Unknown names, scales and
    override keys raise ``ValueError`` listing the allowed ones. The network's module (torch) is
    imported by this call, not with this module: the names and specs above must not pay for it.
    """
    spec = resolved_spec(name, scale, **overrides)
    spec["in_channels"] = in_channels
    return registry_entry(name).network_class()(**spec)
