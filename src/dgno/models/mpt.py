"""MPT: multi-pyramid transformer (Zhang et al., "A Unified Framework for Microscopy Defocus Deblur
with Multi-Pyramid Transformer and Contrastive Learning", CVPR 2024).

A 4-level U-shaped transformer (Restormer-like: 3×3 stem, PixelUnshuffle/PixelShuffle resampling,
additive skips, input residual) whose every block holds an explicit feature pyramid:

    n  = LN(x)
    xa = x + ISCA(n)                 intra-scale channel attention (global, over channels)
    xb = x + CSWA(n, n↓f)            cross-scale window attention against an f× pooled copy
    x' = xa + FEFN(LN(xa), LN(xb))   feature-enhancing FFN: the channel branch, gated-DWConv'ed,
                                     modulates the cross-scale spatial branch

* CSWA: queries come from the full-resolution map, keys/values from the map average-pooled by f
  (+ a 1×1 projection).  Both are split into windows of w×w tokens *of their own scale*, so a query
  window of w×w pixels attends to the w×w coarse tokens that cover the surrounding (f·w)×(f·w) pixel
  region: the attention span grows f-fold at the cost of plain window attention.  Cosine attention
  with a learned per-head temperature and a relative position bias (query position measured in
  coarse-token units); odd blocks shift both grids by half a coarse window (Swin-style cyclic shift
  with masks that stop wrapped regions from mixing).  f = 1 is ordinary (shifted) window attention.
* ISCA: Restormer's transposed attention (d×d per head, 1×1 + depth-wise 3×3 projections).
* Pyramid factors per block, per level (the paper's schedule): level 1 [8, 8, 4, 4, 1, 1],
  level 2 [4, 4, 2, 2, 1, 1], levels 3 and 4 [2, 2, 2, 2, 1, 1]; width 40/80/160/320, heads
  1/2/4/8, window 8, FFN expansion 2.6, bias-free convolutions.  Decoder levels reuse the
  schedule of the encoder level they mirror.

Any H, W: the image is reflect-padded to a multiple of 8 (three stride-2 levels) and each CSWA pads
its own input to a multiple of f·w internally, cropping back afterwards.

EFCR (extended frequency contrastive regularisation) is *not* implemented, for two reasons.
(1) It is a training objective, not part of the network: a wavelet-band contrastive loss whose
negatives are reblurred / augmented copies of the input and whose "extended" part needs an extra,
unlabelled image domain — none of which exists in this project's data or loss interface.
(2) Its settings (reblur kernels, augmentation policy, loss weight, the extra-domain data) could
not be pinned down from the sources available here, and the authors' public code
(github.com/PieceZhang/MPT-CataBlur, models/loss.py) evaluates the contrastive terms inside
``torch.no_grad()``, so no gradient reaches the network and it cannot be told which variant
produced the published MPT+EFCR numbers.  The registry's ``mpt`` is therefore MPT alone; compare it
with the paper's MPT+EFCR row with that caveat.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from dgno.layers.blocks import LayerNorm2d, pad_to_multiple

_MASKED = -1e4  # logit of a masked key: exp() underflows to 0 in float32, no inf arithmetic


def _pw(cin: int, cout: int) -> nn.Conv2d:
    """Bias-free 1×1 conv (MPT, like Restormer, uses no biases)."""
    return nn.Conv2d(cin, cout, 1, bias=False)


def _dw(dim: int) -> nn.Conv2d:
    """Bias-free depth-wise 3×3 conv: local context for the attention projections."""
    return nn.Conv2d(dim, dim, 3, padding=1, groups=dim, bias=False)


class ChannelAttention(nn.Module):
    """ISCA: per head, softmax(τ · Q̂ K̂ᵀ) V with Q̂, K̂ L2-normalised over the pixels (d×d attention).

    Attending across channels instead of pixels is global over the image at O(HW·d²) cost.
    Shapes: (B, dim, H, W) → (B, dim, H, W).
    """

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))
        self.q = nn.Sequential(_pw(dim, dim), _dw(dim))
        self.kv = nn.Sequential(_pw(dim, 2 * dim), _dw(2 * dim))
        self.proj = _pw(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        _, _, h, w = x.shape
        k, v = self.kv(x).chunk(2, dim=1)
        q, k, v = (rearrange(t, "b (g d) h w -> b g d (h w)", g=self.heads) for t in (self.q(x), k, v))
        # softmax(τ q̂·k̂ᵀ) v written out: the "head dimension" here is H·W (tens of thousands), which
        # the fused CUDA attention kernels do not cover (they fail with "no kernel found"), while the
        # d×d attention matrix itself is tiny.
        attn = (F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)) * self.temperature  # (B, g, d, d)
        out = attn.softmax(dim=-1) @ v  # (B, g, d, HW)
        return self.proj(rearrange(out, "b g d (h w) -> b (g d) h w", h=h, w=w))


def _relative_index(window: int, factor: int) -> Tensor:
    """((f·w)², w²) index into a ((2w−1)², heads) bias table for CSWA.

    A query at pixel (i, j) of its (f·w)² block sits at coarse position (⌊i/f⌋, ⌊j/f⌋); its offset
    to key (k, l) of the w×w coarse window is (⌊i/f⌋ − k, ⌊j/f⌋ − l) ∈ [−(w−1), w−1]².
    """
    q = torch.arange(factor * window) // factor  # (f·w,) coarse coordinate of each query row/col
    k = torch.arange(window)
    dy = (q[:, None, None, None] - k[None, None, :, None]) + window - 1  # (fw, 1, w, 1)
    dx = (q[None, :, None, None] - k[None, None, None, :]) + window - 1  # (1, fw, 1, w)
    return (dy * (2 * window - 1) + dx).reshape((factor * window) ** 2, window**2)


def _shift_labels(n: int, window: int) -> Tensor:
    """Region label (0, 1, 2) along one axis of a cyclically shifted grid of n cells (Swin masking)."""
    labels = torch.zeros(n, dtype=torch.long)
    labels[n - window :] = 1
    labels[n - window // 2 :] = 2
    return labels


class CrossScaleWindowAttention(nn.Module):
    """CSWA: full-resolution query windows attend to f×-pooled key/value windows (see module doc).

    Shapes: (B, dim, H, W) → (B, dim, H, W), any H, W (padded to a multiple of f·w inside).
    """

    def __init__(self, dim: int, heads: int, *, factor: int, window: int, shift: bool) -> None:
        super().__init__()
        if factor < 1 or window < 2 or window % 2:
            raise ValueError(f"CSWA needs factor >= 1 and an even window >= 2, got factor={factor}, window={window}")
        self.heads, self.factor, self.window, self.shift = heads, factor, window, shift
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))
        self.pool_proj = _pw(dim, dim) if factor > 1 else None
        self.q = nn.Sequential(_pw(dim, dim), _dw(dim))
        self.kv = nn.Sequential(_pw(dim, 2 * dim), _dw(2 * dim))
        self.proj = _pw(dim, dim)
        self.bias_table = nn.Parameter(torch.empty((2 * window - 1) ** 2, heads))
        nn.init.trunc_normal_(self.bias_table, std=0.02)
        self.register_buffer("bias_index", _relative_index(window, factor), persistent=False)

    def coarse(self, x: Tensor) -> Tensor:
        """The pyramid level: f×f average pooling plus a learned 1×1 correction."""
        if self.pool_proj is None:
            return x
        pooled = F.avg_pool2d(x, self.factor)
        return pooled + self.pool_proj(pooled)

    def shift_mask(self, hc: int, wc: int, device: torch.device) -> Tensor:
        """(n_windows, (f·w)², w²) additive mask: 0 where query and key come from the same region."""
        w, f = self.window, self.factor
        lab = _shift_labels(hc, w)[:, None] * 3 + _shift_labels(wc, w)[None, :]  # (hc, wc) coarse labels
        lab = lab.to(device)
        key = rearrange(lab, "(nh p1) (nw p2) -> (nh nw) (p1 p2)", p1=w, p2=w)
        query = lab.repeat_interleave(f, dim=0).repeat_interleave(f, dim=1)
        query = rearrange(query, "(nh p1) (nw p2) -> (nh nw) (p1 p2)", p1=f * w, p2=f * w)
        return (query[:, :, None] != key[:, None, :]).float() * _MASKED

    def forward(self, x: Tensor) -> Tensor:
        h, w_img = x.shape[-2:]
        w, f, g = self.window, self.factor, self.heads
        xp = pad_to_multiple(x, f * w)
        hp, wp = xp.shape[-2:]
        q = self.q(xp)  # (B, C, hp, wp)
        k, v = self.kv(self.coarse(xp)).chunk(2, dim=1)  # 2 × (B, C, hp/f, wp/f)
        if self.shift:
            s = w // 2
            q = torch.roll(q, shifts=(-s * f, -s * f), dims=(-2, -1))
            k, v = (torch.roll(t, shifts=(-s, -s), dims=(-2, -1)) for t in (k, v))
        q = rearrange(q, "b (g d) (nh p1) (nw p2) -> b (nh nw) g (p1 p2) d", g=g, p1=f * w, p2=f * w)
        k, v = (rearrange(t, "b (g d) (nh p1) (nw p2) -> b (nh nw) g (p1 p2) d", g=g, p1=w, p2=w) for t in (k, v))
        bias = self.bias_table[self.bias_index.reshape(-1)].view(*self.bias_index.shape, g).permute(2, 0, 1)
        if self.shift:  # (g, (fw)², w²) → (nW, g, (fw)², w²)
            bias = bias + self.shift_mask(hp // f, wp // f, x.device)[:, None]
        # softmax(τ q̂·k̂ᵀ + bias) v as one fused kernel (τ folded into the queries); cosine logits
        q = F.normalize(q, dim=-1) * self.temperature
        # The fused kernels take 4-D (batch, heads, L, d) operands and a mask of the query's dtype,
        # so fold the window axis into the batch and materialise the mask per window.
        b, n_win = q.shape[:2]
        mask = bias.expand(b, n_win, *bias.shape[-3:]).reshape(b * n_win, *bias.shape[-3:]).to(q.dtype)
        out = F.scaled_dot_product_attention(
            q.flatten(0, 1), F.normalize(k, dim=-1).flatten(0, 1), v.flatten(0, 1), attn_mask=mask, scale=1.0
        ).unflatten(0, (b, n_win))
        out = rearrange(
            out, "b (nh nw) g (p1 p2) d -> b (g d) (nh p1) (nw p2)", nh=hp // (f * w), p1=f * w, p2=f * w
        )
        if self.shift:
            out = torch.roll(out, shifts=(w // 2 * f, w // 2 * f), dims=(-2, -1))
        return self.proj(out)[..., :h, :w_img]


class FeatureEnhancingFFN(nn.Module):
    """FEFN: W_out(GELU(DWConv(W_a a)) ⊙ W_b b) — channel-branch gate × cross-scale branch value."""

    def __init__(self, dim: int, expansion: float) -> None:
        super().__init__()
        hidden = int(dim * expansion)
        self.gate = nn.Sequential(_pw(dim, hidden), _dw(hidden))
        self.value = _pw(dim, hidden)
        self.out = _pw(hidden, dim)

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return self.out(F.gelu(self.gate(a)) * self.value(b))


class MPTBlock(nn.Module):
    """One multi-pyramid transformer block (module doc); shapes (B, dim, H, W) → (B, dim, H, W)."""

    def __init__(
        self, *, dim: int, heads: int, factor: int, window: int = 8, shift: bool = False, ffn_expansion: float = 2.6
    ) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"MPT block dim {dim} is not divisible by heads {heads}")
        self.norm = LayerNorm2d(dim)
        self.isca = ChannelAttention(dim, heads)
        self.cswa = CrossScaleWindowAttention(dim, heads, factor=factor, window=window, shift=shift)
        self.norm_a, self.norm_b = LayerNorm2d(dim), LayerNorm2d(dim)
        self.ffn = FeatureEnhancingFFN(dim, ffn_expansion)

    def forward(self, x: Tensor) -> Tensor:
        n = self.norm(x)
        xa = x + self.isca(n)
        xb = x + self.cswa(n)
        return xa + self.ffn(self.norm_a(xa), self.norm_b(xb))


def _resample(cin: int, cout: int, shuffle: nn.Module) -> nn.Sequential:
    """Bias-free 3×3 conv then Pixel(Un)Shuffle(2): resolution change without discarding samples."""
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), shuffle)


PAPER_FACTORS = [[8, 8, 4, 4, 1, 1], [4, 4, 2, 2, 1, 1], [2, 2, 2, 2, 1, 1], [2, 2, 2, 2, 1, 1]]


class MPT(nn.Module):
    """forward(x) → [restored]; x (B, in_channels, H, W), any H, W.

    Args (keyword-only): in_channels; dim (level-1 width, doubled per level; paper 40);
    factors (4 lists, one pyramid factor per block, the list length = blocks at that level);
    heads (4 head counts); window (CSWA window, even; 8); ffn_expansion (2.6).
    """

    pad_multiple = 8

    def __init__(
        self,
        *,
        in_channels: int = 1,
        dim: int = 40,
        factors: Sequence[Sequence[int]] = tuple(map(tuple, PAPER_FACTORS)),
        heads: Sequence[int] = (1, 2, 4, 8),
        window: int = 8,
        ffn_expansion: float = 2.6,
    ) -> None:
        super().__init__()
        if len(factors) != 4 or len(heads) != 4 or not all(len(lv) for lv in factors):
            raise ValueError(f"need 4 non-empty factor lists and 4 head counts, got {factors!r}, {heads!r}")
        self.hparams: dict[str, Any] = {
            "in_channels": in_channels,
            "dim": dim,
            "factors": [list(lv) for lv in factors],
            "heads": list(heads),
            "window": window,
            "ffn_expansion": ffn_expansion,
        }
        dims = [dim * 2**i for i in range(4)]

        def level(i: int) -> nn.Sequential:
            return nn.Sequential(
                *(
                    MPTBlock(dim=dims[i], heads=heads[i], factor=f, window=window, shift=j % 2 == 1,
                             ffn_expansion=ffn_expansion)
                    for j, f in enumerate(factors[i])
                )
            )

        self.stem = nn.Conv2d(in_channels, dim, 3, padding=1, bias=False)
        self.encoders = nn.ModuleList(level(i) for i in range(4))
        self.downs = nn.ModuleList(_resample(dims[i], dims[i] // 2, nn.PixelUnshuffle(2)) for i in range(3))
        self.ups = nn.ModuleList(_resample(dims[i + 1], dims[i + 1] * 2, nn.PixelShuffle(2)) for i in range(3))
        self.decoders = nn.ModuleList(level(i) for i in range(3))
        self.head = nn.Conv2d(dim, in_channels, 3, padding=1, bias=False)

    def forward(self, x: Tensor) -> list[Tensor]:
        h, w = x.shape[-2:]
        xp = pad_to_multiple(x, self.pad_multiple)
        z = self.stem(xp)
        skips = []
        for i in range(3):
            z = self.encoders[i](z)
            skips.append(z)
            z = self.downs[i](z)
        z = self.encoders[3](z)
        for i in reversed(range(3)):
            z = self.decoders[i](self.ups[i](z) + skips[i])
        return [(self.head(z) + xp)[..., :h, :w]]


def heads_for(dim: int, head_dim: int = 48) -> int:
    """Largest head count ≤ dim // head_dim (at least 1) that divides dim.

    Restormer and MPT keep roughly head_dim channels per head (1/2/4/8 heads on 48..384 channels);
    a lifting block built from ``dim`` alone uses the same rule.
    """
    return next(g for g in range(max(1, dim // head_dim), 0, -1) if dim % g == 0)
