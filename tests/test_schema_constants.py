"""Every enum of the config schema that mirrors a choice of the code equals it.

The schema (workflow/schemas/config.schema.yaml) rejects a typo before any job runs; the code checks
the same option again when it builds a layer or reads a file. When one list gains a value the other
lacks, a config either fails at validation for an option the code has, or passes validation and
fails hours later in a job. Each tie below names the schema location and the code it mirrors, and
every enum of the schema must have a tie or a stated reason why there is no code constant.
"""

from __future__ import annotations

import pytest

from dgno.checkpoint import pick_device
from dgno.data import GENERATED_SOURCES, RENAMED_SOURCES, bbbc006, bbbc006_pairing, demo, paired_sets
from dgno.data import slides as data_slides
from dgno.experiments import nonblind_settings as nonblind
from dgno.inference import normalisation
from dgno.inference.engine_names import ENGINES
from dgno.inference.tiling import BLENDS
from dgno.layers import blocks, flux
from dgno.layers.mambair import ROUTINGS
from dgno.models.overrides import registry_overrides
from dgno.models.registry import LIFTING_BLOCKS, SCALES, list_models, model_spec
from dgno.optics import seidel
from dgno.report.downstream import DECONV_ROWS
from dgno.slides import focus, pyramid
from dgno.train import TrainConfig
from dgno.workflow import config as workflow_config
from dgno.workflow.settings import DECONV_LABELS

SCHEMA = workflow_config.load_schema()
DATASET = ("properties", "datasets", "additionalProperties", "properties")
DG_FAMILY = ("gg", "lg", "dgno-face", "dgno-cell")


def _node(*path: str) -> dict:
    """The schema node at ``path`` (keys of the YAML), its $ref resolved."""
    node = SCHEMA
    for key in path:
        node = workflow_config._resolve(SCHEMA, node[key])
    return node


def _enum(*path: str) -> list:
    """The allowed values at ``path``: an enum, or the enums, consts and nulls of its anyOf/oneOf options."""
    node = _node(*path)
    if "enum" in node:
        return list(node["enum"])
    values = []
    for option in node.get("anyOf", node.get("oneOf", [])):
        option = workflow_config._resolve(SCHEMA, option)
        if option.get("type") == "null":
            values.append(None)
        values += option.get("enum", [option["const"]] if "const" in option else [])
    return values


def _enum_paths(node, path=()) -> set[tuple[str, ...]]:
    """Every path of the schema that holds an enum (its $defs once, not where they are referenced)."""
    found = {path} if isinstance(node, dict) and "enum" in node else set()
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in children:
        found |= _enum_paths(child, (*path, str(key)))
    return found


# --- the ties ----------------------------------------------------------------------------------


def test_fluxes_and_boundaries_are_the_dg_layers():
    assert _enum("$defs", "flux") == list(flux.FLUXES)
    assert _enum("$defs", "boundary") == list(flux.BOUNDARIES)
    # used twice (a method's overrides, the flux/boundary grid), written once: $refs to the above
    for key, code in (("flux", flux.FLUXES), ("boundary", flux.BOUNDARIES)):
        assert _enum("$defs", "overrides", "properties", key) == list(code)
        assert _enum("properties", "ablations", "properties", "flux_boundary", "properties", key, "items") == list(code)


def test_learnable_tau_is_what_the_overrides_translate():
    assert _enum("$defs", "tau") == ["learnable"]
    assert registry_overrides({"tau": "learnable"}) == {"learn_tau": True}
    assert registry_overrides({"tau": 0.5}) == {"tau": 0.5, "learn_tau": False}


def test_model_scales_and_dg_variants_are_the_registrys():
    assert sorted(_enum("$defs", "scale")) == sorted(SCALES)
    assert sorted(_enum("properties", "scale")) == sorted(SCALES)
    assert _enum("properties", "analysis", "properties", "cost_scale") == [*_enum("$defs", "scale"), None]
    for name in list_models():
        for scale in SCALES:
            model_spec(name, scale)  # every model has every scale the schema allows
    dg = [n for n in list_models() if model_spec(n).get("operator") == "dg" and n not in LIFTING_BLOCKS]
    assert sorted(_enum("$defs", "dg_variant")) == sorted(dg)


