"""Which axes of a stored image are planes, rows, columns and colour, for a network that restores 2-D planes.

The letters are tifffile's (``series.axes``), read from ImageJ or OME metadata, from tifffile's own shape
record, or from the TIFF's photometric tag (an RGB TIFF stored channel-first is ``SYX``), or given by the
user (``--axes``):

    Y, X  rows, columns      S  colour samples (RGB, RGBA; grey + alpha)      C  channels
    Z, T  planes, frames     Q, I, other letters  unknown (a plain page sequence, a shape record)

A network restores one 2-D plane at a time, of ``in_channels`` channels. Every axis that is not Y, X or
the colour axis is a plane axis: a z-stack, a time series or a ``ZCYX`` hyperstack is restored plane by
plane into an array of the same shape. The colour axis is S; for a 3-channel network a C axis of 3
channels is colour too. A 1-channel network restores each colour sample apart (all of a plane's samples
share one intensity normalisation); the authors' networks, trained on one stain, refuse several
channels unless ``--channel`` picks one. An unknown axis of 3 or 4 could be colour or planes: that is
refused with the axes read and the ``--axes`` that settle it, as are planes smaller than the network
needs. The last sample of a 2- or 4-sample colour axis is alpha and is passed through unrestored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dgno.io import InputError

AXES_LETTERS = "TZCQYXS"  # what --axes accepts
KNOWN = frozenset("TZCYXS")  # letters with a meaning; any other letter from a file is unknown
ONE_STAIN_FIX = "pass --channel N for the channel the model was trained on"


@dataclass(frozen=True)
class Layout:
    """How one stored array is cut into the planes a network restores, and put back.

    ``axes``: the stored array's letters; ``colour``: the letter whose samples form one pixel (None:
    grey); ``alpha``: its last sample is alpha; ``pick``: (letter, index) of the one channel kept, whose
    axis the output lacks; ``per_sample``: a 1-channel network restores each colour sample apart.
    """

    axes: str
    colour: str | None = None
    alpha: bool = False
    pick: tuple[str, int] | None = None
    per_sample: bool = False

    @property
    def output_axes(self) -> str:
        return self.axes.replace(self.pick[0], "") if self.pick else self.axes

    def plane_axes(self) -> str:
        return "".join(a for a in self.output_axes if a not in ("Y", "X", self.colour))


def check_axes_option(axes: str | None) -> str | None:
    """``--axes`` checked before any image: letters of :data:`AXES_LETTERS`, each once, Y and X among them."""
    if axes is None:
        return None
    letters = axes.strip().upper()
    bad = sorted(set(letters) - set(AXES_LETTERS))
    if bad or len(set(letters)) != len(letters) or "Y" not in letters or "X" not in letters:
        raise InputError(
            f"--axes {axes}: give one letter per axis of the images, each once, with Y and X, from {AXES_LETTERS} "
            "(T time, Z depth, C channel, Q unknown, Y rows, X columns, S colour samples). Fix: e.g. --axes ZYX for a z-stack, --axes SYX for channel-first RGB"
        )
    return letters


def _unclear(path: Path, axes: str, shape: tuple[int, ...], letter: str) -> InputError:
    n = shape[axes.index(letter)]
    planes, colour = axes.replace(letter, "Z"), axes.replace(letter, "S")
    return InputError(
        f"{path}: axes read {axes}, shape {shape}: the axis {letter} of {n} may be {n} colour samples or {n} planes. "
        f"Fix: --axes {planes} for {n} planes (a z-stack), or --axes {colour} for colour"
    )


def _colour_axis(path: Path, axes: str, shape: tuple[int, ...], in_channels: int) -> str | None:
    """The letter of the colour axis, or None; refuses an unknown axis that could be colour."""
    if "S" in axes:
        return "S"
    for letter in axes:
        if letter not in KNOWN and shape[axes.index(letter)] in (3, 4):
            raise _unclear(path, axes, shape, letter)
    if in_channels > 1 and "C" in axes and shape[axes.index("C")] == in_channels:
        return "C"
    return None


def _channel_refusal(path: Path, channels: int, in_channels: int, model_name: str) -> InputError:
    """An image whose channel count does not fit the model: named, with the model and the fix."""
    kind = {1: "grayscale", 3: "RGB"}.get(channels, f"{channels}-channel")
    if in_channels == 1:
        fix = f"{ONE_STAIN_FIX} (e.g. the nuclear stain's), convert the image to grayscale, or use a 3-channel model (DGNO_3DHistech_Cell / DGNO_3DHistech_Face) for RGB"
    else:
        fix = "pass an RGB image, or a 1-channel model (DGNO_BBBC006_w1_Cell, ..._w2_Face ...) for grayscale fluorescence"
    return InputError(f"{path}: a {kind} image ({channels} channel(s)), but model {model_name} restores {in_channels}-channel images. Fix: {fix}")


def _pick(path: Path, axes: str, shape: tuple[int, ...], channel: int, names: tuple[str, ...]) -> tuple[str, int]:
    """(letter, index) of ``--channel``: on the C axis, else the colour samples S."""
    letter = "C" if "C" in axes else "S" if "S" in axes else None
    if letter is None:
        raise InputError(f"{path}: --channel {channel} given, but the image has no channel axis (axes {axes}, shape {shape}). Fix: leave out --channel for this image")
    n = shape[axes.index(letter)]
    if not 0 <= channel < n:
        listed = f" ({', '.join(f'{k}: {name}' for k, name in enumerate(names))})" if names else ""
        raise InputError(f"{path}: --channel {channel}, but the image has {n} channels{listed}. Fix: --channel 0 … {n - 1}")
    return letter, channel


def _one_stain(path: Path, axes: str, shape: tuple[int, ...], names: tuple[str, ...], model_name: str) -> InputError:
    n = shape[axes.index("C")]
    listed = ", ".join(f"{k}: {name}" for k, name in enumerate(names)) if names else f"0 … {n - 1}"
    return InputError(f"{path}: {n} channels ({listed}), but model {model_name} restores one stain. Fix: {ONE_STAIN_FIX}, e.g. --channel 0")


def resolve_layout(
    path: Path,
    shape: tuple[int, ...],
    axes: str,
    *,
    in_channels: int,
    strict_channels: bool = False,
    channel: int | None = None,
    channel_names: tuple[str, ...] = (),
    model_name: str = "this model",
) -> Layout:
    """The :class:`Layout` of one image for a network of ``in_channels`` (module docstring), or an InputError."""
    if len(axes) != len(shape) or "Y" not in axes or "X" not in axes:
        raise InputError(f"{path}: axes {axes} do not fit the image's shape {shape}. Fix: --axes with one letter per axis, e.g. {'Z' * (len(shape) - 2)}YX")
    pick = _pick(path, axes, shape, channel, channel_names) if channel is not None else None
    kept_axes = axes.replace(pick[0], "") if pick else axes
    kept_shape = tuple(n for a, n in zip(axes, shape) if not (pick and a == pick[0]))
    colour = _colour_axis(path, kept_axes, kept_shape, in_channels)
    samples = kept_shape[kept_axes.index(colour)] if colour else 1
    alpha = colour == "S" and samples in (2, 4)
    samples -= int(alpha)
    if in_channels == 1 and strict_channels and "C" in kept_axes and kept_shape[kept_axes.index("C")] > 1:
        raise _one_stain(path, kept_axes, kept_shape, channel_names, model_name)
    if samples != in_channels and not (in_channels == 1 and not strict_channels and colour):
        raise _channel_refusal(path, samples, in_channels, model_name)
    return Layout(axes, colour, alpha, pick, per_sample=in_channels == 1 and samples > 1)


def check_plane_size(path: Path, shape: tuple[int, ...], axes: str, minimum: int) -> None:
    """Refuse planes smaller than ``minimum`` px a side, naming the size that works (and a likely --axes)."""
    h, w = shape[axes.index("Y")], shape[axes.index("X")]
    if min(h, w) >= minimum:
        return
    hint = ""
    if axes.endswith("YX") and len(axes) >= 3 and w < minimum:
        hint = f", or --axes {axes[:-3]}YXC if the last axis holds {w} channels"
    raise InputError(f"{path}: planes of {h}×{w} px (axes {axes}, shape {shape}); this model restores planes of at least {minimum}×{minimum} px. Fix: pass a larger image{hint}")


def to_planes(data: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray | None]:
    """(planes (N, Y, X) or (N, Y, X, K), alpha (N, Y, X, 1) or None) in the layout's plane order."""
    axes = layout.axes
    if layout.pick:
        data = np.take(data, layout.pick[1], axis=axes.index(layout.pick[0]))
        axes = layout.output_axes
    order = [*layout.plane_axes(), "Y", "X", *([layout.colour] if layout.colour else [])]
    arr = np.transpose(data, [axes.index(a) for a in order])
    planes = arr.reshape(-1, *arr.shape[len(order) - (3 if layout.colour else 2) :])
    if layout.alpha:
        return planes[..., :-1], planes[..., -1:]
    return planes, None


def from_planes(planes: np.ndarray, alpha: np.ndarray | None, layout: Layout, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`to_planes`: restored planes back into the stored order (``shape`` = input's)."""
    axes = layout.output_axes
    out_shape = dict(zip(layout.axes, shape))
    if alpha is not None:
        planes = np.concatenate([planes, alpha.astype(planes.dtype)], axis=-1)
    order = [*layout.plane_axes(), "Y", "X", *([layout.colour] if layout.colour else [])]
    arr = planes.reshape([out_shape[a] for a in order])
    return np.transpose(arr, [order.index(a) for a in axes])
