"""Mamba's selective scan (S6) with three exact backends.

    h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t u_t B_t,      y_t = C_t · h_t + D u_t,      y_t ← y_t · SiLU(z_t)

per channel d (state h_t[d] ∈ ℝᴺ), with Δ = softplus(delta + delta_bias) when ``delta_softplus``.
This is the operator of MambaIRv2's attentive state-space module (ASSM), which scans an image
as a sequence of H·W tokens.  The signature and semantics are those of ``mamba_ssm``'s
``selective_scan_fn`` so the module can call either implementation:

* ``"mamba_ssm"`` — the fused CUDA kernel of ``mamba_ssm`` (only in the GPU environment: its import
  fails without the compiled extension);
* ``"torch"`` — an exact pure-PyTorch chunked scan for every other device (see ``_ChunkedScan``):
  no Python loop over tokens, numerically stable in float32, with a hand-written backward that
  recomputes the states instead of storing them (the states are N times larger than the input);
* ``"triton"`` — two Triton kernels (``dgno.layers.scan_triton``): a chunked associative scan for
  CUDA tensors, with no extension to build (Triton comes with CUDA builds of PyTorch);
* ``"native"`` — a compiled C kernel for CPU inference in float32 (``dgno.layers.native_kernels``): one
  pass over the tokens with the states in registers, an order of magnitude faster than ``"torch"``;
  where it does not apply (gradients, float64, ``return_last_state``) the ``"torch"`` scan runs;
* ``"static"`` — the same recurrence as a graph whose shape depends only on the input's shape
  (``dgno.layers.scan_static``): what ONNX, ``torch.export`` and TorchScript record;
* ``"reference"`` — the recurrence written as a plain loop over tokens; for tests and benchmarks;
* ``"auto"`` — for CUDA tensors ``mamba_ssm`` when it imports, else ``triton`` when it imports,
  else ``torch``; ``torch`` on every other device.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from dgno.layers import native_kernels, scan_triton
from dgno.layers.scan_static import selective_scan_static

Backend = Literal["auto", "torch", "triton", "mamba_ssm", "native", "static", "reference"]
BACKENDS: tuple[str, ...] = ("auto", "torch", "triton", "mamba_ssm", "native", "static", "reference")

# Largest |exponent| the chunked scan lets exp() see.  e^60 ≈ 1e26 keeps every intermediate
# (rescaled inputs summed over a chunk, their gradients) far from float32 overflow (3e38)
# while allowing long chunks; the chunk length adapts so this bound always holds.
EXP_LIMIT = 60.0
# exp(x) is evaluated as exp2(x·log2 e): torch's vectorised exp2 is about 3× faster than exp on
# CPU, and the extra rounding of x·log2 e is of the same size as that of x itself.
LOG2E = 1.0 / math.log(2.0)
# Longest chunk tried (a power of two).  Longer chunks mean fewer sequential carries between
# chunks; the exponent bound shortens them on the fly when the steps Δ are large.
_MAX_CHUNK = {"cpu": 64, "cuda": 128}
# State elements (batch × tokens × N × d) per block: 2 MB of float32 on CPU, so a block's
# arrays stay in cache between the passes; on CUDA large blocks amortise kernel launches.
_BLOCK_ELEMS = {"cpu": 1 << 19, "cuda": 1 << 25}
# State blocks whose per-token preparation (bias, softplus, layout changes) is done together:
# those arrays are N times smaller than the state, so one token block spans several state blocks.
_STATE_BLOCKS_PER_TOKEN_BLOCK = 4


def selective_scan(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    *,
    backend: Backend = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """y = selective_scan(u, Δ, A, B, C, D, z): the Mamba S6 recurrence (module docstring).

    Args:
        u: (b, d, L) input sequence.
        delta: (b, d, L) step sizes before ``delta_bias``/softplus.
        A: (d, N) real state matrix (diagonal per channel; Mamba uses A < 0).
        B, C: (b, N, L) input/output projections shared by all channels, or (b, G, N, L) with
            G groups of d/G channels each (the grouped layout MambaIRv2 uses, G = 1).
        D: (d,) skip weight, optional.
        z: (b, d, L) gate, optional: the output is multiplied by SiLU(z).
        delta_bias: (d,) added to ``delta``, optional.
        delta_softplus: apply softplus to the biased ``delta``.
        return_last_state: also return the final state h_L, (b, d, N).
        backend: see the module docstring.

    Returns:
        y (b, d, L) in ``u``'s dtype, and h_L (b, d, N) when ``return_last_state``.

    Example:
        >>> b, d, n, L = 1, 4, 2, 10
        >>> y = selective_scan(torch.randn(b, d, L), torch.rand(b, d, L), -torch.rand(d, n),
        ...                    torch.randn(b, n, L), torch.randn(b, n, L), backend="torch")
        >>> y.shape
        torch.Size([1, 4, 10])
    """
    _check_shapes(u, delta, A, B, C, D, z, delta_bias)
    if backend not in BACKENDS:
        raise ValueError(f"unknown selective-scan backend {backend!r}; allowed: {', '.join(map(repr, BACKENDS))}")
    args = (u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)
    if backend == "reference":
        return selective_scan_reference(*args)
    if backend == "static":
        if return_last_state:
            raise ValueError("backend 'static' returns y only; use 'torch' for the last state")
        return _selective_scan_shape_only(selective_scan_static, *args)
    if backend == "native" and not return_last_state and _native_applies(u, delta, A, B, C, D, z, delta_bias):
        return _selective_scan_shape_only(native_kernels.selective_scan_native, *args)
    mamba_fn = mamba_selective_scan_fn() if backend in ("auto", "mamba_ssm") else None
    if backend == "mamba_ssm":
        if mamba_fn is None:
            raise RuntimeError(
                "backend 'mamba_ssm' requested but mamba_ssm.ops.selective_scan_interface does not import"
            )
        if not u.is_cuda:
            raise RuntimeError(f"backend 'mamba_ssm' needs CUDA tensors, got device {u.device}")
    if mamba_fn is not None and u.is_cuda:
        return mamba_fn(*(t.contiguous() if isinstance(t, Tensor) else t for t in args))
    if backend == "triton" or (backend == "auto" and u.is_cuda and scan_triton.available(u.device)):
        return _selective_scan_triton(*args)
    return _selective_scan_torch(*args)


def _native_applies(u: Tensor, *others: Tensor | None) -> bool:
    """Whether the ``"native"`` kernel computes this call: CPU, float32 compute, no gradient.

    Raises RuntimeError for CUDA tensors or a kernel that cannot be built (the reason is in the message).
    """
    if u.is_cuda:
        raise RuntimeError("backend 'native' is a CPU kernel; use 'auto' for CUDA tensors")
    if not native_kernels.available():
        raise RuntimeError(f"backend 'native' is unavailable: {native_kernels.unavailable_reason()}")
    tensors = [t for t in (u, *others) if isinstance(t, Tensor)]
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    return _compute_dtype(u) == torch.float32 and not needs_grad


def _selective_scan_shape_only(scan, u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state):
    """The ``"static"`` and ``"native"`` backends: ``scan`` computes y + D u in the compute dtype; the gate here."""
    dtype = _compute_dtype(u)
    cast = [None if t is None else t.to(dtype) for t in (D, delta_bias)]
    y = scan(u.to(dtype), delta.to(dtype), A.to(dtype), _grouped(B, dtype), _grouped(C, dtype), cast[0], cast[1], bool(delta_softplus))
    if z is not None:
        y = y * F.silu(z.to(dtype))
    return y.to(u.dtype)


def _selective_scan_triton(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state):
    """The ``"triton"`` backend: the kernels run the recurrence; D u and the gate are added here."""
    dtype = _compute_dtype(u)
    bias = None if delta_bias is None else delta_bias.to(dtype)
    u_ = u.to(dtype)
    y, last = scan_triton.scan(u_, delta.to(dtype), A.to(dtype), _grouped(B, dtype), _grouped(C, dtype), bias, bool(delta_softplus))
    return _finish(y, last, u, u_, D, z, return_last_state)


@functools.lru_cache(maxsize=1)
def mamba_selective_scan_fn() -> Callable[..., Tensor] | None:
    """``mamba_ssm``'s ``selective_scan_fn``, or None when it cannot be imported.

    Importing fails (ImportError, or OSError from the compiled extension) wherever the CUDA
    extension is missing, i.e. everywhere except the GPU environment; that is not an error.
    """
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except (ImportError, OSError):
        return None
    return selective_scan_fn


def selective_scan_reference(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """The recurrence h_t = exp(Δ_t A) h_{t−1} + Δ_t u_t B_t, y_t = C_t·h_t, one token at a time.

    Deliberately literal (a Python loop over tokens, autograd through every step): the ground
    truth the fast backends are tested and benchmarked against.  Same arguments as
    ``selective_scan``.
    """
    _check_shapes(u, delta, A, B, C, D, z, delta_bias)
    u_, dt, A_, B4, C4 = _prepare(u, delta, A, B, C, delta_bias, delta_softplus)
    b, d, L = u_.shape
    n = A_.shape[1]
    Bd = B4.repeat_interleave(d // B4.shape[1], dim=1)  # (b, d, N, L)
    Cd = C4.repeat_interleave(d // C4.shape[1], dim=1)  # (b, d, N, L)
    decay = torch.exp(dt.unsqueeze(-1) * A_.unsqueeze(1))  # (b, d, L, N)
    drive = (dt * u_).unsqueeze(-1) * Bd.transpose(2, 3)  # (b, d, L, N)
    h = u_.new_zeros(b, d, n)
    ys = []
    for t in range(L):
        h = decay[:, :, t] * h + drive[:, :, t]
        ys.append((h * Cd[:, :, :, t]).sum(-1))  # (b, d)
    y = torch.stack(ys, dim=-1) if ys else u_.new_zeros(b, d, 0)
    return _finish(y, h, u, u_, D, z, return_last_state)


def _check_shapes(u, delta, A, B, C, D, z, delta_bias) -> None:
    """Raise ValueError unless the shapes follow ``selective_scan_fn``'s conventions."""
    if u.dim() != 3 or delta.shape != u.shape:
        raise ValueError(f"u and delta must both be (b, d, L), got {tuple(u.shape)} and {tuple(delta.shape)}")
    b, d, L = u.shape
    if A.dim() != 2 or A.shape[0] != d or A.is_complex():
        raise ValueError(f"A must be real (d={d}, N), got {tuple(A.shape)} {A.dtype}")
    n = A.shape[1]
    for name, t in (("B", B), ("C", C)):
        ok3 = t.dim() == 3 and tuple(t.shape) == (b, n, L)
        ok4 = t.dim() == 4 and t.shape[0] == b and t.shape[2:] == (n, L) and t.shape[1] > 0 and d % t.shape[1] == 0
        if not (ok3 or ok4):
            raise ValueError(
                f"{name} must be (b, N, L) = {(b, n, L)} or (b, G, N, L) with G dividing d={d}, got {tuple(t.shape)}"
            )
    for name, t, shape in (("D", D, (d,)), ("delta_bias", delta_bias, (d,)), ("z", z, (b, d, L))):
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")


