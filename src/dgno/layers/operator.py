"""Galerkin-type kernel integral operator layers: global (GG), local (LG) and DG.

All three share one update (paper Eq. 3 with the Galerkin kernel of Eq. 11-12), written as
the authors' code computes it:

    out = x + W₂ GELU(W₁ (x + Q K_e))     (Q, K, V = 1×1 conv of x, K, V layer-normed per head)

i.e. the operator term Q K_e enters only through the pointwise MLP's input; the skip around
the layer carries x itself.  They differ only in the coefficient matrix K_e ∈ R^{h×d×d}
applied to the queries:

  * GG  (SRNO):  one element = the whole image,  K_e = K̃ᵀṼ / (H W);
  * LG:          p×p windows,                    K_e = K^vol_e = K̃_eᵀṼ_e / p²;
  * DG:          p×p elements plus interface fluxes,
                 K_e = K^vol_e + Σ_{f⊂∂D_e} K^flux_{e,f}  (Eq. 17).

The DG "face" variant builds the flux from face operators K̃_{e,f}ᵀṼ_{e,f} / p on each
element's boundary row/column (Eq. 15-16); the "cell" (P0DG) variant from the
neighbours' volume operators (Eq. 18).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import reduce
from typing import Literal, get_args

import torch
from einops import rearrange
from torch import Tensor, nn

from dgno.choices import check_choice
from dgno.layers import native_kernels
from dgno.layers.blocks import at_least_fp32, full_precision, pad_to_multiple
from dgno.layers.flux import BOUNDARIES, FLUXES, PENALTY_FLUXES, BoundaryName, FluxName, interface_fluxes

VariantName = Literal["face", "cell"]
VARIANTS: tuple[str, ...] = get_args(VariantName)


class HeadLayerNorm(nn.Module):
    """Ln(K) = γ_h (K − μ) / (s + ε) + β_h over the d features of each head, affine per head.

    s is the *unbiased* standard deviation and ε is added to s, not to the variance: the
    authors' per-head norm, which their released weights were trained with (with d = 3
    features per head at full resolution the two definitions differ by a factor √(3/2)).
    Normalising keys and values keeps Kᵀ V / n bounded whatever the element size, so the
    coefficient matrices of different elements (and faces) are on one scale and can be
    averaged/differenced by the fluxes.  Per-pixel statistics do not care how the map is cut
    into elements: ``forward`` takes the channel-first map (B, h·d, H, W), ``normalise`` any layout.
    """

    # True: mean and unbiased variance from one ``var_mean`` reduction, the fast form on a GPU; set by
    # dgno.train.step.set_fused_norms.  False: a mean, then the sum of squared deviations: on a CPU,
    # torch's std / var_mean over the head axis (a middle axis of a few features) is a Welford reduction
    # that took 0.2 s for one (1, 16, 3, 256, 256) map, ten times the two-pass form.
    fused = False

    def __init__(self, heads: int, head_dim: int, *, eps: float = 1e-5) -> None:
        super().__init__()
        if head_dim < 2:
            raise ValueError(f"per-head LayerNorm needs at least 2 features per head (unbiased std), got {head_dim}")
        self.heads, self.head_dim = heads, head_dim
        self.weight = nn.Parameter(torch.ones(heads, head_dim))
        self.bias = nn.Parameter(torch.zeros(heads, head_dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        """x (B, h·d, H, W) → same shape."""
        b, c, h, w = x.shape
        return self.normalise(x.reshape(b, self.heads, self.head_dim, h, w), axis=2).reshape(b, c, h, w)

    def normalise(self, x: Tensor, *, axis: int) -> Tensor:
        """The norm over ``axis`` of x, whose axes ``axis − 1`` and ``axis`` are (heads, d): any layout.

        The operator layers call it on their element layout (B, nH, nW, h, d, p1, p2), where the d
        features of a head lie p1·p2 apart, which is the fast case of torch's CPU reductions whatever
        the memory format of the feature map (on a channels-last map the features would be adjacent,
        and the same reduction took three times as long).
        """
        axis = axis % x.dim()
        trailing = (1,) * (x.dim() - 1 - axis)
        weight, bias = self.weight.view(*self.weight.shape, *trailing), self.bias.view(*self.bias.shape, *trailing)
        if self.fused:
            var, mean = torch.var_mean(x, dim=axis, keepdim=True, correction=1)
            y = (x - mean) / (var.sqrt() + self.eps)
        else:
            xc = x - x.mean(dim=axis, keepdim=True)
            var = (xc * xc).sum(dim=axis, keepdim=True) / (self.head_dim - 1)  # unbiased
            y = xc / (var.sqrt() + self.eps)
        return torch.addcmul(bias, y, weight)


def galerkin_operator(k: Tensor, v: Tensor) -> Tensor:
    """K = K̃ᵀ Ṽ / n: Monte-Carlo quadrature of ∫ k_ℓ(y) v_j(y) dy over n samples.

    k, v: (..., d, n) with the samples last (the layout elements are cut into)
    → (..., d, d), entry [ℓ, j] = Σ_y k_ℓ(y) v_j(y) / n.  Flattened to one contiguous
    batch for ``bmm``: with strided multi-axis batches CPU matmul loops per matrix.
    """
    *batch, d, n = k.shape
    k3, v3 = k.reshape(-1, d, n), v.reshape(-1, d, n)
    return torch.bmm(k3, v3.transpose(1, 2)).div(n).reshape(*batch, d, d)


def element_faces(t: Tensor) -> Tensor:
    """Boundary samples of every element: (..., d, p1, p2) → (4, ..., d, p) as top, bottom, left, right.

    Stacked so the four face operators come out of a single ``bmm`` (p1 = p2 = p).
    """
    return torch.stack([t[..., 0, :], t[..., -1, :], t[..., :, 0], t[..., :, -1]])


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the incoming gradient contiguous.

    The gradient that reaches a ``bmm`` through a permuting ``rearrange`` is a
    strided view, for which CPU ``bmm`` falls back to a per-matrix loop; one copy is
    several times cheaper.
    """

    @staticmethod
    def forward(ctx: object, x: Tensor) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: object, grad: Tensor) -> Tensor:
        return grad.contiguous()


