"""Rule `edge_band`: edge-band vs interior PSNR for every method (and seed replicate) of one dataset: per-image
squared errors, the pooled table, the gains with their intervals, and a bar figure."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import pandas as pd  # noqa: E402

from dgno.experiments.edge_band import edge_band_per_image, pool  # noqa: E402
from dgno.io import write_csv  # noqa: E402
from dgno.report.comparisons import Resampling, edge_band_stats  # noqa: E402
from dgno.report.figures import measured_vs_paper_bars  # noqa: E402

dataset = sm.wildcards.dataset
data_dir = Path("results/data") / dataset
methods = ["input"] + list(sm.params.methods)
per_image = pd.concat(
    [
        edge_band_per_image(
            data_dir=data_dir,
            eval_root=Path("results/eval") / dataset,
            level=lvl,
            methods=methods,
            band_width_px=sm.params.band_width_px,
            replicates=sm.params.replicates,
        )
        for lvl in sm.params.levels
    ],
    ignore_index=True,
)
write_csv(sm.output.per_image, per_image)
frame = pool(per_image, sm.params.band_width_px)
write_csv(sm.output.table, frame)
write_csv(sm.output.stats, edge_band_stats(per_image, list(sm.params.versus), Resampling(**sm.params.resampling)))
labels = {"input": "Blurred", **sm.params.labels}
mean = frame.groupby(["method", "region"], sort=False)["psnr"].mean().reset_index()
bars = pd.DataFrame(
    {"group": mean["region"], "label": mean["method"].map(labels), "measured": mean["psnr"], "paper": float("nan")}
)
measured_vs_paper_bars(bars, sm.output.figure, metric="PSNR (dB)", title=f"{dataset}: PSNR on the edge band, the interior and the whole image")
