"""Rules `table_*`: one results table from its evaluations: the long-form CSV of their summaries (dataset,
method, level, replicate, metrics) and ``<table>_stats.csv``, the per-image statistics the report shows
(mean ± sd over seeds, each stated difference with its bootstrap interval, the highlight)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.io import write_csv  # noqa: E402
from dgno.report.comparisons import Resampling, table_stats  # noqa: E402
from dgno.report.reading import collect_summaries, read_scores  # noqa: E402

summaries = list(sm.input.summaries)
write_csv(sm.output.table, collect_summaries(summaries))
write_csv(sm.output.stats, table_stats(read_scores(summaries), sm.params.spec, Resampling(**sm.params.resampling)))
