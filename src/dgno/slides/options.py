"""The numeric options of a slide's restoration, refused with the option's name before any work.

Only the standard library here: ``dgno deblur-slide`` checks them before torch and the slide readers
load (``dgno.arguments``), and :func:`dgno.slides.restore.restore_slide` checks them again for callers
of the package.
"""

from __future__ import annotations

import math

from dgno.io import InputError


def check_numbers(*, margin: float, min_tissue: float, focus_downsample: int, threshold: float | None, mpp: float | None = None) -> None:
    """``--focus-margin``, ``--min-tissue``, ``--focus-downsample``, ``--threshold`` and ``--mpp``: an InputError for the first bad one."""
    if mpp is not None and not (math.isfinite(mpp) and mpp > 0):
        raise InputError(f"--mpp {mpp}: must be a pixel size in µm, greater than 0. Fix: e.g. --mpp 0.5 for about 20× magnification")
    bad = [
        (not (math.isfinite(margin) and margin >= 0), f"--focus-margin {margin}: must be a number >= 0"),
        (not 0 <= min_tissue <= 1, f"--min-tissue {min_tissue}: must be a share between 0 and 1"),
        (int(focus_downsample) != focus_downsample or focus_downsample < 1, f"--focus-downsample {focus_downsample}: must be a whole number >= 1"),
        (threshold is not None and not 0 <= threshold <= 1, f"--threshold {threshold}: must be a focus score between 0 (sharp) and 1 (blurred)"),
    ]
    for wrong, message in bad:
        if wrong:
            raise InputError(f"{message}. Fix: see dgno deblur-slide --help")