class _GalerkinLayer(nn.Module, ABC):
    """Shared parts: QKV projection, per-head norms, pointwise MLP, element (un)folding."""

    # True: the element cut (with the K and V norms) and Q K_e back onto the map run the compiled CPU
    # kernels (float32, channels-last, inference); set by dgno.layers.native_modules, a runtime choice.
    native = False

    def __init__(self, *, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.qkv = nn.Conv2d(dim, 3 * dim, 1)
        self.k_norm = HeadLayerNorm(heads, self.head_dim)
        self.v_norm = HeadLayerNorm(heads, self.head_dim)
        self.mlp = nn.Sequential(nn.Conv2d(dim, dim, 1), nn.GELU(), nn.Conv2d(dim, dim, 1))

    def _elements(self, x: Tensor, p1: int, p2: int) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K̃, Ṽ on p1×p2 elements, each (B, nH, nW, h, d, p1, p2); H, W must tile exactly.

        Samples stay last (d before p1, p2): the cut then copies runs of p2 contiguous
        pixels, and faces are plain row/column slices.
        """
        if self.native:
            norms = [(n.weight, n.bias, n.eps) for n in (self.k_norm, self.v_norm)]
            return native_kernels.dg_cut(self.qkv(x), self.heads, p1, p2, *norms)
        q, k, v = self.qkv(x).chunk(3, dim=1)  # 3 × (B, C, H, W)
        pattern = "b (h d) (nh p1) (nw p2) -> b nh nw h d p1 p2"
        q, k, v = (rearrange(t, pattern, h=self.heads, p1=p1, p2=p2).contiguous() for t in (q, k, v))
        return q, self.k_norm.normalise(k, axis=4), self.v_norm.normalise(v, axis=4)  # per token: exact after the cut

    def _query_times(self, q: Tensor, op: Tensor) -> Tensor:
        """Q K_e as a channel-first map (B, h·d, nH·p1, nW·p2);  q (B, nH, nW, h, d, p1, p2), op (B, nH, nW, h, d, d)."""
        b, nh, nw, h, d, p1, p2 = q.shape
        # z_j(y) = Σ_ℓ q_ℓ(y) K[ℓ, j], i.e. z = Kᵀ q with the samples last
        z = torch.bmm(op.reshape(-1, d, d).transpose(1, 2), q.reshape(-1, d, p1 * p2))  # (N, d, p1·p2)
        if z.requires_grad:  # (inference, and the graphs exporters record, need no backward helper)
            z = _ContiguousGrad.apply(z)
        z = z.view(b, nh, nw, h, d, p1, p2)
        return rearrange(z, "b nh nw h d p1 p2 -> b (h d) (nh p1) (nw p2)")

    def _apply_operator(self, x: Tensor, q: Tensor, op: Tensor) -> Tensor:
        """out = x + MLP(x + Q K_e);  q (B, nH, nW, h, d, p1, p2), op (B, nH, nW, h, d, d).

        Q K_e in float32 (``full_precision``): the operator matrices are d×d with d = C/heads ≤ 12, so
        float32 costs little there. The MLP runs in x's dtype (bf16 under autocast).
        """
        if self.native:
            return x + self.mlp(native_kernels.dg_apply(q, op, x))
        with full_precision(x):
            qk = self._query_times(q, op)
        return x + self.mlp(x + qk.to(x.dtype))

    # Subclasses say how the input is padded and which coefficient matrices make up K_e;
    # ``forward`` and ``operator_terms`` share that one code path, so the terms an analysis
    # reads are exactly the ones the layer applies.
    def _pad(self, x: Tensor) -> Tensor:
        return x

    @abstractmethod
    def _operator_parts(self, xp: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """Q on the element grid and the named parts of K_e (summed in insertion order)."""

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        xp = self._pad(x)
        with full_precision(xp):
            q, parts = self._operator_parts(at_least_fp32(xp))
        return self._apply_operator(xp, q, reduce(torch.add, parts.values()))[..., :h, :w]

    def operator_terms(self, x: Tensor) -> dict[str, Tensor]:
        """The update split into its per-pixel terms, each (B, C, H, W) cropped like the output.

        "q": the queries Q, i.e. the input-dependent ("dynamic") basis functions;
        one entry per part of K_e applied to them — "volume" = Q K^vol (Q(K̃ᵀṼ) over the
        element, the whole image for GG) and, for DG, "flux" = Q Σ_f K^flux_{e,f};
        "output": the layer's output, identical to ``forward(x)``.
        Pure (no state is stored, nothing is registered), so analyses can call it on any
        input without changing the network; Σ of the part terms = Q K_e, the MLP's input
        minus x, up to rounding.
        """
        h, w = x.shape[-2:]
        xp = self._pad(x)
        with full_precision(xp):
            q, parts = self._operator_parts(at_least_fp32(xp))
            terms = {"q": rearrange(q, "b nh nw h d p1 p2 -> b (h d) (nh p1) (nw p2)")}
            terms.update({name: self._query_times(q, op) for name, op in parts.items()})
        terms["output"] = self._apply_operator(xp, q, reduce(torch.add, parts.values()))
        return {name: t[..., :h, :w] for name, t in terms.items()}


class GlobalGalerkinLayer(_GalerkinLayer):
    """GG / SRNO layer: K_e = K̃ᵀ Ṽ / (H W), one element covering the whole image.

    The globally coupled baseline: every pixel's update depends on all pixels through
    a single h×d×d coefficient matrix.  (B, C, H, W) → (B, C, H, W), any H, W.
    """

    def __init__(self, *, dim: int, heads: int) -> None:
        super().__init__(dim=dim, heads=heads)

    def _operator_parts(self, xp: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        h, w = xp.shape[-2:]
        q, k, v = self._elements(xp, h, w)  # (B, 1, 1, h, d, H, W)
        return q, {"volume": galerkin_operator(k.flatten(-2), v.flatten(-2))}  # (B, 1, 1, h, d, d)


class LocalGalerkinLayer(_GalerkinLayer):
    """LG / windowed SRNO layer: K_e = K^vol_e on independent p×p windows.

    Local like the defocus kernel, but with no communication between windows.
    Any H, W: the input is reflect-padded to a multiple of p (see ``pad_to_multiple``
    for why reflect) and the output cropped back.
    """

    def __init__(self, *, dim: int, heads: int, element_size: int = 8) -> None:
        super().__init__(dim=dim, heads=heads)
        self.element_size = element_size

    def _pad(self, x: Tensor) -> Tensor:
        return pad_to_multiple(x, self.element_size)  # (B, C, Hp, Wp)

    def _operator_parts(self, xp: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        p = self.element_size
        q, k, v = self._elements(xp, p, p)
        return q, {"volume": galerkin_operator(k.flatten(-2), v.flatten(-2))}  # (B, nH, nW, h, d, d)


class DGOperatorLayer(_GalerkinLayer):
    """DG layer: K_e = K^vol_e + Σ_{f⊂∂D_e} F̂(K_e^{∂,f}, K_{e'}^{∂,f}) on p×p elements.

    Element-local volume operators keep the locality of LG; numerical fluxes across
    element interfaces restore controlled cross-element (and, iterated, global)
    coupling.  Assembly is conservative: a flux is added to the left/upper element and
    subtracted from the right/lower one (``dgno.layers.flux``).

    variant   "face": K^{∂,f} = K̃_fᵀ Ṽ_f / p from the element's boundary row/column
              (the domain boundary uses the boundary element's inner face, as the
              authors' code does: see ``dgno.layers.flux.assemble_axis``);
              "cell" (P0DG): K^{∂,f} = K^vol of the element on each side.
    flux      "central" | "jump" | "avg_jump" | "upwind".
    boundary  "neumann" (no boundary flux) | "dirichlet" (zero ghost) | "periodic" (wrap).
    tau       penalty τ of "jump"/"avg_jump": a learnable scalar initialised to ``tau``
              when ``learn_tau`` else the fixed float; central/upwind have no penalty
              and then no τ is created.
    Any H, W: reflect-padded to a multiple of p and cropped back, so the partial
    elements at the bottom/right see mirrored content rather than zeros (the domain
    boundary, and a periodic wrap, is then the padded grid's).
    """

    def __init__(
        self,
        *,
        dim: int,
        heads: int,
        element_size: int = 8,
        variant: VariantName = "cell",
        flux: FluxName = "jump",
        boundary: BoundaryName = "neumann",
        tau: float = 0.25,
        learn_tau: bool = True,
    ) -> None:
        check_choice("variant", variant, VARIANTS)
        check_choice("flux", flux, FLUXES)
        check_choice("boundary", boundary, BOUNDARIES)
        super().__init__(dim=dim, heads=heads)
        self.element_size, self.variant, self.flux, self.boundary = element_size, variant, flux, boundary
        if flux in PENALTY_FLUXES and learn_tau:
            self.tau = nn.Parameter(torch.tensor(float(tau)))
        elif flux in PENALTY_FLUXES:
            self.register_buffer("tau", torch.tensor(float(tau)), persistent=False)
        else:
            self.tau = None

    def element_operators(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """K^vol and the assembled flux, both (B, nH, nW, h, d, d), from K̃, Ṽ (B, nH, nW, h, d, p, p)."""
        vol = galerkin_operator(k.flatten(-2), v.flatten(-2))
        if self.variant == "cell":
            top = bottom = left = right = vol
        else:  # faces: rows 0 / p−1 and columns 0 / p−1 of the element, p samples each
            top, bottom, left, right = galerkin_operator(element_faces(k), element_faces(v)).unbind(0)
        flux = interface_fluxes(top, bottom, left, right, flux=self.flux, boundary=self.boundary, tau=self.tau)
        return vol, flux

    def _pad(self, x: Tensor) -> Tensor:
        return pad_to_multiple(x, self.element_size)  # (B, C, Hp, Wp)

    def _operator_parts(self, xp: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        p = self.element_size
        q, k, v = self._elements(xp, p, p)  # (B, nH, nW, h, d, p, p)
        vol, flux = self.element_operators(k, v)
        return q, {"volume": vol, "flux": flux}  # K_e = vol + flux

    def extra_repr(self) -> str:
        return f"variant={self.variant!r}, flux={self.flux!r}, boundary={self.boundary!r}, p={self.element_size}"


OperatorName = Literal["gg", "lg", "dg"]
OPERATOR_LAYERS: dict[str, type[nn.Module]] = {
    "gg": GlobalGalerkinLayer,
    "lg": LocalGalerkinLayer,
    "dg": DGOperatorLayer,
}


def make_operator_layer(kind: OperatorName, *, dim: int, heads: int, **kwargs: object) -> nn.Module:
    """Build the operator layer ``kind`` ("gg" | "lg" | "dg") with ``dim`` channels."""
    check_choice("operator", kind, tuple(OPERATOR_LAYERS))
    return OPERATOR_LAYERS[kind](dim=dim, heads=heads, **kwargs)
