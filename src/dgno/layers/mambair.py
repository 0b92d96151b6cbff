"""MambaIRv2's attentive state-space module (ASSM) and the DGNO lifting-encoder block built on it.

    block(x) = x' + GDFN(LN(x')),   x' = x + ASSM(LN(x))                      (x: B × C × H × W)

ASSM (Guo et al., "MambaIRv2: Attentive State Space Restoration", CVPR 2025) scans the image as a
sequence of H·W tokens with a selective state-space model (``selective_scan``) and makes the scan
"attentive" in two ways:

* semantic-guided neighbouring: a small MLP routes every token to one of ``num_tokens`` prompts;
  tokens are sorted by route before the scan and unsorted after it, so tokens with the same
  route — similar content anywhere in the image — are neighbours in the 1-D scan instead of
  only raster neighbours;
* attentive state-space equation: the routed prompt, a low-rank (num_tokens × inner_rank ×
  d_state) learned dictionary entry, is added to the scan's output matrix C.  As in the
  authors' code (and MambaIRv2's), the prompts are added in *raster* order to C of the
  *sorted* sequence: position i of the scan reads with the prompt of raster token i, not
  with that of the token sorted into position i.  Their released weights were trained so.

Routing uses a hard Gumbel-softmax (straight-through) while training, as MambaIRv2 does.  In eval
mode the route is, by default (``routing = "argmax"``), the argmax of the router's logits — no
noise — so inference is deterministic.  Two deliberate departures from the authors' code, both at
inference only: their evaluation network routes with a hard Gumbel-softmax (tau 1, over the routes)
in eval mode too (outputs then vary by 5e-3 to 2e-2 between runs), and their token sort is unstable
(the order among tokens of one route depends on the platform, changing outputs by up to 3e-2);
here routing is argmax and the sort is stable (ties keep raster order).  To measure how much of a
published number is that inference noise, ``routing = "gumbel"`` routes as their evaluation
network does, with noise from a seeded generator (:class:`GumbelNoise`) so that a run reproduces;
``dgno.models.routing.set_routing`` switches every ASSM of a model.
MambaIRv2's full layer also has a shifted-window self-attention branch before the ASSM; DGNO's
encoder block (DESIGN.md, "Model") is ASSM + GDFN only, which is also what the paper's parameter
count (12.79 M) implies, so the window branch is not part of this block.

GDFN is Restormer's gated depth-wise feed-forward network (Zamir et al., CVPR 2022).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgno.layers import native_kernels
from dgno.layers.selective_scan import BACKENDS, Backend, selective_scan

Routing = Literal["argmax", "gumbel"]
ROUTINGS = ("argmax", "gumbel")


class GumbelNoise:
    """Standard Gumbel noise from a seeded generator, one generator per device, shared by a model's ASSMs.

    Why one shared stream: the ASSMs run in a fixed order, so a model's draws are fixed by the seed
    and the sequence of inputs; separate generators with one seed would give every block the same
    noise.  g = -log(E), E ~ Exponential(1), as ``torch.nn.functional.gumbel_softmax`` draws it.
    """

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._generators: dict[torch.device, torch.Generator] = {}

    def sample(self, like: Tensor) -> Tensor:
        """Noise shaped like `like`, float32, on its device."""
        gen = self._generators.get(like.device)
        if gen is None:
            gen = self._generators[like.device] = torch.Generator(device=like.device)
            gen.manual_seed(self.seed)
        return -torch.empty(like.shape, device=like.device, dtype=torch.float32).exponential_(generator=gen).log()


class ASSM(nn.Module):
    """y = P_out(LN(S6_{C + prompt}(sort_r(x̃))))  unsorted,  x̃ = W_in x ⊙ σ(DWConv3×3(W_in x)).

    Shapes: x (B, L, dim) tokens of an H×W image in raster order → (B, L, dim).

    Args (keyword-only): dim; d_state (N of the scan, paper: 8); num_tokens (prompts/routes, 64);
    inner_rank (rank of the prompt dictionary, 32); expand (hidden = expand·dim channels are
    scanned, 2); scan_backend (``selective_scan`` backend; "auto" = mamba_ssm on CUDA when
    available, else the exact chunked torch scan).
    """

    def __init__(
        self,
        *,
        dim: int,
        d_state: int = 8,
        num_tokens: int = 64,
        inner_rank: int = 32,
        expand: float = 2.0,
        scan_backend: Backend = "auto",
    ) -> None:
        super().__init__()
        if scan_backend not in BACKENDS:
            raise ValueError(f"unknown scan_backend {scan_backend!r}; allowed: {', '.join(map(repr, BACKENDS))}")
        if dim < 3:
            raise ValueError(f"ASSM needs dim >= 3 (its router has dim // 3 hidden units), got {dim}")
        hidden = int(dim * expand)
        self.d_state, self.scan_backend = d_state, scan_backend
        self.fused_gate = False  # the positional gate by the compiled CPU kernel: a runtime choice, as scan_backend
        # eval-mode routing, a runtime choice like scan_backend (not part of the weights or the spec)
        self.routing: Routing = "argmax"
        self.gumbel: GumbelNoise | None = None
        # value path: 1×1 projection, gated by a depth-wise 3×3 (a conditional positional encoding,
        # the only place the scan sees 2-D neighbourhoods)
        self.in_proj = nn.Conv2d(dim, hidden, 1)
        self.cpe = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        # router: token → log-probabilities over num_tokens routes
        self.route = nn.Sequential(nn.Linear(dim, dim // 3), nn.GELU(), nn.Linear(dim // 3, num_tokens))
        # prompt dictionary, factorised (num_tokens × inner_rank)(inner_rank × d_state)
        self.prompt_codes = nn.Parameter(torch.empty(num_tokens, inner_rank).uniform_(-1 / num_tokens, 1 / num_tokens))
        self.prompt_basis = nn.Parameter(torch.empty(inner_rank, d_state).uniform_(-1 / inner_rank, 1 / inner_rank))
        # selective scan parameters (Mamba's S6 with a low-rank Δ projection)
        self.dt_rank = math.ceil(hidden / 16)
        self.x_proj = nn.Linear(hidden, self.dt_rank + 2 * d_state, bias=False)  # → Δ (low rank), B, C
        self.dt_proj = nn.Linear(self.dt_rank, hidden)  # its bias is the scan's delta_bias
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(hidden, 1))
        self.D = nn.Parameter(torch.ones(hidden))
        self.out_norm = nn.LayerNorm(hidden)
        self.out_proj = nn.Linear(hidden, dim)
        _init_dt_proj(self.dt_proj)

    def forward(self, x: Tensor, size: tuple[int, int]) -> Tensor:
        b, L, _ = x.shape
        h, w = size
        route, one_hot = self.routes(x)  # (B, L) route of every token; (B, L, num_tokens) one-hot when training
        dictionary = self.prompt_codes @ self.prompt_basis  # (num_tokens, N)
        # each token's prompt is its route's row of the dictionary; in training through the one-hot, so the
        # router learns through the prompt (the product picks the same row: 1·row + 0·others, exact)
        prompt = dictionary[route] if one_hot is None else one_hot @ dictionary  # (B, L, N)
        # semantic-guided neighbouring: stable sort by route, scan, unsort.  The keys route·L + position are
        # unique, so any sort orders them as a stable sort of the routes would (ties in raster order); an
        # exporter then needs no stable sort, which ONNX lacks.
        positions = torch.arange(L, device=x.device)
        order = (route * L + positions).argsort(dim=-1)  # (B, L)
        inverse = torch.empty_like(order).scatter_(1, order, positions.expand(b, L))

        v = self.in_proj(x.transpose(1, 2).reshape(b, -1, h, w))  # (B, hidden, H, W)
        v = self.positional_gate(v).flatten(2).transpose(1, 2)  # (B, L, hidden), token-major
        v = _take_rows(v, order)
        y = self._scan(v, prompt)  # (B, L, hidden), sorted order; prompt in raster order
        y = self.out_proj(self.out_norm(y))  # (B, L, dim)
        return _take_rows(y, inverse)

    def positional_gate(self, v: Tensor) -> Tensor:
        """v ⊙ σ(DWConv3×3(v)), (B, hidden, H, W); with ``fused_gate`` in one pass of the compiled CPU kernel
        (``dgno.layers.native_modules`` sets it; inference only)."""
        if self.fused_gate:
            return native_kernels.depthwise_conv_native(v, self.cpe.weight, self.cpe.bias, sigmoid_gate=True)
        return v * torch.sigmoid(self.cpe(v))

    def routes(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        """The route of every token (B, L), and in training its one-hot (B, L, num_tokens), else None.

        Training: hard Gumbel-softmax of the router's log-probabilities (straight-through, so the
        router learns through the prompt).  Eval: the argmax, deterministic; with ``routing ==
        "gumbel"`` the argmax of log-probabilities + seeded Gumbel noise, which is the forward value
        of the authors' eval-time ``gumbel_softmax(logits, tau=1, hard=True, dim=-1)``.  Eval needs no
        one-hot: the prompt is a row of the dictionary (a (B, L, num_tokens) map less to write and read).
        """
        logits = F.log_softmax(self.route(x), dim=-1)
        if self.training:
            one_hot = F.gumbel_softmax(logits, hard=True, dim=-1)
            return one_hot.detach().argmax(-1), one_hot
        if self.routing == "gumbel":
            if self.gumbel is None:
                raise RuntimeError("ASSM routing is 'gumbel' but no noise generator is set; use dgno.models.routing.set_routing(model, 'gumbel', seed=...)")
            if logits.is_cuda and torch.cuda.is_current_stream_capturing():
                raise RuntimeError("Gumbel routing cannot run inside a CUDA graph (every replay would reuse one draw); evaluate without CUDA graphs")
            logits = logits + self.gumbel.sample(logits)
        return logits.argmax(-1), None

    def _scan(self, v: Tensor, prompt: Tensor) -> Tensor:
        """S6 over the tokens v (B, L, hidden) with C ← C + prompt (B, L, N); returns (B, L, hidden).

        Token-major throughout: the scan's (b, d, L) arguments are transposed views of token-major
        data, which is the layout the compiled CPU kernel reads (no copy there).
        """
        dt, B, C = self.x_proj(v).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = F.linear(dt, self.dt_proj.weight).transpose(1, 2)  # (B, hidden, L); bias added in the scan
        B = B.transpose(1, 2).unsqueeze(1)  # (B, 1, N, L): one group, MambaIRv2's layout
        C = (C + prompt).transpose(1, 2).unsqueeze(1)
        # the scan runs in float32 at least (bf16/fp16 activations are promoted, as mamba_ssm
        # requires), and in float64 when the network is (exact comparisons with references)
        dtype = torch.promote_types(v.dtype, torch.float32)
        A = -torch.exp(self.A_log.to(dtype))  # (hidden, N), A < 0: a decaying state
        return selective_scan(
            v.transpose(1, 2).to(dtype),
            dt.to(dtype),
            A,
            B.to(dtype),
            C.to(dtype),
            self.D.to(dtype),
            delta_bias=self.dt_proj.bias.to(dtype),
            delta_softplus=True,
            backend=self.scan_backend,
        ).to(v.dtype).transpose(1, 2)


class GDFN(nn.Module):
    """y = W_out(GELU(a) ⊙ b),  [a, b] = DWConv3×3(W_in x):  Restormer's gated depth-wise FFN.

    The gate lets the block pass or suppress each hidden feature; the depth-wise conv adds the
    local context a token-wise MLP lacks.  Bias-free 1×1/3×3 convolutions, as in Restormer.
    Shapes: (B, dim, H, W) → (B, dim, H, W); hidden = ⌊expansion · dim⌋.
    """

    def __init__(self, *, dim: int, expansion: float = 2.66) -> None:
        super().__init__()
        hidden = int(dim * expansion)
        self.project_in = nn.Conv2d(dim, 2 * hidden, 1, bias=False)
        self.dwconv = nn.Conv2d(2 * hidden, 2 * hidden, 3, padding=1, groups=2 * hidden, bias=False)
        self.project_out = nn.Conv2d(hidden, dim, 1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.dwconv(self.project_in(x)).chunk(2, dim=1)
        return self.project_out(F.gelu(a) * b)


class ASSMBlock(nn.Module):
    """x ← x + ASSM(LN(x)),  x ← x + GDFN(LN(x)):  DGNO's lifting-encoder block, shapes (B, dim, H, W).

    The two pre-norm residual halves of a MambaIRv2-style block: long-range mixing along the
    route-sorted scan, then a local gated feed-forward.  Any H, W (the scan has no window size).
    """

    def __init__(
        self,
        *,
        dim: int,
        d_state: int = 8,
        num_tokens: int = 64,
        inner_rank: int = 32,
        expand: float = 2.0,
        ffn_expansion: float = 2.66,
        scan_backend: Backend = "auto",
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.assm = ASSM(
            dim=dim,
            d_state=d_state,
            num_tokens=num_tokens,
            inner_rank=inner_rank,
            expand=expand,
            scan_backend=scan_backend,
        )
        self.norm2 = nn.LayerNorm(dim)
        self.gdfn = GDFN(dim=dim, expansion=ffn_expansion)

    def forward(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        t = x.flatten(2).transpose(1, 2)  # (B, HW, C)
        t = t + self.assm(self.norm1(t), (h, w))
        x = t.transpose(1, 2).reshape(b, c, h, w)
        return x + self.gdfn(self.norm2(t).transpose(1, 2).reshape(b, c, h, w))


def _init_dt_proj(dt_proj: nn.Linear, dt_min: float = 1e-3, dt_max: float = 0.1, floor: float = 1e-4) -> None:
    """Mamba's Δ initialisation: softplus(bias) log-uniform in [dt_min, dt_max], weight U(±rank^−½).

    Starting with small, varied steps gives every channel a different memory length (1/Δ tokens)
    and keeps exp(ΔA) near 1, so the untrained scan neither forgets instantly nor explodes.
    """
    std = dt_proj.in_features**-0.5
    with torch.no_grad():
        dt_proj.weight.uniform_(-std, std)
        dt = torch.exp(torch.rand(dt_proj.out_features) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        dt = dt.clamp(min=floor)
        dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)


def set_scan_backend(model: nn.Module, backend: Backend) -> int:
    """Switch every ASSM in ``model`` to the selective-scan ``backend``; returns how many were switched.

    The backend is a runtime choice, not part of a model's weights or spec, so a checkpoint trained
    with ``mamba_ssm`` runs with the PyTorch scan and vice versa; benchmarks use this to time both on
    the same weights.  Raises ValueError for an unknown backend or a model without an ASSM.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown scan_backend {backend!r}; allowed: {', '.join(map(repr, BACKENDS))}")
    modules = [m for m in model.modules() if isinstance(m, ASSM)]
    if not modules:
        raise ValueError(f"{type(model).__name__} has no selective-scan (ASSM) modules")
    for m in modules:
        m.scan_backend = backend
    return len(modules)


def _take_rows(x: Tensor, index: Tensor) -> Tensor:
    """x (B, L, F) with its tokens permuted by index (B, L), per batch element: out[b, i] = x[b, index[b, i]].

    One ``index_select`` of whole token rows over the flattened batch (a gather along the token axis of
    a channel-major map reads one index per element, and was an eighth of the CPU forward).
    """
    b, L = index.shape
    rows = (index + torch.arange(b, device=index.device).unsqueeze(1) * L).flatten()
    return x.reshape(b * L, -1).index_select(0, rows).view(b, L, -1)


def _assm_block(dim: int) -> ASSMBlock:
    """Registry factory: the paper's ASSM block (d_state 8, 64 routes, rank 32, expand 2, GDFN 2.66)."""
    return ASSMBlock(dim=dim)


from dgno.layers.blocks import register_encoder_block  # noqa: E402  (registers on import, see blocks.py)

register_encoder_block("assm")(_assm_block)
