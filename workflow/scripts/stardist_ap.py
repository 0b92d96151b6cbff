"""Rule `stardist_ap`: AP at IoU 0.5/0.7/0.9 on blurred, each method's restored and sharp test images; the
per-image matching counts, and each restoration's AP gain over the blurred images with its interval."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import pandas as pd  # noqa: E402

from dgno.experiments.stardist import run_downstream  # noqa: E402
from dgno.io import read_json, write_csv  # noqa: E402
from dgno.report.comparisons import Resampling, stardist_stats  # noqa: E402

spec = sm.params.spec
dataset = sm.wildcards.dataset
run_downstream(
    Path("results/data") / dataset,
    Path("results/eval") / dataset,
    spec["level"],
    list(spec["methods"]),
    read_json(sm.input.model)["model_dir"],
    sm.output.table,
    per_image_csv=sm.output.per_image,
)
counts = pd.read_csv(sm.output.per_image, dtype={"id": str})
write_csv(sm.output.stats, stardist_stats(counts, Resampling(**sm.params.resampling)).assign(dataset=dataset))
