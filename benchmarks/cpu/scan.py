"""Time the chunked pure-PyTorch selective scan against the sequential reference.

Usage: python -m benchmarks.cpu.scan OUT_JSON [--lengths 4096 65536] [--backward-lengths 1024]
                                        [--threads 1 2] [--repeats 5] [--device cpu|cuda]

The scan is set up as in MambaIRv2's ASSM at the paper's first encoder level: d = 2·48 = 96
channels, d_state N = 8, one B/C group (the 4-D layout), A = −(1…N) (S4D-real init), Δ = softplus(δ +
bias) with the bias drawn like mamba's dt init (softplus⁻¹ of log-uniform [1e-3, 0.1]), D = 1,
batch 1, fixed seed.  For each length L the fast scan is warmed up and timed ``repeats`` times
and the reference ``reference_repeats`` times (best time of each: the least disturbed by other
processes on a shared machine, where single runs of the reference varied by 1.8×), both forward
only under ``torch.no_grad``; the max |difference| is reported.
For ``--backward-lengths`` forward + backward are timed the same way and the largest gradient
difference (relative to the gradient's max) over all inputs is reported; the reference's autograd
through per-token slices grows quadratically, hence the short default length.
On CUDA the reference is run on the CPU (its Python loop is launch-bound on a GPU) and ``mamba_ssm``
is timed too when it imports.  ``--threads 1 2`` repeats every case with each torch thread count
(the sequential reference cannot use more than one; the fast scan splits each block's tensor
operations over the threads); every case records its thread count.  The JSON records device and
versions, so numbers from different machines are never compared by accident.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import platform

import torch

from dgno.analysis.timing import device_sync, wall_times
from dgno.io import write_json
from dgno.layers.selective_scan import mamba_selective_scan_fn, selective_scan

D_INNER, D_STATE, BATCH = 96, 8, 1


def make_inputs(L: int, device: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """One MambaIRv2-like scan problem of L tokens (see module docstring)."""
    g = torch.Generator().manual_seed(seed)
    dt = torch.exp(torch.rand(D_INNER, generator=g) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    inputs = {
        "u": torch.randn(BATCH, D_INNER, L, generator=g),
        "delta": torch.randn(BATCH, D_INNER, L, generator=g) * 0.5,
        "A": -torch.arange(1, D_STATE + 1, dtype=torch.float32).repeat(D_INNER, 1),
        "B": torch.randn(BATCH, 1, D_STATE, L, generator=g),
        "C": torch.randn(BATCH, 1, D_STATE, L, generator=g),
        "D": torch.ones(D_INNER),
        "delta_bias": dt + torch.log(-torch.expm1(-dt)),  # softplus⁻¹(dt)
    }
    return {k: v.to(device) for k, v in inputs.items()}


def scan(inputs: dict[str, torch.Tensor], backend: str) -> torch.Tensor:
    return selective_scan(
        inputs["u"],
        inputs["delta"],
        inputs["A"],
        inputs["B"],
        inputs["C"],
        inputs["D"],
        delta_bias=inputs["delta_bias"],
        delta_softplus=True,
        backend=backend,
    )


def grads(inputs: dict[str, torch.Tensor], backend: str) -> dict[str, torch.Tensor]:
    """Gradients of a fixed random projection of the output w.r.t. every input (one forward + backward)."""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items()}
    y = scan(leaves, backend)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.device)
    return dict(zip(leaves, torch.autograd.grad((y * w).sum(), list(leaves.values()))))


def machine(device: str) -> dict:
    info = {
        "device": (torch.cuda.get_device_name() if device == "cuda" else f"cpu ({platform.processor() or platform.machine()})"),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "mamba_ssm": mamba_selective_scan_fn() is not None,
    }
    return info


def _timed(fn, repeats: int, device: str):
    """Best of ``repeats`` synchronised calls (the run least disturbed by other processes) and the last result."""
    return wall_times(fn, repeats=repeats, sync=device_sync(device))


def forward_case(L: int, repeats: int, reference_repeats: int, device: str) -> dict:
    """The chunked scan's forward pass against the token loop (on the CPU) and, on CUDA, ``mamba_ssm``'s."""
    inputs = make_inputs(L, device)
    scan(inputs, "torch")  # warm-up
    fast = _timed(functools.partial(scan, inputs, "torch"), repeats, device)
    ref = _timed(functools.partial(scan, {k: v.cpu() for k, v in inputs.items()}, "reference"), reference_repeats, "cpu")
    case = {
        "tokens": L, "pass": "forward", "d_inner": D_INNER, "d_state": D_STATE, "batch": BATCH,
        "torch_s": fast.best, "reference_s": ref.best, "reference_device": "cpu", "speedup": ref.best / fast.best,
        "max_abs_error": float((fast.result.cpu() - ref.result).abs().max()), "max_abs_output": float(ref.result.abs().max()),
    }  # fmt: skip
    if device == "cuda" and mamba_selective_scan_fn() is not None:
        scan(inputs, "mamba_ssm")
        mamba = _timed(functools.partial(scan, inputs, "mamba_ssm"), repeats, device)
        case["mamba_ssm_s"] = mamba.best
        case["mamba_ssm_max_abs_error"] = float((mamba.result.cpu() - ref.result).abs().max())
        case["torch_vs_mamba_ssm_max_abs_diff"] = float((mamba.result - fast.result).abs().max())
    print(f"L={L}: torch {fast.best:.4f}s  reference {ref.best:.3f}s  speed-up {case['speedup']:.1f}x  max|err| {case['max_abs_error']:.1e}", flush=True)
    return case


def _relative(grads_a: dict[str, torch.Tensor], grads_ref: dict[str, torch.Tensor]) -> dict[str, float]:
    return {k: float((grads_a[k].cpu() - g).abs().max() / g.abs().max()) for k, g in grads_ref.items()}


def backward_case(L: int, repeats: int, reference_repeats: int, device: str) -> dict:
    """Forward + backward of the chunked scan against the token loop: times and the largest relative gradient error."""
    inputs = make_inputs(L, device)
    grads(inputs, "torch")  # warm-up
    fast = _timed(functools.partial(grads, inputs, "torch"), repeats, device)
    ref = _timed(functools.partial(grads, {k: v.cpu() for k, v in inputs.items()}, "reference"), reference_repeats, "cpu")
    rel = _relative(fast.result, ref.result)
    case = {
        "tokens": L, "pass": "forward+backward", "torch_s": fast.best, "reference_s": ref.best, "reference_device": "cpu",
        "speedup": ref.best / fast.best, "max_rel_grad_error": max(rel.values()), "rel_grad_error": rel,
    }  # fmt: skip
    if device == "cuda" and mamba_selective_scan_fn() is not None:
        grads(inputs, "mamba_ssm")
        mamba = _timed(functools.partial(grads, inputs, "mamba_ssm"), repeats, device)
        case["mamba_ssm_s"] = mamba.best
        case["mamba_ssm_max_rel_grad_error"] = max(_relative(mamba.result, ref.result).values())
    print(f"L={L} fwd+bwd: torch {fast.best:.4f}s  reference {ref.best:.3f}s  max rel grad err {max(rel.values()):.1e}", flush=True)
    return case


def run_cases(lengths: list[int], backward_lengths: list[int], repeats: int, reference_repeats: int, device: str) -> list[dict]:
    """Forward cases for ``lengths`` and forward+backward cases for ``backward_lengths``."""
    with torch.no_grad():
        cases = [forward_case(L, repeats, reference_repeats, device) for L in lengths]
    return cases + [backward_case(L, repeats, reference_repeats, device) for L in backward_lengths]


def main(
    out_path: str, lengths: list[int], backward_lengths: list[int], repeats: int, reference_repeats: int, device: str, threads: list[int]
) -> dict:
    cases = []
    for n in threads:
        torch.set_num_threads(n)
        print(f"torch threads: {n}", flush=True)
        cases += [{**case, "threads": n} for case in run_cases(lengths, backward_lengths, repeats, reference_repeats, device)]
    result = {
        "benchmark": "selective_scan",
        "device_kind": device,
        "timing": f"best of {repeats} (torch backend, after warm-up), best of {reference_repeats} (reference); float32",
        "target": "speed-up >= 20 at 65536 tokens with max abs error <= 1e-4 (CPU)",
        "machine": machine(device),
        "cases": cases,
    }
    write_json(out_path, result)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_json")
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 65536])
    parser.add_argument("--backward-lengths", type=int, nargs="*", default=[1024])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reference-repeats", type=int, default=3, help="timed runs of the (slow) reference; best is kept")
    parser.add_argument("--threads", type=int, nargs="+", default=None, help="torch intra-op thread counts (default: torch's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    main(
        args.out_json,
        args.lengths,
        args.backward_lengths,
        args.repeats,
        args.reference_repeats,
        args.device,
        args.threads or [torch.get_num_threads()],
    )
