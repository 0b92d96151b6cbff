"""Rule `finetune_stacks`: the generated z-stacks of finetune.synthetic (dgno.data.synthetic_stacks)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.synthetic_stacks import StackSpec, write_stacks  # noqa: E402

settings = sm.params.settings
spec = StackSpec(**{**settings["spec"], "size": tuple(settings["spec"]["size"])})
write_stacks(Path(sm.output[0]).parent, spec, fields=settings["fields"])
