"""Where the ring model's time goes at one size: each stage of a cold build + apply, timed alone; writes OUT_JSON.

    OMP_NUM_THREADS=1 python -m benchmarks.cpu.ring_stages benchmarks/results/ring_stages_cpu.json [--size 128] [--runs 100]

Stages: interpolation taps (B), the spectra's sampling plan (both geometry-only, cached between operators
of one frame size; timed here uncached), radial PSFs, banded spectra, one apply A, and the whole
``RingBlur(...).A(x)`` for new coefficients on a known frame size (``end_to_end``: the geometry tables
cached) and cold (``end_to_end_cold``: ``ring.clear_caches()`` first); minimum and median of `runs` calls each (the machine's speed drifts, the minimum
is the stage's cost), and the minor page faults of one cold end-to-end run (fresh memory for the operator's
buffers; they cost microseconds each on a virtual machine).  Reference coefficients, float32, one thread
unless OMP_NUM_THREADS says otherwise.
"""

from __future__ import annotations

import argparse
import functools
import resource
import sys
from pathlib import Path

import torch

from dgno import provenance
from dgno.analysis.timing import wall_times
from dgno.experiments.nonblind_settings import REFERENCE_COEFFS
from dgno.io import write_json
from dgno.optics import ring_spectra as spectra
from dgno.optics.polar import interpolation_taps
from dgno.optics.ring import RingBlur, clear_caches
from dgno.optics.ring_spectra import radial_psfs, ring_spectra


def _stats(fn, runs: int) -> dict[str, float]:
    """Minimum (the stage's cost; the machine's speed drifts) and median of ``runs`` calls after one warm-up, ms."""
    timing = wall_times(fn, repeats=runs, warmup=1)
    return {"min_ms": 1e3 * timing.best, "median_ms": 1e3 * timing.median}


class Stages:
    """One operator at ``size`` and the callables that run each stage of building and applying it."""

    def __init__(self, size: int) -> None:
        self.shape = (size, size)
        self.x = torch.rand(1, 1, *self.shape, generator=torch.Generator().manual_seed(0))
        self.op = op = RingBlur(coeffs=REFERENCE_COEFFS, image_shape=self.shape)
        self.radii = torch.arange(op.grid.n_radii) * op.grid.radial_step
        self.kw = dict(field_radius=op.field_radius, psf_size=op.psf_size, oversampling=op.oversampling, dtype=op.dtype)
        self.psfs = radial_psfs(REFERENCE_COEFFS, self.radii, **self.kw)
        self.plan_args = (0, op.grid.n_radii, self.psfs.shape[-1], op.grid, op.band, spectra.BLOCK_VALUES, op.dtype, self.psfs.device)

    def sampling_plan(self):
        spectra._sampling_plan.cache_clear()
        return spectra._sampling_plan(*self.plan_args)

    def end_to_end(self):
        return RingBlur(coeffs=REFERENCE_COEFFS, image_shape=self.shape, psf_size=self.op.psf_size).A(self.x)

    def end_to_end_cold(self):
        clear_caches()
        return self.end_to_end()

    def timings(self, runs: int) -> dict[str, dict[str, float]]:
        op = self.op
        return {
            "taps": _stats(functools.partial(interpolation_taps, op.grid), runs),
            "sampling_plan": _stats(self.sampling_plan, runs),
            "radial_psfs": _stats(lambda: radial_psfs(REFERENCE_COEFFS, self.radii, **self.kw), runs),
            "spectra": _stats(lambda: ring_spectra(self.psfs, 0, op.grid, band=op.band), runs),
            "apply": _stats(lambda: op.A(self.x), runs),
            "end_to_end": _stats(self.end_to_end, runs),
            "end_to_end_cold": _stats(self.end_to_end_cold, runs),
        }

    def psf_reads(self) -> tuple[int, int]:
        """Bicubic PSF reads per build: the plan's points (with the innermost radii's padding, which is read too)
        and the blocks' whole angular windows."""
        blocks = [b for b in self.sampling_plan() if b.slot is not None]
        reads = sum(b.slot.numel() for b in blocks)
        window = sum((b.stop - b.start) * (b.rows[1] - b.rows[0] + 1) * (b.half + 1) for b in blocks)
        return reads, window


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_json", type=Path)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args(argv)
    run = Stages(args.size)
    with torch.no_grad():
        stages = run.timings(args.runs)
        faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        run.end_to_end_cold()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    for name, s in stages.items():
        print(f"{name:12s} min {s['min_ms']:.2f} ms, median {s['median_ms']:.2f} ms", file=sys.stderr)
    print(f"page faults of one cold end-to-end run: {faults}", file=sys.stderr)
    reads, window = run.psf_reads()
    print(f"bicubic PSF reads per build: {reads} (block windows: {window}, {100 * (1 - reads / window):.0f} % skipped)", file=sys.stderr)
    write_json(
        args.out_json,
        {
            "benchmark": "ring (LRI) model, time per stage, CPU, float32",
            "size": args.size,
            "runs": args.runs,
            "threads": torch.get_num_threads(),
            "psf_size": run.op.psf_size,
            "stages": stages,
            "end_to_end_minor_page_faults": faults,
            "psf_reads_per_build": reads,
            "psf_reads_in_block_windows": window,
            **provenance.collect("cpu"),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
