"""Convolutional primitives of the DGNO network: resampling, shallow input branch (SCM/FAM), lifting blocks.

Also holds the small encoder-block registry, so the lifting encoder can use the light
``"conv"`` block (CPU demo) or MambaIRv2's ``"assm"`` block (paper) without the network
knowing either class.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def pad_to_multiple(x: Tensor, multiple: int) -> Tensor:
    """Pad ``x`` (B, C, H, W) at the bottom/right so H and W become multiples of ``multiple``.

    Reflect padding: the padded pixels mirror real content, so statistics computed
    over a partly padded region (LayerNorm'd keys/values, Kᵀ V sums, conv receptive
    fields) stay close to those of the image instead of being pulled towards the
    zero/bias response of an artificial black border.  Reflection needs the pad to be
    smaller than the side; for tiny inputs that are not, replicate padding is used.
    """
    h, w = x.shape[-2:]
    ph, pw = (-h) % multiple, (-w) % multiple
    if ph == 0 and pw == 0:
        return x
    mode = "reflect" if ph < h and pw < w else "replicate"
    return F.pad(x, (0, pw, 0, ph), mode=mode)


def group_layer_norm(x: Tensor, groups: int, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """y = γ (x − μ) / √(σ² + ε) + β per pixel over each of ``groups`` channel groups.

    x (B, G·d, H, W); weight, bias (G, d).  Reducing over the short group axis of the
    channel-first map avoids the permute copies of ``F.layer_norm`` on (…, d) rows,
    and is several times faster on CPU for the small d (3..48) used here.
    """
    b, c, h, w = x.shape
    dtype = x.dtype  # bf16/fp16 under autocast: the statistics are taken in float32 (see ``at_least_fp32``)
    xg = at_least_fp32(x).reshape(b, groups, c // groups, h, w)
    xc = xg - xg.mean(dim=2, keepdim=True)
    y = xc * torch.rsqrt((xc * xc).mean(dim=2, keepdim=True) + eps)
    return torch.addcmul(bias[:, :, None, None], y, weight[:, :, None, None]).reshape(b, c, h, w).to(dtype)


def channel_layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """``group_layer_norm(x, 1, weight[None], bias[None], eps)`` as one ``F.layer_norm`` over the channel axis.

    The channel axis is moved last by a view (no copy when x is channels-last), so the per-pixel
    mean, variance and affine map are one fused kernel instead of about eight element-wise passes;
    the output is a channels-last view of the (B, C, H, W) result.  Same definition (biased
    variance, ε inside the root), equal up to float rounding; statistics in float32 at least.
    """
    y = F.layer_norm(at_least_fp32(x).permute(0, 2, 3, 1), (x.shape[1],), weight, bias, eps)
    return y.permute(0, 3, 1, 2).to(x.dtype)


def at_least_fp32(x: Tensor) -> Tensor:
    """x in float32 if it is a 16-bit float (float32/float64 unchanged).

    Under bf16 autocast, convolutions hand on bf16 maps (8 bits of mantissa); a mean subtracted
    from them, a variance or a Galerkin sum Kᵀ V / n over them should be formed in float32 so the
    normalised result does not inherit that rounding relative to the (larger) mean.
    """
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def full_precision(x: Tensor) -> contextlib.AbstractContextManager:
    """Autocast switched off on x's device, for work that must stay in float32 (see ``at_least_fp32``).

    On a device without autocast (``meta``, where ``dgno summary`` counts FLOPs from shapes alone)
    there is nothing to switch off, and ``torch.autocast`` would refuse the device.
    """
    if not torch.amp.is_autocast_available(x.device.type):
        return contextlib.nullcontext()
    return torch.autocast(x.device.type, enabled=False)


class LayerNorm2d(nn.Module):
    """y = γ (x − μ_c) / σ_c + β over the channel axis of (B, C, H, W).

    Per-pixel channel normalisation (as in Restormer/NAFNet), so it is independent of
    the image size and of batch statistics.
    """

    # True: one F.layer_norm (``channel_layer_norm``), the fast path on a GPU; switched per model by
    # dgno.train.step.set_fused_norms (a runtime choice, not part of the weights or the spec).
    fused = False

    def __init__(self, dim: int, *, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            return channel_layer_norm(x, self.weight, self.bias, self.eps)
        return group_layer_norm(x, 1, self.weight[None], self.bias[None], self.eps)


class Downsample(nn.Module):
    """(B, C_in, H, W) → (B, C_out, H/2, W/2): 3×3 conv to C_out/4, then PixelUnshuffle(2).

    Moving pixels into channels halves the resolution without discarding any sample
    (unlike strided conv or pooling), which matters for fine cellular detail.
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        if out_channels % 4:
            raise ValueError(f"Downsample out_channels must be divisible by 4, got {out_channels}")
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, out_channels // 4, 3, padding=1, bias=False),
            nn.PixelUnshuffle(2),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)


