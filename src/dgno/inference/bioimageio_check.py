"""Check a bioimage.io model package with the format's own libraries, offline.

Two checks, as the bioimage.io model zoo runs them before it accepts a model:

* ``bioimageio.spec``: the description is valid (fields, axes, halo, preprocessing) and every file it names
  is in the zip with the SHA-256 it states, and the test tensors fit the declared shapes and types;
* ``bioimageio.core``'s ``test_model``: the test input runs through every weight format (PyTorch state
  dict, TorchScript, ONNX Runtime) with the declared preprocessing and reproduces the test output within
  the tolerance the package declares.

Offline: the spec's validation would look up every URL in the description (the citation's paper and
code). They are handed to it as known, so nothing is fetched: a package is checked the same with the
network down (the tests check that no request is made).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import yaml

RDF_NAMES = ("rdf.yaml", "bioimageio.yaml")


class PackageError(RuntimeError):
    """A package that fails the format's validation or its test run (the message names the failed checks)."""


def package_urls(path: str | Path) -> list[str]:
    """Every http(s) URL in the package's description (what validation would otherwise look up)."""
    with zipfile.ZipFile(path) as zf:
        name = next((n for n in zf.namelist() if n in RDF_NAMES), None)
        if name is None:
            raise PackageError(f"{path}: no rdf.yaml inside; not a bioimage.io package")
        content = yaml.safe_load(zf.read(name))
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str) and value.startswith(("http://", "https://")):
            found.append(value)

    walk(content)
    return sorted(set(found))


def check_package(path: str | Path, *, run: bool = True) -> str:
    """Validate the package at ``path`` offline and, with ``run``, run bioimageio.core's test on it.

    Returns the summary's status ("passed", or "valid-format" without ``run``); raises
    :class:`PackageError` naming every failed check.
    """
    # bioimageio.core and .spec: about 20 s of imports (their pydantic models), paid only when a package is checked
    from bioimageio.core import test_model
    from bioimageio.spec import InvalidDescr, load_description
    from loguru import logger

    logger.disable("bioimageio")  # its progress logging; the outcome is the summary, raised below when it fails
    descr = load_description(Path(path), perform_io_checks=True, known_files=dict.fromkeys(package_urls(path)))
    if isinstance(descr, InvalidDescr) or not run:
        summary = descr.validation_summary
    else:
        summary = test_model(descr)
    # The summary's own status can read "valid-format" while a test run failed: every check's status is read
    if summary.status == "failed" or any(detail.status == "failed" for detail in summary.details):
        raise PackageError(f"{path}: bioimage.io check failed: {'; '.join(failures(summary))}")
    return summary.status


def failures(summary) -> list[str]:
    """'check name: location: message' of every error in a bioimageio ValidationSummary."""
    out = []
    for detail in summary.details:
        for error in detail.errors:
            where = ".".join(str(p) for p in error.loc)
            out.append(f"{detail.name}: {where + ': ' if where else ''}{error.msg.strip()}")
    return out or [f"status {summary.status}"]
