"""Rule `bbbc006_prepare`: pair planes by well/site, split 4:1 by well, write one channel's dataset."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.bbbc006 import prepare_dataset  # noqa: E402

ds = sm.params.dataset
train = [int(lvl[1:]) for lvl in ds["train_levels"]]
extra = [int(lvl[1:]) for lvl in ds["test_levels"] if lvl not in ds["train_levels"]]
prepare_dataset(
    sm.params.raw,
    Path(sm.output.split).parent,
    channel=ds["channel"],
    seed=sm.params.seed,
    train_planes=train,
    extra_planes=extra,
    n_val_wells=ds["n_val_wells"],
)
