"""The camera: Poisson shot noise, Gaussian read noise and an offset, clipped to the detector's range.

One model for every simulated image of the package: the synthetic nuclei (``dgno.data.synth``, read
noise in electrons, with a camera offset) and the non-blind experiment's blurred images and bead
frames (``dgno.experiments``, read noise in image units).
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from dgno.choices import check_choice

ReadNoiseUnit = Literal["electrons", "intensity"]
READ_NOISE_UNITS: tuple[str, ...] = get_args(ReadNoiseUnit)


def camera_noise(
    clean: np.ndarray,
    *,
    photons: float,
    read_noise: float,
    rng: np.random.Generator,
    unit: ReadNoiseUnit,
    offset: float = 0.0,
) -> np.ndarray:
    """y = clip(Poisson(photons · x) / photons + R + offset, 0, 1): a camera's shot noise, read noise R and bias.

    clean: noise-free image x ≥ 0 (negative values are clipped to 0), intensity 1 = ``photons`` expected
    photo-electrons, so the shot-noise variance is x / photons. The read noise R is Gaussian with std
    ``read_noise``, given in one of two units:

    * ``"electrons"``: added to the photo-electron counts before they are scaled,
      y = clip((Poisson(photons · x) + N(0, read_noise²)) / photons + offset, 0, 1); photons must be > 0;
    * ``"intensity"``: added to the scaled image, y = clip(Poisson(photons · x) / photons + N(0, read_noise²)
      + offset, 0, 1); photons ≤ 0 leaves out the shot noise and read_noise ≤ 0 the read noise.

    The two are the same model (σ_intensity = σ_electrons / photons); each unit keeps its own order of
    operations and random draws, so data sets made before the two were merged reproduce bit for bit.
    The final clip is the detector's: no negative counts, saturation at 1. Returns float32 of clean's shape.
    """
    check_choice("read-noise unit", unit, READ_NOISE_UNITS)
    x = np.clip(np.asarray(clean, np.float64), 0.0, None)
    if unit == "electrons":
        if not photons > 0:
            raise ValueError(f"photons={photons!r}: must be > 0 when the read noise is given in electrons")
        y = (rng.poisson(x * photons) + rng.normal(0.0, read_noise, x.shape)) / photons
    else:
        y = rng.poisson(x * photons) / photons if photons > 0 else x.copy()
        if read_noise > 0:
            y = y + rng.normal(0.0, read_noise, x.shape)
    if offset:
        y = y + offset
    return np.clip(y, 0.0, 1.0).astype(np.float32)
