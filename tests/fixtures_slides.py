"""Slides and networks for the whole-slide tests: written here, small, deterministic.

Tiles are 256 px with 32 px overlap (the authors' 512/32 protocol at half size) so that slides of a
few megapixels hold dozens of tiles and the tests stay fast. Blurred regions are laid on the tile grid
(starts 0, 224, 448, … px) so that every tile is clearly blurred or clearly sharp.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dgno.checkpoint import save_checkpoint
from dgno.data.slides import BlurRegion, blurred_share, brightfield_tissue, fluorescence_tissue, write_slide  # noqa: F401 - blurred_share: for the tests
from dgno.models.registry import build_model
from dgno.slides.network import SlideNetwork

TILE, OVERLAP = 256, 32
STEP = TILE - OVERLAP
# tile rows/cols [2, 4) and [5, 7) (top-left) and [1, 3) × [6, 8) blurred: σ 2.5 and 3.5 px
BLURRED = [BlurRegion(2 * STEP, 2 * STEP, 4 * STEP + OVERLAP, 4 * STEP + OVERLAP, 2.5), BlurRegion(5 * STEP, 1 * STEP, 7 * STEP + OVERLAP, 3 * STEP + OVERLAP, 3.5),
           BlurRegion(1 * STEP, 6 * STEP, 3 * STEP + OVERLAP, 8 * STEP + OVERLAP, 3.0)]  # fmt: skip


def network(channels: int = 3, *, fn=None, batch: int = 1, normalise: str = "dtype", name: str = "identity", strict: bool = False) -> SlideNetwork:
    """A SlideNetwork around ``fn`` (default: the identity) with the test tiles."""
    return SlideNetwork(name=name, channels=channels, forward=fn or (lambda x: x.clone()), device=torch.device("cpu"), tile=TILE, overlap=OVERLAP,
                        batch=batch, normalise=normalise, strict_channels=strict, identity=name)  # fmt: skip


def affine(x: torch.Tensor) -> torch.Tensor:
    """A network that visibly changes every pixel (0.8 x + 0.1), the same for every tile."""
    return 0.8 * x + 0.1


def conv_network(channels: int = 3, seed: int = 0) -> torch.nn.Module:
    """Three 7×7 convolutions with zero padding (receptive radius 9 px) and a residual: a CNN in miniature."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Conv2d(channels, 8, 7, padding=3), torch.nn.GELU(), torch.nn.Conv2d(8, 8, 7, padding=3), torch.nn.GELU(), torch.nn.Conv2d(8, channels, 7, padding=3))
    return net.eval()


def identity_model_file(path: Path, channels: int) -> Path:
    """A smoke-scale NAFNet ``model.pt`` whose last convolution is zero: it returns its input exactly
    (NAFNet adds its input to that convolution's output), at a tenth of a smoke DGNO's cost."""
    model = build_model("nafnet", scale="smoke", in_channels=channels)
    with torch.no_grad():
        model.net.ending.weight.zero_()
        model.net.ending.bias.zero_()
    save_checkpoint(path, {"version": 1, "spec": {"name": "nafnet", "scale": "smoke", "hparams": model.hparams, "overrides": {}}, "state_dict": model.state_dict()})
    return path


def brightfield_slide(path: Path, *, shape=(1600, 2048), layout: str = "generic-tiff", seed: int = 4, regions=BLURRED, mpp: float | None = 0.25) -> np.ndarray:
    """Write an H&E-like slide with ``regions`` defocused; return the written level-0 array."""
    img = brightfield_tissue(shape, seed=seed, regions=regions)
    write_slide(path, img, layout=layout, mpp=mpp)
    return img


def fluorescence_slide(path: Path, *, shape=(1100, 1300), seed: int = 4, regions=BLURRED[:1]) -> np.ndarray:
    """Write a 16-bit two-channel OME-TIFF with SubIFD levels; return the (2, H, W) array."""
    img = fluorescence_tissue(shape, seed=seed, regions=regions)
    write_slide(path, img, layout="ome-tiff", mpp=0.65, channel_names=["DAPI", "Actin"])
    return img


