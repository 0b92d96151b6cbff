"""Rule `figure_visual`: blurred | methods | sharp for the first test images of one dataset."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.paired import read_split  # noqa: E402
from dgno.report.figures import visual_comparison  # noqa: E402

dataset = sm.wildcards.dataset
data_dir = Path("results/data") / dataset
ids = read_split(data_dir)["test"][: sm.params.n_images]
visual_comparison(
    data_dir=data_dir,
    eval_root=Path("results/eval") / dataset,
    level=sm.params.level,
    ids=ids,
    methods=list(sm.params.methods.items()),
    out_png=sm.output[0],
)
