"""Rule `sigma_blur`: blur every sharp image of a dataset with a random sigma map of one level."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.demo import write_blur_level  # noqa: E402

write_blur_level(
    Path(sm.input.split).parent,
    level=sm.wildcards.level,
    sigma_range=tuple(sm.params.sigma_range),
    correlation_length=sm.params.correlation_length,
)