def test_encoder_blocks_are_those_of_the_dg_family():
    allowed = _enum("$defs", "overrides", "properties", "encoder_block")
    used = {model_spec(m, s)["encoder_block"] for m in DG_FAMILY for s in SCALES}
    assert set(allowed) == used
    assert set(allowed) <= set(blocks.ENCODER_BLOCKS) | set(blocks._LAZY_ENCODER_MODULES)


def test_dataset_sources_and_channels_are_the_readers():
    sources = _enum(*DATASET, "source")
    assert set(GENERATED_SOURCES.values()) == set(demo.KINDS) and not set(RENAMED_SOURCES) & set(sources)
    expected = set(GENERATED_SOURCES) | {"seidel", "sigma_map", "bbbc006"} | set(paired_sets.SOURCES)
    assert set(sources) == expected and len(sources) == len(expected)
    assert workflow_config.PAIRED_SOURCES == paired_sets.SOURCES
    assert _enum(*DATASET, "channel") == list(bbbc006.CHANNELS)


def test_seidel_coefficients_and_conventions_are_the_optics():
    coeffs = _node(*DATASET, "seidel", "properties", "coeffs")["oneOf"]
    assert list(coeffs[0]["properties"]) == list(seidel.SEIDEL_NAMES)
    assert coeffs[1]["minItems"] == coeffs[1]["maxItems"] == len(seidel.SEIDEL_NAMES)
    conventions = _enum(*DATASET, "seidel", "properties", "convention")
    for convention in conventions:
        nonblind.true_coefficients({"convention": convention})
    with pytest.raises(ValueError, match="Seidel convention"):
        nonblind.true_coefficients({"convention": "zemax"})


def test_deconvolution_methods_are_the_nonblind_ones_with_labels():
    allowed = _enum("properties", "experiments", "properties", "nonblind", "properties", "deconvolution", "items")
    assert allowed == list(nonblind.METHODS)
    assert set(DECONV_LABELS) == set(DECONV_ROWS) == set(allowed)


def test_tile_blends_are_the_tilings():
    assert _enum("properties", "evaluate", "properties", "blend") == list(BLENDS)


def test_evaluated_checkpoints_and_statistics_defaults_are_the_code():
    from dgno import stats
    from dgno.workflow.plan import EVALUATED_CHECKPOINTS

    assert _enum("properties", "evaluate", "properties", "checkpoint") == list(EVALUATED_CHECKPOINTS)
    block = _node("properties", "stats")["properties"]
    assert block["confidence"]["default"] == stats.CONFIDENCE and block["n_resamples"]["default"] == stats.N_RESAMPLES
    assert block["undertrained_rise_db"]["default"] == stats.UNDERTRAINED_RISE_DB and block["tail_fraction"]["default"] == stats.TAIL_FRACTION


def test_training_choices_are_accepted_by_the_trainer_and_nothing_else():
    for weights in _enum("properties", "train", "properties", "eval_weights"):
        TrainConfig(eval_weights=weights)
    with pytest.raises(ValueError, match="eval_weights"):
        TrainConfig(eval_weights="swa")
    devices = _enum("properties", "device")
    assert "auto" in devices and "cpu" in devices
    for device in devices:
        if device != "cuda":  # cuda needs a GPU here; that it is a known name is checked below
            pick_device(device)
    with pytest.raises(ValueError, match="'auto', 'cpu', 'cuda'"):
        pick_device("tpu")


def test_training_defaults_are_the_schemas():
    """One source for the recipe's defaults: every TrainConfig field that is a config key defaults to the schema's value."""
    from dataclasses import MISSING, fields

    train = _node("properties", "train")["properties"]
    defaults = {f.name: f.default if f.default is not MISSING else f.default_factory() for f in fields(TrainConfig)}
    top = {k: _node("properties", k)["default"] for k in ("seed", "device")}
    assert set(train) <= set(defaults), f"schema train keys the trainer does not take: {sorted(set(train) - set(defaults))}"
    assert set(defaults) - set(train) - set(top) == {"betas"}  # AdamW's betas: the authors' (0.9, 0.999), not a config key
    drift = {k: (defaults[k], node["default"]) for k, node in train.items() if defaults[k] != node["default"]}
    drift |= {k: (defaults[k], v) for k, v in top.items() if defaults[k] != v}
    assert not drift, f"TrainConfig default != schema default: {drift}"


