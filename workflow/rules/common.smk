# Names and input functions shared by every stage. The logic is in dgno.workflow (plan: what runs
# and what each job reads; settings: the params each job gets), plain functions of the config,
# unit-tested without Snakemake (tests/test_workflow_plan.py). Here they are bound to this run's
# config and wildcards. Building the DAG imports no torch (tests/test_workflow_plan.py checks).
import functools
from glob import glob
from pathlib import Path

from dgno.data import GENERATED_SOURCES
from dgno.experiments import catalogue
from dgno.report import comparisons
from dgno.workflow import authors
from dgno.workflow import plan
from dgno.workflow import replicates
from dgno.workflow import resources as dgno_resources
from dgno.workflow import settings
from dgno.workflow import slides as slide_plan
from dgno.workflow import targets
from dgno.workflow.config import load_schema, validate_config
from dgno.workflow.plan import one_of, summaries
from dgno.workflow.settings import DECONV_LABELS, OPERATOR_MAP_IMAGES, canonical

config.update(
    validate_config(
        config,
        load_schema(Path(workflow.basedir) / "workflow/schemas/config.schema.yaml"),
    )
)

DATASETS = list(config["datasets"])
GENERATED = plan.generated_datasets(config)
SEIDEL = plan.datasets_with_source(config, "seidel")
# Sharp images of another dataset with sigma-map blur (dgno.data.sigma_sets).
SIGMA_SETS = plan.datasets_with_source(config, "sigma_map")
BBBC006 = plan.datasets_with_source(config, "bbbc006")
PAIRED = plan.paired_datasets(config)
RAW = config["downloads"]["raw_dir"]
METHODS = list(config["methods"])
METHOD_REGEX = plan.method_regex(METHODS)
EXPERIMENTS = config["experiments"]
DECONVOLUTION = EXPERIMENTS.get("nonblind", {}).get("deconvolution", [])
STARDIST_MODEL = EXPERIMENTS.get("stardist", {}).get("model", "pretrained")
COST_METHODS = plan.cost_methods(config)
RANK_DATASETS = plan.rank_datasets(config)
LAM = EXPERIMENTS.get("lam", {})
LAM_DATASETS = plan.lam_datasets(config)
# Benchmark results written by `dgno bench` / benchmarks/cpu/models.py (tracked in the repository).
BENCH_FILES = sorted(glob("benchmarks/results/*.json"))


# Threads, memory, wall time and GPU per workflow step come from one table (dgno.workflow.resources),
# scaled by `scale` (paper or demo); memory and wall time grow with the retry `attempt`. A rule says
# `threads: threads_for("<rule>")` and `resources: **resources_for("<rule>")`.
def threads_for(name):
    return dgno_resources.threads(name, config["scale"])


def resources_for(name):
    return dgno_resources.rule_resources(name, config["scale"], config["device"])


# Every results table and the figures of the report's sections have one path, in the experiments'
# catalogue (dgno.experiments.catalogue); their rules take it, the caption and the category from there.
TABLES = catalogue.tables(config)


def figure_output(key):
    """A catalogue figure as a rule's output, marked for Snakemake's report (caption: params.caption)."""
    fig = catalogue.FIGURES[key]
    return report(fig.path, caption="../report/figure.rst", category=fig.category)


def figure_caption(key):
    """The caption of a catalogue figure for params.caption (its {dataset} filled per job)."""
    return lambda wc: catalogue.figure_caption(key, wc.get("dataset"))


# --- dgno.workflow functions bound to this config (called in rules with the remaining arguments) ---
@functools.cache
def training_of(dataset, method):
    return plan.training_of(config, dataset, method)


@functools.cache
def restored_readers():
    return plan.restored_readers(config)


experiment_datasets = functools.partial(plan.experiment_datasets, config)
experiment_methods = functools.partial(plan.experiment_methods, config)
experiment_summaries = functools.partial(plan.experiment_summaries, config)
table_levels = functools.partial(plan.table_levels, config)
figure_rows = functools.partial(plan.figure_rows, config)
gg_dg_pair = functools.partial(plan.gg_dg_pair, config)
rank_methods = functools.partial(plan.rank_methods, config)
rank_level = functools.partial(plan.rank_level, config)
lam_level = functools.partial(plan.lam_level, config)
main_dataset = functools.partial(plan.main_dataset, config)
paper_cost_methods = functools.partial(plan.paper_cost_methods, config)
table_summaries = functools.partial(plan.table_summaries, config)
report_inputs = functools.partial(targets.report_inputs, config)
experiment_targets = functools.partial(targets.experiment_targets, config)
analysis_report_inputs = functools.partial(
    targets.analysis_report_inputs, config, BENCH_FILES
)
method_labels = functools.partial(settings.method_labels, config)
method_settings = functools.partial(settings.method_settings, config)
train_settings = functools.partial(settings.train_settings, config)
photometry_of = functools.partial(settings.photometry_of, config)
deconv_settings = functools.partial(settings.deconv_settings, config)
training_seed = functools.partial(replicates.training_seed, config)
edge_band_reads = functools.partial(plan.edge_band_reads, config)
edge_band_summaries = functools.partial(plan.edge_band_summaries, config)
training_curves = functools.partial(plan.training_curves, config)
edge_band_replicates = functools.partial(plan.edge_band_replicates, config)
edge_band_versus = functools.partial(plan.edge_band_versus, config)
resampling = settings.resampling(config)
per_image_files = plan.per_image_files


