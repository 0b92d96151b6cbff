"""The chunked pure-PyTorch selective scan against the sequential reference (forward and gradients)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import dgno.layers.selective_scan as ss
from dgno.layers.selective_scan import selective_scan, selective_scan_reference


def make_inputs(*, b=2, d=6, n=3, L=37, groups=None, dtype=torch.float64, delta_scale=0.5, seed=0):
    """Random scan inputs in the layouts of ``selective_scan_fn``; ``groups`` selects the 4-D B/C layout."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype)

    bc_shape = (b, n, L) if groups is None else (b, groups, n, L)
    return {
        "u": rnd(b, d, L),
        "delta": rnd(b, d, L) * delta_scale,
        "A": -(torch.rand(d, n, generator=g, dtype=dtype) * 4 + 0.1),
        "B": rnd(*bc_shape),
        "C": rnd(*bc_shape),
        "D": rnd(d),
        "z": rnd(b, d, L),
        "delta_bias": rnd(d) * 0.3,
    }


def run(backend, inp, *, use_z, use_bias, softplus, use_D=True, last=False):
    """Output(s) of one backend and the gradients of a fixed random projection w.r.t. all inputs."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in inp.items()}
    out = selective_scan(
        leaves["u"],
        leaves["delta"],
        leaves["A"],
        leaves["B"],
        leaves["C"],
        D=leaves["D"] if use_D else None,
        z=leaves["z"] if use_z else None,
        delta_bias=leaves["delta_bias"] if use_bias else None,
        delta_softplus=softplus,
        return_last_state=last,
        backend=backend,
    )
    outs = out if last else (out,)
    g = torch.Generator().manual_seed(1)
    loss = sum((o * torch.randn(o.shape, generator=g, dtype=torch.float64).to(o)).sum() for o in outs)
    used = [k for k in leaves if (k != "z" or use_z) and (k != "delta_bias" or use_bias) and (k != "D" or use_D)]
    grads = torch.autograd.grad(loss, [leaves[k] for k in used])
    return [o.detach() for o in outs], dict(zip(used, grads))


def assert_backends_agree(inp, *, atol, rtol=0.0, **flags):
    outs_f, grads_f = run("torch", inp, **flags)
    outs_r, grads_r = run("reference", inp, **flags)
    for of, orf in zip(outs_f, outs_r):
        torch.testing.assert_close(of, orf, atol=atol, rtol=rtol)
    assert grads_f.keys() == grads_r.keys()
    for k in grads_f:
        torch.testing.assert_close(grads_f[k], grads_r[k], atol=atol, rtol=rtol, msg=lambda m, k=k: f"grad {k}: {m}")


@pytest.mark.parametrize("groups", [None, 1, 2], ids=["BC3d", "BC4d-G1", "BC4d-G2"])
@pytest.mark.parametrize(
    "use_z,use_bias,softplus",
    [(False, False, False), (True, True, True), (False, True, True), (True, False, False)],
    ids=["plain", "z+bias+softplus", "bias+softplus", "z"],
)
@pytest.mark.parametrize("L", [1, 37, 130])
def test_fast_matches_reference_float64(groups, use_z, use_bias, softplus, L):
    """Exact in float64 for every layout/flag combination, lengths 1, odd, and past one chunk."""
    inp = make_inputs(L=L, groups=groups)
    if not softplus:  # keep Δ positive (a decaying system) without the softplus
        inp["delta"] = inp["delta"].abs()
    assert_backends_agree(inp, atol=1e-10, use_z=use_z, use_bias=use_bias, softplus=softplus)


def test_float32_close_to_float64_reference():
    """float32 (the compute dtype of the model) stays within 1e-4 of the exact scan."""
    inp64 = make_inputs(b=1, d=8, n=8, L=301, groups=1)
    inp32 = {k: v.float() for k, v in inp64.items()}
    flags = {"use_z": False, "use_bias": True, "softplus": True}
    outs_f, grads_f = run("torch", inp32, **flags)
    outs_r, grads_r = run("reference", inp64, **flags)
    torch.testing.assert_close(outs_f[0].double(), outs_r[0], atol=1e-4, rtol=1e-4)
    for k in grads_f:
        torch.testing.assert_close(grads_f[k].double(), grads_r[k], atol=1e-3, rtol=1e-4)


def test_last_state_value_and_gradient():
    """h_L is returned as (b, d, N) and gradients flow through it as well as through y."""
    inp = make_inputs(L=45, groups=2)
    assert_backends_agree(inp, atol=1e-10, use_z=True, use_bias=True, softplus=True, last=True)
    y, last = selective_scan(*(inp[k] for k in ["u", "delta", "A", "B", "C"]), return_last_state=True, backend="torch")
    assert y.shape == (2, 6, 45) and last.shape == (2, 6, 3)


def test_many_blocks_and_chunks(monkeypatch):
    """Small blocks force several token blocks, each of several state blocks of several chunks:
    the carries between them are exact."""
    monkeypatch.setitem(ss._BLOCK_ELEMS, "cpu", 2 * 3 * 16 * 4 * 3)  # 3 chunks of 16 tokens per state block
    monkeypatch.setattr(ss, "_STATE_BLOCKS_PER_TOKEN_BLOCK", 2)
    monkeypatch.setitem(ss._MAX_CHUNK, "cpu", 16)
    inp = make_inputs(d=4, n=3, L=203, groups=None, delta_scale=0.2)
    assert_backends_agree(inp, atol=1e-10, use_z=False, use_bias=True, softplus=True)


@pytest.mark.parametrize("scale", [3.0, 40.0])
def test_huge_steps_shorten_chunks_and_stay_exact(scale):
    """Steps with |A|Δ far beyond exp's float32 range: chunks shrink (down to 1 token), nothing overflows."""
    inp = make_inputs(b=1, d=4, n=3, L=70, dtype=torch.float32, seed=3)
    inp["delta"] = torch.rand(inp["delta"].shape, generator=torch.Generator().manual_seed(4)) * scale
    inp["A"] = inp["A"] * 4
    outs_f, grads_f = run("torch", inp, use_z=False, use_bias=False, softplus=False)
    outs_r, grads_r = run(
        "reference", {k: v.double() for k, v in inp.items()}, use_z=False, use_bias=False, softplus=False
    )
    assert torch.isfinite(outs_f[0]).all()
    torch.testing.assert_close(outs_f[0].double(), outs_r[0], atol=1e-4, rtol=1e-4)
    for k in grads_f:
        assert torch.isfinite(grads_f[k]).all()
        torch.testing.assert_close(grads_f[k].double(), grads_r[k], atol=1e-3, rtol=1e-4)


