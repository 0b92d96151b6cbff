"""Where the ring model's time goes at one size: each stage of a cold build + apply, timed alone; writes OUT_JSON.

    OMP_NUM_THREADS=1 python benchmarks/ring_stages.py benchmarks/results/ring_stages_cpu.json [--size 128] [--runs 100]

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
import resource
import statistics
import sys
import time
from pathlib import Path


def _stats(fn, runs: int) -> dict[str, float]:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"min_ms": 1e3 * min(times), "median_ms": 1e3 * statistics.median(times)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_json", type=Path)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args(argv)

    import torch

    from dgno import provenance
    from dgno.experiments.nonblind_settings import REFERENCE_COEFFS
    from dgno.io import write_json
    from dgno.optics import ring_spectra as spectra
    from dgno.optics.polar import interpolation_taps
    from dgno.optics.ring import RingBlur, clear_caches
    from dgno.optics.ring_spectra import radial_psfs, ring_spectra

    shape = (args.size, args.size)
    x = torch.rand(1, 1, *shape, generator=torch.Generator().manual_seed(0))
    op = RingBlur(coeffs=REFERENCE_COEFFS, image_shape=shape)
    radii = torch.arange(op.grid.n_radii) * op.grid.radial_step
    kw = dict(field_radius=op.field_radius, psf_size=op.psf_size, oversampling=op.oversampling, dtype=op.dtype)
    psfs = radial_psfs(REFERENCE_COEFFS, radii, **kw)

    plan_args = (0, op.grid.n_radii, psfs.shape[-1], op.grid, op.band, spectra.BLOCK_VALUES, op.dtype, psfs.device)

    def sampling_plan():
        spectra._sampling_plan.cache_clear()
        return spectra._sampling_plan(*plan_args)

    def end_to_end():
        return RingBlur(coeffs=REFERENCE_COEFFS, image_shape=shape, psf_size=op.psf_size).A(x)

    def end_to_end_cold():
        clear_caches()
        return end_to_end()

    with torch.no_grad():
        stages = {
            "taps": _stats(lambda: interpolation_taps(op.grid), args.runs),
            "sampling_plan": _stats(sampling_plan, args.runs),
            "radial_psfs": _stats(lambda: radial_psfs(REFERENCE_COEFFS, radii, **kw), args.runs),
            "spectra": _stats(lambda: ring_spectra(psfs, 0, op.grid, band=op.band), args.runs),
            "apply": _stats(lambda: op.A(x), args.runs),
            "end_to_end": _stats(end_to_end, args.runs),
            "end_to_end_cold": _stats(end_to_end_cold, args.runs),
        }
        faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        end_to_end_cold()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    for name, s in stages.items():
        print(f"{name:12s} min {s['min_ms']:.2f} ms, median {s['median_ms']:.2f} ms", file=sys.stderr)
    print(f"page faults of one cold end-to-end run: {faults}", file=sys.stderr)
    # bicubic PSF reads per build: the plan's points (with the innermost radii's padding, which is read too)
    # vs the blocks' whole angular windows
    plan = sampling_plan()
    blocks = [b for b in plan if b.slot is not None]
    reads = sum(b.slot.numel() for b in blocks)
    window = sum((b.stop - b.start) * (b.rows[1] - b.rows[0] + 1) * (b.half + 1) for b in blocks)
    print(f"bicubic PSF reads per build: {reads} (block windows: {window}, {100 * (1 - reads / window):.0f} % skipped)", file=sys.stderr)
    write_json(
        args.out_json,
        {
            "benchmark": "ring (LRI) model, time per stage, CPU, float32",
            "size": args.size,
            "runs": args.runs,
            "threads": torch.get_num_threads(),
            "psf_size": op.psf_size,
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
