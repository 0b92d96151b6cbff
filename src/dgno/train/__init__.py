"""Training: one model on one dataset, in one process or data-parallel under ``torchrun``.

``loop`` is the training loop; it is built from ``recipe`` (what to train), ``batches`` (crops
cut ahead), ``losses``, ``schedule`` (learning rate, EMA decay, progressive stages),
``distributed`` (what the ranks exchange) and ``resume`` (exact resume, never of another run).
``launch`` is how the workflow starts one or several processes; ``python -m dgno.train JOB`` is one
torchrun process. The names below are what the CLI, the workflow's script and users call.
"""

from dgno.train.loop import INTERRUPTED_EXIT, Interrupted, train
from dgno.train.recipe import ModelChoice, TrainConfig

__all__ = ["INTERRUPTED_EXIT", "Interrupted", "ModelChoice", "TrainConfig", "train"]
