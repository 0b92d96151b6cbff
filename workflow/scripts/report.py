"""Rules `report` and `report_authors`: render report/index.html (everything) or report/authors.html (target authors)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.report.build import build_authors_report, build_report  # noqa: E402

build = build_authors_report if sm.rule == "report_authors" else build_report
build(sm.config, "results", sm.output[0])