def test_low_precision_inputs_keep_their_dtype():
    """bfloat16 in → computed in float32 (like mamba_ssm) → bfloat16 out."""
    inp = make_inputs(b=1, d=4, n=2, L=20, dtype=torch.float32)
    u = inp["u"].bfloat16()
    y = selective_scan(u, inp["delta"], inp["A"], inp["B"], inp["C"], inp["D"], backend="torch")
    ref = selective_scan_reference(u.float(), inp["delta"], inp["A"], inp["B"], inp["C"], inp["D"])
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), ref, atol=0.05, rtol=0.02)


def test_softplus_helper_matches_torch():
    x = torch.linspace(-80, 80, 100_001, dtype=torch.float64)
    exact = torch.log1p(torch.exp(x))  # float64 is exact enough here, and has no threshold cut-off
    torch.testing.assert_close(ss._softplus(x), exact, atol=0, rtol=1e-14)
    torch.testing.assert_close(ss._softplus(x.float()).double(), F.softplus(x.float()).double(), atol=1e-6, rtol=1e-6)


def test_auto_on_cpu_uses_the_chunked_scan(monkeypatch):
    """On CPU "auto" must take the chunked torch scan, never the token loop."""
    calls = []
    original = ss._ChunkedScan.apply
    monkeypatch.setattr(ss._ChunkedScan, "apply", lambda *a: calls.append(1) or original(*a))
    monkeypatch.setattr(ss, "selective_scan_reference", lambda *a, **k: pytest.fail("reference used"))
    inp = make_inputs(L=10)
    selective_scan(inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"])
    assert calls


def test_bad_arguments_are_named():
    inp = make_inputs(L=10)
    args = (inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"])
    with pytest.raises(ValueError, match=r"'cuda'.*allowed: 'auto', 'torch', 'triton', 'mamba_ssm', 'native', 'static', 'reference'"):
        selective_scan(*args, backend="cuda")
    with pytest.raises(ValueError, match="B must be"):
        selective_scan(inp["u"], inp["delta"], inp["A"], inp["B"][:, :2], inp["C"])
    with pytest.raises(ValueError, match="G dividing d=6"):
        selective_scan(inp["u"], inp["delta"], inp["A"], inp["B"].unsqueeze(1).expand(-1, 4, -1, -1), inp["C"])
    with pytest.raises(ValueError, match="delta_bias must have shape"):
        selective_scan(*args, delta_bias=torch.zeros(5, dtype=torch.float64))
    if ss.mamba_selective_scan_fn() is None:
        with pytest.raises(RuntimeError, match="mamba_ssm"):
            selective_scan(*args, backend="mamba_ssm")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU environment)")
@pytest.mark.parametrize("backend", ["torch", "triton", "mamba_ssm"])
def test_cuda_backends_match_the_reference(backend):
    """On CUDA, the chunked scan (CUDA branches: one-kernel cumsums, large blocks) and mamba_ssm's kernel
    give the reference's outputs and gradients in float32 (4-D B/C layout, z, bias, softplus)."""
    if backend == "mamba_ssm" and ss.mamba_selective_scan_fn() is None:
        pytest.skip("mamba_ssm does not import here")
    inp = make_inputs(b=2, d=8, n=4, L=300, groups=1, dtype=torch.float32)
    flags = dict(use_z=True, use_bias=True, softplus=True)
    outs_r, grads_r = run("reference", inp, **flags)
    outs_c, grads_c = run(backend, {k: v.cuda() for k, v in inp.items()}, **flags)
    torch.testing.assert_close(outs_c[0].cpu(), outs_r[0], atol=1e-4, rtol=1e-4)
    for k, g in grads_r.items():
        scale = float(g.abs().max())
        torch.testing.assert_close(grads_c[k].cpu() / scale, g / scale, atol=1e-4, rtol=0, msg=lambda m, k=k: f"grad {k}: {m}")


# --- the shape-only ("static") and compiled ("native") backends -----------------------------------


@pytest.mark.parametrize("groups", [None, 1, 2], ids=["BC3d", "BC4d-G1", "BC4d-G2"])
@pytest.mark.parametrize("L", [1, 7, 8, 9, 130, 1000])
def test_static_scan_is_exact_in_float64(groups, L):
    """The blocked scan of fixed shape equals the token loop in float64, at lengths that leave partial chunks
    and need one to four levels of the recursion."""
    inp = make_inputs(L=L, groups=groups)
    args = (inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"], inp["D"])
    kw = dict(z=inp["z"], delta_bias=inp["delta_bias"], delta_softplus=True)
    torch.testing.assert_close(selective_scan(*args, backend="static", **kw), selective_scan_reference(*args, **kw), atol=1e-12, rtol=0)


def _extreme(scale: float, softplus: bool, *, d: int = 20, groups: int = 1, L: int = 700):
    """float32 inputs whose steps reach far beyond exp's float32 range (as the chunked scan's huge-step test)."""
    inp = make_inputs(b=2, d=d, n=8, L=L, groups=groups, dtype=torch.float32, seed=3)
    g = torch.Generator().manual_seed(4)
    inp["delta"] = torch.rand(inp["delta"].shape, generator=g) * scale if not softplus else torch.randn(inp["delta"].shape, generator=g) * scale
    inp["A"] = inp["A"] * 4
    return inp


def _relative_to_reference(backend: str, inp: dict, softplus: bool) -> float:
    """max |y − y_ref| / max |y_ref|, y_ref the token loop run in float32 on the same inputs."""
    args = (inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"], inp["D"])
    kw = dict(delta_bias=inp["delta_bias"], delta_softplus=softplus)
    ref = selective_scan_reference(*args, **kw)
    with torch.no_grad():
        y = selective_scan(*args, backend=backend, **kw)
    assert torch.isfinite(y).all()
    return float((y - ref).abs().max() / ref.abs().max())


@pytest.mark.parametrize("backend", ["static", "native"])
@pytest.mark.parametrize("scale,softplus", [(3.0, False), (40.0, False), (0.5, True), (5.0, True), (100.0, True)])
def test_shape_only_backends_follow_the_token_loop_in_float32(backend, scale, softplus):
    """Within 1e-5 of the float32 token loop (relative to its largest value), also where Δ·A is far beyond
    exp's float32 range: neither backend divides by a decay, so nothing overflows."""
    if backend == "native" and not ss.native_kernels.available():
        pytest.skip(ss.native_kernels.unavailable_reason())
    assert _relative_to_reference(backend, _extreme(scale, softplus), softplus) < 1e-5


@pytest.mark.parametrize("d,groups", [(16, 1), (20, 1), (24, 2), (40, 4), (5, 1)])
def test_native_scan_any_channel_count_and_grouping(d, groups):
    """Channel counts that are not a multiple of the kernel's 16 lanes, and several B/C groups."""
    if not ss.native_kernels.available():
        pytest.skip(ss.native_kernels.unavailable_reason())
    assert _relative_to_reference("native", _extreme(2.0, True, d=d, groups=groups, L=77), True) < 1e-5


def test_native_scan_leaves_gradients_and_float64_to_the_torch_scan(monkeypatch):
    """Where the kernel does not apply (a gradient is needed, float64), the exact chunked scan runs."""
    if not ss.native_kernels.available():
        pytest.skip(ss.native_kernels.unavailable_reason())
    monkeypatch.setattr(ss.native_kernels, "selective_scan_native", lambda *a, **k: pytest.fail("kernel used"))
    inp = make_inputs(L=30)
    args = (inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"])
    torch.testing.assert_close(selective_scan(*args, backend="native"), selective_scan_reference(*args), atol=1e-10, rtol=1e-12)
    u = inp["u"].float().requires_grad_(True)
    selective_scan(u, *(t.float() for t in args[1:]), backend="native").sum().backward()
    assert u.grad is not None


def test_static_scan_graph_depends_only_on_shapes():
    """A trace at one set of values computes the scan for any other values of the same shapes (no branch
    on Δ: the chunked scan's choice of chunk length is data-dependent, this one's is not)."""

    class Scan(torch.nn.Module):
        def forward(self, u, delta, A, B, C):
            return selective_scan(u, delta, A, B, C, delta_softplus=True, backend="static")

    small = make_inputs(b=1, d=4, n=3, L=50, dtype=torch.float32, delta_scale=0.1)
    keys = ("u", "delta", "A", "B", "C")
    traced = torch.jit.trace(Scan(), tuple(small[k] for k in keys), check_trace=False)
    huge = make_inputs(b=1, d=4, n=3, L=50, dtype=torch.float32, delta_scale=30.0, seed=7)
    ref = selective_scan_reference(*(huge[k] for k in keys), delta_softplus=True)
    torch.testing.assert_close(traced(*(huge[k] for k in keys)), ref, atol=1e-4, rtol=1e-4)


def test_static_backend_returns_y_only():
    inp = make_inputs(L=10)
    with pytest.raises(ValueError, match="static.*y only"):
        selective_scan(inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"], return_last_state=True, backend="static")
