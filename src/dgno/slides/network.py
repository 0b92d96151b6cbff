"""The network a slide is restored with: which channels go through it, its intensity scale, one batch of tiles.

:func:`load_network` wraps a project ``model.pt``, an authors' checkpoint or a released one
(``dgno.inference.authors``: the authors' 512-px tiles, 32 px overlap, cross-fade) as a
:class:`SlideNetwork`. Tests and benchmarks build one around any ``(B, C, h, w) → (B, C, h, w)`` callable.

Normalisation (:func:`unit_range`) follows how each network was trained: the 3DHistech networks (RGB)
saw 8-bit values / 255 (``"dtype"``: the dtype's maximum); the BBBC006 networks (one fluorescence
channel) saw each image min-max normalised (``"minmax"``), which on a slide is done once per slide,
from the thumbnail of the restored channel, so that every tile is scaled alike and tiles agree where
they overlap. Values beyond the thumbnail's range (a bright nucleus the thumbnail averaged away) go to
the network above 1 rather than being clipped, and come back to the slide's dtype, clipped only there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dgno.checkpoint import load_trained, pick_device
from dgno.data.download import sha256_file
from dgno.inference import authors as released
from dgno.inference.cuda_graphs import forward_fn
from dgno.inference.evaluate import default_tile_batch
from dgno.io import InputError
from dgno.slides.grid import to_dtype
from dgno.slides.reader import SlideInfo

NORMALISATIONS = ("dtype", "minmax")


@dataclass(frozen=True)
class SlideNetwork:
    """A restoration network and how it is applied: its tiles, blend, batch, normalisation and channels.

    ``forward``: (B, C, h, w) float32 on ``device`` → the restoration, same shape. ``identity``: a digest
    of the weights and settings, stored with a run's finished tiles so a resumed run refuses to mix networks.
    ``strict_channels``: the authors' networks, which refuse data of the other kind (RGB vs fluorescence).
    """

    name: str
    channels: int
    forward: Callable[[torch.Tensor], torch.Tensor]
    device: torch.device
    tile: int = 512
    overlap: int = 32
    blend: str = "crossfade"
    normalise: str = "dtype"
    strict_channels: bool = False
    batch: int = 1
    identity: str = ""


def load_network(
    *,
    checkpoint: str | None = None,
    authors: str | None = None,
    options: str | None = None,
    device: str = "auto",
    tile_batch: int | None = None,
    cuda_graphs: bool = False,
    bf16: bool = False,
    threads: int | None = None,
) -> SlideNetwork:
    """A ``model.pt`` / authors' ``.pth`` (``checkpoint``) or a released network by name (``authors``).

    ``threads``: CPU threads of torch (process-wide; a resumed run on a CPU should use the same number,
    since the order of a multi-threaded sum can change the last bit of a tile).
    """
    if (checkpoint is None) == (authors is None):
        raise ValueError("give exactly one of checkpoint= and authors=")
    if threads is not None:
        if threads < 1:
            raise InputError(f"--threads {threads}: must be at least 1. Fix: pass --threads 1 or more")
        torch.set_num_threads(threads)
    how = released.released(authors, options=options) if authors else released.local(checkpoint, options=options)
    dev = pick_device(device)
    model, _ = load_trained(how.model, dev)
    fwd = forward_fn(model, dev, cuda_graphs=cuda_graphs, bf16=bf16)
    batch = default_tile_batch(dev, tile_batch)
    if batch < 1:
        raise InputError(f"--tile-batch {batch}: must be at least 1. Fix: pass --tile-batch 1 or more")
    return SlideNetwork(
        name=how.name,
        channels=int(model.hparams.get("in_channels", 1)),
        forward=lambda x: fwd(x)[-1],
        device=dev,
        tile=how.tile or 512,
        overlap=how.overlap,
        blend=how.blend,
        normalise=how.normalise,
        strict_channels=how.strict_channels,
        batch=batch,
        identity=f"{sha256_file(how.model)}:bf16={bf16}",
    )


def _parse_channel(info: SlideInfo, channel: str) -> int:
    names = {n.lower(): i for i, n in enumerate(info.channel_names)}
    if channel.lower() in names:
        return names[channel.lower()]
    if channel.isdigit() and int(channel) < info.channels:
        return int(channel)
    listing = ", ".join(f"{i} {n}" for i, n in enumerate(info.channel_names))
    raise InputError(f"{info.path}: no channel {channel!r} (channels: {listing}). Fix: pass --channel with one of those names or indices")


def network_channels(network: SlideNetwork, info: SlideInfo, channel: str | None) -> tuple[int, ...]:
    """The slide channels that go through the network, or an error naming the slide, the network and the fix."""
    rgb = info.photometric in ("rgb", "rgba")
    bits = f"{8 * info.dtype.itemsize}-bit"
    kind = f"{f'{bits} RGB brightfield' if rgb else f'{info.channels}-channel {info.dtype}'} slide"
    if network.channels == 3 and rgb:
        if channel is not None:
            raise InputError(f"{info.path}: --channel {channel} given for an RGB brightfield slide, which {network.name} restores as a whole. Fix: leave out --channel")
        return (0, 1, 2)
    if network.channels == 1 and not (rgb and network.strict_channels):
        if info.channels == 1:
            return (0,)
        if channel is None:
            listing = ", ".join(f"{i} {n}" for i, n in enumerate(info.channel_names))
            raise InputError(f"{info.path}: a {kind}; {network.name} restores one channel. Fix: choose it with --channel NAME or --channel INDEX (channels: {listing})")
        return (_parse_channel(info, channel),)
    if network.channels == info.channels and not rgb and channel is None:
        return tuple(range(info.channels))
    fix = (
        "use a 3DHistech network (--authors DGNO_3DHistech_Cell) for brightfield RGB slides"
        if rgb
        else "use a one-channel network (--authors DGNO_BBBC006_w1_Cell) with --channel for fluorescence slides"
    )
    raise InputError(f"{info.path}: a {kind}, but {network.name} restores {network.channels}-channel images. Fix: {fix}")


def unit_range(normalise: str, dtype: np.dtype, thumb_values: np.ndarray) -> tuple[float, float]:
    """(offset, scale): the network sees (x − offset) / scale (module docstring)."""
    if normalise not in NORMALISATIONS:
        raise ValueError(f"normalise={normalise!r}; allowed: {', '.join(map(repr, NORMALISATIONS))}")
    if normalise == "minmax":
        lo, hi = float(np.min(thumb_values)), float(np.max(thumb_values))
        return lo, (hi - lo) if hi > lo else 1.0
    return 0.0, float(np.iinfo(dtype).max) if np.dtype(dtype).kind in "ui" else 1.0


@torch.no_grad()
def restore_batch(network: SlideNetwork, tiles: np.ndarray, unit: tuple[float, float], *, where: str) -> np.ndarray:
    """(k, h, w, C) tiles in the slide's dtype → their restorations, same shape and dtype.

    The batch is filled up to ``network.batch`` with copies of its last tile, so the network always
    sees one shape (and a resumed run the same batches). ``where`` names the tiles in an error.
    """
    offset, scale = unit
    k = tiles.shape[0]
    x = torch.from_numpy(np.ascontiguousarray(tiles.transpose(0, 3, 1, 2), dtype=np.float32))
    x = (x - offset) / scale
    if k < network.batch:
        x = torch.cat([x, x[-1:].expand(network.batch - k, -1, -1, -1)])
    y = network.forward(x.to(network.device))[:k].float().cpu()
    bad = int((~torch.isfinite(y)).sum())
    if bad:
        raise InputError(f"{where}: the network's output holds {bad} NaN/Inf value(s) (a diverged or corrupt model). Fix: check the checkpoint")
    y = y.numpy().transpose(0, 2, 3, 1) * scale + offset
    return to_dtype(y, tiles.dtype)
