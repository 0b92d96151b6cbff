"""Rule `cost_vs_resolution`: parameters and FLOPs of every method at each configured image size."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.analysis.cost import cost_table  # noqa: E402
from dgno.checkpoint import pick_device  # noqa: E402
from dgno.io import write_csv  # noqa: E402
from dgno.report.figures import cost_vs_resolution  # noqa: E402

methods = {m: sm.params.methods[m] for m in sm.params.labels}  # config order (params.methods is key-sorted)
frame = cost_table(methods, sizes=sm.params.sizes, scale=sm.params.scale, device=str(pick_device(sm.params.device)))
frame.insert(1, "label", frame["method"].map(sm.params.labels))
write_csv(sm.output.table, frame)
print(frame.to_string(), flush=True)
cost_vs_resolution(frame, sm.output.figure, title=f"GMACs vs resolution ({sm.params.scale} scale; legend: parameters)")
