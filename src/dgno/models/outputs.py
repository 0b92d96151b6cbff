"""The outputs of a restoration network as one list, whatever the network returns.

Multi-scale networks (MIMO-UNet, DGNO) return a list of restorations, coarse to full resolution;
the others return one tensor. Losses, validation and inference all want the list.
"""

from __future__ import annotations

import torch


def as_outputs(y: torch.Tensor | list[torch.Tensor]) -> list[torch.Tensor]:
    """[y] for a single tensor, list(y) for a list or tuple; the full-resolution output is last."""
    return list(y) if isinstance(y, (list, tuple)) else [y]
