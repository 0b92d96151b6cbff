"""Rule `claims`: the paper's claims measured in this run's results, one row per measurement
(dgno.report.claims): measured Δ, interval, verdict, scale, and the command of any claim not run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.io import write_csv  # noqa: E402
from dgno.report.claims import claims_frame, evaluate_claims  # noqa: E402

write_csv(sm.output[0], claims_frame(evaluate_claims(sm.config, "results")))
