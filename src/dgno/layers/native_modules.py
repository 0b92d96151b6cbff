"""A trained network rewired for fast CPU inference: same weights, same function, other kernels.

:func:`to_native` changes a model in place, module by module, so the network's own code stays what it
is (the maths of the paper); only how each piece is computed on a CPU changes:

* the feature maps are channels-last (NHWC): the ASSM blocks' (B, H·W, C) token view of a map is then
  free, and per-pixel channel vectors are contiguous for the kernels below;
* a 1×1 convolution is a matrix product over pixels (``PointwiseLinear``): one GEMM on the NHWC data,
  where PyTorch's CPU convolution took an im2col-style path at several times the cost;
* a depth-wise k×k convolution runs the compiled kernel of ``dgno.layers.native_kernels``
  (``NativeDepthwise``);
* the selective scan runs its compiled kernel (``scan_backend = "native"``);
* the channel LayerNorm2d is one ``F.layer_norm`` over the channels-last view (its ``fused`` form).

Nothing changes the arithmetic beyond float rounding (tests compare with the original network).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgno.layers import native_kernels
from dgno.layers.blocks import LayerNorm2d
from dgno.layers.mambair import ASSM


class PointwiseLinear(nn.Module):
    """A 1×1 convolution as y = x W^T + b over the pixels of a channels-last map; (B, C, H, W) → (B, C', H, W)."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.weight = nn.Parameter(conv.weight.detach().flatten(1), requires_grad=False)  # (C', C)
        self.bias = None if conv.bias is None else nn.Parameter(conv.bias.detach(), requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x.permute(0, 2, 3, 1), self.weight, self.bias).permute(0, 3, 1, 2)


class NativeDepthwise(nn.Module):
    """A depth-wise k×k convolution (stride 1, zero padding k // 2) by the compiled kernel; channels-last out."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.weight = nn.Parameter(conv.weight.detach(), requires_grad=False)  # (C, 1, k, k)
        self.bias = None if conv.bias is None else nn.Parameter(conv.bias.detach(), requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        return native_kernels.depthwise_conv_native(x, self.weight, self.bias)


def is_pointwise(conv: nn.Module) -> bool:
    """A plain 1×1 convolution: no groups, stride, dilation or padding."""
    return (
        type(conv) is nn.Conv2d
        and conv.kernel_size == (1, 1)
        and conv.groups == 1
        and conv.stride == (1, 1)
        and conv.dilation == (1, 1)
        and conv.padding in ((0, 0), "valid")
    )


def is_depthwise(conv: nn.Module) -> bool:
    """A depth-wise, odd, square, stride-1 convolution zero-padded to keep the size."""
    if type(conv) is not nn.Conv2d:
        return False
    k = conv.kernel_size
    return (
        conv.groups == conv.in_channels == conv.out_channels
        and k[0] == k[1]
        and k[0] % 2 == 1
        and conv.stride == (1, 1)
        and conv.dilation == (1, 1)
        and conv.padding == (k[0] // 2, k[1] // 2)
        and conv.padding_mode == "zeros"
    )


def to_native(model: nn.Module) -> dict[str, int]:
    """Rewire ``model`` (in eval mode, in place) for the CPU kernels; returns what was changed, by kind.

    Raises RuntimeError (with the reason) when the compiled kernels cannot be built here.
    """
    if not native_kernels.available():
        raise RuntimeError(f"the native CPU kernels are unavailable: {native_kernels.unavailable_reason()}")
    counts = {"pointwise": 0, "depthwise": 0, "scan": 0, "layernorm": 0}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if is_pointwise(child):
                setattr(parent, name, PointwiseLinear(child))
                counts["pointwise"] += 1
            elif is_depthwise(child):
                setattr(parent, name, NativeDepthwise(child))
                counts["depthwise"] += 1
    for module in model.modules():
        if isinstance(module, ASSM):
            module.scan_backend = "native"
            counts["scan"] += 1
        elif isinstance(module, LayerNorm2d):
            module.fused = True
            counts["layernorm"] += 1
    model.eval().to(memory_format=torch.channels_last)
    return counts
