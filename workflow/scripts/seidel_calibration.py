"""Rule `seidel_calibration`: fit Seidel coefficients to noisy synthetic bead frames (dgno.experiments.nonblind)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.experiments.nonblind_data import calibrate  # noqa: E402
from dgno.experiments.nonblind_settings import noise_settings, true_coefficients  # noqa: E402

seidel = sm.params.seidel
result = calibrate(
    sm.output[0],
    coeffs_true=true_coefficients(seidel),
    image_size=tuple(sm.params.image_size),
    seed=sm.params.seed,
    n_images=seidel.get("calibration_images", 4),
    noise=noise_settings(seidel),
)
print("fit error:", result["error"], flush=True)
