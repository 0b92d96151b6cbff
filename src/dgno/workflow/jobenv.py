"""The environment the workflow gives its jobs: this checkout's dgno first on PYTHONPATH, and the allocator settings
that make torch's large CPU allocations cheap.

The Snakefile calls :func:`export_source_path` with the checkout's ``src/``, and :func:`export_allocator_settings`. Jobs inherit the
environment of the Snakemake process that starts them (local jobs, and SLURM jobs through sbatch's
default ``--export=ALL``), so one ``PYTHONPATH`` entry reaches every job, whichever environment runs
it: the ``--sdm conda`` environments (envs/*.yaml) hold only the dependencies, and a shared venv may
hold another (older) install of the package.
"""

from __future__ import annotations

import ctypes
import os

# PyTorch's CPU allocator asks for transparent huge pages for its large tensors when this is set (read once,
# at torch's first allocation, so it must be in the environment before torch loads). A network's activations
# are tens of MB each, allocated and freed at every layer: with 4 KB pages the kernel faulted and zeroed 2.7
# million pages per 512² forward pass of the paper's DGNO-Cell, 10 of its 17 s on 2 cores; with huge pages
# 0.12 million and 11 s (measured 2026-11-28, before the native engine's later kernels).
HUGE_PAGES = ("THP_MEM_ALLOC_ENABLE", "1")

# glibc's malloc hands blocks over 32 MB (every activation of a 512² tile) to mmap and back to the kernel at
# free, so each layer's output is faulted in and zeroed anew, even with huge pages: 7.8 s of system time
# in one 512² native pass of DGNO-Cell on 2 cores.  Served from malloc's own heap and kept there when
# freed, the same blocks are reused from the second pass on: 2.1 s, and the pass 20 % faster (both
# settings together: 36.2 → 27.0 s per megapixel, benchmarks/results/engines_cpu.json, allocators "plain"
# and "dgno"), at the price of a process keeping its peak heap until it exits.
# Read by glibc at a process's start; a running process calls :func:`keep_freed_memory` instead.
HEAP_TUNABLES = ("GLIBC_TUNABLES", "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776")
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # mallopt's parameters (malloc.h)


def export_allocator_settings() -> None:
    """Jobs' torch asks for huge pages (:data:`HUGE_PAGES`) and glibc keeps freed memory for reuse
    (:data:`HEAP_TUNABLES`), unless the environment already says otherwise."""
    os.environ.setdefault(*HUGE_PAGES)
    os.environ.setdefault(*HEAP_TUNABLES)


def keep_freed_memory() -> bool:
    """In this process, glibc's malloc serves large blocks from its heap and keeps what is freed (as
    :data:`HEAP_TUNABLES` does for a new one); False where the C library has no ``mallopt`` (not glibc)."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def export_source_path(src: str) -> None:
    """Put ``src`` first on PYTHONPATH (once: Snakemake parses the Snakefile again inside each job)."""
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if current[:1] != [src]:
        os.environ["PYTHONPATH"] = os.pathsep.join([src, *(p for p in current if p != src)])


__all__ = ["HEAP_TUNABLES", "HUGE_PAGES", "export_allocator_settings", "export_source_path", "keep_freed_memory"]