def _compute_dtype(u: Tensor) -> torch.dtype:
    """float64 stays float64 (exact tests); everything else is computed in float32 like mamba_ssm."""
    return torch.float64 if u.dtype == torch.float64 else torch.float32


def _grouped(B: Tensor, dtype: torch.dtype) -> Tensor:
    """B or C as (b, G, N, L) in the compute dtype (the 3-D layout is the G = 1 case)."""
    return (B.unsqueeze(1) if B.dim() == 3 else B).to(dtype)


def _prepare(u, delta, A, B, C, delta_bias, delta_softplus):
    """Cast to the compute dtype, apply bias/softplus to Δ, and bring B, C to (b, G, N, L)."""
    dtype = _compute_dtype(u)
    dt = delta.to(dtype)
    if delta_bias is not None:
        dt = dt + delta_bias.to(dtype).unsqueeze(-1)
    if delta_softplus:
        dt = F.softplus(dt)
    return u.to(dtype), dt, A.to(dtype), _grouped(B, dtype), _grouped(C, dtype)


def _finish(y, last, u, u_, D, z, return_last_state):
    """y ← (y + D u) · SiLU(z), cast back to u's dtype (the parts outside the recurrence)."""
    if D is not None:
        y = y + u_ * D.to(y.dtype).unsqueeze(-1)
    if z is not None:
        y = y * F.silu(z.to(y.dtype))
    y = y.to(u.dtype)
    return (y, last) if return_last_state else y


