"""Edge-band versus interior PSNR of restored images (the paper's boundary analysis).

The paper's claim is that DG fluxes help most where the image is discontinuous. To test it, each
test image is split by a band around its sharp image's edges (definition in
:func:`dgno.metrics.edge_band_mask`); PSNR is computed separately on the band and on the rest,
pooled over all test images (MSE summed over pixels of all images, then converted), so small
bands in some images do not get the weight of large ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from dgno import metrics
from dgno.data.paired import dataset_normalisation, read_split
from dgno.io import read_image, replicate_dir


def edge_band_per_image(
    *,
    data_dir: str | Path,
    eval_root: str | Path,
    level: str,
    methods: Sequence[str],
    band_width_px: int,
    replicates: Mapping[str, Sequence[int]] | None = None,
) -> pd.DataFrame:
    """Rows (dataset, level, method, replicate, id, region ∈ {edge, interior, all}, sse, n_values, pixels).

    Per image and region: the squared error summed over the region's values (every channel) and their
    number, so PSNRs can be pooled over any set of images (:func:`pool`) and a bootstrap over test
    images can resample them (dgno.report.comparisons). Restored images are read from
    ``eval_root/<method>[/seed=<r>]/<level>/restored/<id>.tif`` for each replicate r of
    ``replicates[method]`` (default [0]); the blurred input is scored as method 'input', read from the
    dataset itself (the evaluation of the input writes no copy of it).
    """
    data_dir, eval_root = Path(data_dir), Path(eval_root)
    norm = dataset_normalisation(data_dir)
    replicates = replicates or {}
    rows = []
    for image_id in read_split(data_dir)["test"]:
        gt = read_image(data_dir / "gt" / f"{image_id}.tif", normalise=norm)
        band = metrics.edge_band_mask(gt, band_width_px=band_width_px)
        channels = gt.shape[-1] if gt.ndim == 3 else 1
        for m in methods:
            for r in replicates.get(m, [0]) if m != "input" else [0]:
                if m == "input":
                    pred = read_image(data_dir / "blur" / level / f"{image_id}.tif", normalise=norm)
                else:
                    pred = read_image(eval_root / replicate_dir(m, r) / level / "restored" / f"{image_id}.tif")
                err = (np.clip(pred, 0, 1) - gt) ** 2  # as metrics.psnr scores: prediction clipped to [0, 1]
                for region, mask in (("edge", band), ("interior", ~band), ("all", np.ones_like(band))):
                    rows.append({"method": m, "replicate": r, "id": image_id, "region": region, "sse": float(err[mask].sum()), "n_values": int(mask.sum()) * channels, "pixels": int(mask.sum())})
    out = pd.DataFrame(rows)
    out.insert(0, "level", level)
    out.insert(0, "dataset", data_dir.name)
    return out


def pool(per_image: pd.DataFrame, band_width_px: int) -> pd.DataFrame:
    """Rows (dataset, level, method, replicate, region, psnr, pixels): PSNR pooled over the test images
    (the mean squared error over all the region's values, one PSNR, so that "all" equals metrics.psnr
    over the pooled pixels; NaN for an empty region)."""
    keys = ["dataset", "level", "method", "replicate", "region"]
    pooled = per_image.groupby(keys, sort=False, as_index=False)[["sse", "n_values", "pixels"]].sum()
    pooled["psnr"] = [metrics.psnr_from_mse(sq / n) if n else float("nan") for sq, n in zip(pooled["sse"], pooled["n_values"])]
    pooled["band_width_px"] = band_width_px
    return pooled[[*keys, "psnr", "pixels", "band_width_px"]]


def edge_band_table(
    *,
    data_dir: str | Path,
    eval_root: str | Path,
    level: str,
    methods: Sequence[str],
    band_width_px: int,
) -> pd.DataFrame:
    """Pooled rows (dataset, level, method, replicate, region, psnr, pixels, band_width_px) of replicate 0
    of each method at one level: :func:`edge_band_per_image`, then :func:`pool`."""
    per_image = edge_band_per_image(data_dir=data_dir, eval_root=eval_root, level=level, methods=methods, band_width_px=band_width_px)
    return pool(per_image, band_width_px)
