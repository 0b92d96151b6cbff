"""Benchmark of the ring (LRI) forward model on CPU (or a GPU); writes OUT_JSON.

    python -m benchmarks.cpu.ring results/benchmarks/ring.json [--threads 1] [--repeats 5] [--rounds 9] [--device cuda]

* Forward model at 256², 512² (and 1024², cached and memory-bounded streaming modes): time to build the
  operator (PSFs + banded spectra), median time of A and Aᵀ after a warm-up, and peak memory.  Each case
  runs in a fresh process so its peak resident memory (``resource.getrusage``, minus the process's
  resident size just before the case) is its own; torch allocates outside Python's heap, which is why
  ``tracemalloc`` would miss it.  On a GPU the peak is ``torch.cuda.max_memory_allocated`` above the
  memory held before the case, and every timed call ends with a device synchronisation.
* Speed-up over brute-force superposition at 128² (and 256², for the trend): end to end (from the
  coefficients and the PSF grid size M, which both methods are given: per-pixel PSFs + superposition vs
  ring build + apply) and apply only (precomputed per-pixel PSFs vs cached spectra), with the relative
  L2 difference of the two results on a uniform random image (the hardest case for the polar
  resampling), and the ring's construction time alone.  The end-to-end ring time is measured twice: for
  new coefficients on frames of a known size (``end_to_end``: the geometry tables, which do not depend on
  the coefficients, are cached like FFT plans; a coefficient sweep or a calibration pays this) and cold
  (``end_to_end_cold``: ``ring.clear_caches()`` before every build; the first operator of a frame size).
  The spectra and PSFs are never cached.
  The two methods are timed in interleaved rounds (one brute-force run, then ``--ring-runs`` ring runs),
  and each round gives a ratio (brute force / median ring run of the round): on a shared machine whose
  speed drifts by tens of per cent over seconds, timing the two in separate blocks measures the drift
  as much as the methods.  The headline is the median of the rounds' ratios; the medians and minima of
  each method's times are recorded too.

* Optional (``--deconv-frame H W``): one ring deconvolution (``deconv.ring_deconvolve``, ``--deconv-iters``
  Adam steps, each one A and one Aᵀ) of an H×W frame padded by the PSF radius, as the non-blind
  experiment runs it (BBBC006 frames are 520×696): operator build and deconvolution time, and peak memory.

Fixed seed, float32, the Seidel coefficients of the non-blind experiment (``nonblind.REFERENCE_COEFFS``)
and twice those (a wider PSF, where brute force costs more).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import sys
from pathlib import Path
from typing import Any

from dgno.analysis.timing import device_sync, wall_times


def _rss_mb() -> float:
    """Current resident set size of this process, MB (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _forward_case(size: int, coeffs: dict, cache: bool, repeats: int, threads: int, device: str, queue) -> None:
    import torch

    from dgno.optics.ring import RingBlur
    from dgno.optics.seidel import SeidelCoefficients

    torch.set_num_threads(threads)
    gpu = device.startswith("cuda")
    x = torch.rand(1, 1, size, size, generator=torch.Generator().manual_seed(0)).to(device)
    base = torch.cuda.memory_allocated() if gpu else _rss_mb()
    sync = device_sync(device)
    built = wall_times(lambda: RingBlur(coeffs=SeidelCoefficients(**coeffs), image_shape=(size, size), cache=cache, device=device), repeats=1, sync=sync)
    op, build = built.result, built.best
    with torch.no_grad():  # median of `repeats` synchronised calls after one warm-up
        t_fwd = wall_times(lambda: op.A(x), repeats=repeats, warmup=1, sync=sync).median
        t_adj = wall_times(lambda: op.A_adjoint(x), repeats=repeats, warmup=1, sync=sync).median
    if gpu:
        peak, above = torch.cuda.max_memory_allocated() / 2**20, (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB → MB on Linux
        above = peak - base
    queue.put(
        {
            "size": size,
            "cache": cache,
            "psf_size": op.psf_size,
            "n_radii": op.grid.n_radii,
            "n_angles": op.grid.n_angles,
            "band": list(op.band),  # (δ_lo, δ_hi), radius offsets of the spectra rows
            "build_s": build,
            "forward_s": t_fwd,
            "adjoint_s": t_adj,
            "spectra_mb": (op.spectra.numel() * op.spectra.element_size() / 2**20) if cache else 0.0,
            "peak_memory": "CUDA max_memory_allocated" if gpu else "process peak RSS",
            "peak_rss_mb": peak,
            "peak_rss_above_start_mb": above,
        }
    )


def _interleaved(brute, ring, rounds: int, ring_runs: int, sync) -> dict[str, Any]:
    """Rounds of one ``brute`` run then ``ring_runs`` ``ring`` runs (after one warm-up of each): the median of
    the rounds' ratios brute / median(ring), and the median and minimum of each method's times (s)."""
    brute(), ring()
    t_brute, t_ring, ratios = [], [], []
    for _ in range(rounds):
        t_brute.append(wall_times(brute, repeats=1, sync=sync).best)
        runs = wall_times(ring, repeats=ring_runs, sync=sync)
        t_ring += runs.times
        ratios.append(t_brute[-1] / runs.median)
    return {
        "speedup": statistics.median(ratios),
        "speedup_per_round": ratios,
        "brute_s": statistics.median(t_brute),
        "brute_min_s": min(t_brute),
        "ring_s": statistics.median(t_ring),
        "ring_min_s": min(t_ring),
    }


def _speedup_case(size: int, coeffs: dict, rounds: int, ring_runs: int, threads: int, device: str, queue) -> None:
    import torch

    from dgno.optics import ring
    from dgno.optics.ring import RingBlur
    from dgno.optics.seidel import SeidelCoefficients
    from dgno.optics.superposition import pixel_psfs, superposition_blur

    torch.set_num_threads(threads)
    c = SeidelCoefficients(**coeffs)
    x = torch.rand(1, 1, size, size, generator=torch.Generator().manual_seed(0)).to(device)
    probe = RingBlur(coeffs=c, image_shape=(size, size), device=device)
    m = probe.psf_size
    kw = dict(field_radius=size / 2.0, psf_size=m, device=device)

    def brute_end_to_end():
        return superposition_blur(x, pixel_psfs((size, size), c, dtype=torch.float32, **kw))

    def ring_build():
        return RingBlur(coeffs=c, image_shape=(size, size), psf_size=m, device=device)

    def ring_cold():
        ring.clear_caches()
        return ring_build().A(x)

    sync = device_sync(device)
    with torch.no_grad():
        y_brute, y_ring = brute_end_to_end(), ring_build().A(x)
        end_to_end = _interleaved(brute_end_to_end, lambda: ring_build().A(x), rounds, ring_runs, sync)
        end_to_end_cold = _interleaved(brute_end_to_end, ring_cold, rounds, ring_runs, sync)
        t_build = wall_times(ring_build, repeats=rounds * ring_runs, warmup=1, sync=sync).median
        psfs = pixel_psfs((size, size), c, dtype=torch.float32, **kw)
        apply = _interleaved(lambda: superposition_blur(x, psfs), lambda: probe.A(x), rounds, ring_runs, sync)
    queue.put(
        {
            "size": size,
            "psf_size": m,
            "brute_end_to_end_s": end_to_end["brute_s"],
            "ring_end_to_end_s": end_to_end["ring_s"],
            "speedup_end_to_end": end_to_end["speedup"],
            "end_to_end": end_to_end,
            "ring_end_to_end_cold_s": end_to_end_cold["ring_s"],
            "speedup_end_to_end_cold": end_to_end_cold["speedup"],
            "end_to_end_cold": end_to_end_cold,
            "ring_build_s": t_build,
            "brute_apply_s": apply["brute_s"],
            "ring_apply_s": apply["ring_s"],
            "speedup_apply": apply["speedup"],
            "apply": apply,
            "rel_l2_ring_vs_brute": float((y_ring - y_brute).norm() / y_brute.norm()),
        }
    )


def _deconv_case(frame: tuple[int, int], coeffs: dict, n_iter: int, threads: int, device: str, queue) -> None:
    import torch

    from dgno.optics.deconv import ring_deconvolve
    from dgno.optics.ring import RingBlur
    from dgno.optics.seidel import SeidelCoefficients

    torch.set_num_threads(threads)
    gpu = device.startswith("cuda")
    h, w = frame
    c = SeidelCoefficients(**coeffs)
    base = torch.cuda.memory_allocated() if gpu else _rss_mb()
    sync = device_sync(device)

    def build_op():
        m = RingBlur(coeffs=c, image_shape=(h, w), field_radius=max(h, w) / 2.0, device=device).psf_size // 2
        return m, RingBlur(coeffs=c, image_shape=(h + 2 * m, w + 2 * m), field_radius=max(h, w) / 2.0, psf_size=2 * m + 1, device=device)

    built = wall_times(build_op, repeats=1, sync=sync)
    (m, op), build = built.result, built.best
    x = torch.rand(1, 1, h + 2 * m, w + 2 * m, generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        y = op.A(x)[..., m : m + h, m : m + w]
    ring_deconvolve(y, op, n_iter=2)  # warm-up: first-call set-up of the optimiser and autograd
    seconds = wall_times(lambda: ring_deconvolve(y, op, n_iter=n_iter), repeats=1, sync=sync).best
    if gpu:
        above = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        above = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    queue.put(
        {
            "frame": [h, w],
            "margin": m,
            "psf_size": op.psf_size,
            "n_iter": n_iter,
            "build_s": build,
            "deconvolve_s": seconds,
            "per_iteration_s": seconds / max(n_iter, 1),
            "peak_above_start_mb": above,
        }
    )


def _in_child(target, *args) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def _forward_rows(args: argparse.Namespace, coeffs: dict) -> list[dict]:
    rows = []
    for size in args.sizes:
        for cache in (True, False):
            row = _in_child(_forward_case, size, coeffs, cache, args.repeats, args.threads, args.device)
            row["coeffs"] = "reference"
            rows.append(row)
            print(f"forward {size}² cache={cache}: build {row['build_s']:.2f} s, A {row['forward_s']:.3f} s, "
                  f"peak +{row['peak_rss_above_start_mb']:.0f} MB", file=sys.stderr)  # fmt: skip
    return rows


def _speedup_rows(args: argparse.Namespace, coeff_sets: dict[str, dict]) -> list[dict]:
    rows = []
    for size in args.speedup_sizes:
        for name, coeffs in coeff_sets.items():
            row = _in_child(_speedup_case, size, coeffs, args.rounds, args.ring_runs, args.threads, args.device)
            row["coeffs"] = name
            rows.append(row)
            print(f"{size}² {name}: end-to-end ×{row['speedup_end_to_end']:.1f} "
                  f"(cold ×{row['speedup_end_to_end_cold']:.1f}), apply ×{row['speedup_apply']:.0f}", file=sys.stderr)  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_json", type=Path)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of A and Aᵀ per forward case")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved brute-force/ring rounds per speed-up case")
    parser.add_argument("--ring-runs", type=int, default=5, help="ring runs per round")
    parser.add_argument("--sizes", type=int, nargs="*", default=[256, 512, 1024], help="forward-model sizes")
    parser.add_argument("--speedup-sizes", type=int, nargs="*", default=[128, 256], help="sizes compared with brute force")
    parser.add_argument("--device", default="cpu", help="torch device of both methods, e.g. cuda")
    parser.add_argument("--deconv-frame", type=int, nargs=2, metavar=("H", "W"), help="also time a ring deconvolution of an H×W frame")
    parser.add_argument("--deconv-iters", type=int, default=300, help="Adam steps of that deconvolution")
    args = parser.parse_args(argv)

    import torch  # after the arguments: the cases run in child processes that set their thread count first

    from dgno import provenance
    from dgno.experiments.nonblind_settings import REFERENCE_COEFFS
    from dgno.io import write_json

    torch.manual_seed(0)
    coeff_sets = {"reference": REFERENCE_COEFFS.as_dict(), "reference_x2": {k: 2 * v for k, v in REFERENCE_COEFFS.as_dict().items()}}
    forward = _forward_rows(args, coeff_sets["reference"])
    speedup = _speedup_rows(args, coeff_sets)
    deconv = None
    if args.deconv_frame:
        deconv = _in_child(_deconv_case, tuple(args.deconv_frame), coeff_sets["reference"], args.deconv_iters, args.threads, args.device)
        print(f"deconvolution {deconv['frame']}: {deconv['deconvolve_s']:.1f} s for {deconv['n_iter']} steps", file=sys.stderr)
    write_json(
        args.out_json,
        {
            "benchmark": f"ring (LRI) forward model, {args.device}, float32",
            "threads": args.threads,
            "repeats": args.repeats,
            "rounds": args.rounds,
            "ring_runs": args.ring_runs,
            "coeff_sets": coeff_sets,
            "forward": forward,
            "speedup_vs_brute_force": speedup,
            "deconvolution": deconv,
            "target_speedup": 50,
            **provenance.collect(args.device),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
