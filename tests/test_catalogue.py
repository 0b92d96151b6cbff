"""The experiments as data (dgno.experiments.catalogue): the schema's experiments are the catalogue's, every
entry names a report function and figures that exist, and the report, the table rule and the targets all
take an experiment's table, figures and section from its entry."""

from __future__ import annotations

import inspect

import pytest
import yaml
from conftest import ROOT

from dgno import deprecation
from dgno.experiments import catalogue
from dgno.report.build import section_function
from dgno.workflow import plan, targets
from dgno.workflow.config import load_config, load_schema, validate_config

CONFIGS = {"demo": ROOT / "config.yaml", "smoke": ROOT / "tests" / "smoke.yaml", "paper": ROOT / "config" / "paper.yaml", "claims": ROOT / "config" / "claims.yaml"}


@pytest.fixture(scope="module")
def configs():
    return {name: load_config(path) for name, path in CONFIGS.items()}


def test_the_schemas_experiments_are_the_catalogues_and_seeds_go_to_seeded_ones():
    schema = load_schema()["properties"]
    experiments = schema["experiments"]["properties"]
    assert set(experiments) == set(catalogue.names("experiments"))
    assert set(schema["ablations"]["properties"]) == set(catalogue.names("ablations"))
    for name, spec in experiments.items():
        assert ("seeds" in spec["properties"]) == catalogue.experiment(name).seeded, name


def test_every_entry_names_a_report_function_of_the_common_signature_and_known_figures():
    for entry in catalogue.EXPERIMENTS:
        params = list(inspect.signature(section_function(entry)).parameters)
        assert params[:4] == ["name", "config", "summaries", "results"], entry.name
    with pytest.raises(ValueError, match="not keys of FIGURES"):
        catalogue.Experiment("x", None, "X", "dgno.report.results:main_section", figures=("no_such_figure",))
    with pytest.raises(ValueError, match="not in the catalogue"):
        catalogue.experiment("no_such_experiment")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_configured_table_is_a_target_with_a_caption_and_its_summaries(configs, name):
    config = configs[name]
    inputs = set(targets.report_inputs(config))
    for table in catalogue.tables(config):
        assert set(catalogue.table_files(table)) <= inputs, table
        caption = catalogue.table_caption(config, table)
        assert "{" not in caption and len(caption) > 40, table
        assert plan.table_summaries(config, table), table
    for entry in catalogue.configured(config):
        if entry.config_key == "experiments":
            assert set(catalogue.figure_files(config, entry.name)) <= inputs, entry.name


def test_figure_paths_are_written_once_in_the_code():
    """A figure's path is its catalogue entry's; rules, targets and report sections take it from there."""
    files = [*(ROOT / "src").rglob("*.py"), *(ROOT / "workflow").rglob("*.smk"), *(ROOT / "workflow" / "scripts").glob("*.py"), ROOT / "Snakefile"]
    for key, figure in catalogue.FIGURES.items():
        prefix = figure.path.split("{")[0].removesuffix(".png")
        users = [p.relative_to(ROOT) for p in files if prefix in p.read_text()]
        assert [str(p) for p in users] == ["src/dgno/experiments/catalogue.py"], (key, users)


def test_the_deprecated_shapes_source_is_read_with_a_message(capsys, monkeypatch):
    monkeypatch.setattr(deprecation, "SAID", set())
    raw = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())
    raw["datasets"]["shapes_narrow"]["source"] = "demo_shapes"
    cfg = validate_config(raw)
    assert cfg["datasets"]["shapes_narrow"]["source"] == "synthetic_shapes"
    assert capsys.readouterr().err == "config: datasets.shapes_narrow.source: demo_shapes: renamed synthetic_shapes\n"
    assert "shapes_narrow" in plan.generated_datasets(cfg)
