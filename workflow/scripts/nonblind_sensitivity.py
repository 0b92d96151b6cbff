"""Rule `nonblind_sensitivity`: PSNR of blurred / Wiener / Richardson-Lucy / ring / the trained blind
networks against the camera's read-noise sigma (dgno.experiments.nonblind.sensitivity)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.checkpoint import load_trained, pick_device  # noqa: E402
from dgno.experiments.nonblind import sensitivity  # noqa: E402
from dgno.experiments.nonblind_settings import noise_settings  # noqa: E402
from dgno.inference.evaluate import model_restorer  # noqa: E402

dev = pick_device(sm.params.device)
ev = sm.params.evaluate
restorers = {}
for ckpt, method in zip(sm.input.models, sm.config["experiments"]["nonblind"]["methods"]):
    model, _ = load_trained(ckpt, dev)
    restorers[method] = model_restorer(model, dev, tile=ev["tile"], overlap=ev["overlap"], blend=ev["blend"])
rows = sensitivity(
    Path(sm.input.split).parent,
    sm.input.clean,
    sm.input.calibration,
    sm.output[0],
    read_sigmas=sm.params.read_sigmas,
    photons=noise_settings(sm.params.seidel)["photons"],
    methods=sm.params.deconvolution,
    params=sm.params.deconv,
    restorers=restorers,
    seed=sm.params.seed,
    device=str(dev),
)
for row in rows:
    print(row, flush=True)