def _selective_scan_torch(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state):
    """The ``"torch"`` backend: ``_ChunkedScan`` with the longest chunk whose exponents stay bounded.

    Chunks of T = 2^k tokens are tried from the longest down; a chunk length whose exponents
    would exceed ±EXP_LIMIT is detected on the fly (``_ChunkTooLong``) and halved.  T = 1
    always works, so the result is exact for any step sizes; huge steps only cost speed.
    """
    dtype = _compute_dtype(u)
    device = "cuda" if u.is_cuda else "cpu"
    D, delta_bias = (None if t is None else t.to(dtype) for t in (D, delta_bias))
    args = (u.to(dtype), delta.to(dtype), A.to(dtype), _grouped(B, dtype), _grouped(C, dtype), D, delta_bias)
    T = min(_MAX_CHUNK[device], 1 << max(0, math.ceil(math.log2(max(u.shape[-1], 1)))))
    while True:
        try:
            y, last = _ChunkedScan.apply(*args, bool(delta_softplus), T, _BLOCK_ELEMS[device])
            break
        except _ChunkTooLong:
            T //= 2
    if z is not None:
        y = y * F.silu(z.to(dtype))
    y = y.to(u.dtype)
    return (y, last) if return_last_state else y


class _ChunkTooLong(Exception):
    """Raised inside ``_ChunkedScan.forward`` when a chunk's exponents would leave ±EXP_LIMIT."""


