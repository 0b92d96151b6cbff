"""Rules `table_*`: evaluation summaries → one long-form CSV (dataset, method, level, metrics)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.io import write_csv  # noqa: E402
from dgno.report.tables import collect_summaries  # noqa: E402

write_csv(sm.output[0], collect_summaries(sm.input))
