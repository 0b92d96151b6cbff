"""What the workflow runs for one configuration: which trainings, which files each job reads, and
the tables, figures and analyses the report needs.

Every function takes the validated config (``dgno.workflow.config.validate_config``) explicitly and
returns names and paths only, so the DAG's logic is tested here without Snakemake
(``tests/test_workflow_plan.py``); ``workflow/rules/common.smk`` binds it to the run's config and
wildcards. Nothing here imports torch or builds a network: whether two methods build the same
network is decided on the registry's specs.

Paths follow docs/CONVENTIONS.md: ``results/data/<dataset>/``, ``results/train/<dataset>/<method>/``,
``results/eval/<dataset>/<method>/<level>/``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from dgno.choices import check_choice
from dgno.data import GENERATED_SOURCES
from dgno.experiments import catalogue
from dgno.experiments.catalogue import experiment_datasets, table_levels
from dgno.models.overrides import registry_overrides
from dgno.models.registry import resolved_spec
from dgno.workflow import authors
from dgno.workflow.config import PAIRED_SOURCES
from dgno.workflow.replicates import eval_dir, method_dir, replicate_summaries, seeds_of
from dgno.workflow.settings import DECONV_LABELS, canonical, method_labels, method_settings

Config = Mapping[str, Any]

# Models whose decoder has per-scale operator stacks (the rank figure compares GG/LG with DG).
RANK_MODELS = ("gg", "lg", "dgno-face", "dgno-cell")
# What the evaluate rules score (evaluate.checkpoint): the finished model.pt, or the training's checkpoint.pt now.
EVALUATED_CHECKPOINTS = ("model", "in_progress")


# --- names -------------------------------------------------------------------------------------


def one_of(names: Iterable[str]) -> str:
    """Wildcard regex matching exactly these names (and nothing at all when there are none)."""
    names = list(names)
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


def method_regex(methods: Iterable[str]) -> str:
    """Wildcard regex of the method names, longest first: ablation grid points are paths
    ('dgno-cell/flux=jump') that begin with another method's name."""
    return "|".join(re.escape(m) for m in sorted(methods, key=len, reverse=True))


def datasets_with_source(config: Config, *sources: str) -> list[str]:
    """Datasets whose images come from one of ``sources`` (config order)."""
    return [d for d, spec in config["datasets"].items() if spec["source"] in sources]


def generated_datasets(config: Config) -> list[str]:
    """Datasets whose sharp images the workflow generates (dgno.data.GENERATED_SOURCES)."""
    return [d for d, spec in config["datasets"].items() if spec["source"] in GENERATED_SOURCES]


def dataset_seed(config: Config, dataset: str) -> int:
    """The seed a generated dataset's scenes are drawn from: its own ``seed``, else the run's."""
    return int(config["datasets"][dataset].get("seed", config["seed"]))


def paired_datasets(config: Config) -> list[str]:
    """Real (blurred, sharp) pairs with the authors' split: 3DHistech, DPDD, RealDOF."""
    return datasets_with_source(config, *PAIRED_SOURCES)


def ablation_methods(config: Config) -> set[str]:
    """Methods that are ablation grid points (added to ``methods`` by the config's validation)."""
    return {r["method"] for rows in config["ablation_runs"].values() for r in rows}


def experiment_methods(config: Config, dataset: str) -> list[str]:
    """Methods trained on `dataset` by any experiment (ordered as in the config)."""
    used = set()
    for spec in config["experiments"].values():
        if dataset in spec.get("datasets", [spec.get("dataset")]):
            used.update(spec["methods"])
    return [m for m in config["methods"] if m in used]


def _own_outputs_only(config: Config) -> set[str]:
    """Datasets of experiments whose entry says ``dataset_outputs=False``: the non-blind one (its figures come
    from its own entry) and the robustness set (only its table: the demo stays cheap)."""
    return {
        ds for e in catalogue.configured(config) if e.config_key == "experiments" and not e.dataset_outputs for ds in experiment_datasets(config, e.name)
    }


def experiment_dataset_set(config: Config) -> list[str]:
    """Datasets with trained methods that get the per-dataset tables and figures (catalogue.DATASET_FIGURES)."""
    skip = _own_outputs_only(config)
    return [ds for ds in config["datasets"] if experiment_methods(config, ds) and ds not in skip]


