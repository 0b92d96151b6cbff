"""Rule `figure_operators`: learned basis, latent Q(KᵀV) and DG flux maps of each method on one test image, figure + statistics."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.analysis.operators import dataset_operator_views  # noqa: E402
from dgno.checkpoint import pick_device  # noqa: E402
from dgno.io import write_csv  # noqa: E402
from dgno.report.figures import operator_maps  # noqa: E402

dataset = sm.wildcards.dataset
# DG variants first: they are the subject of the figure; GG/LG rows are the contrast
order = sorted(range(len(sm.params.methods)), key=lambda i: not sm.config["methods"][sm.params.methods[i]]["model"].startswith("dgno"))
methods = [sm.params.methods[i] for i in order]
models = [sm.input.models[i] for i in order]
views, frame = dataset_operator_views(
    dict(zip(methods, models)),
    dict(sm.params.labels),
    data_dir=str(Path("results/data") / dataset),
    level=sm.params.level,
    stat_images=sm.params.stat_images,
    device=str(pick_device(sm.params.device)),
)
write_csv(sm.output.table, frame)
print(frame.to_string(), flush=True)
operator_maps(
    views,
    sm.output.figure,
    title=f"{dataset} · level {sm.params.level} · test image {frame['figure_image'].iloc[0]}: finest decoder scale, first and last operator step",
)
