"""The one place where the workflow makes its jobs import this checkout's dgno.

The Snakefile calls :func:`export_source_path` with the checkout's ``src/``. Jobs inherit the
environment of the Snakemake process that starts them (local jobs, and SLURM jobs through sbatch's
default ``--export=ALL``), so one ``PYTHONPATH`` entry reaches every job, whichever environment runs
it: the ``--sdm conda`` environments (envs/*.yaml) hold only the dependencies, and a shared venv may
hold another (older) install of the package.
"""

from __future__ import annotations

import os


def export_source_path(src: str) -> None:
    """Put ``src`` first on PYTHONPATH (once: Snakemake parses the Snakefile again inside each job)."""
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if current[:1] != [src]:
        os.environ["PYTHONPATH"] = os.pathsep.join([src, *(p for p in current if p != src)])


__all__ = ["export_source_path"]