def figure_rows(config: Config, dataset: str) -> dict[str, str]:
    """{results folder: label} of every restoration shown for `dataset` (methods, then deconvolution)."""
    rows = method_labels(config, experiment_methods(config, dataset))
    for name, spec in config["experiments"].items():  # the non-blind comparison's deconvolutions
        if dataset in experiment_datasets(config, name):
            rows.update({d: DECONV_LABELS[d] for d in spec.get("deconvolution", [])})
    return rows


def gg_dg_pair(config: Config, methods: Iterable[str]) -> list[str]:
    """[GG method, DG method] of the residual figure: the first gg and the last dgno-* ([] without both)."""
    gg = [m for m in methods if config["methods"][m]["model"] == "gg"]
    dg = [m for m in methods if config["methods"][m]["model"].startswith("dgno")]
    return [gg[0], dg[-1]] if gg and dg else []


def paper_cost_methods(config: Config) -> list[str]:
    """Methods whose parameters/FLOPs are also counted at paper scale (`evaluate.paper_scale_cost`)."""
    choice = config["evaluate"]["paper_scale_cost"]
    if isinstance(choice, bool):
        return list(config["methods"]) if choice else []
    return [m for m in config["methods"] if m in choice]


def cost_methods(config: Config) -> list[str]:
    """Methods of the cost analysis: the configured ones (an ablation grid point costs what its variant does)."""
    grid = ablation_methods(config)
    return [m for m in config["methods"] if m not in grid]


# --- trainings ---------------------------------------------------------------------------------


def _network(config: Config, dataset: str, method: str) -> tuple[str, dict[str, Any]]:
    """(registry model, resolved constructor spec) of a method on a dataset: what its training builds."""
    spec = method_settings(config, dataset, method)
    overrides = registry_overrides(spec.get("overrides", {}))
    return spec["model"], canonical(resolved_spec(spec["model"], config["scale"], **overrides))


def training_of(config: Config, dataset: str, method: str) -> str:
    """The method whose training `method` uses on `dataset`: itself, or for an ablation grid point that
    builds exactly a configured method's network (e.g. Face avg_jump + dirichlet = DGNO-Face), that
    method, so the paper's default settings are trained once and reused, as in the paper's tables.
    """
    grid = ablation_methods(config)
    if method not in grid:
        return method
    mine = _network(config, dataset, method)
    for other, spec in config["methods"].items():
        if other in grid or "authors_checkpoints" in spec:
            continue
        if spec["model"] == mine[0] and _network(config, dataset, other) == mine:
            return other
    return method


def trained_model(
    config: Config, dataset: str, method: str, trainings: Callable[[str, str], str] | None = None, replicate: int = 0
) -> str:
    """Checkpoint that evaluates `dataset`: its own, or that of its `trained_on` dataset (RealDOF ← DPDD);
    for a method with `authors_checkpoints`, the authors' checkpoint imported for that dataset; for an
    ablation grid point equal to a configured method, that method's training (:func:`training_of`,
    or ``trainings(dataset, method)``: the same function of this config, e.g. cached). ``replicate``
    r >= 1: the training with seed + r (``dgno.workflow.replicates``).
    """
    source = config["datasets"][dataset].get("trained_on", dataset)
    if "authors_checkpoints" in config["methods"][method]:
        if replicate:
            raise ValueError(f"method {method} uses the authors' weights: it has no seed replicate {replicate}")
        return f"results/authors/{source}/{method}/model.pt"
    trained = trainings(source, method) if trainings else training_of(config, source, method)
    return f"results/train/{source}/{method_dir(trained, replicate)}/model.pt"


def evaluated_checkpoint(
    config: Config, dataset: str, method: str, trainings: Callable[[str, str], str] | None = None, replicate: int = 0
) -> str:
    """The file the `evaluate` rules score: :func:`trained_model`, or with ``evaluate.checkpoint:
    in_progress`` the training's ``checkpoint.pt`` as it is on disk now (a run still training, or
    interrupted), so that test PSNR can follow the iterations; that never starts a training."""
    model = trained_model(config, dataset, method, trainings, replicate)
    choice = config["evaluate"].get("checkpoint", "model")
    check_choice("evaluate.checkpoint", choice, EVALUATED_CHECKPOINTS)
    if choice == "in_progress" and model.startswith("results/train/"):
        return model.removesuffix("model.pt") + "checkpoint.pt"
    return model


