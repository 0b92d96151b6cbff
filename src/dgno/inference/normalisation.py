"""Stored pixel values ↔ the [0, 1] intensities a network was trained on, and back, exactly.

    unit = (stored − lo) / (hi − lo)            stored = lo + unit · (hi − lo)   (rounded for integers)

A network sees intensities in [0, 1]; a microscope file holds 8/16/32-bit unsigned or signed integers
or floats, often without filling its type (12-bit camera data in a 16-bit file, photon counts 0..3999
in a 32-bit one, background-subtracted int16 with negatives). One affine map per restored plane,
:class:`Scaling`, carries the plane there and the network's output back to the plane's own type, so
a restored file has the input's dtype and range and nothing is clipped that the map could represent.

Two kinds of map (``Normalisation``), as training records them in a model file (``"normalise"``):

* ``minmax``: each plane's own minimum and maximum (the authors' BBBC006 protocol, the demo's nuclei).
  Invariant to the data's scale and offset: 12-bit data and the same data ×16 restore alike.
* ``dtype``: a fixed full scale, 0 → 0 and full scale → 1 (the authors' 3DHistech networks: 8-bit / 255).
  The full scale is that of the data's bit depth, not of the container: the OME ``SignificantBits``
  when the file states it, else the smallest common camera depth (8, 10, 12, 14, 16 … bits) that holds
  the plane's maximum, so 12-bit data in a uint16 file are divided by 4095, not 65535. A plane this map
  cannot represent (negative values, floats outside [0, 1]) is scaled by its own min-max instead and
  the :class:`Scaling` says so (``fallback``), so the caller can tell the user.

Round trip: ``from_unit(to_unit(x, s), s) == x`` exactly for integer planes whose range spans up to 2²⁴
levels (every 8/16-bit plane and 24-bit counts), since ``to_unit`` returns float32 (the network's type);
beyond that, to float32's relative precision (6e-8). No torch here: the whole-slide command and the
tests use it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dgno.choices import check_choice

Normalisation = Literal["minmax", "dtype"]
NORMALISATIONS: tuple[str, ...] = ("minmax", "dtype")
CHECKPOINT_KEY = "normalise"  # the model-file key training and import-authors write
UNRECORDED = "dtype"  # what a model file without the key gets: scaling by the data's full scale
CAMERA_BITS = (8, 10, 12, 14, 16, 20, 24, 32, 48, 64)  # depths of real sensors and containers
FLOAT_SLACK = 1e-3  # float data this far outside [0, 1] still count as [0, 1] data (rounding of exports)


@dataclass(frozen=True)
class Scaling:
    """The affine map of one plane: ``stored = lo + unit · (hi − lo)``, back to ``dtype``.

    ``kind`` is the map applied; ``fallback`` says why it is min-max although ``dtype`` was asked
    (empty when the asked kind was applied).
    """

    lo: float
    hi: float
    dtype: str
    kind: str
    fallback: str = ""


def full_scale(dtype: np.dtype, max_value: float, *, significant_bits: int | None = None) -> float:
    """The full-scale value 2^b − 1 of the data's bit depth b (see the module docstring).

    ``significant_bits`` (OME ``SignificantBits``) wins when it holds ``max_value``; otherwise b is
    the smallest of :data:`CAMERA_BITS` (capped at the dtype's value bits) with 2^b − 1 ≥ max_value.
    """
    dtype = np.dtype(dtype)
    value_bits = np.iinfo(dtype).bits - (1 if dtype.kind == "i" else 0)
    if significant_bits and 0 < significant_bits <= value_bits and max_value <= 2**significant_bits - 1:
        return float(2**significant_bits - 1)
    for bits in (*(b for b in CAMERA_BITS if b < value_bits), value_bits):
        if max_value <= 2**bits - 1:
            return float(2**bits - 1)
    return float(2**value_bits - 1)


def data_bits(values: np.ndarray) -> int | None:
    """The bit depth b of non-negative integer data, from its largest value (as :func:`full_scale` picks it); else None.

    Why: a stack's planes, or a file's images, come from one camera. Its bit depth decided once for the
    whole file keeps a dim plane of 12-bit data from being read as 8-bit data while its neighbours
    are read as 12-bit (each plane would then be scaled differently).
    """
    values = np.asarray(values)
    if values.dtype.kind not in "ui" or values.size == 0 or values.min() < 0:
        return None
    return int(full_scale(values.dtype, float(values.max()))).bit_length()


def _minmax(values: np.ndarray, dtype: str, fallback: str = "") -> Scaling:
    lo, hi = float(np.min(values)), float(np.max(values))
    return Scaling(lo, hi, dtype, "minmax", fallback)


def scaling_for(values: np.ndarray, kind: str, *, significant_bits: int | None = None) -> Scaling:
    """The map of one plane (any shape; all its values share one map) for normalisation ``kind``.

    Raises ``ValueError`` for NaN/Inf values (no map can carry them) and for complex or object data.
    """
    check_choice("normalisation", kind, NORMALISATIONS)
    values = np.asarray(values)
    dtype = values.dtype
    if dtype.kind not in "buif":
        raise ValueError(f"pixel type {dtype} cannot be restored; allowed: integers, floats, booleans")
    if dtype.kind in "ui" and dtype.itemsize > 4:
        raise ValueError(f"pixel type {dtype}: 64-bit integers cannot pass through the network's float arithmetic exactly; allowed: integers of up to 32 bits, floats, booleans")
    if dtype.kind == "f" and not np.all(np.isfinite(values)):
        raise ValueError(f"{int((~np.isfinite(values)).sum())} NaN/Inf pixel value(s)")
    if values.size == 0:
        raise ValueError("no pixels")
    if kind == "minmax":
        return _minmax(values, dtype.str)
    if dtype.kind == "b":
        return Scaling(0.0, 1.0, dtype.str, "dtype")
    lo, hi = float(np.min(values)), float(np.max(values))
    if dtype.kind == "f":
        if lo < -FLOAT_SLACK or hi > 1 + FLOAT_SLACK:
            return _minmax(values, dtype.str, f"float values in [{lo:.4g}, {hi:.4g}], not [0, 1]")
        return Scaling(0.0, 1.0, dtype.str, "dtype")
    if lo < 0:
        return _minmax(values, dtype.str, f"negative values (minimum {lo:.0f})")
    return Scaling(0.0, full_scale(dtype, hi, significant_bits=significant_bits), dtype.str, "dtype")


def to_unit(values: np.ndarray, scaling: Scaling, *, clip: bool = True) -> np.ndarray:
    """float32 intensities in [0, 1] of ``values`` under ``scaling`` (a constant plane gives zeros).

    ``clip=False`` keeps values outside [lo, hi] outside [0, 1]: for a map taken from a sample of the data
    (a whole slide's, from its thumbnail, whose averaging narrows the range), where clipping would flatten
    every pixel brighter than the sample's brightest.
    """
    span = scaling.hi - scaling.lo
    if span <= 0:
        return np.zeros(np.shape(values), np.float32)
    unit = (np.asarray(values, dtype=np.float64) - scaling.lo) / span
    return (np.clip(unit, 0.0, 1.0) if clip else unit).astype(np.float32)


def from_unit(unit: np.ndarray, scaling: Scaling, *, clip: bool = True) -> np.ndarray:
    """Intensities in [0, 1] back to stored values: ``scaling``'s dtype and range, integers rounded.

    ``clip=False`` maps intensities outside [0, 1] beyond [lo, hi] (see :func:`to_unit`); integers are
    still clipped to their dtype's range.
    """
    dtype = np.dtype(scaling.dtype)
    unit = np.asarray(unit, dtype=np.float64)
    stored = scaling.lo + (np.clip(unit, 0.0, 1.0) if clip else unit) * (scaling.hi - scaling.lo)
    if dtype.kind == "b":
        return stored >= 0.5
    if dtype.kind in "ui":
        info = np.iinfo(dtype)
        return np.clip(np.rint(stored), info.min, info.max).astype(dtype)
    return stored.astype(dtype)


def normalise(values: np.ndarray, kind: str, *, significant_bits: int | None = None) -> tuple[np.ndarray, Scaling]:
    """(float32 intensities in [0, 1], the map back): :func:`scaling_for` then :func:`to_unit`."""
    scaling = scaling_for(values, kind, significant_bits=significant_bits)
    return to_unit(values, scaling), scaling


def recorded(model_file: dict[str, Any]) -> str | None:
    """The normalisation a model file records (``"normalise"``), or None for a file written without it.

    Raises ``ValueError`` for a recorded value this version does not know.
    """
    kind = model_file.get(CHECKPOINT_KEY)
    if kind is not None:
        check_choice("normalisation recorded in the model file", kind, NORMALISATIONS)
    return kind

