"""The selective scan (S6) as two Triton kernels: the ``"triton"`` backend of ``selective_scan``.

    h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t u_t B_t,      y_t = C_t · h_t,      Δ = softplus(δ + bias)

Why a kernel: the chunked PyTorch scan (``selective_scan._ChunkedScan``) is built for CPUs.  On a
GPU its sequential carry between chunks and its many small element-wise passes are one kernel
launch each: a paper-scale DGNO forward spends most of its time launching kernels (H200: 14 img/s
at both 128² and 256²), and the training step reads and writes the N-times-larger state tensors
several times.  Triton ships with every CUDA build of PyTorch, so this backend is available
wherever a GPU is, with no compiled extension to build (unlike ``mamba_ssm``).

Work split: one program per (batch element, block of ``channels`` channels that share B and C);
it walks the sequence in chunks of ``block_l`` tokens.  Inside a chunk the recurrence is a
parallel associative scan over (decay, drive) pairs,

    (a₁, b₁) ∘ (a₂, b₂) = (a₁ a₂, a₂ b₁ + b₂),        h_t = b̂_t + â_t h_start,

which only multiplies decays ≤ 1 (no overflow, no division, unlike the cumulative-sum form the CPU
scan uses).  The state entering each chunk is kept for the backward pass: (b, d, chunks + 1, N),
``block_l`` times smaller than all states.

Backward, chunk by chunk from the end: the states of the chunk are recomputed from its saved
start, and the adjoint λ_t = C_t g_t + exp(Δ_{t+1} A) λ_{t+1} is a reverse associative scan with
the next token's decay.  Then

    ∂u_t = Δ_t Σ_n λ_t B_t,   ∂Δ_t = Σ_n λ_t (u_t B_t + A a_t h_{t−1}),   ∂A = Σ_t λ_t Δ_t a_t h_{t−1},
    ∂B_t = Σ_c λ_t Δ_t u_t,   ∂C_t = Σ_c h_t g_t,

with a_t h_{t−1} = h_t − Δ_t u_t B_t.  ∂B and ∂C sum over channels, across programs, so they are
accumulated with atomic adds (the summation order, hence the last bits, can vary between runs;
forward outputs are deterministic).  D u and the SiLU(z) gate are left to autograd outside.

Tests run these kernels on the CPU through Triton's interpreter (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs without triton: the backend reports itself unavailable
    triton = None
    tl = None


@dataclass(frozen=True)
class ScanConfig:
    """Tile sizes of the kernels: ``channels`` per program × ``block_l`` tokens × N states.

    Chosen on an H100 by ``benchmarks/gpu/speed.py`` (its ``scan_configs`` records every
    candidate, see ``config_for``); ``channels`` is lowered automatically to a divisor of the
    channels per group.
    """

    block_l: int = 128
    channels: int = 2
    num_warps: int = 4


# Two tile shapes, picked by how many (batch × channel) rows there are to spread over the GPU
# (benchmarks/results/gpu_speed_h100.json, "scan_configs", 96 channels × 65 536 tokens, H100):
# batch 8 (768 rows): 2 channels × 128 tokens was fastest (forward + backward 12.5 ms; 1 × 256:
# 14.3 ms); batch 1 (96 rows): 1 channel × 256 tokens (4.2 ms vs 6.0 ms), since two channels per
# program left most multiprocessors idle.  CONFIG is the many-rows shape; FEW_ROWS_CONFIG is used
# when batch × channels ≤ FEW_ROWS.
CONFIG = ScanConfig()
FEW_ROWS_CONFIG = ScanConfig(block_l=256, channels=1, num_warps=4)
FEW_ROWS = 512


def config_for(batch: int, channels: int) -> ScanConfig:
    """The tile shape for a scan of ``batch`` × ``channels`` rows (see FEW_ROWS_CONFIG)."""
    return FEW_ROWS_CONFIG if batch * channels <= FEW_ROWS else CONFIG


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU with its interpreter (tests)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def available(device: torch.device | str) -> bool:
    """Whether the Triton scan can run on ``device``: CUDA with triton, or anywhere when interpreting."""
    if triton is None:
        return False
    return torch.device(device).type == "cuda" or interpreting()


if triton is not None:

    @triton.jit
    def _combine(a1, b1, a2, b2):
        # (a₁, b₁) then (a₂, b₂): h ↦ a₂ (a₁ h + b₁) + b₂
        return a1 * a2, a2 * b1 + b2

    @triton.jit
    def _softplus(x):
        # max(x, 0) + log1p(e^{−|x|}) with log1p(y) ≈ log(u) + (y − (u − 1)), u = 1 + y: keeps the
        # relative precision of small steps Δ (x ≪ 0), where log(1 + e^x) would round to 0
        y = tl.exp(-tl.abs(x))
        u = 1.0 + y
        return tl.maximum(x, 0.0) + tl.log(u) + (y - (u - 1.0))

    @triton.jit
    def _steps(DT, bias, rows, t, mask, SOFTPLUS: tl.constexpr):
        """(δ + bias, Δ) at tokens t of the channel rows (CB,) → two (CB, BL) tiles; Δ = 0 where masked."""
        x = tl.load(DT + rows[:, None] + t[None, :], mask=mask, other=0.0) + bias[:, None]
        if SOFTPLUS:
            dt = _softplus(x)
        else:
            dt = x
        return x, tl.where(mask, dt, 0.0)

    @triton.jit
    def _chunk_states(dt, u, Bt, a_mat, h0):
        """States of one chunk: h (CB, BL, N) from its start h0 (CB, N), and the drive Δ u B."""
        decay = tl.exp(dt[:, :, None] * a_mat[:, None, :])  # exp(Δ_t A), (CB, BL, N)
        drive = (dt * u)[:, :, None] * Bt[None, :, :]  # Δ_t u_t B_t
        pa, pb = tl.associative_scan((decay, drive), 1, _combine)
        return pb + pa * h0[:, None, :], drive

    @triton.jit
    def _scan_fwd(
        U, DT, A, BIAS, Bm, Cm, Y, STATES,
        L, D, G, N, CH_PER_GROUP, n_chunks,
        SOFTPLUS: tl.constexpr, HAS_BIAS: tl.constexpr, CB: tl.constexpr, BLOCK_L: tl.constexpr, NP: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        c0 = tl.program_id(1) * CB
        ch = c0 + tl.arange(0, CB)  # this program's channels, all in group c0 // CH_PER_GROUP
        ch_ok = ch < D
        n = tl.arange(0, NP)
        n_ok = n < N
        a_mat = tl.load(A + ch[:, None] * N + n[None, :], mask=ch_ok[:, None] & n_ok[None, :], other=0.0)  # (CB, N)
        if HAS_BIAS:
            bias = tl.load(BIAS + ch, mask=ch_ok, other=0.0)
        else:
            bias = tl.zeros((CB,), dtype=a_mat.dtype)
        rows = (b * D + ch) * L  # offsets of the channel rows in (b, d, L)
        bc = (b * G + c0 // CH_PER_GROUP) * N * L  # this group's B, C in (b, G, N, L)
        last = tl.arange(0, BLOCK_L) == BLOCK_L - 1
        h = a_mat * 0.0  # state entering the chunk, (CB, N)
        for k in range(0, n_chunks):
            t = k * BLOCK_L + tl.arange(0, BLOCK_L)
            t_ok = t < L
            m2 = ch_ok[:, None] & t_ok[None, :]  # (CB, BL)
            mbc = t_ok[:, None] & n_ok[None, :]  # (BL, N)
            x, dt = _steps(DT, bias, rows, t, m2, SOFTPLUS)
            u = tl.load(U + rows[:, None] + t[None, :], mask=m2, other=0.0)
            Bt = tl.load(Bm + bc + n[None, :] * L + t[:, None], mask=mbc, other=0.0)  # (BL, N)
            Ct = tl.load(Cm + bc + n[None, :] * L + t[:, None], mask=mbc, other=0.0)
            hs, drive = _chunk_states(dt, u, Bt, a_mat, h)
            tl.store(Y + rows[:, None] + t[None, :], tl.sum(hs * Ct[None, :, :], 2), mask=m2)
            h = tl.sum(tl.where(last[None, :, None], hs, 0.0), 1)  # padding tokens (Δ = 0) keep the state
            tl.store(STATES + ((b * D + ch[:, None]) * (n_chunks + 1) + k + 1) * N + n[None, :], h, mask=ch_ok[:, None] & n_ok[None, :])

    @triton.jit
    def _scan_bwd(
        U, DT, A, BIAS, Bm, Cm, GY, STATES, GLAST,
        DU, DDT, DB, DC, DA, DBIAS,
        L, D, G, N, CH_PER_GROUP, n_chunks,
        SOFTPLUS: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_GLAST: tl.constexpr,
        CB: tl.constexpr, BLOCK_L: tl.constexpr, NP: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        c0 = tl.program_id(1) * CB
        ch = c0 + tl.arange(0, CB)
        ch_ok = ch < D
        n = tl.arange(0, NP)
        n_ok = n < N
        mcn = ch_ok[:, None] & n_ok[None, :]
        a_mat = tl.load(A + ch[:, None] * N + n[None, :], mask=mcn, other=0.0)
        if HAS_BIAS:
            bias = tl.load(BIAS + ch, mask=ch_ok, other=0.0)
        else:
            bias = tl.zeros((CB,), dtype=a_mat.dtype)
        rows = (b * D + ch) * L
        bc = (b * G + c0 // CH_PER_GROUP) * N * L
        first = tl.arange(0, BLOCK_L) == 0
        if HAS_GLAST:  # λ entering from the right: ∂loss/∂h_L
            lam = tl.load(GLAST + (b * D + ch[:, None]) * N + n[None, :], mask=mcn, other=0.0)
        else:
            lam = a_mat * 0.0
        dA = a_mat * 0.0
        dbias = bias * 0.0
        for kk in range(0, n_chunks):
            k = n_chunks - 1 - kk
            t = k * BLOCK_L + tl.arange(0, BLOCK_L)
            t_ok = t < L
            m2 = ch_ok[:, None] & t_ok[None, :]
            mbc = t_ok[:, None] & n_ok[None, :]
            x, dt = _steps(DT, bias, rows, t, m2, SOFTPLUS)
            _, dt_next = _steps(DT, bias, rows, t + 1, ch_ok[:, None] & (t + 1 < L)[None, :], SOFTPLUS)
            u = tl.load(U + rows[:, None] + t[None, :], mask=m2, other=0.0)
            gy = tl.load(GY + rows[:, None] + t[None, :], mask=m2, other=0.0)
            Bt = tl.load(Bm + bc + n[None, :] * L + t[:, None], mask=mbc, other=0.0)
            Ct = tl.load(Cm + bc + n[None, :] * L + t[:, None], mask=mbc, other=0.0)
            h0 = tl.load(STATES + ((b * D + ch[:, None]) * (n_chunks + 1) + k) * N + n[None, :], mask=mcn, other=0.0)
            hs, drive = _chunk_states(dt, u, Bt, a_mat, h0)
            # λ_t = C_t g_t + exp(Δ_{t+1} A) λ_{t+1}: a reverse scan, continued from the next chunk
            decay_next = tl.exp(dt_next[:, :, None] * a_mat[:, None, :])
            qa, qb = tl.associative_scan((decay_next, Ct[None, :, :] * gy[:, :, None]), 1, _combine, reverse=True)
            lam_t = qb + qa * lam[:, None, :]  # (CB, BL, N)
            lam = tl.sum(tl.where(first[None, :, None], lam_t, 0.0), 1)
            prev = hs - drive  # a_t h_{t−1}
            lam_b = tl.sum(lam_t * Bt[None, :, :], 2)  # Σ_n λ_t B_t, (CB, BL)
            ddt = u * lam_b + tl.sum(lam_t * a_mat[:, None, :] * prev, 2)
            if SOFTPLUS:
                ddt = ddt * tl.sigmoid(x)
            ddt = tl.where(m2, ddt, 0.0)  # padding tokens carry λ but have no step of their own
            tl.store(DU + rows[:, None] + t[None, :], dt * lam_b, mask=m2)
            tl.store(DDT + rows[:, None] + t[None, :], ddt, mask=m2)
            dA += tl.sum(lam_t * dt[:, :, None] * prev, 1)
            dbias += tl.sum(ddt, 1)
            tl.atomic_add(DB + bc + n[None, :] * L + t[:, None], tl.sum(lam_t * (dt * u)[:, :, None], 0), mask=mbc)
            tl.atomic_add(DC + bc + n[None, :] * L + t[:, None], tl.sum(hs * gy[:, :, None], 0), mask=mbc)
        tl.store(DA + (b * D + ch[:, None]) * N + n[None, :], dA, mask=mcn)
        tl.store(DBIAS + b * D + ch, dbias, mask=ch_ok)


def _launch_shape(d: int, groups: int, config: ScanConfig) -> tuple[int, int]:
    """(channels per program, programs per batch element): channels a power of two dividing d/G."""
    per_group = d // groups
    cb = 1
    while cb * 2 <= config.channels and per_group % (cb * 2) == 0:
        cb *= 2
    return cb, -(-d // cb)


class _TritonScan(torch.autograd.Function):
    """y = C·h with h_t = exp(Δ_t A) h_{t−1} + Δ_t u_t B_t (module docstring); also returns h_L.

    u, delta (b, d, L); A (d, N); B4, C4 (b, G, N, L); bias (d,) or None; all one float dtype.
    """

    @staticmethod
    def forward(ctx, u, delta, A, B4, C4, bias, softplus: bool):
        u, delta, A, B4, C4 = (t.contiguous() for t in (u, delta, A, B4, C4))
        b, d, L = u.shape
        g, n = B4.shape[1], A.shape[1]
        cfg = config_for(b, d)
        cb, programs = _launch_shape(d, g, cfg)
        n_chunks = max(1, -(-L // cfg.block_l))
        y = torch.empty_like(u)
        states = u.new_zeros(b, d, n_chunks + 1, n)
        bias_arg = bias.contiguous() if bias is not None else u
        _scan_fwd[(b, programs)](
            u, delta, A, bias_arg, B4, C4, y, states,
            L, d, g, n, d // g, n_chunks,
            SOFTPLUS=softplus, HAS_BIAS=bias is not None, CB=cb, BLOCK_L=cfg.block_l,
            NP=triton.next_power_of_2(n), num_warps=cfg.num_warps,
        )  # fmt: skip
        ctx.save_for_backward(u, delta, A, B4, C4, bias, states)
        ctx.softplus, ctx.launch = softplus, (cb, programs, n_chunks, cfg)
        ctx.set_materialize_grads(False)
        return y, states[:, :, -1].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy, glast):
        u, delta, A, B4, C4, bias, states = ctx.saved_tensors
        cb, programs, n_chunks, cfg = ctx.launch
        b, d, L = u.shape
        g, n = B4.shape[1], A.shape[1]
        gy = torch.zeros_like(u) if gy is None else gy.to(u.dtype).contiguous()
        du, ddelta = torch.empty_like(u), torch.empty_like(u)
        dB, dC = torch.zeros_like(B4), torch.zeros_like(C4)
        dA = u.new_empty(b, d, n)  # per batch element, summed below
        dbias = u.new_empty(b, d)
        bias_arg = bias if bias is not None else u
        glast_arg = glast.to(u.dtype).contiguous() if glast is not None else u
        _scan_bwd[(b, programs)](
            u, delta, A, bias_arg, B4, C4, gy, states, glast_arg,
            du, ddelta, dB, dC, dA, dbias,
            L, d, g, n, d // g, n_chunks,
            SOFTPLUS=ctx.softplus, HAS_BIAS=bias is not None, HAS_GLAST=glast is not None,
            CB=cb, BLOCK_L=cfg.block_l, NP=triton.next_power_of_2(n), num_warps=cfg.num_warps,
        )  # fmt: skip
        return du, ddelta, dA.sum(0), dB, dC, (dbias.sum(0) if bias is not None else None), None


def scan(u: Tensor, delta: Tensor, A: Tensor, B4: Tensor, C4: Tensor, bias: Tensor | None, softplus: bool) -> tuple[Tensor, Tensor]:
    """(y, h_L) of the selective scan without D and gate: y (b, d, L), h_L (b, d, N).

    Inputs as ``_TritonScan``, already in the compute dtype (float32, or float64 for exact tests).
    """
    if triton is None:
        raise RuntimeError("the 'triton' selective-scan backend needs the triton package (it ships with CUDA builds of PyTorch)")
    if not available(u.device):
        raise RuntimeError(f"the 'triton' selective-scan backend needs CUDA tensors, got device {u.device}")
    if not math.prod(u.shape):
        return u.clone(), u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    return _TritonScan.apply(u, delta, A, B4, C4, bias, softplus)