def authors_checkpoint_file(config: Config, dataset: str, method: str) -> str:
    """The authors' checkpoint file that a method with `authors_checkpoints` uses on a dataset (named as released)."""
    released = config["methods"][method]["authors_checkpoints"]
    name = released.get(dataset)
    if name is None:
        raise ValueError(
            f"method {method} has no authors' checkpoint for dataset {dataset}; it has: {', '.join(released)}. "
            f"Fix: add it under methods.{method}.authors_checkpoints"
        )
    return f"{config['downloads']['raw_dir']}/authors/{name}.pth"


def authors_options(config: Config, dataset: str, method: str) -> str:
    """Option file (or packaged network name) of the checkpoint that :func:`authors_checkpoint_file` names."""
    name = Path(authors_checkpoint_file(config, dataset, method)).stem
    folder = config["downloads"]["authors_options"]
    return str(Path(folder) / f"{name}.yml") if folder else name


# --- what jobs read ----------------------------------------------------------------------------


def blur_dirs(config: Config, dataset: str, levels: Iterable[str]) -> list[str]:
    """Folders of blurred images; a downloaded dataset's levels all come from its prepare job."""
    if config["datasets"][dataset]["source"] in ("bbbc006", *PAIRED_SOURCES):
        return [f"results/data/{dataset}/manifest.json"]
    return [f"results/data/{dataset}/blur/{lvl}" for lvl in levels]


def data_inputs(config: Config, dataset: str, levels: Iterable[str]) -> dict[str, Any]:
    """Split, sharp images and the blurred images of ``levels`` of one dataset."""
    return {
        "split": f"results/data/{dataset}/split.csv",
        "gt": f"results/data/{dataset}/gt",
        "blur": blur_dirs(config, dataset, levels),
    }


BROAD_NAMES = "broad_names.json"  # the Broad z02/z06/z10 listing (dgno.data.bbbc006_listing.LISTING), rule bbbc006_broad_names
ARCHIVE_LEVELS = ("z02", "z06", "z10")  # the planes in the authors' BBBC006.tar.gz (dgno.data.bbbc006_pairing.PLANES)


def bbbc006_planes(config: Config, dataset: str) -> dict[str, Any]:
    """Raw plane folders (in focus + every configured level) and the label masks of one channel dataset.

    With ``split: authors`` the archive's record replaces the planes it holds (z02, z06, z10); the
    Broad planes of the other levels and the labels are mapped to its fields, and z16 lets the
    preparation compare the archive's ground truth with the Broad one and, if no name maps, take the
    unseen levels from the by-well split (a decision that depends on the data, made there).
    """
    raw = config["downloads"]["raw_dir"]
    levels = list(config["datasets"][dataset]["levels"])
    inputs = {"labels": f"{raw}/bbbc006/labels"}
    if config["datasets"][dataset].get("split") == "authors":
        levels = [lvl for lvl in levels if lvl not in ARCHIVE_LEVELS]
        inputs["archive"] = f"{raw}/bbbc006/authors.json"
        if config["datasets"][dataset].get("plane_rule", "auto") in ("auto", "broad"):
            inputs["broad_names"] = f"{raw}/bbbc006/{BROAD_NAMES}"
    return {"planes": [f"{raw}/bbbc006/{p}" for p in ["z16", *levels]], **inputs}


def seidel_base_inputs(config: Config, dataset: str) -> dict[str, str]:
    """The sharp images to blur; no calibration: the data are made with the true coefficients."""
    base = config["datasets"][dataset]["base"]
    return {"split": f"results/data/{base}/split.csv", "gt": f"results/data/{base}/gt"}


def sensitivity_inputs(config: Config, dataset: str) -> dict[str, Any]:
    """Noise-free blurred test images, the calibration and the blind networks of experiments.nonblind."""
    methods = config["experiments"].get("nonblind", {}).get("methods", [])
    return {
        "split": f"results/data/{dataset}/split.csv",
        "gt": f"results/data/{dataset}/gt",
        "clean": f"results/nonblind/{dataset}/clean",
        "calibration": f"results/nonblind/{dataset}/calibration.json",
        "models": [trained_model(config, dataset, m) for m in methods],
    }


