"""Rule `model_summary`: parameters and FLOPs of each configured method at the run's and paper scale."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

import pandas as pd  # noqa: E402

from dgno.analysis.cost import summarize  # noqa: E402
from dgno.io import write_csv  # noqa: E402

rows = []
for method, spec in sm.params.methods.items():
    scales = [sm.params.scale] + (["paper"] if method in sm.params.paper_methods and sm.params.scale != "paper" else [])
    for scale in scales:
        s = summarize(spec["model"], scale=scale, size=sm.params.size, **spec.get("overrides", {}))
        rows.append({"method": method, "model": spec["model"], "scale": scale, **s})
        print(rows[-1], flush=True)
write_csv(sm.output[0], pd.DataFrame(rows))
