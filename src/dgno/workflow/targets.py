"""The tables, figures and analyses the report needs in one configuration (the report rules' inputs).

Like :mod:`dgno.workflow.plan`, plain functions of the validated config returning paths, tested without
Snakemake (``tests/test_workflow_plan.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from dgno.workflow import reproduction
from dgno.workflow.plan import (
    Config,
    experiment_dataset_set,
    experiment_methods,
    experiment_summaries,
    gg_dg_pair,
    lam_datasets,
    main_dataset,
    rank_datasets,
    rank_methods,
)


def _nonblind_targets(config: Config) -> list[str]:
    ds = config["experiments"]["nonblind"]["dataset"]
    return [
        "results/tables/nonblind.csv",
        f"results/nonblind/{ds}/calibration.json",
        f"results/data/{ds}/manifest.json",
        f"results/figures/nonblind_sensitivity_{ds}.png",
        f"results/figures/visual_{ds}.png",
        f"results/figures/training_curves_{ds}.png",
    ]


def _dataset_targets(config: Config, ds: str) -> list[str]:
    """Edge-band table (with its per-image values and gains), visual comparison, training curves (when it
    trains) and residual figure of one dataset."""
    files = [f"results/tables/edge_band_{ds}.csv", f"results/tables/edge_band_{ds}_stats.csv", f"results/figures/visual_{ds}.png"]
    if "trained_on" not in config["datasets"][ds]:  # no training of its own to plot
        files.append(f"results/figures/training_curves_{ds}.png")
    if gg_dg_pair(config, experiment_methods(config, ds)):
        files.append(f"results/figures/error_difference_{ds}.png")
    return files


TABLE_EXPERIMENTS = ("main", "lifting", "defocus", "synthetic_bbbc006", "dpdd", "realdof", "operators", "robustness", "synthetic")


def _with_stats(tables: list[str]) -> list[str]:
    """Each results table and its ``_stats.csv`` (per-image intervals, highlight; dgno.report.comparisons)."""
    return [f for t in tables for f in (t, t.removesuffix(".csv") + "_stats.csv")]


def report_inputs(config: Config) -> list[str]:
    """Tables (each with its statistics), figures and summaries the report's sections read in this configuration."""
    experiments = config["experiments"]
    files = ["results/tables/model_summary.csv", "results/tables/edge_band_definition.txt"]
    if "nonblind" in experiments:
        files += _nonblind_targets(config) + ["results/tables/nonblind_stats.csv"]
    files += _with_stats([f"results/tables/ablation_{name}.csv" for name in config["ablation_runs"]])
    if "stardist" in experiments:
        files += _with_stats([f"results/tables/stardist_{experiments['stardist']['dataset']}.csv"])
    files += _with_stats([f"results/tables/{name}.csv" for name in TABLE_EXPERIMENTS if name in experiments])
    for name in ("dpdd", "realdof"):
        if name in experiments:
            files += experiment_summaries(config, name)
    if "synthetic" in experiments:
        files.append("results/figures/synthetic_psnr.png")
    for ds in experiment_dataset_set(config):
        files += _dataset_targets(config, ds)
    if reproduction.methods(config):
        files.append(reproduction.TABLE)
    return files


def analysis_report_inputs(config: Config, bench_files: Iterable[str] = ()) -> list[str]:
    """Files the report's analysis figures need in this configuration; ``bench_files`` are the
    benchmark results found in the repository (the runtime/memory figure needs at least one)."""
    files = ["results/tables/cost_vs_resolution.csv", "results/figures/cost_vs_resolution.png"]
    for ds in rank_datasets(config):
        if rank_methods(config, ds):
            files += [
                f"results/tables/effective_rank_{ds}.csv",
                f"results/figures/effective_rank_{ds}.png",
                f"results/tables/operator_maps_{ds}.csv",
                f"results/figures/operators_{ds}.png",
            ]
    for ds in lam_datasets(config):
        files += [f"results/tables/lam_{ds}.csv", f"results/figures/lam_{ds}.png"]
    if main_dataset(config):
        files.append("results/figures/psnr_vs_params.png")
    if list(bench_files):
        files.append("results/figures/runtime_memory.png")
    return files
