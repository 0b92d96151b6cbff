"""The report's building blocks: a section (notes, verdicts, tables, figures) and its figure entries, made from
an experiment's entry in :mod:`dgno.experiments.catalogue` (its title, its figures, the metrics its table shows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dgno import metric_spec
from dgno.experiments import catalogue
from dgno.report.render import (
    Table,
    embed_png,
)


@dataclass
class Figure:
    title: str
    file: str
    command: str
    uri: str | None = None


@dataclass
class Section:
    id: str
    title: str
    paper_source: str = ""
    notes: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    # Tables of words, not measurements: (column headers, rows of strings), e.g. the protocol table.
    text_tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)


def figure(results: Path, rel: str, title: str) -> Figure:
    """A figure entry; embedded when its PNG exists, otherwise it shows the command that makes it."""
    path = results / rel
    return Figure(title=title, file=f"results/{rel}", command=f"snakemake --cores all results/{rel}", uri=embed_png(path))


def experiment_section(name: str, paper_source: str = "") -> Section:
    """An empty section of catalogue experiment ``name``: its id (its table's name) and title."""
    entry = catalogue.experiment(name)
    return Section(id=entry.table_name, title=entry.title, paper_source=paper_source)


def catalogue_figure(results: Path | None, key: str, dataset: str | None = None, title: str | None = None) -> Figure:
    """The figure entry of ``catalogue.FIGURES[key]`` (of one dataset where it is per dataset); ``title``
    replaces the entry's where the section words it from the results (the operator maps' measured ratios)."""
    spec = catalogue.FIGURES[key]
    path = spec.path.format(dataset=dataset) if spec.per_dataset else spec.path
    title = title or (spec.title.format(dataset=dataset) if spec.per_dataset else spec.title)
    return figure(Path(results or "results"), path.removeprefix("results/"), title)


def experiment_figures(results: Path | None, config: dict, name: str) -> list[Figure]:
    """The figures an experiment's entry lists, each per dataset where it is, in the entry's order."""
    datasets = catalogue.experiment_datasets(config, name)
    return [
        catalogue_figure(results, key, ds)
        for key in catalogue.experiment(name).figures
        for ds in (datasets if catalogue.FIGURES[key].per_dataset else [None])
    ]


def table_metrics(name: str) -> list[str]:
    """The metrics the report's table of experiment ``name`` shows: its entry's, else every shown metric."""
    table = catalogue.experiment(name).table
    return list(table.metrics) if table is not None and table.metrics else metric_spec.shown_names()
