"""Rule `effective_rank`: effective rank of the operator latents of each method on one dataset, table + figure."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.analysis.rank import dataset_rank_table  # noqa: E402
from dgno.checkpoint import pick_device  # noqa: E402
from dgno.io import write_csv  # noqa: E402
from dgno.report.figures import effective_rank_bars  # noqa: E402

dataset = sm.wildcards.dataset
frame = dataset_rank_table(
    dict(zip(sm.params.methods, sm.input.models)),
    data_dir=str(Path("results/data") / dataset),
    level=sm.params.level,
    max_images=sm.params.max_images,
    device=str(pick_device(sm.params.device)),
)
frame.insert(1, "label", frame["method"].map(sm.params.labels))
write_csv(sm.output.table, frame)
print(frame.to_string(), flush=True)
effective_rank_bars(
    frame,
    sm.output.figure,
    title=f"{dataset} · level {sm.params.level} · {int(frame['n_images'].iloc[0])} test images: effective rank of the operator latents z (mean ± std)",
)
