"""DGNO network: lifting encoder → T operator layers per decoder scale → pointwise projection.

    z_0 = P(x)                          lifting: 4-level encoder (blocks of kind ``encoder_block``)
    z_{t+1} = σ(W z_t + K z_t)          T operator layers (GG, LG or DG) at 1/4, 1/2 and 1
    s_k = Conv3×3(z_T^k) + x↓k          projection + resized input, k ∈ {1/4, 1/2, 1}

The operator layer is a constructor argument (``operator`` = "gg" | "lg" | "dg" plus
``operator_kwargs``), so the GG/LG/DG comparison of the paper changes one argument and
nothing else in the network.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgno.choices import check_choice
from dgno.layers.blocks import FAM, SCM, Downsample, Upsample, make_encoder_block, pad_to_multiple
from dgno.layers.operator import OPERATOR_LAYERS, OperatorName, make_operator_layer


def half(x: Tensor) -> Tensor:
    """The input at the next coarser scale: nearest-neighbour ``interpolate(scale_factor=0.5)``.

    The authors' pyramid (x_{1/2} = half(x), x_{1/4} = half(x_{1/2})): on even sizes it keeps
    every second pixel, so the coarse inputs and the residuals added to the coarse outputs are
    samples of the blurred image, not averages.
    """
    return F.interpolate(x, scale_factor=0.5, mode="nearest")


class DGNO(nn.Module):
    """Multi-scale neural operator for defocus deblurring; forward(x) → [s_1/4, s_1/2, s_1].

    Encoder (lifting): bias-free 3×3 stem, then 4 levels of ``encoder_blocks[i]`` blocks
    with ``encoder_channels[i]`` channels at 1, 1/2, 1/4, 1/8; Downsample between levels;
    the input halved by nearest neighbour (``half``) once and twice enters at 1/2 and 1/4
    through ``SCM`` and is fused with the downsampled features by ``FAM``.
    Decoder at 1/4, 1/2, 1: Upsample, concat the encoder skip, bias-free 1×1 conv to
    ``decoder_channels[i]``, ``num_layers`` (T) operator layers with ``heads`` heads,
    then a 3×3 conv head plus the resized input (the coarse heads have a bias, the
    full-resolution head none: the authors' layout, which their checkpoints need).

    Sizes: x (B, in_channels, H, W) with any H, W.  It is reflect-padded at the
    bottom/right to a multiple of M = lcm(8, 4p) (p = element size; M = 8 for "gg"):
    8 for the three stride-2 levels, 4p so that the p×p elements tile the 1/4, 1/2 and
    full-resolution grids exactly and element borders line up across scales.  Outputs
    are cropped back to (ceil(H/4), ceil(W/4)), (ceil(H/2), ceil(W/2)) and (H, W): the
    top-left part of the padded grid that covers the real image.  Compare the coarse
    outputs with targets resized to those sizes.
    """

    def __init__(
        self,
        *,
        in_channels: int = 1,
        encoder_block: str = "conv",
        encoder_channels: Sequence[int] = (48, 96, 192, 384),
        encoder_blocks: Sequence[int] = (2, 4, 6, 2),
        decoder_channels: Sequence[int] = (192, 96, 48),
        operator: OperatorName = "dg",
        operator_kwargs: Mapping[str, Any] | None = None,
        heads: int = 16,
        num_layers: int = 2,
    ) -> None:
        super().__init__()
        check_choice("operator", operator, tuple(OPERATOR_LAYERS))
        operator_kwargs = dict(operator_kwargs or {})
        if len(encoder_channels) != 4 or len(encoder_blocks) != 4 or len(decoder_channels) != 3:
            raise ValueError(
                "need 4 encoder_channels, 4 encoder_blocks and 3 decoder_channels, got "
                f"{list(encoder_channels)}, {list(encoder_blocks)}, {list(decoder_channels)}"
            )
        self.hparams: dict[str, Any] = {
            "in_channels": in_channels,
            "encoder_block": encoder_block,
            "encoder_channels": list(encoder_channels),
            "encoder_blocks": list(encoder_blocks),
            "decoder_channels": list(decoder_channels),
            "operator": operator,
            "operator_kwargs": dict(operator_kwargs),
            "heads": heads,
            "num_layers": num_layers,
        }
        c1, c2, c3, c4 = encoder_channels
        d1, d2, d3 = decoder_channels  # at 1/4, 1/2, 1

        def stage(dim: int, n: int) -> nn.Sequential:
            return nn.Sequential(*(make_encoder_block(encoder_block, dim) for _ in range(n)))

        def operators(dim: int) -> nn.Sequential:
            return nn.Sequential(
                *(make_operator_layer(operator, dim=dim, heads=heads, **operator_kwargs) for _ in range(num_layers))
            )

        # lifting encoder
        self.stem = nn.Conv2d(in_channels, c1, 3, padding=1, bias=False)
        self.enc1 = stage(c1, encoder_blocks[0])
        self.down1 = Downsample(c1, c2)
        self.scm2, self.fam2 = SCM(in_channels=in_channels, dim=c2), FAM(c2)
        self.enc2 = stage(c2, encoder_blocks[1])
        self.down2 = Downsample(c2, c3)
        self.scm4, self.fam4 = SCM(in_channels=in_channels, dim=c3), FAM(c3)
        self.enc3 = stage(c3, encoder_blocks[2])
        self.down3 = Downsample(c3, c4)
        self.enc4 = stage(c4, encoder_blocks[3])
        # decoder: upsample, concat skip, 1×1 reduce, T operator layers, projection head
        self.up4 = Upsample(c4, c3)
        self.reduce4 = nn.Conv2d(2 * c3, d1, 1, bias=False)
        self.ops4 = operators(d1)
        self.head4 = nn.Conv2d(d1, in_channels, 3, padding=1)
        self.up2 = Upsample(d1, c2)
        self.reduce2 = nn.Conv2d(2 * c2, d2, 1, bias=False)
        self.ops2 = operators(d2)
        self.head2 = nn.Conv2d(d2, in_channels, 3, padding=1)
        self.up1 = Upsample(d2, c1)
        self.reduce1 = nn.Conv2d(2 * c1, d3, 1, bias=False)
        self.ops1 = operators(d3)
        self.head1 = nn.Conv2d(d3, in_channels, 3, padding=1, bias=False)

        # element size as the built layers resolved it (GG has none: its element is the image)
        p = getattr(self.ops1[0], "element_size", 1) if num_layers else 1
        self.pad_multiple = math.lcm(8, 4 * p)

    def forward(self, x: Tensor) -> list[Tensor]:
        h, w = x.shape[-2:]
        xp = pad_to_multiple(x, self.pad_multiple)  # (B, Cin, Hp, Wp)
        x2 = half(xp)  # (B, Cin, Hp/2, Wp/2)
        x4 = half(x2)  # (B, Cin, Hp/4, Wp/4)

        s1 = self.enc1(self.stem(xp))  # (B, c1, Hp, Wp)
        s2 = self.enc2(self.fam2(self.down1(s1), self.scm2(x2)))  # (B, c2, Hp/2, Wp/2)
        s3 = self.enc3(self.fam4(self.down2(s2), self.scm4(x4)))  # (B, c3, Hp/4, Wp/4)
        s4 = self.enc4(self.down3(s3))  # (B, c4, Hp/8, Wp/8)

        z4 = self.ops4(self.reduce4(torch.cat([self.up4(s4), s3], dim=1)))  # (B, d1, Hp/4, Wp/4)
        z2 = self.ops2(self.reduce2(torch.cat([self.up2(z4), s2], dim=1)))  # (B, d2, Hp/2, Wp/2)
        z1 = self.ops1(self.reduce1(torch.cat([self.up1(z2), s1], dim=1)))  # (B, d3, Hp, Wp)

        out4 = (self.head4(z4) + x4)[..., : -(-h // 4), : -(-w // 4)]
        out2 = (self.head2(z2) + x2)[..., : -(-h // 2), : -(-w // 2)]
        out1 = (self.head1(z1) + xp)[..., :h, :w]
        return [out4, out2, out1]
