"""Rule `stardist_authors`: StarDist AP on the authors' restorations (blurred and sharp alongside), for target `authors`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.experiments.stardist import run_downstream, unmeasurable, write_unmeasured  # noqa: E402
from dgno.io import read_json  # noqa: E402

data_dir = Path(sm.input.manifest).parent
why = unmeasurable(data_dir)
if why:  # e.g. the authors' archive names no Broad field: their test images have no label masks
    print(why)
    write_unmeasured(sm.output[0], why)
else:
    eval_root = Path("results/eval") / sm.wildcards.dataset
    run_downstream(data_dir, eval_root, sm.params.level, list(sm.params.methods), read_json(sm.input.model)["model_dir"], sm.output[0])
