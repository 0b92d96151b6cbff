"""The paper's baselines and lifting networks (table below); here, the adapters of the spandrel networks (NAFNet, SwinIR, Restormer).

Names (each with "paper", "demo" and "smoke" scales):

| name           | network                                                        | source                  |
|----------------|----------------------------------------------------------------|-------------------------|
| nafnet         | NAFNet-width32, GoPro deblurring config                        | spandrel                |
| swinir         | SwinIR restoration config (upscale 1: denoising / JPEG layout) | spandrel                |
| restormer      | Restormer, motion / single-image defocus deblurring config     | spandrel-extra-arches   |
| gkmnet         | GKMNet (Gaussian kernel mixture, scale-recurrent)              | ``dgno.models.gkmnet``  |
| mimo-unet      | MIMO-UNet (8 residual blocks per stage; 20 = MIMO-UNet+)       | ``dgno.models.mimo_unet``|
| mpt            | multi-pyramid transformer (without the EFCR training loss)     | ``dgno.models.mpt``     |
| mambairv2      | MambaIRv2 restoration network on the shared ASSM block         | ``dgno.models.mambairv2``|
| nafnet-dgno    | DGNO-Cell with NAFNet blocks as lifting encoder                | ``dgno.models.lifting`` |
| restormer-dgno | DGNO-Cell with Restormer blocks as lifting encoder             | ``dgno.models.lifting`` |
| mpt-dgno       | DGNO-Cell with MPT blocks as lifting encoder                   | ``dgno.models.lifting`` |

All follow the registry contract: ``<network>(in_channels=..., **spec)`` → a module with ``.hparams``
whose forward maps (B, C, H, W) of any size to a list of restorations, coarse to fine (a
one-element list for single-output networks).  spandrel networks are wrapped in small adapters
that record the hyper-parameters, reflect-pad to the network's size multiple and crop back.

Each name's network and its sizes at each scale are one entry of ``dgno.models.registry.BASELINES``
(the DGNO family, lifting networks included, is ``DGNO_FAMILY`` there): demo scales are sized so that 300 training
steps of batch 4 on 64×64 patches take at most about a minute on one CPU core
(``benchmarks/cpu/models.py`` measures it); smoke scales are the smallest networks that still run
every code path (tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from dgno.layers.blocks import pad_to_multiple
from dgno.models.lifting import quiet_spandrel


class _PaddedRestorer(nn.Module):
    """forward(x) → [net(pad(x))[..., :H, :W]]: any input size for a network that needs a multiple.

    Reflect padding (bottom/right) keeps the padded border image-like, as everywhere in dgno.
    """

    net: nn.Module
    pad_multiple: int
    hparams: dict[str, Any]

    def forward(self, x: Tensor) -> list[Tensor]:
        h, w = x.shape[-2:]
        return [self.net(pad_to_multiple(x, self.pad_multiple))[..., :h, :w]]


class NAFNetRestorer(_PaddedRestorer):
    """spandrel NAFNet (Chen et al., ECCV 2022); pads to 2^(number of encoder levels).

    Args (keyword-only): in_channels; width (level-1 channels); middle_blocks; encoder_blocks,
    decoder_blocks (NAFBlocks per level, one entry per level, equal lengths).
    """

    def __init__(
        self,
        *,
        in_channels: int = 1,
        width: int = 32,
        middle_blocks: int = 1,
        encoder_blocks: Sequence[int] = (1, 1, 1, 28),
        decoder_blocks: Sequence[int] = (1, 1, 1, 1),
    ) -> None:
        super().__init__()
        if len(encoder_blocks) != len(decoder_blocks):
            raise ValueError(f"need as many decoder as encoder levels, got {list(encoder_blocks)}, {list(decoder_blocks)}")
        with quiet_spandrel():
            from spandrel.architectures.NAFNet import NAFNet
        self.hparams = {
            "in_channels": in_channels,
            "width": width,
            "middle_blocks": middle_blocks,
            "encoder_blocks": list(encoder_blocks),
            "decoder_blocks": list(decoder_blocks),
        }
        self.net = NAFNet(
            img_channel=in_channels,
            width=width,
            middle_blk_num=middle_blocks,
            enc_blk_nums=list(encoder_blocks),
            dec_blk_nums=list(decoder_blocks),
        )
        self.pad_multiple = 2 ** len(encoder_blocks)


class SwinIRRestorer(_PaddedRestorer):
    """spandrel SwinIR (Liang et al., ICCVW 2021) in its restoration form (upscale 1, no upsampler).

    x̂ = x + Conv(f_0 + Conv(RSTBs(f_0))), f_0 = Conv(x): the denoising / JPEG layout.  Pads to the
    window size.  Args (keyword-only): in_channels; img_size (training patch size, sets the
    precomputed attention masks; other sizes work); window_size; depths, num_heads (one entry per
    RSTB); embed_dim; mlp_ratio; drop_path_rate (stochastic depth, training only).
    """

    def __init__(
        self,
        *,
        in_channels: int = 1,
        img_size: int = 128,
        window_size: int = 8,
        depths: Sequence[int] = (6, 6, 6, 6, 6, 6),
        num_heads: Sequence[int] = (6, 6, 6, 6, 6, 6),
        embed_dim: int = 180,
        mlp_ratio: float = 2.0,
        drop_path_rate: float = 0.1,
    ) -> None:
        super().__init__()
        if len(depths) != len(num_heads):
            raise ValueError(f"depths and num_heads need one entry per RSTB, got {list(depths)}, {list(num_heads)}")
        self.hparams = {
            "in_channels": in_channels,
            "img_size": img_size,
            "window_size": window_size,
            "depths": list(depths),
            "num_heads": list(num_heads),
            "embed_dim": embed_dim,
            "mlp_ratio": mlp_ratio,
            "drop_path_rate": drop_path_rate,
        }
        with quiet_spandrel():
            from spandrel.architectures.SwinIR import SwinIR

            net = SwinIR(
                img_size=img_size,
                in_chans=in_channels,
                window_size=window_size,
                depths=list(depths),
                num_heads=list(num_heads),
                embed_dim=embed_dim,
                mlp_ratio=mlp_ratio,
                drop_path_rate=drop_path_rate,
                upscale=1,
                img_range=1.0,
                upsampler="",
                resi_connection="1conv",
            )
        self.net = net
        self.pad_multiple = window_size


class RestormerRestorer(_PaddedRestorer):
    """spandrel-extra-arches Restormer (Zamir et al., CVPR 2022); pads to 8 (three stride-2 levels).

    Args (keyword-only): in_channels; dim (level-1 width); num_blocks (4 levels);
    num_refinement_blocks; heads (4 levels); ffn_expansion; bias; layer_norm ("WithBias" | "BiasFree").
    """

    pad_multiple = 8

    def __init__(
        self,
        *,
        in_channels: int = 1,
        dim: int = 48,
        num_blocks: Sequence[int] = (4, 6, 6, 8),
        num_refinement_blocks: int = 4,
        heads: Sequence[int] = (1, 2, 4, 8),
        ffn_expansion: float = 2.66,
        bias: bool = False,
        layer_norm: str = "WithBias",
    ) -> None:
        super().__init__()
        if layer_norm not in ("WithBias", "BiasFree"):
            raise ValueError(f"unknown layer_norm {layer_norm!r}; allowed: 'WithBias', 'BiasFree'")
        if len(num_blocks) != 4 or len(heads) != 4:
            raise ValueError(f"Restormer needs 4 levels of num_blocks and heads, got {list(num_blocks)}, {list(heads)}")
        with quiet_spandrel():
            from spandrel_extra_arches.architectures.Restormer import Restormer
        self.hparams = {
            "in_channels": in_channels,
            "dim": dim,
            "num_blocks": list(num_blocks),
            "num_refinement_blocks": num_refinement_blocks,
            "heads": list(heads),
            "ffn_expansion": ffn_expansion,
            "bias": bias,
            "layer_norm": layer_norm,
        }
        self.net = Restormer(
            inp_channels=in_channels,
            out_channels=in_channels,
            dim=dim,
            num_blocks=list(num_blocks),
            num_refinement_blocks=num_refinement_blocks,
            heads=list(heads),
            ffn_expansion_factor=ffn_expansion,
            bias=bias,
            LayerNorm_type=layer_norm,
            dual_pixel_task=False,
        )