def _softplus(x: Tensor) -> Tensor:
    """softplus(x) = max(x, 0) + log1p(e^{−|x|}), with log1p(y) = log(u) + (y − (u − 1)), u = 1 + y.

    Same values as ``F.softplus`` to a few ulp, but built from vectorised exp/log: torch's CPU
    log1p/softplus kernels are scalar and cost several times a whole scan block.  u − 1 is exact,
    so c = y − (u − 1) is the rounding error of u, and log(1 + y) = log(u) + log(1 + c/u); the
    correction c replaces c/u (they differ by c·y/u ≤ |c|·y, under an ulp of log1p(y) ≈ y).  When
    y is below half an ulp of 1, u == 1 and the result is exactly y.  Ten passes, no division.
    """
    pos = x.clamp(min=0)
    y = torch.sub(x, pos, alpha=2).mul_(LOG2E).exp2_()  # x − 2 max(x, 0) = −|x|, exactly; y = e^{−|x|}
    u = y + 1
    c = y.sub_(u - 1)  # rounding error of 1 + y
    return torch.log(u).add_(c).add_(pos)


class _ChunkedScan(torch.autograd.Function):
    """y_t = Σ_n C_t[n] h_t[n] + D u_t,  h_t = exp(Δ_t A) h_{t−1} + Δ_t u_t B_t,  Δ = softplus(δ + bias).

    Within a chunk of T tokens with reference token m, write E_t = exp(A(σ_t − σ_m)) (σ = within-
    chunk cumulative Δ, so E_t/E_k is the decay from token k to t) and r = exp(A σ_m) (decay from
    the chunk start to m).  Then, exactly,

        h_t = E_t · ( r · h_start + Σ_{k≤t} (Δ_k u_k B_k) / E_k ),

    a cumulative sum instead of a recurrence.  The reference token in the middle halves the
    exponent range, and every chunk is checked to keep A(σ_t − σ_m) within ±EXP_LIMIT, so nothing
    overflows or loses relative precision, as a single cumulative product over the sequence would.
    Only the chunk-start states are carried sequentially, one vector update per chunk.

    Work is done in blocks of K whole chunks in the layout (b, T, K, G, N, d/G) — token within
    chunk, chunk, state — so per-token inputs broadcast over contiguous channels, the chunk
    cumsum adds contiguous slices, y = C·h is one batched matmul, and a block stays in cache.
    Everything per token (bias, softplus, the layout changes, σ) is done for several state
    blocks at once (``_Tokens``): those arrays are N times smaller, and their many small
    operations cost more in dispatch than in arithmetic.  The backward pass runs the adjoint
    recurrence λ_t = C_t g_t + exp(Δ_{t+1} A) λ_{t+1} the same way from the end, recomputing the
    states block by block from the saved chunk-start states, so memory is O(input), not
    O(input × N).
    """

    @staticmethod
    def forward(ctx, u, delta, A, B4, C4, D, bias, softplus: bool, T: int, block_elems: int):
        # u, delta: (b, d, L); A: (d, N); B4, C4: (b, G, N, L); D, bias: (d,) or None
        plan = _Plan(u, delta, A, B4, C4, D, bias, softplus, T, block_elems)
        starts = u.new_zeros(plan.b, plan.n_chunks + 1, *plan.state)  # h at every chunk start (and the end)
        # y is written token-major, (b, Lp, d) — whole rows of d channels, the block layout's order —
        # and returned as the transposed (b, d, L) view: writing each block into a (b, d, L) array
        # (rows a power-of-two stride apart) took about a tenth of the CPU forward.
        y = u.new_empty(plan.b, plan.Lp, plan.d)
        work = (u.new_empty(plan.block_numel), u.new_empty(plan.block_numel))  # reused block buffers
        for s0, s1 in plan.token_blocks():
            tok = _Tokens(plan, s0, s1, check=True)
            y_tok = y[:, s0 * T : s1 * T].view(plan.b, s1 - s0, T, plan.d).transpose(1, 2)  # (b, T, S, d)
            for k0, k1 in plan.state_blocks(s1 - s0):
                blk = _Block(plan, tok, k0, k1, work)
                h_s = starts[:, s0 + k0 : s0 + k1 + 1].unbind(1)
                for k, (end, decay) in enumerate(zip(blk.local_end.unbind(1), blk.chunk_decay.unbind(1))):
                    torch.addcmul(end, decay, h_s[k], out=h_s[k + 1])  # h_start(k+1) = decay_k · h_start(k) + end_k
                h = blk.states(starts[:, s0 + k0 : s0 + k1])  # (b, T, K, G, N, hd)
                y_blk = _contract_state(blk.C, h).flatten(3)  # y_t = Σ_n C_t[n] h_t[n], (b, T, K, d)
                if D is None:
                    y_tok[:, :, k0:k1] = y_blk
                else:  # + D u, while u is at hand in the block layout
                    torch.addcmul(y_blk, tok.u[:, :, k0:k1].flatten(3), plan.Dd, out=y_tok[:, :, k0:k1])
        ctx.save_for_backward(u, delta, A, B4, C4, D, bias, starts)
        ctx.softplus, ctx.T, ctx.block_elems = softplus, T, block_elems
        last = starts[:, -1].transpose(-1, -2).reshape(plan.b, plan.d, plan.n)  # (b, d, N), a copy
        return y.transpose(1, 2)[..., : plan.L], last

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy, glast):
        u, delta, A, B4, C4, D, bias, starts = ctx.saved_tensors
        plan = _Plan(u, delta, A, B4, C4, D, bias, ctx.softplus, ctx.T, ctx.block_elems)
        b, T, g, n, hd = plan.b, plan.T, plan.g, plan.n, plan.hd
        g_p = plan.pad(torch.zeros_like(u) if gy is None else gy.to(u.dtype))
        # adjoint entering the current chunk from its right: ∂loss/∂h_L at first, then carried leftwards
        carry = u.new_zeros(b, *plan.state)
        if glast is not None:
            carry += glast.to(u.dtype).view(b, g, hd, n).transpose(-1, -2)
        du, ddelta = u.new_empty(b, plan.d, plan.Lp), u.new_empty(b, plan.d, plan.Lp)
        dB, dC = u.new_empty(b, g, n, plan.Lp), u.new_empty(b, g, n, plan.Lp)
        dA = u.new_zeros(plan.state)
        for s0, s1 in reversed(list(plan.token_blocks())):
            tok = _Tokens(plan, s0, s1, check=False, for_backward=True)
            g_tok = tok.tokens(g_p, per="channel")  # (b, T, S, G, 1, hd)
            du_tok, ddt_tok = u.new_empty(b, T, s1 - s0, g, hd), u.new_empty(b, T, s1 - s0, g, hd)
            dB_tok, dC_tok = u.new_empty(b, T, s1 - s0, g, n), u.new_empty(b, T, s1 - s0, g, n)
            for k0, k1 in reversed(list(plan.state_blocks(s1 - s0))):
                blk = _Block(plan, tok, k0, k1)
                h = blk.states(starts[:, s0 + k0 : s0 + k1])  # (b, T, K, G, N, hd)
                g_k = g_tok[:, :, k0:k1]
                dC_tok[:, :, k0:k1] = _contract_channel(h, g_k)
                # λ_t = Σ_{k≥t} (E_k / E_t) C_k g_k + (E_end / E_t) · carry   (reverse cumulative sum)
                lam = _reverse_cumsum_tokens_(blk.E * blk.C * g_k)
                carries = u.new_empty(b, k1 - k0, *plan.state)
                into = (blk.r[:, 0] * lam[:, 0]).unbind(1)  # r_k Σ_t E_t c_t: what chunk k passes on
                for k, (out, decay) in reversed(list(enumerate(zip(carries.unbind(1), blk.chunk_decay.unbind(1))))):
                    out.copy_(carry)
                    carry = torch.addcmul(into[k], decay, carry)  # carry_{k−1} = into_k + decay_k · carry_k
                lam.add_((blk.E[:, T - 1] * carries).unsqueeze(1)).div_(blk.E)
                dt_k, u_k = tok.dt[:, :, k0:k1], tok.u[:, :, k0:k1]  # (b, T, K, G, 1, hd)
                hb = h.sub_(blk.du * blk.B)  # a_t h_{t−1} = h_t − Δ_t u_t B_t
                lam_B = _contract_state(blk.B, lam)  # Σ_n λ_t[n] B_t[n], (b, T, K, G, hd)
                lh = hb.mul_(lam)
                du_tok[:, :, k0:k1] = dt_k[:, :, :, :, 0] * lam_B
                ddt_tok[:, :, k0:k1] = u_k[:, :, :, :, 0] * lam_B + (lh * plan.At).sum(4)  # ∂/∂Δ
                dA += lh.mul_(dt_k).sum((0, 1, 2))
                dB_tok[:, :, k0:k1] = _contract_channel(lam, blk.du)
            plan.store(du, s0, s1, du_tok)
            ddt = plan.store(ddelta, s0, s1, ddt_tok)
            if ctx.softplus:
                ddt.mul_(torch.sigmoid(tok.x))  # Δ = softplus(x) → ∂/∂x
            plan.store(dB, s0, s1, dB_tok)
            plan.store(dC, s0, s1, dC_tok)
        L = plan.L
        du, ddelta, dB, dC, g_p = du[..., :L], ddelta[..., :L], dB[..., :L], dC[..., :L], g_p[..., :L]
        dD = None
        if D is not None:
            du += g_p * D.unsqueeze(-1)
            dD = (g_p * u).sum((0, 2))
        dbias = None if bias is None else ddelta.sum((0, 2))
        grads_A = dA.transpose(-1, -2).reshape(plan.d, plan.n)  # (G, N, hd) → (d, N)
        return du, ddelta, grads_A, dB, dC, dD, dbias, None, None, None


