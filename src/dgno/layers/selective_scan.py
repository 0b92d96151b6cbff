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
* ``"reference"`` — the recurrence written as a plain loop over tokens; for tests and benchmarks;
* ``"auto"`` — ``mamba_ssm`` for CUDA tensors when it imports, else ``torch``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

Backend = Literal["auto", "torch", "mamba_ssm", "reference"]
BACKENDS: tuple[str, ...] = ("auto", "torch", "mamba_ssm", "reference")

# Largest |exponent| the chunked scan lets exp() see.  e^60 ≈ 1e26 keeps every intermediate
# (rescaled inputs summed over a chunk, their gradients) far from float32 overflow (3e38)
# while allowing long chunks; the chunk length adapts so this bound always holds.
EXP_LIMIT = 60.0
# Longest chunk tried.  On CPU the within-chunk prefix sum is T−1 vector additions and the
# carry between chunks one per chunk, so the Python-op count per block, T + tokens/T, is
# smallest near T = 32; on CUDA the prefix sum is one kernel and only the carry loop remains.
_MAX_CHUNK = {"cpu": 32, "cuda": 128}
# State elements (batch × tokens × N × D) processed per block: about 2 MB of float32 on CPU,
# which stays in cache; on CUDA large blocks amortise kernel launches.
_BLOCK_ELEMS = {"cpu": 1 << 19, "cuda": 1 << 25}


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
    mamba_fn = mamba_selective_scan_fn() if backend in ("auto", "mamba_ssm") else None
    if backend == "mamba_ssm":
        if mamba_fn is None:
            raise RuntimeError("backend 'mamba_ssm' requested but mamba_ssm.ops.selective_scan_interface does not import")
        if not u.is_cuda:
            raise RuntimeError(f"backend 'mamba_ssm' needs CUDA tensors, got device {u.device}")
    if mamba_fn is not None and u.is_cuda:
        return mamba_fn(*(t.contiguous() if isinstance(t, Tensor) else t for t in args))
    return _selective_scan_torch(*args)


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
            raise ValueError(f"{name} must be (b, N, L) = {(b, n, L)} or (b, G, N, L) with G dividing d={d}, got {tuple(t.shape)}")
    for name, t, shape in (("D", D, (d,)), ("delta_bias", delta_bias, (d,)), ("z", z, (b, d, L))):
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")


def _compute_dtype(u: Tensor) -> torch.dtype:
    """float64 stays float64 (exact tests); everything else is computed in float32 like mamba_ssm."""
    return torch.float64 if u.dtype == torch.float64 else torch.float32


def _prepare(u, delta, A, B, C, delta_bias, delta_softplus):
    """Cast to the compute dtype, apply bias/softplus to Δ, and bring B, C to (b, G, N, L)."""
    dtype = _compute_dtype(u)
    dt = delta.to(dtype)
    if delta_bias is not None:
        dt = dt + delta_bias.to(dtype).unsqueeze(-1)
    if delta_softplus:
        dt = F.softplus(dt)
    B4 = B.unsqueeze(1) if B.dim() == 3 else B
    C4 = C.unsqueeze(1) if C.dim() == 3 else C
    return u.to(dtype), dt, A.to(dtype), B4.to(dtype), C4.to(dtype)


def _finish(y, last, u, u_, D, z, return_last_state):
    """y ← (y + D u) · SiLU(z), cast back to u's dtype (the parts outside the recurrence)."""
    if D is not None:
        y = y + u_ * D.to(y.dtype).unsqueeze(-1)
    if z is not None:
        y = y * F.silu(z.to(y.dtype))
    y = y.to(u.dtype)
    return (y, last) if return_last_state else y


def _selective_scan_torch(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state):
    """The ``"torch"`` backend: elementwise parts by autograd, the recurrence by ``_ChunkedScan``."""
    u_, dt, A_, B4, C4 = _prepare(u, delta, A, B, C, delta_bias, delta_softplus)
    device = "cuda" if u_.is_cuda else "cpu"
    T = chunk_length(dt, A_, _MAX_CHUNK[device])
    y, last = _ChunkedScan.apply(u_, dt, A_, B4, C4, T, _BLOCK_ELEMS[device])
    return _finish(y, last, u, u_, D, z, return_last_state)


