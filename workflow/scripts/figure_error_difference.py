"""Rule `figure_error_difference`: |e_GG| − |e_DG| on the first test image, with its edge band."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno import metrics  # noqa: E402
from dgno.data.paired import dataset_normalisation, read_split  # noqa: E402
from dgno.io import read_image  # noqa: E402
from dgno.report.figures import error_difference  # noqa: E402

dataset, level = sm.wildcards.dataset, sm.params.level
data_dir, eval_root = Path("results/data") / dataset, Path("results/eval") / dataset
gg, dg = sm.params.pair
image_id = read_split(data_dir)["test"][0]
norm = dataset_normalisation(data_dir)
gt = read_image(data_dir / "gt" / f"{image_id}.tif", normalise=norm)
error_difference(
    gt=gt,
    blur=read_image(data_dir / "blur" / level / f"{image_id}.tif", normalise=norm),
    pred_gg=read_image(eval_root / gg / level / "restored" / f"{image_id}.tif"),
    pred_dg=read_image(eval_root / dg / level / "restored" / f"{image_id}.tif"),
    band=metrics.edge_band_mask(gt, band_width_px=sm.params.band_width_px),
    out_png=sm.output[0],
    title=f"{dataset} {image_id} ({level}): {gg} vs {dg}",
)
