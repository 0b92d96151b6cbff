"""What each workflow rule asks a cluster for: threads, memory, wall time, whether it needs a GPU, and
whether it runs where Snakemake runs (a local rule) instead of as a cluster job.

One table rather than numbers scattered over the rule files: every rule takes its request from here
(``threads_for`` and ``resources_for`` in ``workflow/rules/common.smk``), the Snakefile's local rules
are the table's ``local`` entries, and the profile test checks that GPU rules (and only those) go to
the GPU partition of ``profiles/slurm``; a reviewer sees the whole paper run's request at a glance. Values are those of the first attempt at paper scale (``scale: paper``);
a retry (the profile's ``retries``) gets ``attempt`` times the memory and wall time, because the
usual reason a cluster job fails twice the same way is that it was killed for exceeding one of
them. Training also resumes from its checkpoint on a retry, so a longer second attempt finishes it.

At demo scale (``config.yaml``, the test configs) every rule asks for one thread, little memory and
a short wall time: the images are tiny, and the single-node test cluster must fit several jobs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    """threads, memory (MB) and wall time (min) at paper scale; gpu: one GPU unless ``device: cpu``;
    local: runs where Snakemake runs (downloads need its network; light bookkeeping and plots are not
    worth a queue wait)."""

    threads: int
    mem_mb: int
    runtime_min: int
    gpu: bool = False
    local: bool = False


DOWNLOAD = Request(1, 2000, 240, local=True)  # network bound; 240 min covers a slow mirror for RealDOF/DPDD
PREPARE = Request(2, 8000, 120)  # decode, crop and write one dataset's images once
TABLE = Request(1, 2000, 30, local=True)  # reads summary.json / CSV files only
FIGURE = Request(1, 4000, 60, local=True)  # a few images and a matplotlib figure

# Paper-scale request of every rule that runs something (aggregate target rules run nothing).
PAPER: dict[str, Request] = {
    # data
    "sharp_images": PREPARE,
    "bbbc006_plane": DOWNLOAD,
    "bbbc006_labels": DOWNLOAD,
    "bbbc006_prepare": PREPARE,
    "bbbc006_authors_archive": DOWNLOAD,  # 3.2 GB, then unpacked once
    "bbbc006_broad_names": Request(1, 1000, 30, local=True),  # network: the central directories of three zips, about 100 kB each
    "paired_source": DOWNLOAD,
    "paired_prepare": PREPARE,
    "sigma_sharp": PREPARE,
    "sigma_blur": Request(4, 8000, 240),
    # non-blind comparison: the ring forward model and ring deconvolution run on the GPU,
    # Wiener / Richardson-Lucy on CPU cores
    "seidel_calibration": Request(1, 4000, 60),
    "seidel_blur": Request(4, 16000, 240, gpu=True),
    "deconvolve": Request(4, 8000, 480),
    "deconvolve_ring": Request(4, 16000, 480, gpu=True),
    # re-scores every deconvolution and the blind networks at each noise level (ring on the GPU)
    "nonblind_sensitivity": Request(4, 16000, 960, gpu=True),
    # training and evaluation; 8 threads feed the GPU (crop extraction, augmentation)
    "train": Request(8, 32000, 1440, gpu=True),
    "train_replicate": Request(8, 32000, 1440, gpu=True),  # a seed replicate of a training (the same job)
    "authors_checkpoint": DOWNLOAD,
    "import_authors": Request(1, 4000, 30),
    "evaluate": Request(4, 16000, 240, gpu=True),
    "evaluate_replicate": Request(4, 16000, 240, gpu=True),
    "evaluate_input": Request(2, 8000, 120),
    "evaluate_gumbel": Request(4, 16000, 240, gpu=True),  # one Gumbel-routing repeat of an evaluation
    # StarDist (TensorFlow CPU)
    "stardist_pretrained": DOWNLOAD,
    "train_stardist": Request(8, 32000, 720),
    "stardist_ap": Request(4, 16000, 240),
    "stardist_authors": Request(4, 16000, 240),
    # operator analyses run the trained networks
    "effective_rank": Request(4, 16000, 120, gpu=True),
    "figure_operators": Request(4, 16000, 120, gpu=True),
    "figure_lam": Request(4, 16000, 120, gpu=True),
    "cost_vs_resolution": Request(4, 32000, 240, gpu=True),
    # whole slides: the network on the GPU, beside threads that read, scan focus and compress the pyramid; memory
    # does not grow with the slide (about 1 GB measured up to 67 megapixels, benchmarks/results/slides_memory.json)
    "slide_synthetic": Request(1, 4000, 30),
    "restore_slide": Request(8, 16000, 720, gpu=True),
    # fine-tuning on a lab's own stacks: preparing the fields, training on the GPU, scoring the held-out fields
    "finetune_stacks": Request(1, 4000, 30),
    "finetune": Request(8, 32000, 720, gpu=True),
    "figure_psnr_params": FIGURE,
    "runtime_memory": FIGURE,
    # tables, figures, report
    "table": TABLE,  # every results table (dgno.experiments.catalogue)
    "claims": TABLE,  # the paper's claims, measured from the tables' per-image files
    "edge_band": Request(2, 8000, 120),  # reads every restored image of a dataset
    "edge_band_definition": TABLE,
    "figure_visual": FIGURE,
    "figure_error_difference": FIGURE,
    "figure_training_curves": FIGURE,
    "figure_synthetic": FIGURE,
    "figure_nonblind_sensitivity": FIGURE,
    "model_summary": Request(1, 8000, 120),  # builds every network once to count parameters/FLOPs
    "report": FIGURE,
    "authors_table": TABLE,
    "report_authors": TABLE,
}

DEMO = Request(1, 1000, 30)
# A plotting rule the table does not list (figure_<name>) asks for FIGURE: a report figure is its script,
# its rule and its entry in dgno.experiments.catalogue (docs/extending.md), not a line here too.
PLOT_PREFIX = "figure_"


def _paper_request(rule: str) -> Request:
    if rule in PAPER:
        return PAPER[rule]
    if rule.startswith(PLOT_PREFIX):
        return FIGURE
    raise KeyError(
        f"dgno.workflow.resources: rule '{rule}' has no entry in PAPER (src/dgno/workflow/resources.py); "
        "add its threads, memory, wall time and GPU need there"
    )


def request(rule: str, scale: str) -> Request:
    """The request of ``rule`` at the config's ``scale`` (``paper`` or anything smaller)."""
    paper = _paper_request(rule)
    return paper if scale == "paper" else Request(DEMO.threads, DEMO.mem_mb, DEMO.runtime_min, paper.gpu)


