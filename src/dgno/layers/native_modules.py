"""A trained network rewired for fast CPU inference: same weights, same function, other kernels.

:func:`to_native` changes a model in place, module by module, so the network's own code stays what it
is (the maths of the paper); only how each piece is computed on a CPU changes:

* the feature maps are channels-last (NHWC): the ASSM blocks' (B, H·W, C) token view of a map is then
  free, and per-pixel channel vectors are contiguous for the kernels below;
* a 1×1 convolution is a matrix product over pixels (``PointwiseLinear``) on the NHWC data, where
  PyTorch's CPU convolution took an im2col-style path at several times the cost; it and every linear map
  (``PackedLinear``) run the compiled product of ``native_kernels``, which keeps a 6-pixel × 2-register
  block of outputs in registers: with the few channels of these networks (48 to 200) it ran 1.2-2.5×
  faster than MKL's GEMM on this project's test machine (equal on the widest layers);
* a depth-wise k×k convolution runs the compiled kernel of ``dgno.layers.native_kernels``
  (``NativeDepthwise``), with the gate that follows it in the same pass where a block has one: the
  GDFN's GELU(a) ⊙ b (``NativeGDFN``, its hidden channels padded with zeros to whole vector blocks, which
  the matrix products also run faster on) and the ASSM's v ⊙ σ(DWConv(v)) (``ASSM.fused_gate``);
* the selective scan runs its compiled kernel (``scan_backend = "native"``);
* the Galerkin operator layers cut the map into elements, with the per-head norms of K and V, and put
  Q K_e back onto the map, plus the residual, in one compiled pass each (``_GalerkinLayer.native``);
* the channel LayerNorm2d is one ``F.layer_norm`` over the channels-last view (its ``fused`` form).

Nothing changes the arithmetic beyond float rounding (tests compare with the original network).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgno.layers import native_kernels
from dgno.layers.blocks import LayerNorm2d
from dgno.layers.mambair import ASSM, GDFN
from dgno.layers.operator import _GalerkinLayer


class PackedLinear(nn.Module):
    """y = x Wᵀ + b over the last axis by the compiled matrix product, W packed once into its panels.

    ``weight`` and ``bias`` stay as they were (code that reads them, such as the ASSM's Δ projection,
    keeps working); the packed copies are buffers.  x (..., K) with a contiguous last axis → (..., N).
    """

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.detach(), requires_grad=False)  # (N, K)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        packed, packed_bias = native_kernels.pack_linear(self.weight, self.bias)
        self.register_buffer("packed", packed, persistent=False)  # (N'/P, K, P)
        self.register_buffer("packed_bias", packed_bias, persistent=False)  # (N',)

    def forward(self, x: Tensor) -> Tensor:
        return native_kernels.linear_native(x, self.packed, self.packed_bias, self.weight.shape[0])


class PointwiseLinear(PackedLinear):
    """A 1×1 convolution as y = x Wᵀ + b over the pixels of a channels-last map; (B, C, H, W) → (B, C', H, W)."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__(conv.weight.flatten(1), conv.bias)  # (C', C)

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class NativeDepthwise(nn.Module):
    """A depth-wise k×k convolution (stride 1, zero padding k // 2) by the compiled kernel; channels-last out."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.weight = nn.Parameter(conv.weight.detach(), requires_grad=False)  # (C, 1, k, k)
        self.bias = None if conv.bias is None else nn.Parameter(conv.bias.detach(), requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        return native_kernels.depthwise_conv_native(x, self.weight, self.bias)


class NativeGDFN(nn.Module):
    """Restormer's GDFN, W_out(GELU(a) ⊙ b) with [a, b] = DWConv3×3(W_in x), as one compiled pass over bands of
    rows (``native_kernels.gdfn``); (B, dim, H, W) → channels-last (B, dim, H, W).

    The hidden width h is padded to h' (a multiple of 16): W_in gains zero rows after a's and after b's h
    outputs, the depth-wise weights zeros, W_out zero columns.  A padded channel is then 0 in a and b,
    GELU(0) ⊙ 0 = 0, and it adds nothing to the output: the function is unchanged.
    """

    def __init__(self, gdfn: GDFN) -> None:
        super().__init__()
        hidden = gdfn.project_out.in_channels
        padded = -(-hidden // 16) * 16
        w_in = gdfn.project_in.weight.detach().flatten(1)  # (2h, dim)
        w_dw = gdfn.dwconv.weight.detach()  # (2h, 1, k, k)

        def halves(w: Tensor) -> Tensor:  # (2h, ...) → (2h', ...): each half padded with zeros
            a, b = w.chunk(2)
            pad = w.new_zeros(padded - hidden, *w.shape[1:])
            return torch.cat([a, pad, b, pad])

        self.project_in = PackedLinear(halves(w_in), None)  # (2h', dim)
        self.w_dw = nn.Parameter(halves(w_dw), requires_grad=False)  # (2h', 1, k, k)
        w_out = gdfn.project_out.weight.detach().flatten(1)  # (dim, h)
        self.project_out = PackedLinear(F.pad(w_out, (0, padded - hidden)), None)  # (dim, h')

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.project_out.weight.shape[1]  # h'
        return native_kernels.gdfn(x, self.project_in.packed, self.w_dw, self.project_out.packed, hidden)


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
    counts = {"gdfn": 0, "gate": 0, "pointwise": 0, "linear": 0, "depthwise": 0, "scan": 0, "operator": 0, "layernorm": 0}
    block = native_kernels.lanes()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, GDFN) and type(child.dwconv) is nn.Conv2d and is_depthwise(child.dwconv):
                setattr(parent, name, NativeGDFN(child))
                counts["gdfn"] += 1
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if is_pointwise(child):
                setattr(parent, name, PointwiseLinear(child))
                counts["pointwise"] += 1
            elif type(child) is nn.Linear:
                setattr(parent, name, PackedLinear(child.weight, child.bias))
                counts["linear"] += 1
            elif is_depthwise(child):
                setattr(parent, name, NativeDepthwise(child))
                counts["depthwise"] += 1
    for module in model.modules():
        if isinstance(module, ASSM):
            module.scan_backend = "native"
            counts["scan"] += 1
            if module.cpe.weight.shape[0] % block == 0:
                module.fused_gate = True
                counts["gate"] += 1
        elif isinstance(module, _GalerkinLayer):
            module.native = True
            counts["operator"] += 1
        elif isinstance(module, LayerNorm2d):
            module.fused = True
            counts["layernorm"] += 1
    model.eval().to(memory_format=torch.channels_last)
    return counts
