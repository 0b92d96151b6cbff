"""Rules `stardist_pretrained` / `train_stardist`: the segmentation model of the StarDist check, as the config chose it.

pretrained: the published model, fetched where Snakemake runs (a local rule); offline it stops with
instructions, it never falls back silently. train: a StarDist trained here on the dataset (an
explicit choice, named in the report's table).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.experiments.stardist import load_stardist_model
from dgno.experiments.stardist_training import train_on_dataset  # noqa: E402
from dgno.io import write_json  # noqa: E402

spec = sm.params.spec
out = Path(sm.output[0])
if spec["model"] == "pretrained":
    try:
        _, description = load_stardist_model("pretrained")
    except RuntimeError as exc:
        raise RuntimeError(
            f"{exc}. Fix: run this rule where the network is (it is a local rule: the machine that runs snakemake), "
            "or set experiments.stardist.model: train to segment with a StarDist trained here (the report then says so)"
        ) from exc
    record = {"model_dir": "pretrained", "kind": "pretrained", "source": description}
else:
    model_dir = out.parent / "model"
    _, description = train_on_dataset(
        Path(sm.input.split).parent, model_dir, epochs=spec["epochs"], steps_per_epoch=spec["steps_per_epoch"], patch=spec["patch"], seed=sm.params.seed
    )
    record = {"model_dir": str(model_dir), "kind": "trained here", "source": description}
write_json(out, record)
