"""Rule `figure_training_curves`: loss and validation PSNR of every method (and seed replicate) trained on one
dataset, with the under-trained flag (config stats.undertrained_rise_db over the last stats.tail_fraction)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import pandas as pd  # noqa: E402

from dgno.io import replicate_of  # noqa: E402
from dgno.report.figures import training_curves  # noqa: E402
from dgno.stats import training_trend  # noqa: E402


def label(path: str) -> str:
    r = replicate_of(path)
    folder = Path(path).parent.parent if r else Path(path).parent
    return sm.params.labels[folder.name] + (f" (seed {r})" if r else "")


curves = {label(p): pd.read_csv(p) for p in sm.input}
trends = {
    name: training_trend(
        df["iteration"],
        pd.to_numeric(df["val_psnr"], errors="coerce"),
        tail_fraction=sm.params.stats["tail_fraction"],
        threshold_db=sm.params.stats["undertrained_rise_db"],
    )
    for name, df in curves.items()
}
for name, trend in trends.items():
    if trend.under_trained:
        print(f"{name}: under-trained, validation PSNR +{trend.rise_db:.3f} dB over iterations {trend.window[0]:.0f}-{trend.window[1]:.0f}", file=sys.stderr)
training_curves(curves, sm.output[0], title=f"training on {sm.wildcards.dataset}", trends=trends)
