"""The report's building blocks: a section (notes, verdicts, tables, figures) and its figure entries."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

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