def stardist_inputs(config: Config) -> dict[str, Any]:
    """The segmentation model, the restorations it segments and the blurred input of its level."""
    spec = config["experiments"]["stardist"]
    ds, lvl = spec["dataset"], spec["level"]
    return {
        "model": f"results/stardist/{ds}/model.json",
        "restored": [f"results/eval/{ds}/{m}/{lvl}/restored" for m in spec["methods"]],
        "blur": blur_dirs(config, ds, [lvl]),
    }


def restored_readers(config: Config) -> frozenset[tuple[str, str, str]]:
    """(dataset, method, level) of the evaluations whose restored images are read later by the
    edge-band table and error-difference figure (experiment methods at the table levels), the
    visual comparison (its rows at the first table level) and StarDist (its methods at its level).
    Every other evaluation (ablation grid points, other levels) writes scores only."""
    shown = [ds for e in catalogue.configured(config) if "visual" in e.figures and not e.dataset_outputs for ds in experiment_datasets(config, e.name)]
    need = set()
    for ds in experiment_dataset_set(config) + shown:
        levels = table_levels(config, ds)
        need |= {(ds, m, lvl) for m in experiment_methods(config, ds) for lvl in levels}
        need |= {(ds, m, levels[0]) for m in figure_rows(config, ds)}
    if "stardist" in config["experiments"]:
        spec = config["experiments"]["stardist"]
        need |= {(spec["dataset"], m, spec["level"]) for m in spec["methods"]}
    return frozenset(need | authors.restored_needed(config))


def edge_band_reads(config: Config, dataset: str, method: str, level: str) -> bool:
    """Whether the edge-band table reads this evaluation's restored images (the only reader of a seed
    replicate's: figures and StarDist show replicate 0)."""
    return dataset in experiment_dataset_set(config) and method in experiment_methods(config, dataset) and level in table_levels(config, dataset)


# --- evaluation summaries behind each table ----------------------------------------------------


def summaries(dataset: str, methods: Iterable[str], levels: Iterable[str], with_input: bool = True) -> list[str]:
    """Evaluation summaries for every (method, level) of a dataset, plus the blurred input's."""
    rows = list(methods) + (["input"] if with_input else [])
    levels = list(levels)
    return [f"results/eval/{dataset}/{m}/{lvl}/summary.json" for m in rows for lvl in levels]


def experiment_summaries(config: Config, name: str) -> list[str]:
    """Summaries an experiment's table needs: every (method, level) of its dataset(s) + the input row,
    and the seed replicates of its trained methods (``experiments.<name>.seeds``)."""
    spec = config["experiments"][name]
    rows = list(spec["methods"]) + list(spec.get("deconvolution", []))
    datasets = experiment_datasets(config, name)
    levels = lambda ds: spec.get("levels", table_levels(config, ds))  # noqa: E731
    return [s for ds in datasets for s in summaries(ds, rows, levels(ds))] + replicate_summaries(config, name, datasets, rows, levels)


def per_image_files(summary_files: Iterable[str]) -> list[str]:
    """The per-image scores beside each summary.json (the tables' intervals are computed from them)."""
    return [str(Path(s).with_name("per_image.csv")) for s in summary_files]


def training_curves(config: Config, dataset: str) -> list[str]:
    """train_metrics.csv of every training on a dataset (each seed replicate too): the training-curves
    figure and the claims' under-trained flag read them."""
    return [
        f"results/train/{dataset}/{method_dir(m, r)}/train_metrics.csv"
        for m in experiment_methods(config, dataset)
        if "authors_checkpoints" not in config["methods"][m]
        for r in seeds_of(config, dataset, m)
    ]


def edge_band_replicates(config: Config, dataset: str) -> dict[str, list[int]]:
    """{method: the replicates the edge-band table reads} on one dataset (every seed any experiment trains)."""
    return {m: seeds_of(config, dataset, m) for m in experiment_methods(config, dataset)}


def edge_band_versus(config: Config, dataset: str) -> list[str]:
    """Rows every edge-band gain is stated against: the blurred input, and GG where the dataset has it."""
    return ["input"] + [m for m in experiment_methods(config, dataset) if config["methods"][m]["model"] == "gg"][:1]


