"""Rule `sigma_sharp`: the base dataset's sharp images and split for a sigma_map dataset (dgno.data.sigma_sets)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.sigma_sets import copy_sharp  # noqa: E402

copy_sharp(Path(sm.input.split).parent, Path(sm.output.split).parent, seed=sm.params.seed)
