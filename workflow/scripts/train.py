"""Rule `train`: one model on one dataset, in this process or under torchrun (logic in dgno.train, dgno.train.launch)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821

from dgno.train import INTERRUPTED_EXIT, Interrupted, ModelChoice, TrainConfig, launch, train  # noqa: E402
from dgno.workflow.settings import speed_only_train  # noqa: E402

sm = snakemake  # noqa: F821
method = sm.params.method
# prefetch and the step's levers are not params: they do not change results, so changing one must
# not trigger a retrain (the schema fills in their defaults).
speed = speed_only_train(sm.config)
cfg = TrainConfig.from_dict({**sm.params.train, **speed, "seed": sm.params.seed, "device": sm.params.device})
data_dir, out_dir = Path(sm.input.split).parent, Path(sm.output.model).parent
choice = ModelChoice(name=method["model"], scale=sm.params.scale, overrides=method.get("overrides", {}))
levels = list(sm.params.levels)
# One process per GPU the job holds (the `gpu` resource, set by the profile); more than one: torchrun.
nproc = launch.processes(sm.resources.get("gpu", 0))
if nproc > 1:
    launch.check_batches(nproc, cfg.batch_size, cfg.progressive)
    sys.stdout.flush()
    launch.exec_torchrun(nproc, launch.job_spec(data_dir, out_dir, model_choice=choice, levels=levels, cfg=cfg), sm.log[0])
try:
    train(data_dir, out_dir, model_choice=choice, levels=levels, cfg=cfg)
except Interrupted as err:
    # SIGTERM (SLURM's warning before the time limit): the checkpoint is written; a failed job makes
    # Snakemake retry (profile `retries`), and the retry resumes from the checkpoint.
    print(f"{err}; the retry resumes from it", file=sys.stderr)
    sys.exit(INTERRUPTED_EXIT)
