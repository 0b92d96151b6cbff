"""Rule `paired_prepare`: write a real paired dataset (3DHistech, DPDD, RealDOF) in the shared layout."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.paired_prepare import prepare  # noqa: E402

ds = sm.params.dataset
prepare(ds["source"], ds["path"], Path(sm.output.split).parent, counts=ds.get("counts"), check_size=ds["check_size"])
