"""Rule `figure_lam`: local attribution maps (LAM) of each method for one output window of one test image, figure + table."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.analysis.lam import dataset_lam  # noqa: E402
from dgno.checkpoint import pick_device  # noqa: E402
from dgno.io import write_csv  # noqa: E402
from dgno.report.figures import lam_maps  # noqa: E402

dataset = sm.wildcards.dataset
lam = sm.params.lam
views, frame = dataset_lam(
    dict(zip(lam["methods"], sm.input.models)),
    dict(sm.params.labels),
    data_dir=str(Path("results/data") / dataset),
    level=sm.params.level,
    image=lam["image"],
    window_size=lam["window"],
    crop=lam["crop"],
    sigma_max=lam["sigma_max"],
    steps=lam["steps"],
    device=str(pick_device(sm.params.device)),
)
write_csv(sm.output.table, frame)
print(frame.to_string(), flush=True)
row = frame.iloc[0]
lam_maps(
    views,
    sm.output.figure,
    title=(
        f"{dataset} · level {row['level']} · test image {row['image']}: LAM of the {row['window_size']}-px output window "
        f"(progressive blur σ ≤ {row['sigma_max']:g} px, {row['steps']} steps)"
    ),
)
