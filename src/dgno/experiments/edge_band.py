"""Edge-band versus interior PSNR of restored images (the paper's boundary analysis).

The paper's claim is that DG fluxes help most where the image is discontinuous. To test it, each
test image is split by a band around its sharp image's edges (definition in
:func:`dgno.metrics.edge_band_mask`); PSNR is computed separately on the band and on the rest,
pooled over all test images (MSE summed over pixels of all images, then converted), so small
bands in some images do not get the weight of large ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from dgno import metrics
from dgno.data.paired import dataset_normalisation, read_split
from dgno.io import read_image


def edge_band_table(
    *,
    data_dir: str | Path,
    eval_root: str | Path,
    level: str,
    methods: Sequence[str],
    band_width_px: int,
) -> pd.DataFrame:
    """Rows (method, region ∈ {edge, interior, all}, psnr, pixels) for one dataset and blur level.

    Restored images are read from ``eval_root/<method>/<level>/restored/<id>.tif``; the blurred
    input is scored as method 'input', read from the dataset itself (the evaluation of the input
    writes no copy of it: dgno.inference.evaluate writes restored images only where a later rule reads them).
    """
    data_dir, eval_root = Path(data_dir), Path(eval_root)
    norm = dataset_normalisation(data_dir)
    ids = read_split(data_dir)["test"]
    acc = {(m, r): [0.0, 0, 0] for m in methods for r in ("edge", "interior", "all")}  # squared error, values, pixels
    for image_id in ids:
        gt = read_image(data_dir / "gt" / f"{image_id}.tif", normalise=norm)
        band = metrics.edge_band_mask(gt, band_width_px=band_width_px)
        channels = gt.shape[-1] if gt.ndim == 3 else 1
        for m in methods:
            if m == "input":
                pred = read_image(data_dir / "blur" / level / f"{image_id}.tif", normalise=norm)
            else:
                pred = read_image(eval_root / m / level / "restored" / f"{image_id}.tif")
            err = (np.clip(pred, 0, 1) - gt) ** 2  # as metrics.psnr scores: prediction clipped to [0, 1]
            for region, mask in (("edge", band), ("interior", ~band), ("all", np.ones_like(band))):
                acc[(m, region)][0] += float(err[mask].sum())
                acc[(m, region)][1] += int(mask.sum()) * channels
                acc[(m, region)][2] += int(mask.sum())
    # pooled over images: the mean squared error over all the region's values (every channel), one PSNR,
    # so that "all" equals metrics.psnr over the pooled pixels; NaN for an empty region
    rows = [
        {"method": m, "region": r, "psnr": metrics.psnr_from_mse(sq / n) if n else float("nan"), "pixels": px}
        for (m, r), (sq, n, px) in acc.items()
    ]
    out = pd.DataFrame(rows)
    out.insert(0, "level", level)
    out.insert(0, "dataset", data_dir.name)
    out["band_width_px"] = band_width_px
    return out