def table_spec(table):
    """What one results table compares (dgno.report.comparisons.table_spec), key-sorted for params."""
    return canonical(comparisons.table_spec(config, table))


def table_caption(table):
    return catalogue.table_caption(config, table)


# --- input functions and params of wildcards ----------------------------------------------------
def per_dataset(function):
    """An input or params function of the {dataset} wildcard: ``function(config, dataset)``."""
    return lambda wildcards: function(config, wildcards.dataset)


dataset_seed = per_dataset(plan.dataset_seed)
bbbc006_settings = per_dataset(settings.bbbc006_settings)
bbbc006_planes = per_dataset(plan.bbbc006_planes)
seidel_base_inputs = per_dataset(plan.seidel_base_inputs)
seidel_data_settings = per_dataset(settings.seidel_data_settings)
seidel_image_size = per_dataset(settings.seidel_image_size)
sensitivity_inputs = per_dataset(plan.sensitivity_inputs)
rank_inputs = per_dataset(plan.rank_inputs)
# The operator-map figure reads what the rank analysis reads: same level, images and checkpoints.
operator_map_inputs = rank_inputs
lam_inputs = per_dataset(plan.lam_inputs)
authors_stardist_inputs = per_dataset(authors.stardist_inputs)


def dataset_cfg(wildcards):
    return config["datasets"][wildcards.dataset]


def train_inputs(wildcards):
    levels = config["datasets"][wildcards.dataset]["train_levels"]
    return plan.data_inputs(config, wildcards.dataset, levels)


def eval_data_inputs(wildcards):
    return plan.data_inputs(config, wildcards.dataset, [wildcards.level])


def paired_url(wildcards):
    """Download URL of a real paired dataset ("" for 3DHistech: placed by hand, never downloaded)."""
    source = config["datasets"][wildcards.dataset]["source"]
    return config["downloads"].get(f"{source}_url", "")


def trained_model(wildcards):
    """model.pt (or, with evaluate.checkpoint: in_progress, the training's checkpoint.pt as it is now)."""
    return plan.evaluated_checkpoint(
        config, wildcards.dataset, wildcards.method, training_of
    )


def replicate_model(wildcards):
    """The same for seed replicate ``wildcards.replicate`` (dgno.workflow.replicates)."""
    return plan.evaluated_checkpoint(
        config,
        wildcards.dataset,
        wildcards.method,
        training_of,
        int(wildcards.replicate),
    )


def authors_checkpoint_file(wildcards):
    return plan.authors_checkpoint_file(config, wildcards.dataset, wildcards.method)


def authors_options(wildcards):
    return plan.authors_options(config, wildcards.dataset, wildcards.method)


def keep_restored(wildcards):
    """Whether a later rule reads this evaluation's restored images (plan.restored_readers)."""
    method = wildcards.get("method", "input")
    return (wildcards.dataset, method, wildcards.level) in restored_readers()


def stardist_inputs(wildcards):
    return plan.stardist_inputs(config)


# --- the paper's numbers from the authors' released weights (dgno.workflow.authors) --------------
authors_table_inputs = functools.partial(authors.table_inputs, config)
authors_settings = functools.partial(authors.settings, config)
gumbel_settings = functools.partial(settings.gumbel_settings, config)


def authors_target(wildcards):
    return authors.target(config)


# --- whole slides (dgno.workflow.slides): the slides block's files, glob patterns expanded once per run ---
SLIDES = slide_plan.slide_inputs(config)
SYNTHETIC_SLIDES = slide_plan.synthetic_names(config)
# One caption for both pictures of a slide (Snakemake's report takes it from params.caption).
SLIDE_CAPTION = " ".join(
    catalogue.figure_caption(key) for key in ("slide_focus", "slide_before_after")
)


def slide_input(wildcards):
    return SLIDES[wildcards.slide]


def slide_network(wildcards):
    return slide_plan.network_file(config)


def slide_network_options(wildcards):
    return slide_plan.network_options(config)


def synthetic_slide_settings(wildcards):
    return slide_plan.synthetic_settings(config, wildcards.slide)


def slide_settings(wildcards):
    return slide_plan.restore_settings(config)
