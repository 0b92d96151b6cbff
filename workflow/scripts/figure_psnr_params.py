"""Rule `figure_psnr_params`: measured PSNR against counted parameters, with the paper's points beside them."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import pandas as pd  # noqa: E402

from dgno.io import write_csv  # noqa: E402
from dgno.report.figures import psnr_vs_params  # noqa: E402
from dgno.report.psnr_params import measured_psnr_params, paper_psnr_params  # noqa: E402
from dgno.report.reading import collect_summaries  # noqa: E402

p = sm.params
measured = measured_psnr_params(
    collect_summaries(sm.input.summaries),
    pd.read_csv(sm.input.model_summary),
    dataset=p.dataset,
    levels=p.levels,
    scale=p.scale,
    labels=p.labels,
)
paper = paper_psnr_params(p.paper_keys, paper_column=p.paper_column)
write_csv(sm.output.table, pd.concat([measured.assign(kind="measured"), paper.assign(kind="paper")], ignore_index=True))
psnr_vs_params(
    measured,
    paper,
    sm.output.figure,
    title=f"PSNR vs parameters — measured on {p.dataset} ({p.scale} scale); paper: {p.paper_column or 'no matching column'}",
)
