"""The environment the workflow gives its jobs: this checkout's dgno first on PYTHONPATH, and huge pages for torch.

The Snakefile calls :func:`export_source_path` with the checkout's ``src/``, and :func:`export_huge_pages`. Jobs inherit the
environment of the Snakemake process that starts them (local jobs, and SLURM jobs through sbatch's
default ``--export=ALL``), so one ``PYTHONPATH`` entry reaches every job, whichever environment runs
it: the ``--sdm conda`` environments (envs/*.yaml) hold only the dependencies, and a shared venv may
hold another (older) install of the package.
"""

from __future__ import annotations

import os

# PyTorch's CPU allocator asks for transparent huge pages for its large tensors when this is set (read once,
# at torch's first allocation, so it must be in the environment before torch loads). A network's activations
# are tens of MB each, allocated and freed at every layer: with 4 KB pages the kernel faulted and zeroed 2.7
# million pages per 512² forward pass of the paper's DGNO-Cell, 10 of its 17 s on 2 cores; with huge pages
# 0.12 million and 11 s (eager PyTorch: 28 s → 18 s). benchmarks/results/engines_cpu.json.
HUGE_PAGES = ("THP_MEM_ALLOC_ENABLE", "1")


def export_huge_pages() -> None:
    """Jobs' torch asks for huge pages (:data:`HUGE_PAGES`), unless the environment already says otherwise."""
    os.environ.setdefault(*HUGE_PAGES)


def export_source_path(src: str) -> None:
    """Put ``src`` first on PYTHONPATH (once: Snakemake parses the Snakefile again inside each job)."""
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if current[:1] != [src]:
        os.environ["PYTHONPATH"] = os.pathsep.join([src, *(p for p in current if p != src)])


__all__ = ["HUGE_PAGES", "export_huge_pages", "export_source_path"]