def chunk_length(dt: Tensor, A: Tensor, max_chunk: int) -> int:
    """Largest power of two T ≤ ``max_chunk`` with |A|·|σ_t − σ_m| ≤ EXP_LIMIT in every chunk.

    σ_t = Σ_{j≤t} Δ_j is the within-chunk cumulative step and m = ⌊(T−1)/2⌋ the chunk's reference
    token; the scan evaluates exp(±A(σ_t − σ_m)), so this bound is what keeps it finite.  It is
    checked through max_d |A_d|·Σ|Δ| over each half chunk, an upper bound of the span that costs
    two passes over Δ.  Typical MambaIRv2 steps (Δ ≲ 0.1, |A| ≤ 8) give the longest chunk; huge
    steps shorten the chunks (slower, never wrong).  T = 1 always qualifies.
    dt: (b, d, L), A: (d, N).
    """
    b, d, L = dt.shape
    alpha = A.detach().abs().amax(dim=1).unsqueeze(-1)  # (d, 1)
    T = min(max_chunk, 1 << max(0, math.ceil(math.log2(max(L, 1)))))
    mass = dt.detach().abs()
    while T > 1:
        n_chunks = -(-L // T)
        halves = F.pad(mass, (0, n_chunks * T - L)).view(b, d, 2 * n_chunks, T // 2).sum(-1)  # (b, d, 2·chunks)
        if float((halves.amax(0) * alpha).amax()) <= EXP_LIMIT:
            return T
        T //= 2
    return 1


class _ChunkedScan(torch.autograd.Function):
    """h_t = exp(Δ_t A) h_{t−1} + Δ_t u_t B_t, y_t = Σ_n C_t[n] h_t[n], by chunks of T tokens.

    Within a chunk with reference token m, write E_t = exp(A(σ_t − σ_m)) (σ = within-chunk
    cumulative Δ, so E_t/E_k is the decay from token k to t) and r = exp(A σ_m) (decay from the
    chunk start to m).  Then, exactly,

        h_t = E_t · ( r · h_start + Σ_{k≤t} (Δ_k u_k B_k) / E_k ),

    a cumulative sum instead of a recurrence.  The reference token in the middle bounds both
    exp(±A(σ_t − σ_m)) by e^EXP_LIMIT (``chunk_length``), so nothing overflows or loses its
    relative precision, which a single cumulative product over the sequence would.  Only the
    chunk-start states h_start are carried sequentially, one vector update per chunk.

    Tensors are processed in blocks of whole chunks in the token-major layout
    (b, K, T, N, G, D/G), so per-token quantities broadcast over contiguous channels and a
    block stays in cache.  The backward pass runs the adjoint recurrence
    λ_t = C_t g_t + exp(Δ_{t+1} A) λ_{t+1} the same way from the end, recomputing the states
    block by block from the saved chunk-start states.
    """

    @staticmethod
    def forward(ctx, u, dt, A, B4, C4, T: int, block_elems: int):
        # u, dt: (b, d, L); A: (d, N); B4, C4: (b, G, N, L)
        plan = _Plan(u, A, B4, T, block_elems)
        u_p, dt_p, B_p, C_p = (plan.pad(t) for t in (u, dt, B4, C4))
        plan.set_offsets(dt_p)
        At = plan.state_matrix(A)  # (N, G, d/G)
        starts = u.new_zeros(plan.b, plan.n_chunks + 1, *plan.state)  # h at every chunk start (and the end)
        y = u.new_empty(plan.b, plan.Lp, plan.d)
        for c0, c1 in plan.blocks():
            blk = _Block(plan, At, u_p, dt_p, B_p, c0, c1)
            for k in range(c1 - c0):  # carry: h_start(k+1) = decay_k · h_start(k) + local end state_k
                torch.addcmul(blk.local_end[:, k], blk.chunk_decay[:, k], starts[:, c0 + k], out=starts[:, c0 + k + 1])
            h = blk.states(starts[:, c0:c1])  # (b, K, T, N, G, d/G)
            h.mul_(plan.tokens(C_p, c0, c1, per="state"))
            torch.sum(h, dim=3, out=y[:, c0 * T : c1 * T].view(plan.b, c1 - c0, T, plan.g, plan.hd))
        ctx.save_for_backward(u, dt, A, B4, C4, starts)
        ctx.T, ctx.block_elems = T, block_elems
        last = starts[:, -1].flatten(2).transpose(1, 2).clone()  # (b, d, N); a copy, `starts` is saved
        return y[:, : plan.L].transpose(1, 2), last

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy, glast):
        u, dt, A, B4, C4, starts = ctx.saved_tensors
        T = ctx.T
        plan = _Plan(u, A, B4, T, ctx.block_elems)
        gy = torch.zeros_like(u) if gy is None else gy.to(u.dtype)
        u_p, dt_p, B_p, C_p, g_p = (plan.pad(t) for t in (u, dt, B4, C4, gy))
        plan.set_offsets(dt_p)
        At = plan.state_matrix(A)
        b, g, hd, n, K_ = plan.b, plan.g, plan.hd, plan.n, plan.n_chunks
        # adjoint entering from the right of the current chunk: ∂loss/∂h_L, then carried leftwards
        carry = u.new_zeros(b, *plan.state)
        if glast is not None:
            carry += glast.to(u.dtype).transpose(1, 2).reshape(b, *plan.state)
        du = u.new_empty(b, plan.Lp, g, hd)
        ddt = u.new_empty(b, plan.Lp, g, hd)
        dB = u.new_empty(b, plan.Lp, n, g)
        dC = u.new_empty(b, plan.Lp, n, g)
        dA = u.new_zeros(plan.state)
        for c0, c1 in reversed(list(plan.blocks())):
            k_ = c1 - c0
            sl = slice(c0 * T, c1 * T)
            blk = _Block(plan, At, u_p, dt_p, B_p, c0, c1)
            h = blk.states(starts[:, c0:c1])  # (b, K, T, N, G, hd)
            g_tok = plan.tokens(g_p, c0, c1, per="channel")  # (b, K, T, 1, G, hd)
            C_tok = plan.tokens(C_p, c0, c1, per="state")  # (b, K, T, N, G, 1)
            dC[:, sl] = (h * g_tok).sum(-1).flatten(1, 2)
            # λ_t = Σ_{k≥t} (E_k / E_t) C_k g_k + (E_end / E_t) · carry  (reverse cumulative sum)
            lam = blk.E * C_tok * g_tok
            _cumsum_tokens_(lam, reverse=True)
            carries = u.new_empty(b, k_, *plan.state)
            for k in reversed(range(k_)):  # carry_{k−1} = r_k Σ_t E_t c_t + decay_k · carry_k
                carries[:, k] = carry
                carry = torch.addcmul(blk.r[:, k, 0] * lam[:, k, 0], blk.chunk_decay[:, k], carry)
            lam.add_((blk.E[:, :, T - 1] * carries).unsqueeze(2)).div_(blk.E)
            # a_t h_{t−1} = h_t − Δ_t u_t B_t
            hb = h.sub_(blk.du_tok * blk.B_tok)
            lam_B = (lam * blk.B_tok).sum(3)  # (b, K, T, G, hd)
            lh = lam.mul(hb)
            du[:, sl] = (blk.dt_tok[:, :, :, 0] * lam_B).flatten(1, 2)
            ddt[:, sl] = (blk.u_tok[:, :, :, 0] * lam_B + (lh * At).sum(3)).flatten(1, 2)
            dA += (lh * blk.dt_tok).sum((0, 1, 2))
            dB[:, sl] = (lam.mul_(blk.du_tok)).sum(-1).flatten(1, 2)
        L = plan.L
        grads_u = du[:, :L].flatten(2).transpose(1, 2)
        grads_dt = ddt[:, :L].flatten(2).transpose(1, 2)
        grads_B = dB[:, :L].permute(0, 3, 2, 1)  # (b, G, N, L)
        grads_C = dC[:, :L].permute(0, 3, 2, 1)
        grads_A = dA.flatten(1).t()  # (d, N)
        return grads_u, grads_dt, grads_A, grads_B, grads_C, None, None


class _Plan:
    """Sizes and layout helpers shared by the forward and backward passes of ``_ChunkedScan``."""

    def __init__(self, u: Tensor, A: Tensor, B4: Tensor, T: int, block_elems: int) -> None:
        self.b, self.d, self.L = u.shape
        self.n = A.shape[1]
        self.g = B4.shape[1]
        self.hd = self.d // self.g
        self.T = T
        self.n_chunks = max(1, -(-self.L // T))
        self.Lp = self.n_chunks * T
        self.state = (self.n, self.g, self.hd)  # one token's state, channel-minor
        self.K = max(1, block_elems // (self.b * T * self.n * self.d))  # chunks per block

    def set_offsets(self, dt_p: Tensor) -> None:
        """σ_t − σ_m per token, (b, d, Lp), and σ_m per chunk, (b, d, chunks), for the padded Δ.

        Computed once for the whole sequence (a cumsum along the contiguous token axis) rather
        than per block in the token-major layout, where it would be a slow strided cumsum.
        """
        m = (self.T - 1) // 2
        sig = dt_p.view(self.b, self.d, self.n_chunks, self.T).cumsum(-1)
        self.sig_m = sig[..., m].contiguous()
        self.rho = (sig - sig[..., m : m + 1]).view(self.b, self.d, self.Lp)

    def pad(self, x: Tensor) -> Tensor:
        """Zero-pad the token axis to whole chunks: Δ = 0, u = 0 tokens leave the state unchanged."""
        return F.pad(x, (0, self.Lp - self.L)) if self.Lp != self.L else x

    def state_matrix(self, A: Tensor) -> Tensor:
        """A (d, N) → (N, G, d/G), the state layout."""
        return A.t().reshape(self.state).contiguous()

    def blocks(self):
        """(c0, c1) chunk ranges of the blocks, in order."""
        return ((c0, min(self.n_chunks, c0 + self.K)) for c0 in range(0, self.n_chunks, self.K))

    def tokens(self, x: Tensor, c0: int, c1: int, *, per: Literal["channel", "state"]) -> Tensor:
        """Chunks c0..c1 of x in token-major layout (b, K, T, ·, ·, ·), contiguous.

        per="channel": x (b, d, Lp) → (b, K, T, 1, G, d/G);  per="state": x (b, G, N, Lp) → (b, K, T, N, G, 1).
        """
        xs = x[..., c0 * self.T : c1 * self.T]
        shape = (self.b, c1 - c0, self.T)
        if per == "channel":
            return xs.transpose(1, 2).reshape(*shape, 1, self.g, self.hd)
        return xs.permute(0, 3, 2, 1).reshape(*shape, self.n, self.g, 1)


class _Block:
    """One block of chunks: the exponentials, rescaled inputs and per-chunk summaries."""

    def __init__(self, plan: _Plan, At: Tensor, u_p: Tensor, dt_p: Tensor, B_p: Tensor, c0: int, c1: int) -> None:
        T = plan.T
        self.dt_tok = plan.tokens(dt_p, c0, c1, per="channel")  # (b, K, T, 1, G, hd)
        self.u_tok = plan.tokens(u_p, c0, c1, per="channel")
        self.B_tok = plan.tokens(B_p, c0, c1, per="state")  # (b, K, T, N, G, 1)
        self.du_tok = self.dt_tok * self.u_tok
        rho = plan.tokens(plan.rho, c0, c1, per="channel")  # σ_t − σ_m
        sig_m = plan.sig_m[:, :, c0:c1].transpose(1, 2).reshape(plan.b, c1 - c0, 1, 1, plan.g, plan.hd)
        self.E = torch.mul(rho, At).exp_()  # (b, K, T, N, G, hd): E_t = exp(A(σ_t − σ_m)), |exponent| ≤ EXP_LIMIT
        self.r = torch.mul(sig_m, At).exp_()  # (b, K, 1, N, G, hd): decay chunk start → m
        q = torch.mul(self.du_tok, self.B_tok).div_(self.E)  # Δ_k u_k B_k / E_k
        self.q = _cumsum_tokens_(q)
        E_end = self.E[:, :, T - 1]  # (b, K, N, G, hd)
        self.chunk_decay = self.r[:, :, 0] * E_end  # exp(A σ_end): decay over the whole chunk
        self.local_end = E_end * q[:, :, T - 1]  # chunk-end state from a zero start

    def states(self, h_start: Tensor) -> Tensor:
        """h_t = E_t (r h_start + q_t) for every token of the block; consumes ``q``."""
        h = self.q.add_((self.r[:, :, 0] * h_start).unsqueeze(2)).mul_(self.E)
        del self.q
        return h


def _cumsum_tokens_(x: Tensor, *, reverse: bool = False) -> Tensor:
    """In-place (reverse) cumulative sum over the token axis 2 of a (b, K, T, ...) block.

    On CPU, T−1 in-place additions of contiguous token slices run several times faster than
    ``torch.cumsum`` over a non-innermost axis; on CUDA one cumsum kernel beats T launches.
    """
    T = x.shape[2]
    if x.is_cuda:
        if reverse:
            x.copy_(x.flip(2).cumsum(2).flip(2))
        else:
            torch.cumsum(x, 2, out=x)
        return x
    order = range(T - 2, -1, -1) if reverse else range(1, T)
    step = 1 if reverse else -1
    for j in order:
        x[:, :, j].add_(x[:, :, j + step])
    return x
