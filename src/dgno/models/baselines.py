"""Every baseline of the paper in the model registry, plus the lifting-module ablation.

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

All follow the registry contract: ``factory(in_channels=..., **scale)`` → a module with ``.hparams``
whose forward maps (B, C, H, W) of any size to a list of restorations, coarse to fine (a
one-element list for single-output networks).  spandrel networks are wrapped in small adapters
that record the hyper-parameters, reflect-pad to the network's size multiple and crop back.

Demo scales are sized so that 300 training steps of batch 4 on 64×64 patches take at most about
a minute on one CPU core (``benchmarks/bench_models.py`` measures it); smoke scales are the
smallest networks that still run every code path (tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from dgno.layers.blocks import pad_to_multiple
from dgno.models.dgno import DGNO
from dgno.models.gkmnet import GKMNet
from dgno.models.lifting import LIFTING_MODELS, quiet_spandrel
from dgno.models.mambairv2 import MambaIRv2
from dgno.models.mimo_unet import MIMOUNet
from dgno.models.mpt import MPT, PAPER_FACTORS
from dgno.models.registry import model_spec, register


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


# --- scales ----------------------------------------------------------------------------------
# paper: the published restoration configurations (see each class); demo: ≤ ~1 min for 300 steps of
# batch 4 at 64² on one CPU core; smoke: tiny.

_SCALES: dict[str, tuple[type[nn.Module], dict[str, dict[str, Any]]]] = {
    "nafnet": (
        NAFNetRestorer,
        {
            "paper": {"width": 32, "middle_blocks": 1, "encoder_blocks": [1, 1, 1, 28], "decoder_blocks": [1, 1, 1, 1]},
            "demo": {"width": 16, "middle_blocks": 2, "encoder_blocks": [1, 1, 1, 2], "decoder_blocks": [1, 1, 1, 1]},
            "smoke": {"width": 4, "middle_blocks": 1, "encoder_blocks": [1, 1], "decoder_blocks": [1, 1]},
        },
    ),
    "swinir": (
        SwinIRRestorer,
        {
            "paper": {"img_size": 128, "window_size": 8, "depths": [6] * 6, "num_heads": [6] * 6, "embed_dim": 180,
                      "mlp_ratio": 2.0, "drop_path_rate": 0.1},
            "demo": {"img_size": 64, "window_size": 8, "depths": [2], "num_heads": [2], "embed_dim": 24,
                     "mlp_ratio": 2.0, "drop_path_rate": 0.0},
            "smoke": {"img_size": 32, "window_size": 4, "depths": [1], "num_heads": [1], "embed_dim": 8,
                      "mlp_ratio": 2.0, "drop_path_rate": 0.0},
        },
    ),
    "restormer": (
        RestormerRestorer,
        {
            "paper": {"dim": 48, "num_blocks": [4, 6, 6, 8], "num_refinement_blocks": 4, "heads": [1, 2, 4, 8],
                      "ffn_expansion": 2.66, "bias": False, "layer_norm": "WithBias"},
            "demo": {"dim": 8, "num_blocks": [1, 1, 1, 1], "num_refinement_blocks": 0, "heads": [1, 1, 1, 1],
                     "ffn_expansion": 2.66, "bias": False, "layer_norm": "WithBias"},
            "smoke": {"dim": 4, "num_blocks": [1, 1, 1, 1], "num_refinement_blocks": 1, "heads": [1, 1, 1, 1],
                      "ffn_expansion": 2.66, "bias": False, "layer_norm": "WithBias"},
        },
    ),
    "gkmnet": (
        GKMNet,
        {
            "paper": {"channels": [32, 64, 128], "num_kernels": 21, "sigma_step": 0.25, "kernel_size": 21, "lstm_kernel": 5},
            "demo": {"channels": [8, 12, 16], "num_kernels": 9, "sigma_step": 0.5, "kernel_size": 21, "lstm_kernel": 3},
            "smoke": {"channels": [4, 8, 8], "num_kernels": 3, "sigma_step": 0.5, "kernel_size": 5, "lstm_kernel": 3},
        },
    ),
    "mimo-unet": (
        MIMOUNet,
        {
            "paper": {"base_channels": 32, "num_res": 8},
            "demo": {"base_channels": 12, "num_res": 2},
            "smoke": {"base_channels": 8, "num_res": 1},
        },
    ),
    "mpt": (
        MPT,
        {
            "paper": {"dim": 40, "factors": PAPER_FACTORS, "heads": [1, 2, 4, 8], "window": 8, "ffn_expansion": 2.6},
            "demo": {"dim": 8, "factors": [[4], [2], [2], [2]], "heads": [1, 1, 2, 2], "window": 4,
                     "ffn_expansion": 2.6},
            "smoke": {"dim": 4, "factors": [[2, 1], [2], [1], [1]], "heads": [1, 1, 1, 1], "window": 4,
                      "ffn_expansion": 2.0},
        },
    ),
    "mambairv2": (
        MambaIRv2,
        {
            "paper": {"embed_dim": 174, "depths": [6] * 6, "d_state": 16, "num_tokens": 128, "inner_rank": 64,
                      "expand": 2.0, "ffn_expansion": 2.0},
            "demo": {"embed_dim": 12, "depths": [1, 1], "d_state": 4, "num_tokens": 16, "inner_rank": 8,
                     "expand": 1.0, "ffn_expansion": 2.0},
            "smoke": {"embed_dim": 6, "depths": [1], "d_state": 4, "num_tokens": 4, "inner_rank": 4,
                      "expand": 1.0, "ffn_expansion": 2.0},
        },
    ),
}

for _name, (_cls, _scales) in _SCALES.items():
    register(_name, factory=_cls, scales=_scales)

# Lifting ablation: DGNO-Cell at each scale, only the encoder block swapped.  At demo scale the
# full-resolution level gets no lifting block: the transformer blocks at 64² cost up to ~0.5× a whole
# DGNO demo step on CPU each, which pushed a 300-step demo run past a minute.
_LIFTING_DEMO_BLOCKS = [0, 1, 1, 1]


def _lifting_scales(block: str) -> dict[str, dict[str, Any]]:
    """DGNO-Cell's scales with ``encoder_block`` = ``block`` (demo: see ``_LIFTING_DEMO_BLOCKS``)."""
    scales = {s: {**model_spec("dgno-cell", s), "encoder_block": block} for s in ("paper", "demo", "smoke")}
    scales["demo"]["encoder_blocks"] = list(_LIFTING_DEMO_BLOCKS)
    return scales


for _name, _block in LIFTING_MODELS.items():
    register(_name, factory=DGNO, scales=_lifting_scales(_block))
