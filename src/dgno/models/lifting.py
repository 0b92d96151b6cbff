"""Lifting-module ablation: DGNO's decoder (DG-Cell operator layers) on NAFNet, Restormer or MPT encoders.

The paper's table "Ablation with Different Lifting Modules" swaps the lifting encoder of DGNO
for the building block of another restoration network and keeps everything else.  ``DGNO``
already takes its encoder block by name, so the swap is one argument: this module registers
three more encoder blocks,

    "nafblock"         NAFNet's block (spandrel ``NAFBlock``): LN → 1×1 → DWConv → SimpleGate →
                       SCA → 1×1 (β-scaled), then LN → 1×1 → SimpleGate → 1×1 (γ-scaled)
    "restormer_block"  Restormer's transformer block (spandrel-extra-arches ``TransformerBlock``):
                       MDTA + GDFN (expansion 2.66, bias-free, LayerNorm with bias)
    "mpt_block"        MPT's multi-pyramid block (``dgno.models.mpt.MPTBlock``) with a 2× pyramid
                       (MPT's factor at levels 2-4; a block factory only knows its width, not its
                       level or index, so MPT's per-block schedule and shift alternation cannot
                       be reproduced) and window 8

and :func:`dgno_with_lifting` is the network of the registry's lifting entries (``dgno.models.registry.LIFTING_BLOCKS``
names each one's block): DGNO, built after this module has registered the blocks.  Heads follow Restormer/MPT: about
48 channels per head (1/2/4/8 heads on DGNO's 48/96/192/384-channel levels).  The encoder layout
(widths, blocks per level, shallow inputs) and the decoder are DGNO-Cell's at every scale, except
that the demo scale leaves the full-resolution level without a lifting block (CPU time; see
``dgno.models.baselines``).

spandrel is imported only when such a block is built: importing it takes seconds, and the
registry is imported by every command.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from torch import nn

from dgno.layers.blocks import register_encoder_block
from dgno.models.dgno import DGNO
from dgno.models.mpt import MPTBlock, heads_for


@contextlib.contextmanager
def quiet_spandrel() -> Iterator[None]:
    """Import / build spandrel networks without two deprecation warnings of its internals under torch 2.14.

    Hidden: the FutureWarning of spandrel's ``torch.jit.script`` use (on import) and the UserWarning
    of SwinIR's ``torch.meshgrid`` call without ``indexing`` (on construction).  Both concern
    spandrel's code, not anything this project calls; all other warnings pass.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated", category=FutureWarning)
        warnings.filterwarnings("ignore", message=r"torch\.meshgrid: in an upcoming release", category=UserWarning)
        yield


def _nafblock(dim: int) -> nn.Module:
    """NAFNet block with its published expansions (depth-wise ×2, FFN ×2)."""
    with quiet_spandrel():
        from spandrel.architectures.NAFNet.__arch.NAFNet_arch import NAFBlock
    return NAFBlock(dim)


def _restormer_block(dim: int) -> nn.Module:
    """Restormer block (MDTA + GDFN) as configured for deblurring."""
    with quiet_spandrel():
        from spandrel_extra_arches.architectures.Restormer.__arch.restormer_arch import (
            TransformerBlock,
        )
    return TransformerBlock(dim, heads_for(dim), 2.66, False, "WithBias")


def _mpt_block(dim: int) -> nn.Module:
    """MPT block with a 2× pyramid, no window shift (a lifting block is built from its width alone)."""
    return MPTBlock(dim=dim, heads=heads_for(dim), factor=2, window=8, shift=False, ffn_expansion=2.6)


register_encoder_block("nafblock")(_nafblock)
register_encoder_block("restormer_block")(_restormer_block)
register_encoder_block("mpt_block")(_mpt_block)


def dgno_with_lifting(**kwargs) -> DGNO:
    """DGNO with one of the encoder blocks this module registers (the registry's lifting entries build it)."""
    return DGNO(**kwargs)
