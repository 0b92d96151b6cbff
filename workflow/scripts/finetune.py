"""Rule `finetune`: a network fine-tuned on the config's stacks, pairs or slides, and its report (dgno.train.finetune, dgno.report.finetune)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.report.finetune import write_report  # noqa: E402
from dgno.train import INTERRUPTED_EXIT, Interrupted  # noqa: E402
from dgno.train.finetune import finetune, start_from  # noqa: E402
from dgno.train.finetune_data import Inputs  # noqa: E402

job = sm.params.job
data = {k: tuple(v) for k, v in job["data"].items()}
preparation = dict(job["preparation"])
if preparation.get("distances") is not None:
    preparation["distances"] = tuple(preparation["distances"])
out_dir = Path(sm.output.model).parent
try:
    finetune(Inputs(**data), out_dir, start=start_from(**sm.params.start, normalise=job["normalise"]), preparation=preparation,
             overrides=job["overrides"], patience=job["patience"], device=sm.params.device, seed=sm.params.seed, lpips=job["lpips"])  # fmt: skip
except Interrupted as err:
    # SIGTERM (SLURM's warning before the time limit): the checkpoint is written; the retry resumes from it.
    print(f"{err}; the retry resumes from it", file=sys.stderr)
    sys.exit(INTERRUPTED_EXIT)
report = write_report(out_dir)
print(report["verdict"])
if report["warning"]:
    _log.warn(report["warning"])
