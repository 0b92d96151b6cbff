"""Rule `sigma_blur`: blur every sharp image of a dataset with a random sigma map of one level (demo or sigma_map sets)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import json  # noqa: E402

from dgno.data import sigma_sets  # noqa: E402
from dgno.data.demo import write_blur_level  # noqa: E402

data_dir = Path(sm.input.split).parent
kind = json.loads((data_dir / "manifest.json").read_text())["kind"]
write = sigma_sets.write_level if kind == sigma_sets.KIND else write_blur_level
write(data_dir, level=sm.wildcards.level, sigma_range=tuple(sm.params.sigma_range), correlation_length=sm.params.correlation_length)
