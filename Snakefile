# DGNO reproduction pipeline: the table of contents.
# `snakemake --cores all` runs the offline demo (config.yaml); `snakemake --profile slurm all` the paper.
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# This checkout's dgno, for Snakemake itself and (dgno.workflow.jobenv) for every job, whichever
# environment runs it: the --sdm conda envs hold only the dependencies, a shared venv may hold an
# older install. And the allocator settings for the jobs' torch (huge pages, freed memory kept: jobenv).
SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)
from dgno.workflow.jobenv import export_allocator_settings, export_source_path

export_source_path(SRC)
export_allocator_settings()


# A --configfile replaces the demo config instead of being merged into it (Snakemake would
# otherwise add the demo's datasets to the paper's).
if "name" not in config:

    configfile: "config.yaml"


report: "workflow/report/workflow.rst"


# On a cluster, SLURM's time-limit warning (SIGTERM, profiles/slurm) goes to every process of the
# job step. The bash that runs a job's command must not die of it first: the job would end, and
# SLURM kill the rest, while `dgno train` is still writing its checkpoint. With a trap, bash waits
# for the command and exits with its status; the command itself keeps the default SIGTERM action.
shell.prefix(
    "set -euo pipefail; trap 'echo SIGTERM: waiting for the job command to stop >&2' TERM; "
)


include: "workflow/rules/common.smk"


wildcard_constraints:
    dataset=one_of(DATASETS),
    method=METHOD_REGEX,
    level=r"[a-z0-9][a-z0-9_.-]*",
    replicate=r"[1-9][0-9]*",


include: "workflow/rules/data.smk"
include: "workflow/rules/blur.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/authors.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/downstream.smk"
include: "workflow/rules/deconv.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/slides.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/report.smk"


# Downloads run where Snakemake runs (the network is there, not on compute nodes); so do light
# bookkeeping and plotting jobs: the rules src/dgno/workflow/resources.py marks `local` (the parser's
# `localrules:` takes literal names only; this is the call it makes).
defined = {r.name for r in workflow.rules}
local = [name for name in dgno_resources.local_rules(defined) if name in defined]
workflow.localrules(*local)


rule all:
    default_target: True
    input:
        "report/index.html",
