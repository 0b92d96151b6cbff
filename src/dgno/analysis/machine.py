"""The CPU's peak float32 rate, from what the machine says about itself: how far a measured rate is from the limit.

    peak = cores × FMA units per core × float32 lanes per FMA × 2 FLOP per FMA × clock

* cores: the CPUs the timed process uses (its threads, at most the CPUs it may run on);
* lanes: 16 with AVX-512, 8 with AVX2/FMA or AVX, 4 with SSE (from the CPU flags);
* FMA units: 2 per core, the number of x86 server cores since Haswell and Zen 1 with FMA (a CPU without FMA
  counts one multiply and one add unit instead: the same 2 FLOP per lane and cycle);
* clock: the highest frequency the kernel reports (``cpuinfo_max_freq``), else the ``cpu MHz`` line of
  ``/proc/cpuinfo`` (a virtual machine often reports only that).

It is the textbook upper bound: no real network reaches it (memory traffic, element-wise work), and the
measured FLOPs count only matrix products and convolutions (``dgno.analysis.cost``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

FMA_UNITS = 2


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def float32_lanes(flags: set[str]) -> int:
    """Float32 values per vector instruction of the widest vector unit the flags name."""
    if "avx512f" in flags:
        return 16
    if "avx2" in flags or "avx" in flags or "fma" in flags:
        return 8
    return 4


def clock_ghz() -> float | None:
    """The highest clock the kernel reports, in GHz (None when it reports none)."""
    try:
        return int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) / 1e6
    except (OSError, ValueError):
        pass
    try:
        mhz = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("cpu MHz")]
    except (OSError, ValueError):
        return None
    return max(mhz) / 1e3 if mhz else None


def cpu_peak(threads: int) -> dict[str, Any]:
    """The peak float32 GFLOP/s of ``threads`` cores, and every number it is made of."""
    cores = min(threads, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    flags = cpu_flags()
    lanes = float32_lanes(flags)
    ghz = clock_ghz()
    peak = None if ghz is None else cores * FMA_UNITS * lanes * 2 * ghz
    return {
        "cores": cores, "fma_units_per_core": FMA_UNITS, "float32_lanes": lanes, "flop_per_fma": 2, "clock_ghz": ghz,
        "peak_gflops": peak, "vector_isa": "avx512f" if lanes == 16 else ("avx2" if "avx2" in flags else ("avx" if lanes == 8 else "sse")),
        "formula": "cores x FMA units x float32 lanes x 2 FLOP x GHz",
    }  # fmt: skip
