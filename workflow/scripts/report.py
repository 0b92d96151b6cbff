"""Rule `report`: render report/index.html from the results tree."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.report.build import build_report  # noqa: E402

build_report(sm.config, "results", sm.output[0])
