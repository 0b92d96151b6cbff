"""The tables, figures and analyses the report needs in one configuration (the report rules' inputs).

Like :mod:`dgno.workflow.plan`, plain functions of the validated config returning paths, tested without
Snakemake (``tests/test_workflow_plan.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from dgno.experiments import catalogue
from dgno.workflow import authors, slides
from dgno.workflow.plan import (
    Config,
    experiment_dataset_set,
    experiment_methods,
    gg_dg_pair,
    lam_datasets,
    main_dataset,
    rank_datasets,
    rank_methods,
)


def _dataset_targets(config: Config, ds: str) -> list[str]:
    """What every dataset an experiment trains on gets (catalogue.DATASET_FIGURES): its edge-band table (with
    its per-image values and gains) and figures — training curves only when it trains, the residual figure
    only with a GG and a DG method."""
    skip = set()
    if "trained_on" in config["datasets"][ds]:  # no training of its own to plot
        skip.add("training_curves")
    if not gg_dg_pair(config, experiment_methods(config, ds)):
        skip.add("error_difference")
    figures = [catalogue.FIGURES[key].path.format(dataset=ds) for key in catalogue.DATASET_FIGURES if key not in skip]
    return [f"results/tables/edge_band_{ds}.csv", f"results/tables/edge_band_{ds}_stats.csv", *figures]


def experiment_targets(config: Config, name: str) -> list[str]:
    """A configured experiment's results table with its statistics, the figures and other files its section reads."""
    entry = catalogue.experiment(name)
    files = catalogue.table_files(entry.table_name) if entry.table_name in catalogue.tables(config) else []
    if entry.config_key == "experiments":
        files += catalogue.figure_files(config, entry.name) + catalogue.other_files(config, entry.name)
    if entry.config_key == "slides":
        files += slides.targets(config)
    return files


def report_inputs(config: Config) -> list[str]:
    """Tables (each with its statistics), figures and summaries the report's sections read in this configuration."""
    files = ["results/tables/model_summary.csv", "results/tables/edge_band_definition.txt"]
    for entry in catalogue.configured(config):
        files += experiment_targets(config, entry.name)
    for ds in experiment_dataset_set(config):
        files += _dataset_targets(config, ds)
    if authors.methods(config):
        files.append(authors.TABLE)
    return list(dict.fromkeys(files))


def analysis_report_inputs(config: Config, bench_files: Iterable[str] = ()) -> list[str]:
    """Files the report's analysis figures need in this configuration; ``bench_files`` are the
    benchmark results found in the repository (the runtime/memory figure needs at least one)."""
    figure = {key: f.path for key, f in catalogue.FIGURES.items()}
    files = ["results/tables/cost_vs_resolution.csv", figure["cost_vs_resolution"]]
    for ds in rank_datasets(config):
        if rank_methods(config, ds):
            files += [
                f"results/tables/effective_rank_{ds}.csv",
                figure["effective_rank"].format(dataset=ds),
                f"results/tables/operator_maps_{ds}.csv",
                figure["operator_maps"].format(dataset=ds),
            ]
    for ds in lam_datasets(config):
        files += [f"results/tables/lam_{ds}.csv", figure["lam"].format(dataset=ds)]
    if main_dataset(config):
        files.append(figure["psnr_vs_params"])
    if list(bench_files):
        files.append(figure["runtime_memory"])
    return files
