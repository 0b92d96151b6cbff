"""The report's building blocks: a section (notes, verdicts, tables, figures) and its figure entries, made from
an experiment's entry in :mod:`dgno.experiments.catalogue` (its title, its figures, the metrics its table shows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dgno import metric_spec
from dgno.experiments import catalogue
from dgno.report.render import (
    ShownTable,
    embed_png,
)


@dataclass
class ShownFigure:
    """A figure as a report section shows it: its PNG embedded, or the command that makes it (its declaration,
    path and caption: :class:`dgno.experiments.catalogue.Figure`)."""

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
    tables: list[ShownTable] = field(default_factory=list)
    figures: list[ShownFigure] = field(default_factory=list)
    # Tables of words, not measurements: (column headers, rows of strings), e.g. the protocol table.
    text_tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)


def figure(results: Path, rel: str, title: str) -> ShownFigure:
    """A figure entry; embedded when its PNG exists, otherwise it shows the command that makes it."""
    path = results / rel
    return ShownFigure(title=title, file=f"results/{rel}", command=f"snakemake --cores all results/{rel}", uri=embed_png(path))


def empty_section(name: str, paper_source: str = "") -> Section:
    """A section of catalogue experiment ``name`` with nothing in it yet: its id (its table's name) and title.
    A section function fills it; :func:`dgno.report.build.experiment_section` calls that function."""
    entry = catalogue.experiment(name)
    return Section(id=entry.table_name, title=entry.title, paper_source=paper_source)


def catalogue_figure(results: Path | None, key: str, dataset: str | None = None, title: str | None = None) -> ShownFigure:
    """The figure entry of ``catalogue.FIGURES[key]`` (of one dataset where it is per dataset); ``title``
    replaces the entry's where the section words it from the results (the operator maps' measured ratios)."""
    spec = catalogue.FIGURES[key]
    path = spec.path.format(dataset=dataset) if spec.per_dataset else spec.path
    title = title or (spec.title.format(dataset=dataset) if spec.per_dataset else spec.title)
    return figure(Path(results or "results"), path.removeprefix("results/"), title)


def experiment_figures(results: Path | None, config: dict, name: str) -> list[ShownFigure]:
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
