"""Assemble the report from the results tree of one configuration: one module per kind of section
(results, operators, ablations, synthetic, downstream, cost, protocol), put together here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from dgno.io import read_json
from dgno.report.ablations import ablation_section
from dgno.report.claims import claims_section
from dgno.report.comparisons import select_replicates
from dgno.report.cost_section import BENCH_COMMAND, cost_section, runtime_section
from dgno.report.downstream import nonblind_section, stardist_section
from dgno.report.operators_section import lam_section, operators_section
from dgno.report.protocol import protocol_section
from dgno.report.render import (
    CATALOGUE,
    benchmark_times,
    header_context,
    render,
)
from dgno.report.reproduction import reproduction_section
from dgno.report.results import defocus_section, lifting_section, main_section, real_defocus_section, robustness_section
from dgno.report.synthetic import synthetic_bbbc006_section, synthetic_section
from dgno.report.tables import collect_summaries, summary_files


def build_report(config: dict[str, Any], results_root: str | Path, out_html: str | Path) -> None:
    """Read every results file of this configuration and write the standalone HTML report."""
    results = Path(results_root)
    summaries = collect_summaries(summary_files(results))

    def rows_of(name: str) -> pd.DataFrame:  # the seed replicates this experiment's table reads (replicate 0 elsewhere)
        return select_replicates(summaries, config, name)

    sections = [protocol_section(config), claims_section(config, results)]
    if "main" in config["experiments"]:
        sections.append(main_section(config, rows_of("main"), results))
    if "operators" in config["experiments"]:
        sections.append(operators_section(config, rows_of("operators"), results))
    if "lam" in config["experiments"]:
        sections.append(lam_section(config, results))
    if "synthetic" in config["experiments"]:
        sections.append(synthetic_section(config, rows_of("synthetic"), results))
    if "synthetic_bbbc006" in config["experiments"]:
        sections.append(synthetic_bbbc006_section(config, rows_of("synthetic_bbbc006"), results))
    if "nonblind" in config["experiments"]:
        sections.append(nonblind_section(config, rows_of("nonblind"), results))
    stardist_source = None
    if "stardist" in config["experiments"]:
        sections.append(stardist_section(config, results))
        model_json = results / "stardist" / config["experiments"]["stardist"]["dataset"] / "model.json"
        if model_json.exists():
            stardist_source = read_json(model_json)["source"]
    if "lifting" in config["experiments"]:
        sections.append(lifting_section(config, rows_of("lifting"), results))
    if "defocus" in config["experiments"]:
        sections.append(defocus_section(config, rows_of("defocus"), results))
    for name in ("dpdd", "realdof"):
        if name in config["experiments"]:
            sections.append(real_defocus_section(name, config, rows_of(name), results))
    if "robustness" in config["experiments"]:
        sections.append(robustness_section(config, rows_of("robustness"), results))
    for name in config.get("ablation_runs", {}):
        sections.append(ablation_section(name, config, rows_of(""), results))
    if "reproduction" in config:
        sections.append(reproduction_section(config, results))
    sections.append(cost_section(config, results))
    runtime, runtime_measured = runtime_section(results)
    sections.append(runtime)
    covered = {s.id.removeprefix("ablation_") for s in sections if s.id != "runtime_memory" or runtime_measured}
    catalogue = [
        {
            "title": title,
            "section": (f"ablation_{key}" if key in config.get("ablation_runs", {}) else key) if key in covered else None,
            "status": "recorded benchmarks (not measured in this run)" if key == "runtime_memory" else None,
            "reason": "no benchmark results: " + BENCH_COMMAND
            if key == "runtime_memory"
            else "not part of this configuration; config/paper.yaml runs it: snakemake --profile slurm all"
            if key in ("main", "lifting", "defocus", "operators", "synthetic", "synthetic_bbbc006", "nonblind", "stardist", "flux_boundary", "penalty", "element_size_T", "dpdd", "realdof", "lam")
            else "not yet implemented by this version of the pipeline",
        }
        for key, title in CATALOGUE
    ]
    context = header_context(config, rows_of(""), stardist_source, results=results)
    context.update(sections=sections, catalogue=catalogue, compute=benchmark_times(results / "benchmarks").to_dict("records"))
    render(context, out_html)


def build_authors_report(config: dict[str, Any], results_root: str | Path, out_html: str | Path) -> None:
    """The report of target ``authors``: the protocol and the reproduction from the released weights, standing alone."""
    results = Path(results_root)
    summaries = collect_summaries(summary_files(results))
    context = header_context(config, summaries, results=results)
    catalogue = [{"title": "Reproduction from the released weights", "section": "reproduction", "status": None, "reason": ""}]
    context.update(sections=[protocol_section(config), reproduction_section(config, results)], catalogue=catalogue, compute=benchmark_times(results / "benchmarks").to_dict("records"))
    render(context, out_html)
