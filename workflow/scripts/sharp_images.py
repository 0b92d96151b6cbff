"""Rule `sharp_images`: generate a demo dataset's sharp images, labels and split."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.demo import write_sharp_dataset  # noqa: E402

write_sharp_dataset(
    Path(sm.output.split).parent,
    kind=sm.params.kind,
    size=tuple(sm.params.size),
    **sm.params.counts,
    seed=sm.params.seed,
    photometry=sm.params.photometry or None,
)
