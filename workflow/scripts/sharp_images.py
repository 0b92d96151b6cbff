"""Rule `sharp_images`: generate a demo dataset's sharp images, labels and split."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.demo import write_sharp_dataset  # noqa: E402

ds = sm.params.dataset
write_sharp_dataset(
    Path(sm.output.split).parent,
    kind=ds["source"].removeprefix("demo_"),
    size=tuple(ds["size"]),
    n_train=ds["n_train"],
    n_val=ds["n_val"],
    n_test=ds["n_test"],
    seed=sm.params.seed,
)
