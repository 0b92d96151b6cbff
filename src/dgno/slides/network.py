"""The network a slide is restored with: which channels go through it, its intensity scale, one batch of tiles.

:func:`load_network` wraps a project ``model.pt``, an authors' checkpoint or a released one
(``dgno.inference.authors``: the authors' 512-px tiles, 32 px overlap, cross-fade) as a
:class:`SlideNetwork`, after the checks every restoration command makes before its first image
(``dgno.inference.preflight``: device, threads, tiles). Tests and benchmarks build one around any
``(B, C, h, w) → (B, C, h, w)`` callable.

Intensities (``dgno.inference.normalisation``): the network sees the [0, 1] values it was trained on,
by the normalisation its model file records (``--normalise`` overrides it): the 3DHistech networks (RGB)
saw 8-bit values / 255 (``"dtype"``: the data's full scale); the BBBC006 networks and the demo's (one
fluorescence channel) saw each image min-max normalised (``"minmax"``). On a slide the map is one
:class:`~dgno.inference.normalisation.Scaling` for the whole slide (:func:`slide_scaling`), taken from
the thumbnail of the restored channels, so that every tile is scaled alike and tiles agree where they
overlap. Values beyond the thumbnail's range (a bright nucleus the thumbnail averaged away) go to the
network above 1 rather than being clipped, and come back to the slide's dtype, clipped only to its range.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from dgno.checkpoint import load_trained
from dgno.data.download import sha256_file
from dgno.inference import authors as released
from dgno.inference import normalisation, preflight
from dgno.inference.engine_names import ENGINES
from dgno.inference.engines import build_engine
from dgno.inference.evaluate import default_tile_batch
from dgno.inference.normalisation import Scaling
from dgno.io import InputError
from dgno.slides.grid import to_dtype
from dgno.slides.reader import SlideInfo


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
    engine: str = "eager"
    engine_note: str = ""


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
    normalise: str | None = None,
    tile: int | None = None,
    overlap: int | None = None,
    engine: str = "auto",
) -> SlideNetwork:
    """A ``model.pt`` / authors' ``.pth`` (``checkpoint``) or a released network by name (``authors``).

    ``threads``: CPU threads of torch (process-wide; default ``preflight.default_threads``: $OMP_NUM_THREADS,
    else the CPUs this process may use). A resumed run on a CPU should use the same number, since the
    order of a multi-threaded sum can change the last bit of a tile. ``normalise``: "minmax" or "dtype"
    instead of what the model file records. ``tile`` / ``overlap``: instead of the network's own (the
    authors' 512 / 32 px; 512 / 64 px for a project model). ``engine``: how the network runs
    (``dgno.inference.engines``; "auto" = the fastest that runs on the device). Options and device are
    checked before the model is read (an :class:`~dgno.io.InputError` naming the option).
    """
    if (checkpoint is None) == (authors is None):
        raise ValueError("give exactly one of checkpoint= and authors=")
    if normalise is not None and normalise not in normalisation.NORMALISATIONS:
        raise InputError(f"--normalise {normalise}: allowed: {', '.join(normalisation.NORMALISATIONS)}. Fix: leave it out to use the model's own")
    if engine not in ENGINES:
        raise InputError(f"--engine {engine}: allowed: {', '.join(ENGINES)}. Fix: leave it out for the fastest that runs here")
    dev = preflight.check_device(device)
    preflight.use_threads(preflight.check_threads(threads))
    preflight.check_tiling(tile=tile, overlap=overlap, tile_batch=tile_batch)  # what was given, before any download
    how = released.released(authors, options=options) if authors else released.local(checkpoint, options=options)
    model, blob = load_trained(how.model, dev)
    tile, overlap = tile or how.tile or 512, how.overlap if overlap is None else overlap
    preflight.check_tiling(tile=tile, overlap=overlap, tile_batch=tile_batch)
    chosen = build_engine(model, dev, engine=engine, tile=tile, cuda_graphs=cuda_graphs, bf16=bf16)
    fwd = chosen.forward
    return SlideNetwork(
        name=how.name,
        channels=int(model.hparams.get("in_channels", 1)),
        forward=lambda x: fwd(x)[-1],
        device=dev,
        tile=tile,
        overlap=overlap,
        blend=how.blend,
        normalise=normalise or how.normalise or _recorded_normalisation(blob, how.model),
        strict_channels=how.strict_channels,
        batch=default_tile_batch(dev, tile_batch),
        identity=f"{sha256_file(how.model)}:bf16={bf16}:engine={chosen.name}",
        engine=chosen.name,
        engine_note=chosen.note,
    )


def _recorded_normalisation(blob: dict, path) -> str:
    """The normalisation the model file records; the data's full scale (with a note) for a file without one."""
    try:
        kind = normalisation.recorded(blob)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}. Fix: pass --normalise minmax or dtype") from None
    if kind is None:
        print(f"note: {path} records no input normalisation; scaling by the data's full scale (dtype). Pass --normalise minmax if it was trained on per-image min-max data", file=sys.stderr)
        return normalisation.UNRECORDED
    return kind


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
    if network.channels == info.channels and not rgb and channel is None and not network.strict_channels:  # a brightfield network refuses fluorescence
        return tuple(range(info.channels))
    fix = (
        "use a 3DHistech network (--authors DGNO_3DHistech_Cell) for brightfield RGB slides"
        if rgb
        else "use a one-channel network (--authors DGNO_BBBC006_w1_Cell) with --channel for fluorescence slides"
    )
    raise InputError(f"{info.path}: a {kind}, but {network.name} restores {network.channels}-channel images. Fix: {fix}")


def slide_scaling(network: SlideNetwork, info: SlideInfo, thumb_values: np.ndarray) -> Scaling:
    """The one map of a slide's restored channels into the network's [0, 1] (module docstring).

    ``thumb_values``: the thumbnail's pixels of those channels (block means, float), rounded back to the
    slide's dtype so that the map is the one ``dgno deblur`` would take of an image of these values.
    """
    try:
        scaling = normalisation.scaling_for(to_dtype(thumb_values, info.dtype), network.normalise)
    except ValueError as exc:
        raise InputError(f"{info.path}: {exc}. Fix: convert the slide to integers or finite floats") from None
    return scaling if scaling.hi > scaling.lo else replace(scaling, hi=scaling.lo + 1.0)  # a flat thumbnail: the identity map


@torch.no_grad()
def restore_batch(network: SlideNetwork, tiles: np.ndarray, scaling: Scaling, *, where: str) -> np.ndarray:
    """(k, h, w, C) tiles in the slide's dtype → their restorations, same shape and dtype.

    The batch is filled up to ``network.batch`` with copies of its last tile, so the network always
    sees one shape (and a resumed run the same batches). ``where`` names the tiles in an error.
    """
    k = tiles.shape[0]
    unit = normalisation.to_unit(tiles.transpose(0, 3, 1, 2), scaling, clip=False)
    x = torch.from_numpy(np.ascontiguousarray(unit))
    if k < network.batch:
        x = torch.cat([x, x[-1:].expand(network.batch - k, -1, -1, -1)])
    y = network.forward(x.to(network.device))[:k].float().cpu()
    bad = int((~torch.isfinite(y)).sum())
    if bad:
        raise InputError(f"{where}: the network's output holds {bad} NaN/Inf value(s) (a diverged or corrupt model). Fix: check the checkpoint")
    return normalisation.from_unit(y.numpy().transpose(0, 2, 3, 1), scaling, clip=False)
