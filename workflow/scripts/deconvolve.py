"""Rule `deconvolve`: non-blind restoration (Wiener / Richardson-Lucy with the centre PSF, or ring
deconvolution with the spatially varying PSFs) with the config's settings, then the same scoring as
every other method."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.checkpoint import pick_device  # noqa: E402
from dgno.experiments.nonblind import deconvolve_dataset  # noqa: E402
from dgno.inference.evaluate import score_dataset  # noqa: E402

data_dir = Path(sm.input.split).parent
out_dir = Path(sm.output.summary).parent
deconvolve_dataset(
    data_dir,
    sm.input.calibration,
    sm.output.restored,
    method=sm.wildcards.deconv,
    params=sm.params.deconv,
    level=sm.wildcards.level,
    device=str(pick_device(sm.params.device)),
)
score_dataset(
    None,
    data_dir,
    sm.wildcards.level,
    out_dir,
    method=sm.wildcards.deconv,
    with_lpips=sm.params.evaluate["lpips"],
    precomputed=Path(sm.output.restored),
)