def edge_band_summaries(config: Config, dataset: str) -> list[str]:
    """Evaluations the edge-band table reads: every method of the dataset's experiments at its table
    levels, each of its seed replicates, and the blurred input."""
    levels = table_levels(config, dataset)
    methods = experiment_methods(config, dataset)
    extra = [f"{eval_dir(dataset, m, lvl, r)}/summary.json" for m in methods for r in seeds_of(config, dataset, m)[1:] for lvl in levels]
    return summaries(dataset, methods, levels) + extra


def table_summaries(config: Config, table: str) -> list[str]:
    """The evaluation summaries behind one results table (an experiment's, or ``ablation_<name>``)."""
    entry = catalogue.by_table(table)
    if entry.config_key == "ablations":
        return ablation_summaries(config, entry.name)
    if entry.table.datasets == "trained_on_and_experiment":
        return trained_on_summaries(config, entry.name)
    return experiment_summaries(config, entry.name)


def trained_on_summaries(config: Config, name: str) -> list[str]:
    """Summaries of a table that scores an experiment's methods and the blurred input on its dataset and, for
    comparison, on the same levels of the dataset the models were trained on (the robustness table)."""
    spec = config["experiments"][name]
    ds = spec["dataset"]
    levels = config["datasets"][ds]["test_levels"]
    trained = config["datasets"][ds]["trained_on"]
    return summaries(ds, spec["methods"], levels) + summaries(trained, spec["methods"], levels)


def ablation_summaries(config: Config, ablation: str) -> list[str]:
    """Summaries of one ablation table: every grid point at its dataset's table levels."""
    return [
        f"results/eval/{r['dataset']}/{r['method']}/{lvl}/summary.json"
        for r in config["ablation_runs"][ablation]
        for lvl in table_levels(config, r["dataset"])
    ]


# --- analyses behind the paper's figures (rules in analysis.smk) -------------------------------


def rank_datasets(config: Config) -> list[str]:
    """The dataset of the operators experiment, where the rank and operator-map analyses run."""
    operators = config["experiments"].get("operators")
    return [operators["dataset"]] if operators else []


def rank_methods(config: Config, dataset: str) -> list[str]:
    """Trained methods of the operators experiment with per-scale operator stacks (GG, LG, DGNO)."""
    return [
        m
        for m in config["experiments"]["operators"]["methods"]
        if config["methods"][m]["model"] in RANK_MODELS and "authors_checkpoints" not in config["methods"][m]
    ]


def rank_level(config: Config, dataset: str) -> str:
    """Blur level of the rank analysis: ``analysis.rank_level``, else the first table level."""
    return config["analysis"]["rank_level"] or table_levels(config, dataset)[0]


def rank_inputs(config: Config, dataset: str) -> dict[str, Any]:
    """Test split and blurred images of the analysed level, and one checkpoint per method (in order).
    The operator-map figure reads the same."""
    return {
        **data_inputs(config, dataset, [rank_level(config, dataset)]),
        "models": [f"results/train/{dataset}/{m}/model.pt" for m in rank_methods(config, dataset)],
    }


def lam_datasets(config: Config) -> list[str]:
    """The dataset of the local attribution maps (paper fig. "LAM-based interpretability"), if configured."""
    lam = config["experiments"].get("lam")
    return [lam["dataset"]] if lam else []


def lam_level(config: Config, dataset: str) -> str:
    """Blur level of the LAM figure: ``experiments.lam.level``, else the first table level."""
    return config["experiments"].get("lam", {}).get("level") or table_levels(config, dataset)[0]


def lam_inputs(config: Config, dataset: str) -> dict[str, Any]:
    """Test split and blurred images of the analysed level, and one checkpoint per LAM method (in order)."""
    return {
        **data_inputs(config, dataset, [lam_level(config, dataset)]),
        "models": [f"results/train/{dataset}/{m}/model.pt" for m in config["experiments"]["lam"]["methods"]],
    }


def main_dataset(config: Config) -> str | None:
    """The first dataset of the main experiment (PSNR-vs-parameters figure), if configured."""
    main = config["experiments"].get("main")
    return main["datasets"][0] if main else None