def threads(rule: str, scale: str) -> int:
    return request(rule, scale).threads


def mem_mb(rule: str, scale: str):
    """Memory in MB as a Snakemake resource function: ``attempt`` times the first attempt's."""
    base = request(rule, scale).mem_mb
    return lambda wildcards, attempt: base * attempt


def runtime(rule: str, scale: str):
    """Wall time in minutes as a Snakemake resource function: ``attempt`` times the first attempt's."""
    base = request(rule, scale).runtime_min
    return lambda wildcards, attempt: base * attempt


def gpus(rule: str, device: str) -> int:
    """GPUs the rule asks for: one for GPU work unless the config runs on the CPU (``device: cpu``)."""
    return int(request(rule, "paper").gpu and device != "cpu")


def rule_resources(rule: str, scale: str, device: str) -> dict:
    """A rule's ``resources:`` (memory and wall time as functions of the retry; ``gpu`` for GPU work only)."""
    out = {"mem_mb": mem_mb(rule, scale), "runtime": runtime(rule, scale)}
    if request(rule, "paper").gpu:
        out["gpu"] = gpus(rule, device)
    return out


def local_rules(defined: Iterable[str] = ()) -> list[str]:
    """The rules that run where Snakemake runs (the Snakefile declares them local; never a GPU rule): the
    table's local entries, and of the ``defined`` rules the plotting rules the table does not list."""
    listed = [name for name, req in PAPER.items() if req.local]
    return listed + [name for name in defined if name not in PAPER and name.startswith(PLOT_PREFIX)]


def gpu_rules() -> list[str]:
    """The rules that ask for a GPU (``profiles/slurm`` sends exactly these to its GPU partition)."""
    return [name for name, req in PAPER.items() if req.gpu]


__all__ = ["DEMO", "PAPER", "Request", "gpu_rules", "gpus", "local_rules", "mem_mb", "request", "rule_resources", "runtime", "threads"]
