"""Rule `seidel_blur`: blur every sharp image of the base dataset by brute-force Seidel PSF superposition
(true coefficients) and add camera noise; keep the noise-free test images for the sensitivity sweep."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.checkpoint import pick_device  # noqa: E402
from dgno.experiments.nonblind_data import blur_dataset  # noqa: E402

blur_dataset(
    Path(sm.input.split).parent,
    Path(sm.output.split).parent,
    seidel=sm.params.seidel,
    clean_dir=sm.output.clean,
    split=None,
    seed=sm.params.seed,
    device=str(pick_device(sm.params.device)),
)
