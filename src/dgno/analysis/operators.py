"""What a trained operator decoder computes, term by term (the paper's figure "fig:qualitative").

The paper shows, for one BBBC006 test image, (i) the learned dynamic basis functions, (ii) the
latent representations Q(KᵀV) and (iii) the DG flux and boundary responses, and claims that
the flux responses concentrate at element interfaces and structural transitions. One operator
layer updates its input x as

    z = x + Q K^vol_e + Q Σ_f K^flux_{e,f},     out = z + MLP(z)

(``dgno.layers.operator``), so the three panels are the three per-pixel tensors of that sum:

    basis  = the channels of Q (input-dependent: the "dynamic" basis of the Galerkin view),
    latent = Q K^vol_e = Q(K̃ᵀṼ) over each element (the whole image for GG),
    flux   = Q K^flux_e (DG only; zero for GG/LG, which have no flux).

They are read with ``operator_terms`` of each layer, called from a forward hook on the same
input the network feeds the layer, so the network's own forward pass (padding, multi-scale
fusion) is unchanged and the maps are exactly the terms it applies. The layers are found as
in the effective-rank analysis (``dgno.analysis.rank``).

The interface claim is measured rather than assumed: ``interface_energy_ratio`` is the mean
squared channel norm of a map on pixels within one pixel of an interior element interface
divided by the same mean on all other pixels. It is 1 when the map does not care where the
element borders are. Note that the flux term of an element is its queries times one d×d
matrix per head (constant over the element), so a ratio above 1 can only come from the
queries themselves, not from the assembly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from dgno.analysis.rank import capture_layers, operator_layers
from dgno.checkpoint import load_trained
from dgno.data.paired import load_pairs, read_split, to_tensor_image

# Per-pixel terms of an operator layer that the analysis keeps (``operator_terms`` also returns "output").
TERMS: tuple[str, ...] = ("q", "volume", "flux")


def _terms(module: nn.Module, inputs: tuple, _output: Tensor) -> dict[str, Tensor]:
    """The layer's terms, recomputed from its input without gradients (nothing is stored on the layer)."""
    with torch.no_grad():
        return module.operator_terms(inputs[0])


def capture_operator_terms(model: nn.Module, image_hw: tuple[int, int], *, scales: Sequence[str] | None = None):
    """Forward hooks that store each operator layer's terms (see module docstring), cropped to the image.

    A context manager yielding {(scale, t): {"q" | "volume" | ["flux"] | "output": Tensor (B, C,
    ceil(H/stride), ceil(W/stride))}}, filled by the next forward pass; only the layers of ``scales``
    (paper names s1, s2, s3; all when None). The hooks (``dgno.analysis.rank.capture_layers``)
    recompute the terms from the layer's input, a second pass through that layer.
    """
    for key, (layer, _stride) in operator_layers(model).items():
        if (scales is None or key[0] in scales) and not hasattr(layer, "operator_terms"):
            raise ValueError(f"operator layer {type(layer).__name__} at {key} cannot split its update into terms")
    return capture_layers(model, image_hw, _terms, scales=scales)


def channel_norm(t: Tensor) -> np.ndarray:
    """‖t(y)‖₂ over channels of one map (1, C, H, W) or (C, H, W) → (H, W) float64."""
    if t.ndim == 4:
        if t.shape[0] != 1:
            raise ValueError(f"channel_norm takes one image, got batch {t.shape[0]}")
        t = t[0]
    return t.detach().to(torch.float64).norm(dim=0).cpu().numpy()


def interface_mask(shape: tuple[int, int], element_size: int, *, width: int = 1) -> np.ndarray:
    """True on pixels within ``width`` px of an interior element interface of a p×p grid from (0, 0).

    Interfaces sit between rows/columns k·p − 1 and k·p (k ≥ 1); the ``width`` pixels on each
    side count. The image border is not an interface (it has no neighbouring element), and the
    grid starts at the top-left corner because DGNO pads at the bottom/right only.
    """
    if element_size < 1 or width < 1:
        raise ValueError(f"element_size and width must be ≥ 1, got {element_size}, {width}")

    def axis(n: int) -> np.ndarray:
        i = np.arange(n)
        r = i % element_size
        near = (r < width) & (i - r >= element_size)  # just after an interface, not the image border
        near |= (element_size - 1 - r < width) & (i - r + element_size < n)  # just before one inside the image
        return near

    rows, cols = axis(shape[0]), axis(shape[1])
    return rows[:, None] | cols[None, :]


