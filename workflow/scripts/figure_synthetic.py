"""Rule `figure_synthetic`: measured PSNR per method and sigma range, paper values as ticks."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import pandas as pd  # noqa: E402

from dgno.report.reading import load_paper, mean_over_levels, paper_key  # noqa: E402
from dgno.report.synthetic import synthetic_paper_rows  # noqa: E402

cfg = sm.config
frame = mean_over_levels(pd.read_csv(sm.input[0]))
datasets = list(dict.fromkeys(frame["dataset"]))
rows, key = synthetic_paper_rows(load_paper("synthetic"), cfg, datasets)
labels = {"input": "Blurred", **sm.params.labels}


def paper_value(method, dataset):
    mc = cfg["methods"].get(method, {"model": "blur"})
    return rows.get(paper_key(mc, method), {}).get(key.get(dataset, ""), {}).get("psnr", float("nan"))


bars = pd.DataFrame(
    {
        "group": frame["dataset"],
        "label": frame["method"].map(labels),
        "measured": frame["psnr"],
        "paper": [paper_value(m, d) for m, d in zip(frame["method"], frame["dataset"])],
    }
)
from dgno.report.figures import measured_vs_paper_bars  # noqa: E402

measured_vs_paper_bars(bars, sm.output[0], metric="PSNR (dB)", title="Controlled synthetic experiment")