def test_adamw_implementations_are_the_training_steps():
    from dgno.train.recipe import ADAMW_IMPLS, SPEED_ONLY

    assert _enum("properties", "train", "properties", "adamw_impl") == list(ADAMW_IMPLS)
    for impl in ADAMW_IMPLS:
        TrainConfig(adamw_impl=impl)
    assert set(SPEED_ONLY) <= set(_node("properties", "train", "properties"))


def test_slide_choices_are_deblur_slides_and_the_generators():
    slides = ("properties", "slides", "properties")
    assert _enum(*slides, "restore") == list(focus.RESTORE_MODES)
    assert _enum(*slides, "compression") == list(pyramid.COMPRESSIONS)
    assert _enum(*slides, "normalise") == [*normalisation.NORMALISATIONS, None]
    assert _enum("$defs", "synthetic_slide", "properties", "kind") == list(data_slides.KINDS) == list(data_slides.KIND_LAYOUT)


def test_finetune_choices_are_the_fine_tunings_and_the_generators():
    from dgno.data.synthetic_stacks import BLURS

    assert _enum("properties", "finetune", "properties", "normalise") == [*normalisation.NORMALISATIONS, None]
    assert _enum("properties", "finetune", "properties", "synthetic", "properties", "blur") == list(BLURS)


def test_plane_rules_and_routings_are_the_codes():
    assert _enum(*DATASET, "plane_rule") == list(bbbc006_pairing.PLANE_RULES)
    assert _enum(*DATASET, "plane_check") == list(bbbc006_pairing.PLANE_CHECKS)
    assert _enum("properties", "evaluate", "properties", "routing") == list(ROUTINGS)


def test_engines_are_the_codes():
    assert _enum("properties", "evaluate", "properties", "engine") == list(ENGINES)
    assert _enum("properties", "slides", "properties", "engine") == list(ENGINES)


# Enums that mirror no constant of the package: choices only the workflow itself acts on.
WORKFLOW_ONLY = {
    # which prepare function rule bbbc006_prepare calls (dgno.data.bbbc006 or dgno.data.bbbc006_authors)
    (*DATASET, "split"),
    # which rule makes the StarDist model (workflow/rules/downstream.smk), not an option of dgno.downstream
    ("properties", "experiments", "properties", "stardist", "properties", "model"),
    # provenance labels the report prints as given
    ("properties", "protocol", "additionalProperties", "properties", "source"),
}

TIED = {
    ("$defs", "flux"),
    ("$defs", "boundary"),
    ("$defs", "dg_variant"),
    ("$defs", "scale"),
    ("$defs", "overrides", "properties", "encoder_block"),
    ("properties", "device"),
    (*DATASET, "source"),
    (*DATASET, "channel"),
    (*DATASET, "seidel", "properties", "convention"),
    ("properties", "train", "properties", "eval_weights"),
    ("properties", "train", "properties", "adamw_impl"),
    ("properties", "evaluate", "properties", "blend"),
    ("properties", "evaluate", "properties", "routing"),
    ("properties", "evaluate", "properties", "engine"),
    ("properties", "slides", "properties", "engine"),
    (*DATASET, "plane_rule"),
    (*DATASET, "plane_check"),
    ("properties", "evaluate", "properties", "checkpoint"),
    ("properties", "experiments", "properties", "nonblind", "properties", "deconvolution", "items"),
    ("properties", "slides", "properties", "restore"),
    ("properties", "slides", "properties", "compression"),
    ("properties", "slides", "properties", "normalise"),
    ("$defs", "synthetic_slide", "properties", "kind"),
    ("properties", "finetune", "properties", "normalise"),
    ("properties", "finetune", "properties", "synthetic", "properties", "blur"),
}


def test_every_schema_enum_is_tied_to_the_code_or_said_to_be_workflow_only():
    found, known = _enum_paths(SCHEMA), TIED | WORKFLOW_ONLY
    assert found == known, f"untied enums: {sorted(found - known)}; stale entries: {sorted(known - found)}"
