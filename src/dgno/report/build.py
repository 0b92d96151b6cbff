"""Assemble the report from the results tree of one configuration: one section per experiment of
:mod:`dgno.experiments.catalogue` that the configuration runs (each rendered by the function its entry
names, followed by the figures its entry lists), between the protocol and claims and the cost sections."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from dgno.experiments import catalogue
from dgno.io import read_json
from dgno.report.authors import TITLE as AUTHORS_TITLE
from dgno.report.authors import authors_section
from dgno.report.claims import claims_section
from dgno.report.comparisons import select_replicates
from dgno.report.cost_section import BENCH_COMMAND, cost_section, runtime_section
from dgno.report.protocol import protocol_section
from dgno.report.reading import collect_summaries, summary_files
from dgno.report.render import benchmark_times, header_context, render
from dgno.report.section import Section, experiment_figures

RUNTIME = ("runtime_memory", "Runtime / memory vs image size")  # the paper's catalogue line of the recorded benchmarks
NOT_CONFIGURED = "not part of this configuration; config/paper.yaml runs it: snakemake --profile slurm all"


def section_function(entry: catalogue.Experiment) -> Callable[..., Section]:
    """The report function an entry names (``"module:function"``), called (name, config, summaries, results)."""
    module, _, name = entry.section.partition(":")
    return getattr(importlib.import_module(module), name)


def experiment_section(entry: catalogue.Experiment, config: dict[str, Any], summaries: pd.DataFrame, results: Path) -> Section:
    """One experiment's section: its function's notes, verdicts, tables and figures, after the figures its entry lists."""
    rows = select_replicates(summaries, config, entry.name if entry.config_key == "experiments" else "")
    sec = section_function(entry)(entry.name, config, rows, results)
    if entry.config_key == "experiments":
        sec.figures = experiment_figures(results, config, entry.name) + sec.figures
    return sec


def catalogue_rows(config: dict[str, Any], sections: list[Section], runtime_measured: bool) -> list[dict[str, Any]]:
    """The report's list of the paper's experiments, each with its section in this report or why it has none."""
    ids = {s.id for s in sections}
    rows = []
    for entry in catalogue.EXPERIMENTS:
        if entry.paper is not None:
            here = entry.table_name in ids
            rows.append({"title": entry.paper, "section": entry.table_name if here else None, "status": None, "reason": NOT_CONFIGURED})
    rows.append(
        {"title": RUNTIME[1], "section": RUNTIME[0] if runtime_measured else None, "status": "recorded benchmarks (not measured in this run)",
         "reason": "no benchmark results: " + BENCH_COMMAND}
    )  # fmt: skip
    return rows


def build_report(config: dict[str, Any], results_root: str | Path, out_html: str | Path) -> None:
    """Read every results file of this configuration and write the standalone HTML report."""
    results = Path(results_root)
    summaries = collect_summaries(summary_files(results))
    sections = [protocol_section(config), claims_section(config, results)]
    sections += [experiment_section(entry, config, summaries, results) for entry in catalogue.configured(config)]
    stardist_source = None
    if "stardist" in config["experiments"]:
        model_json = results / "stardist" / config["experiments"]["stardist"]["dataset"] / "model.json"
        if model_json.exists():
            stardist_source = read_json(model_json)["source"]
    if "authors" in config:
        sections.append(authors_section(config, results))
    sections.append(cost_section(config, results))
    runtime, runtime_measured = runtime_section(results)
    sections.append(runtime)
    context = header_context(config, select_replicates(summaries, config, ""), stardist_source, results=results)
    context.update(sections=sections, catalogue=catalogue_rows(config, sections, runtime_measured), compute=benchmark_times(results / "benchmarks").to_dict("records"))
    render(context, out_html)


def build_authors_report(config: dict[str, Any], results_root: str | Path, out_html: str | Path) -> None:
    """The report of target ``authors``: the protocol and the paper's numbers from the authors' released weights, standing alone."""
    results = Path(results_root)
    summaries = collect_summaries(summary_files(results))
    context = header_context(config, summaries, results=results)
    catalogue_list = [{"title": AUTHORS_TITLE, "section": "authors", "status": None, "reason": ""}]
    context.update(sections=[protocol_section(config), authors_section(config, results)], catalogue=catalogue_list, compute=benchmark_times(results / "benchmarks").to_dict("records"))
    render(context, out_html)