def interface_energy_ratio(norm_map: np.ndarray, element_size: int, *, width: int = 1) -> float:
    """mean(map²) on the interface band / mean(map²) elsewhere; NaN when either side is empty or zero.

    1 = no preference for element borders, > 1 = the map's energy concentrates there.
    """
    return _energy_ratio(norm_map, interface_mask(norm_map.shape, element_size, width=width))


def boundary_element_mask(shape: tuple[int, int], element_size: int) -> np.ndarray:
    """True on pixels of the elements that touch the image border (the outermost ring of the p×p grid).

    These are the elements whose operators see the domain-boundary treatment (a zero ghost for
    Dirichlet, the wrap for periodic, nothing for Neumann), i.e. the paper's "boundary responses".
    """
    rows = np.arange(shape[0]) // element_size
    cols = np.arange(shape[1]) // element_size
    r = (rows == 0) | (rows == rows[-1])
    c = (cols == 0) | (cols == cols[-1])
    return r[:, None] | c[None, :]


def _energy_ratio(norm_map: np.ndarray, mask: np.ndarray) -> float:
    """mean(map²) where ``mask`` / mean(map²) elsewhere; NaN when a side is empty or has no energy outside."""
    if mask.all() or not mask.any():
        return float("nan")
    energy = np.asarray(norm_map, dtype=np.float64) ** 2
    inside, outside = energy[mask].mean(), energy[~mask].mean()
    if outside <= 0:  # e.g. an all-zero flux map: no energy anywhere to compare
        return float("nan")
    return float(inside / outside)


def top_varying_channels(q: Tensor, k: int) -> list[int]:
    """Indices of the ``k`` channels of Q (1, C, H, W) with the largest spatial std, largest first.

    The basis panels show these: a channel that is nearly constant over the image carries no
    visible spatial adaptation, and picking by variance is deterministic for a given image.
    """
    std = q[0].detach().to(torch.float64).flatten(1).std(dim=1)
    order = torch.argsort(std, descending=True, stable=True)
    return [int(i) for i in order[: min(k, q.shape[1])]]


def _gray(t: Tensor) -> np.ndarray:
    """(1, C, H, W) image → (H, W) float32 for display (channel mean for colour inputs)."""
    return t[0].detach().float().mean(dim=0).cpu().numpy()


@dataclass
class OperatorView:
    """The maps of one operator layer (one method, scale and iteration t) on one image, ready to draw."""

    label: str
    scale: str
    t: int
    stride: int
    element_size: int | None  # p in samples of this scale's grid (p·stride image px); None for GG (one element)
    blurred: np.ndarray  # (H, W)
    restored: np.ndarray  # (H, W), the network's full-resolution output
    basis: np.ndarray  # (k, h, w) selected channels of Q at this scale
    basis_channels: list[int]
    latent: np.ndarray  # (h, w) ‖Q K^vol‖ over channels
    flux: np.ndarray | None  # (h, w) ‖Q K^flux‖ over channels; None when the layer has no flux
    stats: dict[str, float] = field(default_factory=dict)


def view_stats(latent: np.ndarray, flux: np.ndarray | None, element_size: int | None) -> dict[str, float]:
    """Interface-energy ratios of the latent and flux maps, the flux's border-element ratio and flux/latent energy."""
    nan = float("nan")
    stats = {"latent_interface_ratio": nan, "flux_interface_ratio": nan, "flux_boundary_ratio": nan, "flux_to_latent_energy": nan}
    if element_size is not None:
        stats["latent_interface_ratio"] = interface_energy_ratio(latent, element_size)
        if flux is not None:
            stats["flux_interface_ratio"] = interface_energy_ratio(flux, element_size)
            stats["flux_boundary_ratio"] = _energy_ratio(flux, boundary_element_mask(flux.shape, element_size))
    if flux is not None and (latent**2).mean() > 0:
        stats["flux_to_latent_energy"] = float((flux**2).mean() / (latent**2).mean())
    return stats


