"""How the workflow's ``train`` rule starts a training: one process, or ``torchrun`` with one per GPU.

The number of processes is the rule's ``gpu`` resource, which the SLURM profile sets
(``set-resources: train: gpu: 4``) and the executor plugin turns into ``--gpus=4``: one number, so
a job never holds GPUs it does not use or starts more processes than it has GPUs. With
``device: cpu`` the same resource starts that many CPU processes talking through gloo, which is how
the launch path is tested without GPUs.

With more than one process, the rule's script replaces itself (``exec``) by
``python -m torch.distributed.run --standalone --nproc_per_node=N -m dgno.train JOB``, where JOB
is the JSON of exactly the arguments the one-process path passes to :func:`dgno.train.train`, so
both paths train the same recipe, write the same files and resume from the same checkpoint (each
process runs ``dgno/train/__main__.py``). Exec, not a child process, leaves one process between the
job's shell and the trainers: SLURM's time-limit SIGTERM reaches torchrun, which passes it on to the
trainers and waits for them (up to 30 s) while they write their checkpoint.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dgno.io import InputError


def processes(gpu_resource: Any) -> int:
    """Training processes for a rule's ``gpu`` resource: one per GPU, at least one (``gpu=0`` on CPU)."""
    try:
        n = int(gpu_resource or 0)
    except (TypeError, ValueError):
        raise InputError(
            f"resource gpu={gpu_resource!r} of rule train is not a whole number. Fix: set e.g. `gpu: 4` under "
            "set-resources: train: in the profile (profiles/slurm/config.yaml)"
        ) from None
    if n < 0:
        raise InputError(f"resource gpu={n} of rule train is negative. Fix: set a number of GPUs >= 0 in the profile")
    return max(n, 1)


def check_batches(n: int, batch_size: int, progressive: list[dict] | None = None) -> None:
    """Every optimizer step's batch must split evenly over ``n`` processes; fail before launching.

    ``train.batch_size`` (and each progressive stage's ``batch_size``) is the batch of one step,
    shared by all processes: the paper's 32 crops are 8 per GPU on 4 GPUs, as the authors ran it.
    """
    for where, batch in [("train.batch_size", batch_size)] + [
        (f"progressive[{i}].batch_size", s["batch_size"]) for i, s in enumerate(progressive or [])
    ]:
        if batch % n:
            raise InputError(
                f"{where}={batch} cannot be split over {n} training processes (the batch is that of one optimizer step, "
                f"shared by all of them). Fix: use a number of processes that divides {batch} (the workflow: `gpu` under "
                "set-resources: train: in the profile; by hand: torchrun --nproc_per_node) or change the batch in the config"
            )


def job_spec(data_dir: str | Path, out_dir: str | Path, *, model_choice, levels: list[str], cfg) -> str:
    """The arguments of one :func:`dgno.train.train` call as JSON (what each torchrun process reads)."""
    return json.dumps(
        {"data_dir": str(data_dir), "out_dir": str(out_dir), "model_choice": asdict(model_choice), "levels": list(levels), "cfg": asdict(cfg)},
        sort_keys=True,
    )


def torchrun_argv(n: int, job: str) -> list[str]:
    """Command line that trains ``job`` with ``n`` processes on this node.

    ``--standalone`` picks a free local rendezvous port, so several trainings can share a node.
    torchrun is run as ``python -m torch.distributed.run`` with this interpreter, so the trainers use
    the same environment as the rule whatever is first on PATH.
    """
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", "-m", "dgno.train", job]


def exec_torchrun(n: int, job: str, log_path: str | Path) -> None:
    """Replace this process by torchrun with ``n`` trainers, all writing to ``log_path``. Never returns."""
    argv = torchrun_argv(n, job)
    log = os.open(str(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default, set here so it does not warn about it
    os.write(2, f"dgno: training with {n} processes: {' '.join(argv[:-1])} JOB\n".encode())
    os.execve(sys.executable, argv, env)
