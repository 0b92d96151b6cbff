"""Which slides a configuration lists, and the name each one's results are filed under.

A slide's results are named after its file without the extension(s) (:func:`slide_name`: ``a.ome.tif``
→ ``a``, ``b.svs`` → ``b``), by ``dgno deblur-slide`` and by the workflow's ``slides`` target alike.
The workflow's config lists slides as paths or glob patterns (``slides.inputs``, relative to the
working directory) and generated slides by name (``slides.synthetic``); :func:`listed_slides` expands
the patterns, once per run, the same way for the rules and for the report.

Only the standard library here: the Snakefile builds its DAG with it, and that must not load torch or
the slide readers.
"""

from __future__ import annotations

import glob
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dgno.io import InputError

MULTI_SUFFIXES = (".ome.tiff", ".ome.tif", ".ome.btf")  # a slide's extension of two parts


def slide_name(path: str | Path) -> str:
    """The slide's name without its extension(s): ``a.ome.tif`` → ``a``, ``b.svs`` → ``b``."""
    path = Path(path)
    name = path.name
    for suffix in MULTI_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def unique_names(paths: Iterable[str | Path], *, fix: str) -> dict[str, str]:
    """{name: path} of ``paths``, each file once; two files of one name are an InputError naming both and ``fix``."""
    names: dict[str, str] = {}
    for path in paths:
        name = slide_name(path)
        earlier = names.setdefault(name, str(path))
        if earlier != str(path) and Path(earlier).resolve() != Path(path).resolve():
            raise InputError(f"{path}: its results would have the same name ({name}) as those of {earlier}. Fix: rename one of them, or {fix}")
    return names


def expand_inputs(patterns: Iterable[str]) -> list[str]:
    """The files of ``slides.inputs``: each path as given, each glob pattern's matches in sorted order.

    A pattern or path that names no file is an InputError (a typo would otherwise restore nothing, silently).
    """
    files: list[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else ([pattern] if Path(pattern).exists() else [])
        matches = [m for m in matches if Path(m).is_file()]  # a pattern may also match folders (an MRXS slide's data)
        if not matches:
            raise InputError(f"config key slides.inputs: {pattern!r} names no file (relative paths start in the working directory). Fix: correct the path or pattern, or remove it")
        files += [m for m in matches if m not in files]
    return files


def listed_slides(config: Mapping[str, Any]) -> dict[str, str]:
    """{name: file} of the slides that ``slides.inputs`` lists (empty without a ``slides`` block)."""
    block = config.get("slides") or {}
    return unique_names(expand_inputs(block.get("inputs", [])), fix="restore them in separate runs (config key slides.inputs)")


def slide_names(config: Mapping[str, Any]) -> list[str]:
    """The names of every slide of the ``slides`` block: the listed files', then the generated ones (an
    InputError when a generated slide has the name of a listed one)."""
    listed = listed_slides(config)
    generated = list((config.get("slides") or {}).get("synthetic", {}))
    for name in generated:
        if name in listed:
            raise InputError(f"config key slides.synthetic.{name}: a generated slide of the same name as {listed[name]} (slides.inputs). Fix: rename the generated slide")
    return [*listed, *generated]
