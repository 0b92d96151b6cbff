"""MambaIRv2 as a full restoration network (Guo et al., "MambaIRv2: Attentive State Space Restoration", CVPR 2025).

MambaIRv2's restoration variant (denoising / JPEG artefact removal: upscale 1) has the SwinIR layout,
with the window-attention transformer layers replaced by attentive state-space layers:

    f_0 = Conv3×3(x)                                   shallow features
    f_k = f_{k−1} + Conv3×3(Block^L(f_{k−1}))          K residual groups (ASSG) of L blocks
    x̂   = x + Conv3×3(f_0 + Conv3×3(LN(f_K)))          reconstruction + global residual

Blocks are this project's ASSM encoder block (``dgno.layers.mambair.ASSMBlock``, registered as the
encoder block "assm"): x + ASSM(LN(x)), then x + GDFN(LN(x)).  Its ASSM is MambaIRv2's attentive
state-space module (semantic-guided token routing + prompt-augmented selective scan); published
sizes for the restoration config are used: width 174, 6 groups × 6 blocks, d_state 16,
128 routes, prompt rank 64, expansion 2.  Two deliberate differences from the published layer,
both inherited from the shared block: it has no shifted-window self-attention branch (DGNO's
encoder block is ASSM + FFN only), and its FFN is Restormer's GDFN (here with expansion 2 = the
published MLP ratio) rather than MambaIRv2's ConvFFN — so the parameter count is below the
published network's.

No padding is needed: the scan has no window size, every convolution is size-preserving.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from dgno.layers.blocks import LayerNorm2d
from dgno.layers.mambair import ASSMBlock


class ResidualGroup(nn.Module):
    """ASSG: f + Conv3×3(blocks(f)); shapes (B, dim, H, W) → (B, dim, H, W)."""

    def __init__(self, *, dim: int, depth: int, block_kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(ASSMBlock(dim=dim, **block_kwargs) for _ in range(depth)))
        self.conv = nn.Conv2d(dim, dim, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv(self.blocks(x))


class MambaIRv2(nn.Module):
    """forward(x) → [restored]; x (B, in_channels, H, W), any H, W.

    Args (keyword-only): in_channels; embed_dim (width; 174); depths (blocks per residual group,
    one entry per group; [6]*6); d_state, num_tokens, inner_rank, expand (ASSM: 16, 128, 64, 2);
    ffn_expansion (GDFN hidden ratio; 2).
    """

    def __init__(
        self,
        *,
        in_channels: int = 1,
        embed_dim: int = 174,
        depths: Sequence[int] = (6, 6, 6, 6, 6, 6),
        d_state: int = 16,
        num_tokens: int = 128,
        inner_rank: int = 64,
        expand: float = 2.0,
        ffn_expansion: float = 2.0,
    ) -> None:
        super().__init__()
        if not depths or min(depths) < 1:
            raise ValueError(f"depths needs at least one group of >= 1 blocks, got {list(depths)}")
        block_kwargs = {
            "d_state": d_state,
            "num_tokens": num_tokens,
            "inner_rank": inner_rank,
            "expand": expand,
            "ffn_expansion": ffn_expansion,
        }
        self.hparams: dict[str, Any] = {"in_channels": in_channels, "embed_dim": embed_dim, "depths": list(depths),
                                        **block_kwargs}
        self.conv_first = nn.Conv2d(in_channels, embed_dim, 3, padding=1)
        self.groups = nn.Sequential(
            *(ResidualGroup(dim=embed_dim, depth=d, block_kwargs=block_kwargs) for d in depths)
        )
        self.norm = LayerNorm2d(embed_dim)
        self.conv_after_body = nn.Conv2d(embed_dim, embed_dim, 3, padding=1)
        self.conv_last = nn.Conv2d(embed_dim, in_channels, 3, padding=1)

    def forward(self, x: Tensor) -> list[Tensor]:
        shallow = self.conv_first(x)  # (B, C, H, W)
        deep = self.conv_after_body(self.norm(self.groups(shallow)))
        return [x + self.conv_last(shallow + deep)]
