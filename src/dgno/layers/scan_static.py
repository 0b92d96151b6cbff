"""The selective scan as a graph of fixed shape: the form that exports (ONNX, torch.export, TorchScript).

    h_t = a_t ⊙ h_{t−1} + b_t,    a_t = exp(Δ_t A),  b_t = Δ_t u_t B_t,    y_t = C_t · h_t + D u_t

The chunked scan of ``dgno.layers.selective_scan`` chooses its chunk length from the values of Δ (it
halves the chunk until the exponents of a chunk fit in float32), which needs ``Tensor.item()``: a
data-dependent branch that no exporter can follow.  This form needs no such choice, because it never
divides by a decay: it is a blocked parallel scan (reduce, then scan) whose every step multiplies by
decays in (0, 1], exactly as the recurrence does, so it is exact and stable for any Δ.

* Tokens are cut into chunks of ``CHUNK`` (padded with Δ = 0, which leaves the state unchanged).
* Pass 1 runs the recurrence inside every chunk from a zero state, all chunks at once: ``CHUNK``
  steps, each an elementwise update of the (chunks × channels × states) slab.  Its end states e_k
  and the chunk decays P_k = exp(A Σ_chunk Δ) define the same recurrence one level up,
  c_k = P_k c_{k−1} + e_k, which is solved the same way, recursively, until one chunk holds it all.
* Pass 2 runs every chunk again from its true start state c_{k−1}, contracting with C as it goes,
  so the (tokens × channels × states) array of all states is never stored.

The number of steps depends only on the length (``CHUNK`` per level, ⌈log_CHUNK L⌉ levels), so the
graph depends only on the input's shape: a tracer records it for one tile size.  Cost: about twice
the recurrence's arithmetic, done as large elementwise operations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# Tokens per chunk at every level: the steps of a pass are unrolled in the graph, so CHUNK sets its size;
# 8 was the fastest of 8/16/32 on a CPU at 512² (fewer steps mean more levels, which are cheap).
CHUNK = 8


def selective_scan_static(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None,
    delta_bias: Tensor | None,
    delta_softplus: bool,
) -> Tensor:
    """y (b, d, L) of the selective scan; arguments as ``dgno.layers.selective_scan.selective_scan``.

    ``B``, ``C`` are (b, G, N, L) (G groups of d/G channels); everything is computed in ``u``'s dtype
    (the caller casts).  No gradient-specific code: autograd differentiates it, slowly; training uses
    the chunked scan.
    """
    b, d, L = u.shape
    g, n = B.shape[1], B.shape[2]
    dt = delta if delta_bias is None else delta + delta_bias.unsqueeze(-1)
    if delta_softplus:
        dt = F.softplus(dt)
    A3 = A.view(g, d // g, n)  # (G, hd, N): channel c = g·hd + j
    dt_c = _chunks(dt.transpose(1, 2))  # (b, nc, T, d)
    du_c = _chunks((dt * u).transpose(1, 2))  # (b, nc, T, d)
    B_c = _chunks(B.permute(0, 3, 1, 2))  # (b, nc, T, G, N)
    C_c = _chunks(C.permute(0, 3, 1, 2))
    nc = dt_c.shape[1]

    def step(h: Tensor | None, t: int) -> Tensor:
        """h_t = a_t h_{t−1} + b_t for token t of every chunk; states (b, nc, G, hd, N)."""
        dt_t = dt_c[:, :, t].view(b, nc, g, d // g, 1)
        b_t = du_c[:, :, t].view(b, nc, g, d // g, 1) * B_c[:, :, t].unsqueeze(3)
        return b_t if h is None else torch.exp(dt_t * A3) * h + b_t

    h = None
    for t in range(CHUNK):  # pass 1: every chunk from a zero state
        h = step(h, t)
    decay = torch.exp(dt_c.sum(2).view(b, nc, g, d // g, 1) * A3)  # P_k = exp(A Σ_chunk Δ)
    shape = decay.shape
    ends = _inclusive_scan(decay.flatten(2), h.flatten(2)).view(shape)  # c_k
    h = _shift_right(ends)  # c_{k−1}: each chunk's start state
    ys = []
    for t in range(CHUNK):  # pass 2: every chunk from its start state, contracted with C token by token
        h = step(h, t)
        ys.append((h * C_c[:, :, t].unsqueeze(3)).sum(-1).flatten(2))  # (b, nc, d)
    y = torch.stack(ys, dim=2).flatten(1, 2)[:, :L].transpose(1, 2)  # (b, d, L)
    return y if D is None else y + u * D.unsqueeze(-1)


def _chunks(x: Tensor) -> Tensor:
    """(b, L, ...) → (b, nc, CHUNK, ...), zero-padded at the end to whole chunks.

    Zero Δ makes a padding token's decay 1 and its input 0, so it leaves the state as it was.
    """
    x = _pad_tokens(x, (-x.shape[1]) % CHUNK, 0.0)
    return x.unflatten(1, (x.shape[1] // CHUNK, CHUNK))


def _shift_right(x: Tensor) -> Tensor:
    """x (B, n, ...) moved one token along axis 1, a zero token first: the state each chunk starts from."""
    return F.pad(x[:, :-1], [0, 0] * (x.dim() - 2) + [1, 0])


def _pad_tokens(x: Tensor, pad: int, value: float) -> Tensor:
    """x (B, n, ...) with ``pad`` tokens of ``value`` appended on axis 1.

    ``F.pad`` rather than a concatenation with a new tensor: a tracer would record the new tensor's
    batch size as a constant, and the exported file would accept one batch size only.
    """
    return F.pad(x, [0, 0] * (x.dim() - 2) + [0, pad], value=value) if pad else x


def _inclusive_scan(a: Tensor, b: Tensor) -> Tensor:
    """h_k = a_k h_{k−1} + b_k along axis 1 of (B, n, S), h_0 = b_0; the same blocked scan, recursively."""
    n = a.shape[1]
    if n == 1:
        return b
    pad = (-n) % CHUNK  # (padding: decay 1, input 0)
    a, b = _pad_tokens(a, pad, 1.0), _pad_tokens(b, pad, 0.0)
    a, b = (x.unflatten(1, (x.shape[1] // CHUNK, CHUNK)) for x in (a, b))  # (B, nc, T, S)
    h, prod = b[:, :, 0], a[:, :, 0]
    for t in range(1, CHUNK):
        h = a[:, :, t] * h + b[:, :, t]
        prod = prod * a[:, :, t]
    ends = _inclusive_scan(prod, h)  # the chunks' end states
    h = _shift_right(ends)
    outs = []
    for t in range(CHUNK):
        h = a[:, :, t] * h + b[:, :, t]
        outs.append(h)
    return torch.stack(outs, dim=2).flatten(1, 2)[:, :n]
