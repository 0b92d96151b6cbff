# Helpers shared by every stage (config validation, target lists, input functions).
import json
from pathlib import Path

from dgno.config import load_schema, validate_config

config.update(
    validate_config(
        config,
        load_schema(Path(workflow.basedir) / "workflow/schemas/config.schema.yaml"),
    )
)

DATASETS = list(config["datasets"])
METHODS = list(config["methods"])
EXPERIMENTS = config["experiments"]


def dataset_cfg(wildcards):
    return config["datasets"][wildcards.dataset]


def blur_dirs(dataset, levels):
    return [f"results/data/{dataset}/blur/{lvl}" for lvl in levels]


def train_inputs(wildcards):
    ds = config["datasets"][wildcards.dataset]
    return {
        "split": f"results/data/{wildcards.dataset}/split.csv",
        "gt": f"results/data/{wildcards.dataset}/gt",
        "blur": blur_dirs(wildcards.dataset, ds["train_levels"]),
    }


def eval_data_inputs(wildcards):
    return {
        "split": f"results/data/{wildcards.dataset}/split.csv",
        "gt": f"results/data/{wildcards.dataset}/gt",
        "blur": f"results/data/{wildcards.dataset}/blur/{wildcards.level}",
    }


def summaries(dataset, methods, levels, with_input=True):
    """Evaluation summaries for every (method, level) of a dataset, plus the blurred input's."""
    rows = list(methods) + (["input"] if with_input else [])
    return [
        f"results/eval/{dataset}/{m}/{lvl}/summary.json" for m in rows for lvl in levels
    ]


def experiment_datasets(name):
    spec = EXPERIMENTS[name]
    return spec.get("datasets", [spec.get("dataset")])


def experiment_summaries(name):
    spec = EXPERIMENTS[name]
    return [
        s
        for ds in experiment_datasets(name)
        for s in summaries(ds, spec["methods"], config["datasets"][ds]["test_levels"])
    ]


def method_json(wildcards):
    return json.dumps(config["methods"][wildcards.method])


def experiment_methods(dataset):
    """Methods trained on `dataset` by any experiment (ordered as in the config)."""
    used = set()
    for spec in EXPERIMENTS.values():
        if dataset in spec.get("datasets", [spec.get("dataset")]):
            used.update(spec["methods"])
    return [m for m in METHODS if m in used]


def method_labels(methods):
    return {m: config["methods"][m].get("label", m) for m in methods}


def gg_dg_pair(methods):
    """(GG method, best-guess DG method) for the residual figure: the first gg and the first dgno-*."""
    gg = [m for m in methods if config["methods"][m]["model"] == "gg"]
    dg = [m for m in methods if config["methods"][m]["model"].startswith("dgno")]
    return [gg[0], dg[-1]] if gg and dg else []


def experiment_dataset_set():
    return [ds for ds in DATASETS if experiment_methods(ds)]


def report_inputs():
    files = [
        "results/tables/model_summary.csv",
        "results/tables/edge_band_definition.txt",
    ]
    if "operators" in EXPERIMENTS:
        files.append("results/tables/operators.csv")
    if "synthetic" in EXPERIMENTS:
        files += ["results/tables/synthetic.csv", "results/figures/synthetic_psnr.png"]
    for ds in experiment_dataset_set():
        files += [
            f"results/tables/edge_band_{ds}.csv",
            f"results/figures/visual_{ds}.png",
            f"results/figures/training_curves_{ds}.png",
        ]
        if gg_dg_pair(experiment_methods(ds)):
            files.append(f"results/figures/error_difference_{ds}.png")
    return files
