"""Rule `edge_band_definition`: the exact edge-band definition, quoted under every edge-band table."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import inspect  # noqa: E402

from dgno import metrics  # noqa: E402

doc = inspect.getdoc(metrics.edge_band_mask).split("\n\n")[0]
Path(sm.output[0]).write_text(f"Edge band ({sm.params.band_width_px} px): {doc}\n")