class _Plan:
    """Sizes, padded inputs and the block partition shared by the passes of ``_ChunkedScan``.

    Inputs stay in their (…, L) layout; each token block converts its own slice to the block
    layout, so per-token arrays are rearranged while in cache, never as whole-sequence copies.
    """

    def __init__(self, u, delta, A, B4, C4, D, bias, softplus: bool, T: int, block_elems: int) -> None:
        self.b, self.d, self.L = u.shape
        self.n = A.shape[1]
        self.g = B4.shape[1]
        self.hd = self.d // self.g
        self.T = T
        self.n_chunks = max(1, -(-self.L // T))
        self.Lp = self.n_chunks * T
        self.state = (self.g, self.n, self.hd)  # one token's state, channel-minor
        self.K = max(1, block_elems // (self.b * T * self.n * self.d))  # chunks per state block
        self.S = self.K * _STATE_BLOCKS_PER_TOKEN_BLOCK  # chunks per token block
        self.block_numel = self.b * T * min(self.K, self.n_chunks) * self.n * self.d
        self.At = A.view(self.g, self.hd, self.n).transpose(1, 2).contiguous()  # (G, N, d/G)
        self.At2 = self.At * LOG2E  # A in base-2 units: exp(Ax) = exp2(A log2(e) x)
        self.alpha = A.abs().amax(1)  # (d,) max_n |A_dn|, bounds the exponents
        self.u, self.delta, self.B, self.C = (self.pad(x) for x in (u, delta, B4, C4))
        self.Dd = D  # (d,): D u is added in the block layout (…, d)
        self.bias = None if bias is None else bias.view(self.d, 1, 1)
        self.softplus = softplus

    def pad(self, x: Tensor) -> Tensor:
        """Zero-pad the token axis to whole chunks (``_Tokens`` also sets Δ = 0 there, so the
        padding tokens leave the state, and h_L, unchanged)."""
        return F.pad(x, (0, self.Lp - self.L)) if self.Lp != self.L else x

    def token_blocks(self):
        """(c0, c1) chunk ranges of the token blocks, in order."""
        return ((c0, min(self.n_chunks, c0 + self.S)) for c0 in range(0, self.n_chunks, self.S))

    def state_blocks(self, n: int):
        """(k0, k1) ranges, relative to a token block of n chunks, of its state blocks, in order."""
        return ((k0, min(n, k0 + self.K)) for k0 in range(0, n, self.K))

    def store(self, out: Tensor, c0: int, c1: int, x: Tensor) -> Tensor:
        """Write a block result x (b, T, K, G, F) into out (b, G·F, Lp) or (b, G, F, Lp) at chunks c0..c1.

        Returns the written part of ``out`` as (b, G·F, K, T) or (b, G, F, K, T).
        """
        view = out[..., c0 * self.T : c1 * self.T].unflatten(-1, (c1 - c0, self.T))  # (b, ·, K, T)
        view.view(self.b, self.g, x.shape[-1], c1 - c0, self.T).copy_(x.permute(0, 3, 4, 2, 1))
        return view


class _Tokens:
    """Per-token arrays of the chunks c0..c1 (a token block) in the layout (b, T, S, G, ·, ·)."""

    def __init__(self, plan: _Plan, c0: int, c1: int, *, check: bool, for_backward: bool = False) -> None:
        self.plan, self.c0, self.c1 = plan, c0, c1
        T, m = plan.T, (plan.T - 1) // 2
        # Δ along the contiguous token axis, (b, d, S, T), then in the block layout with u
        x = self.seq(plan.delta)
        if plan.bias is not None:
            x = x + plan.bias
        dt = _softplus(x) if plan.softplus else x
        if c1 == plan.n_chunks and plan.Lp > plan.L:  # padding: Δ = 0 keeps the last state h_L
            dt = dt.clone()
            dt.view(plan.b, plan.d, -1)[..., plan.L - c0 * T :] = 0
        # Δ and u are brought to the block layout first (two transposes either way), so the
        # within-chunk cumsum σ, σ − σ_m and Δ u are computed there, without further layout changes.
        dt = self.tokens(dt, per="channel", blocked=True)  # (b, T, S, G, 1, hd)
        u_tok = self.tokens(plan.u, per="channel")
        sig = _cumsum_tokens(dt)
        rho = sig - sig[:, m : m + 1]  # σ_t − σ_m
        if check and T > 1 and not dt.is_meta:  # meta tensors (FLOP counting) have no values to check
            # σ is monotone when Δ = softplus(·) ≥ 0: the extremes are at the chunk's ends
            span = torch.maximum(-rho[:, 0], rho[:, -1]).amax((0, 1)) if plan.softplus else rho.abs().amax((0, 1, 2))
            if float((span.reshape(-1) * plan.alpha).amax()) > EXP_LIMIT:
                raise _ChunkTooLong
        self.B = self.tokens(plan.B, per="state")  # (b, T, S, G, N, 1)
        self.C = self.tokens(plan.C, per="state")
        self.u = u_tok
        self.du = dt * u_tok  # (b, T, S, G, 1, hd)
        self.rho = rho
        self.r = sig[:, m : m + 1].mul(plan.At2).exp2_()  # (b, 1, S, G, N, hd): decay chunk start → m
        if for_backward:
            self.x, self.dt = x, dt

    def seq(self, x: Tensor) -> Tensor:
        """This token block of a (b, d, Lp) sequence as a (b, d, S, T) view."""
        T = self.plan.T
        return x[..., self.c0 * T : self.c1 * T].unflatten(-1, (self.c1 - self.c0, T))

    def tokens(self, x: Tensor, *, per: Literal["channel", "state"], blocked: bool = False) -> Tensor:
        """This token block of x in the block layout, contiguous.

        per="channel": x (b, d, Lp) → (b, T, S, G, 1, hd);  per="state": x (b, G, N, Lp) → (b, T, S, G, N, 1).
        ``blocked``: x is already this block as (b, d, S, T') (T' = T, or 1 for a per-chunk value).
        """
        p, k = self.plan, self.c1 - self.c0
        xs = x if blocked else x[..., self.c0 * p.T : self.c1 * p.T].unflatten(-1, (k, p.T))
        if per == "channel":  # (b, d, S, T')
            return _channels_last(xs).view(p.b, xs.shape[-1], k, p.g, 1, p.hd)
        return xs.permute(0, 4, 3, 1, 2).contiguous().view(p.b, p.T, k, p.g, p.n, 1)  # (b, G, N, S, T)


class _Block:
    """Chunks k0..k1 of a token block, state-sized: exponentials, rescaled inputs, chunk summaries."""

    def __init__(self, plan: _Plan, tok: _Tokens, k0: int, k1: int, work: tuple[Tensor, Tensor] | None = None) -> None:
        T = plan.T
        shape = (plan.b, T, k1 - k0, *plan.state)
        E, q = (w[: math.prod(shape)].view(shape) for w in work) if work else (None, None)
        self.B, self.C, self.du = tok.B[:, :, k0:k1], tok.C[:, :, k0:k1], tok.du[:, :, k0:k1]
        self.r = tok.r[:, :, k0:k1]
        self.E = torch.mul(tok.rho[:, :, k0:k1], plan.At2, out=E).exp2_()  # (b, T, K, G, N, hd): exp(A(σ_t − σ_m))
        # q_t = Σ_{k≤t} Δ_k u_k B_k / E_k, as a cumsum within groups of t2 tokens plus the group
        # offsets.  Only the group totals are needed before the carry (a read-only reduction);
        # ``states`` adds each group's offset to its first token and then runs the within-group
        # cumsum, which saves a full pass over the block compared with adding the offsets after.
        self.q = torch.mul(self.du, self.B, out=q).div_(self.E)  # Δ_t u_t B_t / E_t, not yet summed
        self.t2 = _group_size(T)
        self.group_totals = self.q.unflatten(1, (T // self.t2, self.t2)).sum(2)  # (b, T/t2, K, G, N, hd)
        E_end = self.E[:, T - 1]  # (b, K, G, N, hd)
        self.chunk_decay = self.r[:, 0] * E_end  # exp(A σ_end): decay over the whole chunk
        self.local_end = E_end * self.group_totals.sum(1)  # chunk-end state from a zero start

    def states(self, h_start: Tensor) -> Tensor:
        """h_t = E_t (r h_start + q_t) for every token of the block, h_start (b, K, G, N, hd); consumes q."""
        totals = self.group_totals
        first = self.q.unflatten(1, (totals.shape[1], self.t2))[:, :, 0]  # (b, T/t2, K, G, N, hd)
        # group offsets r h_start + (exclusive prefix sum of the group totals), added to each
        # group's first token before its cumsum.  Shifted, not inclusive − own: later terms are
        # exponentially larger, so that subtraction would cancel catastrophically.
        first.add_(self.r * h_start.unsqueeze(1))
        first[:, 1:] += totals[:, :-1].cumsum(1)
        _group_cumsum_(self.q, self.t2)
        h = self.q.mul_(self.E)
        del self.q, self.group_totals
        return h


def _channels_last(x: Tensor) -> Tensor:
    """x (b, d, S, T) → contiguous (b, T, S, d), through 2-D transposes of each batch element.

    A direct permuted copy reads d rows a power-of-two stride apart, one element per cache line,
    and is 3–5× slower on CPU than torch's cache-blocked 2-D transpose (used by ``copy_`` when the
    source is the transpose of a contiguous matrix); the remaining (S, T) → (T, S) swap moves
    whole contiguous rows of d elements.
    """
    b, d, S, T = x.shape
    if x.is_cuda or T == 1 or S == 1:
        return x.permute(0, 3, 2, 1).contiguous()
    x = x.contiguous()
    rows = x.new_empty(b, S * T, d)  # (b, S·T, d)
    for i in range(b):
        rows[i].copy_(x[i].view(d, S * T).t())
    return rows.view(b, S, T, d).transpose(1, 2).contiguous()


def _cumsum_tokens(x: Tensor) -> Tensor:
    """Cumulative sum over the token axis 1 of a (b, T, ...) block, as a new tensor.

    On CPU two-level, like ``_group_cumsum_`` (``torch.cumsum`` over a non-innermost axis is
    several times slower): t2 − 1 slice additions inside groups of t2 ≈ √T tokens, then T/t2 − 1
    to add each group's predecessor's total, about 2√T operations instead of T − 1.  On CUDA one
    cumsum kernel.
    """
    if x.is_cuda:
        return x.cumsum(1)
    out = x.clone()
    t2 = _group_size(x.shape[1])
    _group_cumsum_(out, t2)
    groups = out.unflatten(1, (x.shape[1] // t2, t2)).unbind(1)  # (b, t2, ...) each
    for prev, cur in zip(groups, groups[1:]):
        cur.add_(prev[:, t2 - 1 :])
    return out


def _contract_state(v: Tensor, h: Tensor) -> Tensor:
    """Σ_n v[n] h[n, :] per token: v (b, T, K, G, N, 1), h (b, T, K, G, N, hd) → (b, T, K, G, hd).

    A batched (1×N)·(N×hd) matmul: one fused multiply-reduce instead of a product and a sum.
    """
    *lead, n, hd = h.shape
    return torch.bmm(v.reshape(-1, 1, n), h.reshape(-1, n, hd)).view(*lead, hd)


def _contract_channel(h: Tensor, v: Tensor) -> Tensor:
    """Σ_c h[:, c] v[c] per token: h (b, T, K, G, N, hd), v (b, T, K, G, 1, hd) → (b, T, K, G, N)."""
    *lead, n, hd = h.shape
    return torch.bmm(h.reshape(-1, n, hd), v.reshape(-1, hd, 1)).view(*lead, n)


def _group_size(T: int) -> int:
    """t2 ≈ √T, a power of two dividing T: the within-group length of the two-level cumsum."""
    return 1 << (max(T.bit_length() - 1, 0) + 1) // 2


def _group_cumsum_(x: Tensor, t2: int) -> Tensor:
    """In place: cumulative sum over axis 1 of x (b, T, ...) within consecutive groups of t2 tokens.

    Returns the group totals (b, T/t2, ...), a view of x.  On CPU the sum is t2 − 1 additions of
    contiguous slices (``torch.cumsum`` over a non-innermost axis is several times slower); on
    CUDA one cumsum kernel.
    """
    grouped = x.unflatten(1, (x.shape[1] // t2, t2))  # (b, T1, t2, ...)
    if x.is_cuda:
        grouped.copy_(grouped.cumsum(2))
        return grouped[:, :, t2 - 1]
    slices = grouped.unbind(2)
    for prev, cur in zip(slices, slices[1:]):
        cur.add_(prev)
    return slices[-1]


def _reverse_cumsum_tokens_(x: Tensor) -> Tensor:
    """In place: x_t ← Σ_{k≥t} x_k over the token axis 1 of a (b, T, K, ...) block.

    On CUDA one cumsum kernel.  On CPU two-level, like ``_group_cumsum_``: t2 − 1 slice additions
    inside groups of t2 tokens, then T/t2 − 1 to carry the group totals leftwards.
    """
    if x.is_cuda:
        return x.copy_(x.flip(1).cumsum(1).flip(1))
    T = x.shape[1]
    t2 = _group_size(T)
    grouped = x.unflatten(1, (T // t2, t2))  # (b, T1, t2, ...)
    slices = grouped.unbind(2)
    for nxt, cur in zip(slices[::-1], slices[-2::-1]):
        cur.add_(nxt)
    groups = grouped.unbind(1)
    for nxt, cur in zip(groups[::-1], groups[-2::-1]):
        cur.add_(nxt[:, :1])
    return x
