"""One ``torchrun`` process: ``python -m dgno.train JOB`` runs the training described by the JSON job.

JOB is :func:`dgno.train.launch.job_spec`'s JSON, so every process trains exactly what the
one-process path of the workflow's ``train`` rule would.
"""

from __future__ import annotations

import json
import os
import sys

from dgno.train.loop import INTERRUPTED_EXIT, Interrupted, train
from dgno.train.recipe import ModelChoice, TrainConfig


def main(argv: list[str] | None = None) -> int:
    """Run the training of the JSON job in ``argv`` (default: the command line); the exit status."""
    (job,) = argv if argv is not None else sys.argv[1:]
    spec = json.loads(job)
    try:
        train(
            spec["data_dir"],
            spec["out_dir"],
            model_choice=ModelChoice(**spec["model_choice"]),
            levels=spec["levels"],
            cfg=TrainConfig.from_dict(spec["cfg"]),
        )
    except Interrupted as err:  # SIGTERM: checkpoint written; the job fails and Snakemake's retry resumes
        if os.environ.get("RANK", "0") == "0":  # one line in the job log, not one per process
            print(f"{err}; the retry resumes from it", file=sys.stderr)
        return INTERRUPTED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
