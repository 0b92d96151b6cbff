"""Rule `figure_nonblind_sensitivity`: PSNR vs read-noise sigma, one line per method (measured values only)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import pandas as pd  # noqa: E402

from dgno.report.figures import noise_sensitivity  # noqa: E402

noise_sensitivity(
    pd.read_csv(sm.input[0]),
    sm.output[0],
    labels=sm.params.labels,
    operating_sigma=sm.params.read_sigma,
    title=f"Noise sensitivity on {sm.wildcards.dataset}",
)