class Upsample(nn.Module):
    """(B, C_in, H, W) → (B, C_out, 2H, 2W): 3×3 conv to 4·C_out, then PixelShuffle(2).

    The sub-pixel convolution learns the upsampling instead of interpolating it.
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, 4 * out_channels, 3, padding=1, bias=False),
            nn.PixelShuffle(2),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)


class SCM(nn.Module):
    """S(x_s) = IN(W₄ GELU(W₃ GELU(W₂ GELU(W₁ x_s)))): the shallow input branch of a coarse level.

    W₁ 3×3 → dim/4, W₂ 1×1 → dim/2, W₃ 3×3 → dim/2, W₄ 1×1 → dim (all with bias), then an
    affine InstanceNorm (MIMO-UNet's shallow convolutional module, as the authors use it).
    It gives the 1/2 and 1/4 encoder levels direct access to the blurred image at their
    own scale rather than only through the strided path; the instance norm puts that
    branch on a per-image scale, whatever the image's brightness.
    Shapes: x_s (B, in_channels, h, w) → (B, dim, h, w).
    """

    def __init__(self, *, in_channels: int, dim: int) -> None:
        super().__init__()
        if dim % 4:
            raise ValueError(f"SCM dim must be a multiple of 4, got {dim}")
        q, h = dim // 4, dim // 2
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, q, 3, padding=1),
            nn.GELU(),
            nn.Conv2d(q, h, 1),
            nn.GELU(),
            nn.Conv2d(h, h, 3, padding=1),
            nn.GELU(),
            nn.Conv2d(h, dim, 1),
            nn.InstanceNorm2d(dim, affine=True),
        )

    def forward(self, image: Tensor) -> Tensor:
        # float32 even under autocast: the instance norm subtracts each channel's mean, and where a
        # channel varies little about a large mean, the bf16 rounding of its conv input (relative
        # 2⁻⁸ of the mean) is amplified by 1/σ (measured: 19 % relative error after SCM on a demo image)
        with full_precision(image):
            return self.body(at_least_fp32(image))


class FAM(nn.Module):
    """f' = Conv3×3([f, s]): fuse encoder features f with the shallow branch s (both (B, dim, h, w))."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.merge = nn.Conv2d(2 * dim, dim, 3, padding=1)

    def forward(self, feat: Tensor, shallow: Tensor) -> Tensor:
        return self.merge(torch.cat([feat, shallow], dim=1))


class ConvBlock(nn.Module):
    """x ← x + W_out(GELU(a) ⊙ b),  [a, b] = DWConv3×3(W_in(LN(x))),  a, b ∈ R^dim.

    A light gated residual conv block (GDFN-like, expansion 1): the depth-wise 3×3
    gives local spatial context at negligible cost, the gate gives the non-linearity.
    It is the CPU stand-in for MambaIRv2's ASSM in the lifting encoder, so it is kept
    narrow: a wider hidden layer made the CPU demo ~10 % slower per iteration.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = LayerNorm2d(dim)
        self.proj_in = nn.Conv2d(dim, 2 * dim, 1)
        self.dwconv = nn.Conv2d(2 * dim, 2 * dim, 3, padding=1, groups=2 * dim)
        self.proj_out = nn.Conv2d(dim, dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.dwconv(self.proj_in(self.norm(x))).chunk(2, dim=1)  # 2 × (B, dim, H, W)
        return x + self.proj_out(F.gelu(a) * b)


ENCODER_BLOCKS: dict[str, Callable[[int], nn.Module]] = {}

# Blocks that live in optional modules, imported only when asked for (the module
# registers itself on import).
_LAZY_ENCODER_MODULES: dict[str, str] = {"assm": "dgno.layers.mambair"}


def register_encoder_block(name: str) -> Callable[[Callable[[int], nn.Module]], Callable[[int], nn.Module]]:
    """Decorator: ``ENCODER_BLOCKS[name] = factory`` where ``factory(dim) -> nn.Module``."""

    def deco(factory: Callable[[int], nn.Module]) -> Callable[[int], nn.Module]:
        if name in ENCODER_BLOCKS and ENCODER_BLOCKS[name] is not factory:
            raise ValueError(f"encoder block {name!r} is already registered")
        ENCODER_BLOCKS[name] = factory
        return factory

    return deco


register_encoder_block("conv")(ConvBlock)


def make_encoder_block(kind: str, dim: int) -> nn.Module:
    """Build one lifting-encoder block ``kind`` with ``dim`` channels (shape-preserving)."""
    if kind not in ENCODER_BLOCKS and kind in _LAZY_ENCODER_MODULES:
        module = _LAZY_ENCODER_MODULES[kind]
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise
            raise ValueError(f"encoder block {kind!r} needs module {module}, which is not available") from err
    if kind not in ENCODER_BLOCKS:
        allowed = sorted(set(ENCODER_BLOCKS) | set(_LAZY_ENCODER_MODULES))
        raise ValueError(f"unknown encoder block {kind!r}; allowed: {', '.join(map(repr, allowed))}")
    return ENCODER_BLOCKS[kind](dim)
