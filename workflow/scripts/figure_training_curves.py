"""Rule `figure_training_curves`: loss and validation PSNR of every method trained on one dataset."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import pandas as pd  # noqa: E402

from dgno.report.figures import training_curves  # noqa: E402

curves = {sm.params.labels[Path(p).parent.name]: pd.read_csv(p) for p in sm.input}
training_curves(curves, sm.output[0], title=f"training on {sm.wildcards.dataset}")
