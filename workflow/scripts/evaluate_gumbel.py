"""Rule `evaluate_gumbel`: the evaluation repeated with the authors' Gumbel routing, seeded (dgno.inference.repeats)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.inference.repeats import evaluate_repeats  # noqa: E402

ev = sm.params.evaluate
evaluate_repeats(
    sm.input.model,
    Path(sm.input.split).parent,
    sm.wildcards.level,
    sm.output[0],
    repeats=ev["repeats"],
    seed=ev["routing_seed"],
    tile=ev["tile"],
    overlap=ev["overlap"],
    blend=ev["blend"],
    device=sm.params.device,
    method=sm.wildcards.method,
    with_lpips=ev["lpips"],
)
