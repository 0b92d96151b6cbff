"""Effective rank of the latent functions z of the operator decoder (the paper's rank figure).

The paper argues that DG operators keep the latent basis diverse where a global Galerkin
operator collapses it. Its measure is the effective rank (Roy & Vetterli, 2007) of the
latent matrix z: one feature map (C, H, W) read as a (tokens × channels) matrix Z with
tokens = H·W pixels and channels = C latent functions,

    σ_1 ≥ … ≥ σ_r   singular values of Z (not centred),
    p_i = σ_i / Σ_j σ_j,
    erank(Z) = exp(−Σ_i p_i log p_i).

It is 1 for a rank-1 matrix, n for a matrix with n equal non-zero singular values (e.g. an
identity-like n-column matrix) and always ≤ min(tokens, channels); utilisation = erank / C
puts the three scales (192/96/48 channels at paper scale) on one axis.

Latents are captured with forward hooks on the decoder's operator layers, so the network's
own forward pass (padding, multi-scale fusion) is measured unchanged; each hook output is
cropped back to the part of the padded grid that covers the real image.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from dgno.checkpoint import load_trained
from dgno.data.paired import load_pairs, read_split, to_tensor_image

# (paper's scale name, DGNO attribute holding that scale's T operator layers, stride w.r.t. the input)
OPERATOR_STAGES: tuple[tuple[str, str, int], ...] = (("s1", "ops4", 4), ("s2", "ops2", 2), ("s3", "ops1", 1))


def effective_rank(matrix: Tensor | np.ndarray, *, eps: float = 1e-12) -> float:
    """exp(entropy of the normalised singular values) of a 2-D matrix; 0 for an all-zero matrix.

    Computed in float64: the smallest singular values of a (tokens × channels) latent matrix
    matter for the entropy, and float32 SVD of tall matrices loses them.
    """
    m = torch.as_tensor(matrix).detach().to(torch.float64)
    if m.ndim != 2:
        raise ValueError(f"effective_rank needs a 2-D matrix, got shape {tuple(m.shape)}")
    s = torch.linalg.svdvals(m)
    total = s.sum()
    if total <= eps:
        return 0.0
    p = s / total
    p = p[p > eps]  # 0·log 0 = 0
    return float(torch.exp(-(p * p.log()).sum()))


def latent_matrix(z: Tensor) -> Tensor:
    """(C, H, W) or (1, C, H, W) feature map → (H·W tokens, C channels) matrix."""
    if z.ndim == 4:
        if z.shape[0] != 1:
            raise ValueError(f"latent_matrix takes one image, got batch {z.shape[0]}")
        z = z[0]
    if z.ndim != 3:
        raise ValueError(f"latent_matrix needs (C, H, W) or (1, C, H, W), got shape {tuple(z.shape)}")
    c = z.shape[0]
    return z.reshape(c, -1).T  # (H·W, C)


def operator_layers(model: nn.Module) -> dict[tuple[str, int], tuple[nn.Module, int]]:
    """{(scale, t): (operator layer, stride)} of a DGNO-type network (GG, LG, DGNO-Face/Cell).

    t counts the operator iterations at one scale from 0 (the paper's T = 0, 1 for T = 2 layers).
    """
    out: dict[tuple[str, int], tuple[nn.Module, int]] = {}
    for scale, attr, stride in OPERATOR_STAGES:
        stack = getattr(model, attr, None)
        if not isinstance(stack, nn.Sequential):
            raise ValueError(
                f"{type(model).__name__} has no operator stack {attr!r}; effective-rank analysis needs a DGNO-type "
                f"network (registry models gg, lg, dgno-face, dgno-cell) with {[a for _, a, _ in OPERATOR_STAGES]}"
            )
        for t, layer in enumerate(stack):
            out[(scale, t)] = (layer, stride)
    return out


def crop_to_image(t: Tensor, image_hw: tuple[int, int], stride: int) -> Tensor:
    """The top-left (ceil(H/stride), ceil(W/stride)) part of a feature map: the part that covers the image.

    DGNO pads at the bottom/right only, so this is the same crop its outputs get.
    """
    h, w = image_hw
    return t[..., : -(-h // stride), : -(-w // stride)]


@contextmanager
def capture_layers(
    model: nn.Module,
    image_hw: tuple[int, int],
    read: Callable[[nn.Module, tuple, Tensor], Tensor | dict[str, Tensor]],
    *,
    scales: Sequence[str] | None = None,
):
    """Forward hooks on the operator layers that store ``read(layer, inputs, output)``, cropped to the image.

    Yields {(scale, t): Tensor or {name: Tensor}, each (B, C, ceil(H/stride), ceil(W/stride))}, filled by
    the next forward pass; only the layers of ``scales`` (paper names s1, s2, s3; all when None). The
    network's own forward pass is unchanged, so what is stored is what it computes; the hooks are
    removed on exit even if the forward pass fails.
    """
    store: dict[tuple[str, int], Tensor | dict[str, Tensor]] = {}
    handles = []

    def hook_for(key: tuple[str, int], stride: int):
        def hook(module: nn.Module, inputs: tuple, output: Tensor) -> None:
            value = read(module, inputs, output)
            if isinstance(value, dict):
                store[key] = {name: crop_to_image(t, image_hw, stride).detach() for name, t in value.items()}
            else:
                store[key] = crop_to_image(value, image_hw, stride).detach()

        return hook

    for key, (layer, stride) in operator_layers(model).items():
        if scales is None or key[0] in scales:
            handles.append(layer.register_forward_hook(hook_for(key, stride)))
    try:
        yield store
    finally:
        for handle in handles:
            handle.remove()


def capture_latents(model: nn.Module, image_hw: tuple[int, int]):
    """Forward hooks that store each operator layer's output z_{t+1} (cropped to the image): a context
    manager yielding {(scale, t): Tensor (B, C, ceil(H/stride), ceil(W/stride))} (see :func:`capture_layers`)."""
    return capture_layers(model, image_hw, lambda _module, _inputs, output: output)


@dataclass(frozen=True)
class RankRecord:
    scale: str
    t: int
    stride: int
    channels: int
    tokens: int
    erank: float


@torch.no_grad()
def image_latent_ranks(model: nn.Module, x: Tensor) -> list[RankRecord]:
    """Effective rank of every (scale, t) latent for one image x (1, C_in, H, W)."""
    if x.ndim != 4 or x.shape[0] != 1:
        raise ValueError(f"image_latent_ranks takes one image (1, C, H, W), got shape {tuple(x.shape)}")
    strides = {k: s for k, (_, s) in operator_layers(model).items()}
    with capture_latents(model, tuple(x.shape[-2:])) as store:
        model(x)
    records = []
    for (scale, t), z in sorted(store.items()):
        m = latent_matrix(z)
        records.append(RankRecord(scale=scale, t=t, stride=strides[(scale, t)], channels=m.shape[1], tokens=m.shape[0], erank=effective_rank(m)))
    return records


def latent_rank_table(model: nn.Module, images: Iterable[Tensor]) -> pd.DataFrame:
    """Mean ± std over images of each latent's effective rank, and utilisation = erank / channels.

    Columns: scale, t, stride, channels, tokens (of the last image), erank, erank_std, utilization, n_images.
    """
    model.eval()
    rows = [vars(r) for x in images for r in image_latent_ranks(model, x)]
    if not rows:
        raise ValueError("latent_rank_table got no images")
    frame = pd.DataFrame(rows)
    out = (
        frame.groupby(["scale", "t", "stride", "channels"], sort=True)
        .agg(tokens=("tokens", "last"), erank=("erank", "mean"), erank_std=("erank", "std"), n_images=("erank", "size"))
        .reset_index()
    )
    out["erank_std"] = out["erank_std"].fillna(0.0)
    out["utilization"] = out["erank"] / out["channels"]
    return out[["scale", "t", "stride", "channels", "tokens", "erank", "erank_std", "utilization", "n_images"]]


def dataset_rank_table(
    checkpoints: dict[str, str],
    *,
    data_dir: str,
    level: str,
    max_images: int | None = None,
    device: str = "cpu",
) -> pd.DataFrame:
    """Latent effective ranks of trained checkpoints on the blurred test images of one level.

    checkpoints: {method: model.pt}. Every method sees the same images (the first
    ``max_images`` test ids, all when None), so their ranks are directly comparable.
    """
    ids = read_split(data_dir).get("test", [])
    if max_images is not None:
        ids = ids[:max_images]
    if not ids:
        raise ValueError(f"{data_dir}: no test images for the effective-rank analysis")
    pairs = load_pairs(data_dir, split="test", levels=[level], ids=ids)
    frames = []
    for method, path in checkpoints.items():
        model, _ = load_trained(path, device)
        images = (to_tensor_image(p.blur).to(device) for p in pairs)
        frame = latent_rank_table(model, images)
        frame.insert(0, "method", method)
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    out["level"] = level
    return out
