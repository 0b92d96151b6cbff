"""Seed replicates: an experiment's methods trained again with other seeds, and where each replicate lives.

Why: one training seed is one draw of the network's initial weights and of the crops it sees. At the
demo's scale the methods differ by less than a retrained model moves, so a table of one seed cannot
tell a lead from luck. ``experiments.<name>.seeds: n`` trains every trained method of that experiment
n times; the tables then give mean ± sd over the seeds beside the per-image interval of each stated
difference (``dgno.report.comparisons``).

Layout (docs/CONVENTIONS.md): replicate 0 is the run's own training, at the plain paths
(``results/train/<dataset>/<method>/``, ``results/eval/<dataset>/<method>/<level>/``), so adding seeds
never retrains or re-scores it. Replicate r >= 1 trains with training seed ``seed + r`` at
``results/train/<dataset>/<method>/seed=<r>/`` and is evaluated at
``results/eval/<dataset>/<method>/seed=<r>/<level>/``: each is a target like any other. Untrained rows
(the blurred input, deconvolution, the authors' weights) have no replicates: one evaluation serves
every seed.

Seeds belong to an experiment, not to a method: a method that several experiments use on one dataset
(DGNO-Cell on the nuclei, in Table 1 and in GG vs LG vs DGNO) is trained max(seeds) times, and each
table reads the replicates its own experiment asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dgno.experiments import catalogue
from dgno.experiments.catalogue import experiment_seeds
from dgno.io import replicate_dir
from dgno.report.comparisons import is_trained, row_replicates

Config = Mapping[str, Any]
__all__ = ["experiment_seeds", "is_trained", "row_replicates"]


def method_dir(method: str, replicate: int) -> str:
    """The method's folder below a dataset: the method itself for replicate 0, ``<method>/seed=<r>`` otherwise."""
    return replicate_dir(method, replicate)


def eval_dir(dataset: str, method: str, level: str, replicate: int = 0) -> str:
    """results/eval/<dataset>/<method>[/seed=<r>]/<level>: one evaluation's folder."""
    return f"results/eval/{dataset}/{replicate_dir(method, replicate)}/{level}"


def training_seed(config: Config, replicate: int) -> int:
    """Training seed of replicate r: the run's ``seed`` + r (replicate 0 trains exactly as without seeds)."""
    return int(config["seed"]) + int(replicate)


def replicate_summaries(config: Config, name: str, datasets: Iterable[str], rows: Iterable[str], levels_of) -> list[str]:
    """summary.json of every replicate r >= 1 an experiment's table needs (rows × its datasets' levels).

    levels_of(dataset) gives the levels of a dataset in this table. Replicate 0 is listed by the caller
    (the paths of a run without seeds).
    """
    rows = list(rows)
    return [
        f"{eval_dir(ds, m, lvl, r)}/summary.json"
        for ds in datasets
        for m in rows
        for r in row_replicates(config, name, m)[1:]
        for lvl in levels_of(ds)
    ]


def seeds_of(config: Config, dataset: str, method: str) -> list[int]:
    """Every replicate of one (dataset, method) any experiment asks for: 0 … max(seeds) − 1."""
    n = 1
    for name in (e.name for e in catalogue.EXPERIMENTS if e.seeded):
        spec = config["experiments"].get(name)
        if spec and method in spec.get("methods", []) and dataset in spec.get("datasets", [spec.get("dataset")]):
            n = max(n, int(spec.get("seeds", 1)))
    return list(range(n)) if is_trained(config, method) else [0]
