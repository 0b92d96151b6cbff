"""Rule `authors_table`: each paper number the authors' weights cover, measured, with a verdict (dgno.report.authors)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.report.authors import write_table  # noqa: E402

frame = write_table(dict(sm.params.settings), "results", sm.output[0])
print(frame[["table", "row", "dataset", "metric", "paper", "measured", "verdict"]].to_string(index=False))
