"""The Triton selective scan (forward and every gradient) against the token-loop reference.

The kernels run on the CPU through Triton's interpreter (TRITON_INTERPRET=1), which must be set
before triton is imported: each check runs in a fresh Python process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import patient

from dgno.layers import scan_triton

pytestmark = pytest.mark.skipif(scan_triton.triton is None, reason="triton is not installed")

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import dgno.layers.scan_triton as st
    from dgno.layers.selective_scan import selective_scan

    # Triton's interpreter before 3.7 turns a kernel's scalar argument (a 1-element array) into a loop
    # bound with int(array), which numpy >= 2.4 refuses ("only 0-dimensional arrays can be converted to
    # Python scalars"); 3.7 squeezes the array first. Older interpreters (GPU hosts with torch 2.11 have
    # triton 3.6) get the same fix here, so the kernels are tested whatever numpy is installed.
    import triton
    if tuple(int(v) for v in triton.__version__.split(".")[:2]) < (3, 7):
        import triton.runtime.interpreter as interp
        _patch = interp._patch_lang_tensor
        def _patch_squeezed(tensor, scope):
            _patch(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))
        interp._patch_lang_tensor = _patch_squeezed

    case = json.loads(sys.argv[1])
    st.CONFIG = st.FEW_ROWS_CONFIG = st.ScanConfig(block_l=case.pop("block_l"), channels=case.pop("channels"))
    dtype = getattr(torch, case.pop("dtype"))
    b, d, n, L, G = (case.pop(k) for k in ("b", "d", "n", "L", "G"))
    g = torch.Generator().manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(dtype)
    leaves = {
        "u": rnd(b, d, L), "delta": rnd(b, d, L) * 0.5 - 1.0, "A": -(torch.rand(d, n, generator=g, dtype=torch.float64) * 3 + 0.1).to(dtype),
        "B": rnd(b, G, n, L), "C": rnd(b, G, n, L), "D": rnd(d), "delta_bias": rnd(d) * 0.3,
    }
    if not case["softplus"]:  # raw steps must be positive for a decaying state
        leaves["delta"] = leaves["delta"].abs() * 0.2
    out = {}
    for backend in ("reference", "triton"):
        x = {k: v.clone().requires_grad_(True) for k, v in leaves.items()}
        res = selective_scan(x["u"], x["delta"], x["A"], x["B"], x["C"], x["D"], None,
                             x["delta_bias"] if case["bias"] else None, case["softplus"],
                             return_last_state=case["last"], backend=backend)
        ys = res if case["last"] else (res,)
        w = torch.Generator().manual_seed(1)
        loss = sum((y * torch.randn(y.shape, generator=w, dtype=torch.float64).to(y)).sum() for y in ys)
        names = [k for k in x if case["bias"] or k != "delta_bias"]
        grads = torch.autograd.grad(loss, [x[k] for k in names])
        out[backend] = ([y.detach().double() for y in ys], dict(zip(names, (t.double() for t in grads))))
    (ref_y, ref_g), (tri_y, tri_g) = out["reference"], out["triton"]
    report = {"y": max(float((a - c).abs().max() / a.abs().max()) for a, c in zip(ref_y, tri_y))}
    report.update({k: float((ref_g[k] - tri_g[k]).abs().max() / ref_g[k].abs().max()) for k in ref_g})
    report["dtype_kept"] = all(y.dtype == dtype for y in ys)
    print(json.dumps(report))
    """
)


def _run(**case) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(case)], env=env, capture_output=True, text=True, timeout=patient(300))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "case",
    [  # the interpreter takes seconds per case: the two larger ones are slow, the last stays in make test-fast
        # several chunks with a ragged last one, 2 channels per program, bias + softplus, h_L and its gradient
        pytest.param(dict(b=2, d=4, n=4, L=37, G=1, block_l=16, channels=2, softplus=True, bias=True, last=True), marks=pytest.mark.slow),
        # grouped B/C (d/G = 3 channels per group: one channel per program), N not a power of two
        pytest.param(dict(b=1, d=6, n=3, L=20, G=2, block_l=8, channels=4, softplus=True, bias=True, last=False), marks=pytest.mark.slow),
        # raw steps (no softplus, no bias), one chunk longer than the sequence
        dict(b=1, d=4, n=8, L=12, G=1, block_l=16, channels=4, softplus=False, bias=False, last=False),
    ],
)
def test_triton_scan_matches_reference_float64(case):
    err = _run(dtype="float64", **case)
    assert err.pop("dtype_kept")
    assert max(err.values()) < 1e-12, err


@pytest.mark.slow
def test_triton_scan_float32_within_mamba_tolerance():
    """float32 kernels against the float64 reference: a 1e-4 bound, with margin."""
    err = _run(dtype="float32", b=1, d=4, n=8, L=300, G=1, block_l=128, channels=2, softplus=True, bias=True, last=False)
    assert err.pop("dtype_kept")
    assert max(err.values()) < 1e-5, err


def test_triton_backend_refuses_cpu_tensors_without_the_interpreter():
    if scan_triton.interpreting():
        pytest.skip("this process runs the Triton interpreter")
    u = torch.zeros(1, 2, 4)
    with pytest.raises(RuntimeError, match="needs CUDA tensors"):
        scan_triton.scan(u, u, -torch.ones(2, 2), torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4), None, True)


def test_launch_shape_divides_the_group():
    """Channels per program: a power of two ≤ the configured one that divides the channels per group."""
    cfg = scan_triton.ScanConfig(channels=4)
    assert scan_triton._launch_shape(96, 1, cfg) == (4, 24)
    assert scan_triton._launch_shape(6, 2, cfg) == (1, 6)  # 3 channels per group
    assert scan_triton._launch_shape(12, 2, cfg) == (2, 6)


def test_config_follows_the_number_of_rows():
    """Few (batch × channel) rows: one channel per program (more programs); many: the two-channel tiles."""
    assert scan_triton.config_for(1, 96) == scan_triton.FEW_ROWS_CONFIG
    assert scan_triton.config_for(8, 96) == scan_triton.CONFIG
    assert scan_triton.FEW_ROWS_CONFIG.channels == 1 and scan_triton.CONFIG.channels == 2
