"""What the ``authors`` target runs: the paper's numbers from the authors' released weights.

For the methods of ``authors.methods`` (each with ``authors_checkpoints``): every checkpoint
they name is downloaded and imported; each dataset they have one for is evaluated at all of its
test levels, with ``evaluate.gumbel_repeats`` Gumbel-routing repeats beside the argmax evaluation;
StarDist AP is measured on their restorations of ``experiments.stardist``'s dataset and level; a
table puts each paper number beside the measured one. A dataset placed by hand (3DHistech) is
evaluated only when its files are there when the DAG is built (:func:`placed`); otherwise the
report's section says "not run" with the placement steps. Plain functions of the validated config,
tested without Snakemake (``tests/test_authors_workflow.py``, ``tests/test_authors_report.py``); ``workflow/rules/authors.smk`` binds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from dgno.data.paired_sets import find_layout_root, layout_for

Config = Mapping[str, Any]
HAND_PLACED = ("3dhistech",)  # sources with no download: the target runs them only once they are there
REPORT = "report/authors.html"
TABLE = "results/tables/authors.csv"


def methods(config: Config) -> list[str]:
    return list(config.get("authors", {}).get("methods", []))


def placed(config: Config, dataset: str) -> bool:
    """Whether a dataset's files are there (always True for a dataset that is downloaded or generated).

    Decided when the DAG is built, from the configured folder: a hand-placed dataset counts as placed
    when its layout's folders are found at or below ``datasets.<name>.path``; the data rule checks the
    rest (counts, sizes) and stops with the steps if the copy is incomplete.
    """
    ds = config["datasets"][dataset]
    if ds["source"] not in HAND_PLACED:
        return True
    root = Path(ds["path"])
    return root.is_dir() and find_layout_root(root, layout_for(ds["source"], check_size=False)) is not None


def datasets(config: Config) -> list[str]:
    """Datasets of this config that a method of ``authors.methods`` has a checkpoint for (config order)."""
    named = {ds for m in methods(config) for ds in config["methods"][m]["authors_checkpoints"]}
    return [ds for ds in config["datasets"] if ds in named]


def evaluated(config: Config) -> list[str]:
    """The target's datasets that run now (hand-placed ones only once placed)."""
    return [ds for ds in datasets(config) if placed(config, ds)]


def imports(config: Config) -> list[str]:
    """Every authors' checkpoint of the target, imported (whether or not its dataset is placed)."""
    return [f"results/authors/{ds}/{m}/model.pt" for m in methods(config) for ds in datasets(config) if ds in config["methods"][m]["authors_checkpoints"]]


def _cells(config: Config) -> list[tuple[str, str, str]]:
    return [
        (ds, m, lvl)
        for ds in evaluated(config)
        for m in methods(config)
        if ds in config["methods"][m]["authors_checkpoints"]
        for lvl in config["datasets"][ds]["test_levels"]
    ]


def summaries(config: Config) -> list[str]:
    """The argmax (or ``evaluate.routing``) evaluations: one per dataset, method and test level."""
    return [f"results/eval/{ds}/{m}/{lvl}/summary.json" for ds, m, lvl in _cells(config)]


def gumbel_runs(config: Config) -> list[str]:
    """The Gumbel-routing repeats (``evaluate.gumbel_repeats`` of them, one job) of every evaluation of the target."""
    if not config["evaluate"]["gumbel_repeats"]:
        return []
    return [f"results/eval/{ds}/{m}/{lvl}/gumbel" for ds, m, lvl in _cells(config)]


def stardist_dataset(config: Config) -> str | None:
    """The dataset whose restorations StarDist segments: experiments.stardist's, when the target evaluates it."""
    spec = config["experiments"].get("stardist")
    return spec["dataset"] if spec and spec["dataset"] in evaluated(config) else None


def stardist_table(config: Config) -> list[str]:
    ds = stardist_dataset(config)
    return [f"results/authors/stardist_{ds}.csv"] if ds else []


def stardist_inputs(config: Config, dataset: str) -> dict[str, Any]:
    """The segmentation model, the authors' restorations at StarDist's level and the dataset."""
    level = config["experiments"]["stardist"]["level"]
    return {
        "model": f"results/stardist/{dataset}/model.json",
        "restored": [f"results/eval/{dataset}/{m}/{level}/restored" for m in methods(config) if dataset in config["methods"][m]["authors_checkpoints"]],
        "manifest": f"results/data/{dataset}/manifest.json",
    }


