# DGNO reproduction pipeline: the table of contents.
# `snakemake --cores all` runs the offline demo (config.yaml); `snakemake --profile slurm all` the paper.
from snakemake.utils import min_version

min_version("9.0")


# A --configfile replaces the demo config instead of being merged into it (Snakemake would
# otherwise add the demo's datasets to the paper's).
if "name" not in config:

    configfile: "config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


wildcard_constraints:
    dataset="|".join(DATASETS),
    method="|".join(METHODS),
    level=r"[a-z0-9][a-z0-9_.-]*",


include: "workflow/rules/data.smk"
include: "workflow/rules/blur.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/deconv.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        "report/index.html",
