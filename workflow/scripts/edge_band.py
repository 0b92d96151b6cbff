"""Rule `edge_band`: edge-band vs interior PSNR for every method of one dataset, table + bar figure."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import pandas as pd  # noqa: E402

from dgno.experiments.edge_band import edge_band_table  # noqa: E402
from dgno.io import write_csv  # noqa: E402
from dgno.report.figures import measured_vs_paper_bars  # noqa: E402

dataset = sm.wildcards.dataset
data_dir = Path("results/data") / dataset
methods = ["input"] + list(sm.params.methods)
frame = pd.concat(
    [
        edge_band_table(data_dir=data_dir, eval_root=Path("results/eval") / dataset, level=lvl, methods=methods, band_width_px=sm.params.band_width_px)
        for lvl in sm.params.levels
    ]
)
write_csv(sm.output.table, frame)
labels = {"input": "Blurred", **sm.params.labels}
mean = frame.groupby(["method", "region"], sort=False)["psnr"].mean().reset_index()
bars = pd.DataFrame(
    {"group": mean["region"], "label": mean["method"].map(labels), "measured": mean["psnr"], "paper": float("nan")}
)
measured_vs_paper_bars(bars, sm.output.figure, metric="PSNR (dB)", title=f"{dataset}: PSNR on the edge band, the interior and the whole image")