def restored_needed(config: Config) -> set[tuple[str, str, str]]:
    """(dataset, method, level) whose restored images the target's StarDist check reads."""
    ds = stardist_dataset(config)
    if ds is None:
        return set()
    level = config["experiments"]["stardist"]["level"]
    return {(ds, m, level) for m in methods(config) if ds in config["methods"][m]["authors_checkpoints"]}


def target(config: Config) -> str:
    """The file target ``authors`` makes, or a clear error for a config without an ``authors`` block."""
    if not methods(config):
        raise ValueError(
            f"target authors: config {config['name']!r} has no `authors` block. Fix: run it with the paper "
            "config (snakemake --profile slurm authors, or snakemake authors --cores all --configfile config/paper.yaml)"
        )
    return REPORT


def table_inputs(config: Config) -> dict[str, list[str]]:
    """What the authors' table reads: evaluations, Gumbel repeats, StarDist AP, manifests, the imports ({} without an ``authors`` block)."""
    if not methods(config):
        return {}
    return {
        "summaries": summaries(config),
        "gumbel": gumbel_runs(config),
        "stardist": stardist_table(config),
        "manifests": [f"results/data/{ds}/manifest.json" for ds in evaluated(config)],
        "models": imports(config),
    }


def benchmark_files(config: Config) -> list[str]:
    """The benchmark files of the target's jobs that use the GPU (evaluations, Gumbel repeats, StarDist)."""
    files = [f"results/benchmarks/evaluate/{ds}/{m}/{lvl}.tsv" for ds, m, lvl in _cells(config)]
    if config["evaluate"]["gumbel_repeats"]:
        files += [f"results/benchmarks/evaluate_gumbel/{ds}/{m}/{lvl}.tsv" for ds, m, lvl in _cells(config)]
    ds = stardist_dataset(config)
    return files + ([f"results/benchmarks/stardist_authors/{ds}.tsv"] if ds else [])


RELEASED = Path(__file__).resolve().parents[1] / "models" / "authors_networks.yaml"  # read as data: no torch here


def network(config: Config, name: str) -> dict[str, Any]:
    """The ``network_g`` block of a checkpoint, as its import reads it (downloads.authors_options, else the packaged one)."""
    folder = config["downloads"]["authors_options"]
    if folder and (Path(folder) / f"{name}.yml").exists():
        return dict((yaml.safe_load((Path(folder) / f"{name}.yml").read_text()) or {}).get("network_g", {}))
    return dict(yaml.safe_load(RELEASED.read_text()).get(name, {}).get("network_g", {}))


def settings(config: Config) -> dict[str, Any]:
    """The authors' table's params: methods, their datasets (placed or not, with the path), tolerances, levels."""
    if not methods(config):
        return {}
    spec = config["authors"]
    return {
        "methods": methods(config),
        "labels": {m: config["methods"][m].get("label", m) for m in methods(config)},
        "paper_keys": {m: config["methods"][m].get("paper_key") or config["methods"][m]["model"].replace("-", "_") for m in methods(config)},
        "datasets": {
            ds: {
                "placed": placed(config, ds),
                "source": config["datasets"][ds]["source"],
                "path": config["datasets"][ds].get("path"),
                "paper_column": config["datasets"][ds].get("paper_column", ds),
                "test_levels": list(config["datasets"][ds]["test_levels"]),
                "table_levels": [lvl for lvl in config["datasets"][ds]["test_levels"] if lvl in config["datasets"][ds]["train_levels"]],
                "split": config["datasets"][ds].get("split"),
            }
            for ds in datasets(config)
        },
        "networks": {m: {ds: network(config, config["methods"][m]["authors_checkpoints"][ds]) for ds in datasets(config) if ds in config["methods"][m]["authors_checkpoints"]} for m in methods(config)},
        "tolerances": dict(spec["tolerances"]),
        "gumbel_repeats": config["evaluate"]["gumbel_repeats"],
        "routing": config["evaluate"]["routing"],
        "stardist": {"dataset": stardist_dataset(config), "level": config["experiments"].get("stardist", {}).get("level")},
        "benchmarks": benchmark_files(config),
    }