@torch.no_grad()
def image_operator_views(
    model: nn.Module,
    x: Tensor,
    *,
    label: str = "",
    scale: str = "s3",
    steps: Iterable[int] | None = None,
    n_basis: int = 3,
) -> list[OperatorView]:
    """Maps of the ``scale`` operator layers at iterations ``steps`` (all when None) for one image x (1, C, H, W).

    The basis channels are picked once, at the last captured iteration, and shown at every t, so
    rows of one method show the same channels evolving.
    """
    if x.ndim != 4 or x.shape[0] != 1:
        raise ValueError(f"image_operator_views takes one image (1, C, H, W), got shape {tuple(x.shape)}")
    layers = operator_layers(model)
    model.eval()
    with capture_operator_terms(model, tuple(x.shape[-2:]), scales=[scale]) as store:
        restored = model(x)[-1]
    if not store:
        raise ValueError(f"no operator layers at scale {scale!r}; have {sorted({s for s, _ in layers})}")
    keys = sorted(store)
    if steps is not None:
        wanted = {t if t >= 0 else len(keys) + t for t in steps}
        keys = [k for k in keys if k[1] in wanted]
    channels = top_varying_channels(store[keys[-1]]["q"], n_basis)
    views = []
    for key in keys:
        layer, stride = layers[key]
        terms = store[key]
        p = getattr(layer, "element_size", None)
        latent = channel_norm(terms["volume"])
        flux = channel_norm(terms["flux"]) if "flux" in terms else None
        views.append(
            OperatorView(
                label=label,
                scale=key[0],
                t=key[1],
                stride=stride,
                element_size=p,
                blurred=_gray(x),
                restored=_gray(restored),
                basis=terms["q"][0, channels].detach().float().cpu().numpy(),
                basis_channels=channels,
                latent=latent,
                flux=flux,
                stats=view_stats(latent, flux, p),
            )
        )
    return views


def stats_frame(views: Iterable[OperatorView], *, method: str, image_id: str) -> pd.DataFrame:
    """One row per view: method, label, image, scale, t, element_size and the ``view_stats`` columns."""
    return pd.DataFrame(
        [
            {"method": method, "label": v.label, "image": image_id, "scale": v.scale, "t": v.t, "element_size": v.element_size, **v.stats}
            for v in views
        ]
    )


def summarise_stats(per_image: pd.DataFrame) -> pd.DataFrame:
    """Mean (and std of the flux ratio) over images per method, scale and t; n_images counts them."""
    keys = ["method", "label", "scale", "t", "element_size"]
    out = (
        per_image.groupby(keys, sort=False, dropna=False)
        .agg(
            latent_interface_ratio=("latent_interface_ratio", "mean"),
            flux_interface_ratio=("flux_interface_ratio", "mean"),
            flux_interface_ratio_std=("flux_interface_ratio", "std"),
            flux_boundary_ratio=("flux_boundary_ratio", "mean"),
            flux_to_latent_energy=("flux_to_latent_energy", "mean"),
            n_images=("image", "nunique"),
        )
        .reset_index()
    )
    out["element_size"] = out["element_size"].astype("Int64")  # GG has none: keep the others integers
    return out


def dataset_operator_views(
    checkpoints: dict[str, str],
    labels: dict[str, str],
    *,
    data_dir: str,
    level: str,
    stat_images: int | None = 8,
    scale: str = "s3",
    n_basis: int = 3,
    device: str = "cpu",
) -> tuple[list[OperatorView], pd.DataFrame]:
    """Figure views (first test image, first and last iteration) and image-averaged statistics.

    checkpoints: {method: model.pt}. The figure uses the first test image of the split so every
    method is shown on the same input; the statistics average the first ``stat_images`` test
    images (all when None) so the interface ratio is not an artefact of one field of view.
    """
    ids = read_split(data_dir).get("test", [])
    if stat_images is not None:
        ids = ids[:stat_images]
    if not ids:
        raise ValueError(f"{data_dir}: no test images for the operator maps")
    pairs = load_pairs(data_dir, split="test", levels=[level], ids=ids)
    views: list[OperatorView] = []
    frames = []
    for method, path in checkpoints.items():
        model, _ = load_trained(path, device)
        label = labels.get(method, method)
        for i, pair in enumerate(pairs):
            x = to_tensor_image(pair.blur).to(device)
            image_views = image_operator_views(model, x, label=label, scale=scale, n_basis=n_basis)
            frames.append(stats_frame(image_views, method=method, image_id=pair.id))
            if i == 0:
                last = len(image_views) - 1
                views += [v for v in image_views if v.t in (0, last)]
    per_image = pd.concat(frames, ignore_index=True)
    out = summarise_stats(per_image)
    out["level"] = level
    out["figure_image"] = pairs[0].id
    return views, out

