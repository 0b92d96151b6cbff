"""The learned focus measure of brightfield slides: a small convolutional network that scores every
16-px cell of a tile for defocus.

Why learned: the hand-made measure (E½ / E0 over 80-px windows, ``dgno.slides.focus.block_detail``)
reads every loss of fine detail as defocus, so soft tissue in focus (oedematous stroma, fat, pale
stain, JPEG-flattened areas) scored like mild defocus, and its windows moved a region's edge by a cell
or two; at the 50 % tile rule both cost precision and recall on real H&E. The network is trained on
the project's own synthetic defocus of real tissue (``dgno.slides.focus_training``: the dev sources of
``dgno.data.tissue_sources`` only, PSFs of ``dgno.optics.defocus``), so it learns what defocus does
to tissue rather than what soft tissue looks like.

**Input.** The tile's luminance (0-255), split in two channels that do not depend on stain density:
the detail about a local mean, divided by the local contrast plus a noise floor of ``NOISE_FLOOR``
grey levels (so flat glass and sensor noise stay small), and the log of the local contrast itself
(both over a Gaussian window of σ ``CONTEXT_SIGMA`` px).

**Network** (:class:`FocusNet`; shapes for a 512-px tile):

    prepared (2, 512, 512) → space-to-depth by 4 → (32, 128, 128)
    → 3×3 conv 32, ReLU → 3×3 conv 32, ReLU            (128 × 128: 4-px cells)
    → 2×2 conv stride 2, 48, ReLU → 3×3 conv 48, ReLU  (64 × 64)
    → 2×2 conv stride 2, 64, ReLU → 3×3 conv 64, ReLU  (32 × 32: one per 16-px cell)
    → 1×1 conv → logit (32, 32)

The strided 2×2 convolutions keep each output on its own 16 × 16 pixels (cell *i* covers pixels
[16 i, 16 i + 16)); the 3×3 ones give each cell a context of about 100 px. About 95 000 weights
(``focus_net.npz`` beside this module, 0.4 MB); one 512-px tile takes about 0.1 s on a core.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

WEIGHTS = Path(__file__).with_name("focus_net.npz")
CELL = 16  # px: one logit per 16 × 16 pixels
NOISE_FLOOR = 3.0  # grey levels added to the local contrast before dividing by it
CONTEXT_SIGMA = 8.0  # px: the local mean and contrast


def _gaussian_kernel(sigma: float) -> torch.Tensor:
    r = int(3 * sigma + 0.5)
    x = torch.arange(-r, r + 1, dtype=torch.float32)
    k = torch.exp(-x * x / (2 * sigma * sigma))
    return k / k.sum()


def gaussian_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """(B, 1, H, W) → same: a separable Gaussian blur, edges mirrored."""
    k = _gaussian_kernel(sigma)
    r = k.numel() // 2
    mode = "reflect" if min(x.shape[-2:]) > r else "replicate"  # a tile smaller than the kernel: its edge repeated
    x = F.conv2d(F.pad(x, (r, r, 0, 0), mode=mode), k.view(1, 1, 1, -1))
    return F.conv2d(F.pad(x, (0, 0, r, r), mode=mode), k.view(1, 1, -1, 1))


def prepare(grey: torch.Tensor) -> torch.Tensor:
    """(B, 1, H, W) luminance 0-255 → (B, 2, H, W): contrast-normalised detail, log local contrast (module docstring)."""
    mean = gaussian_blur(grey, CONTEXT_SIGMA)
    detail = grey - mean
    contrast = torch.sqrt(gaussian_blur(detail * detail, CONTEXT_SIGMA) + 1e-6)
    return torch.cat([detail / (contrast + NOISE_FLOOR), torch.log1p(contrast) / 3.0 - 1.0], dim=1)


class FocusNet(nn.Module):
    """Luminance (B, 1, H, W), H and W multiples of 16 → defocus logits (B, H/16, W/16) (module docstring)."""

    def __init__(self, widths: tuple[int, int, int] = (32, 48, 64)) -> None:
        super().__init__()
        a, b, c = widths
        self.body = nn.Sequential(
            nn.Conv2d(2 * 16, a, 3, padding=1), nn.ReLU(), nn.Conv2d(a, a, 3, padding=1), nn.ReLU(),  # (a, H/4, W/4)
            nn.Conv2d(a, b, 2, stride=2), nn.ReLU(), nn.Conv2d(b, b, 3, padding=1), nn.ReLU(),  # (b, H/8, W/8)
            nn.Conv2d(b, c, 2, stride=2), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1), nn.ReLU(),  # (c, H/16, W/16)
            nn.Conv2d(c, 1, 1),  # (1, H/16, W/16)
        )  # fmt: skip

    def forward(self, grey: torch.Tensor) -> torch.Tensor:
        return self.body(F.pixel_unshuffle(prepare(grey), 4))[:, 0]


def save_weights(net: FocusNet, path: Path) -> None:
    """The weights as plain arrays (``.npz``, no pickle), named as in the state dict."""
    np.savez(path, **{k: v.detach().cpu().numpy() for k, v in net.state_dict().items()})


@cache
def shipped_net(path: Path = WEIGHTS) -> FocusNet:
    """The network with the weights shipped in the package (read once per process), in eval mode."""
    net = FocusNet()
    with np.load(path) as arrays:
        net.load_state_dict({k: torch.from_numpy(arrays[k]) for k in arrays.files})
    return net.eval()


def cell_logits(grey: np.ndarray, net: FocusNet | None = None) -> np.ndarray:
    """(H, W) luminance 0-255 → (ceil(H/16), ceil(W/16)) float32 defocus logits, > 0 where the network
    takes a cell for blurred; a tile whose sides are not multiples of 16 is mirrored out to them."""
    net = net or shipped_net()
    g = torch.from_numpy(np.ascontiguousarray(grey, np.float32))[None, None]
    h, w = g.shape[-2:]
    ph, pw = -h % CELL, -w % CELL
    if ph or pw:
        g = F.pad(g, (0, pw, 0, ph), mode="reflect" if min(h, w) > max(ph, pw) else "replicate")
    with torch.inference_mode():
        return net(g)[0].numpy().astype(np.float32)
