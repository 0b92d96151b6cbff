"""Rule `edge_band_definition`: the exact edge-band definition, quoted under every edge-band table."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import inspect  # noqa: E402

from dgno import metrics  # noqa: E402

defaults = {k: v.default for k, v in inspect.signature(metrics.edge_band_mask).parameters.items() if v.default is not inspect.Parameter.empty}
text = (
    f"Edge band: Canny edges of the sharp image (scikit-image, Gaussian sigma {defaults['canny_sigma']} px, hysteresis "
    f"thresholds {defaults['low_threshold']}/{defaults['high_threshold']} on [0, 1] intensities), dilated to every pixel within "
    f"{sm.params.band_width_px} px (Euclidean) of an edge pixel; interior = all other pixels. PSNR pooled over all test images "
    "(squared errors summed over the region's pixels, then converted). Code: dgno.metrics.edge_band_mask, dgno.experiments.edge_band."
)
Path(sm.output[0]).write_text(text + "\n")
