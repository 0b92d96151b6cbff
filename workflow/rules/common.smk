# Helpers shared by every stage (config validation, target lists, input functions).
import functools
import json
import re
from glob import glob
from pathlib import Path
from types import SimpleNamespace

from dgno.workflow import resources as dgno_resources
from dgno.workflow.config import load_schema, validate_config

config.update(
    validate_config(
        config,
        load_schema(Path(workflow.basedir) / "workflow/schemas/config.schema.yaml"),
    )
)

DATASETS = list(config["datasets"])
GENERATED = [d for d in DATASETS if config["datasets"][d]["source"].startswith("demo_")]
SEIDEL = [d for d in DATASETS if config["datasets"][d]["source"] == "seidel"]
# Sharp images of another dataset with sigma-map blur (dgno.data.sigma_sets).
SIGMA_SETS = [d for d in DATASETS if config["datasets"][d]["source"] == "sigma_map"]
BBBC006 = [d for d in DATASETS if config["datasets"][d]["source"] == "bbbc006"]
# Real (blurred, sharp) pairs with the authors' split: 3DHistech, DPDD, RealDOF (dgno.data.paired_sets).
PAIRED = [
    d
    for d in DATASETS
    if config["datasets"][d]["source"] in ("3dhistech", "dpdd", "realdof")
]
RAW = config["downloads"]["raw_dir"]


# Threads, memory, wall time and GPU per workflow step come from one table (dgno.workflow.resources), scaled by `scale`
# (paper or demo); memory and wall time grow with the retry `attempt`.
def threads_for(name):
    return dgno_resources.threads(name, config["scale"])


def mem_mb_for(name):
    return dgno_resources.mem_mb(name, config["scale"])


def runtime_for(name):
    return dgno_resources.runtime(name, config["scale"])


def gpu_for(name):
    return dgno_resources.gpus(name, config["device"])


def canonical(obj):
    """Key-sorted copy of a params dict: Snakemake compares params by their text, so key order
    (which a YAML round trip may change) must not trigger reruns."""
    return json.loads(json.dumps(obj, sort_keys=True))


def one_of(names):
    """Wildcard regex matching exactly these names (and nothing at all when there are none)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


DECONVOLUTION = config["experiments"].get("nonblind", {}).get("deconvolution", [])
STARDIST_MODEL = config["experiments"].get("stardist", {}).get("model", "pretrained")
METHODS = list(config["methods"])
EXPERIMENTS = config["experiments"]
ABLATIONS = config["ablation_runs"]
ABLATION_METHODS = {r["method"] for rows in ABLATIONS.values() for r in rows}
METHOD_REGEX = "|".join(re.escape(m) for m in sorted(METHODS, key=len, reverse=True))


def dataset_cfg(wildcards):
    return config["datasets"][wildcards.dataset]


def blur_dirs(dataset, levels):
    """Folders of blurred images; a downloaded dataset's levels all come from its prepare job."""
    if dataset in BBBC006 or dataset in PAIRED:
        return [f"results/data/{dataset}/manifest.json"]
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
        "blur": blur_dirs(wildcards.dataset, [wildcards.level]),
    }


def paired_url(wildcards):
    """Download URL of a real paired dataset ("" for 3DHistech: placed by hand, never downloaded)."""
    source = config["datasets"][wildcards.dataset]["source"]
    return config["downloads"].get(f"{source}_url", "")


def _network(dataset, method):
    """(registry model, resolved constructor spec) of a method on a dataset: what its training builds."""
    from dgno.models.overrides import registry_overrides
    from dgno.models.registry import resolved_spec

    spec = method_settings(dataset, method)
    overrides = registry_overrides(spec.get("overrides", {}))
    return spec["model"], canonical(
        resolved_spec(spec["model"], config["scale"], **overrides)
    )


@functools.lru_cache(maxsize=None)
def training_of(dataset, method):
    """The method whose training `method` uses on `dataset`: itself, or for an ablation grid point that
    builds exactly a configured method's network (e.g. Face avg_jump + dirichlet = DGNO-Face), that
    method, so the paper's default settings are trained once and reused, as in the paper's tables.
    """
    if method not in ABLATION_METHODS:
        return method
    mine = _network(dataset, method)
    for other in METHODS:
        if other in ABLATION_METHODS or "official" in config["methods"][other]:
            continue
        if (
            config["methods"][other]["model"] == mine[0]
            and _network(dataset, other) == mine
        ):
            return other
    return method


def trained_model(wildcards):
    """Checkpoint that evaluates `dataset`: its own, or that of its `trained_on` dataset (RealDOF ← DPDD);
    for a method with `official` weights, the authors' checkpoint imported for that dataset; for an
    ablation grid point equal to a configured method, that method's training (``training_of``).
    """
    ds = config["datasets"][wildcards.dataset]
    source = ds.get("trained_on", wildcards.dataset)
    if "official" in config["methods"][wildcards.method]:
        return f"results/official/{source}/{wildcards.method}/model.pt"
    return f"results/train/{source}/{training_of(source, wildcards.method)}/model.pt"


def official_checkpoint(wildcards):
    """The authors' checkpoint file that an `official` method uses on a dataset (named as released)."""
    name = config["methods"][wildcards.method]["official"].get(wildcards.dataset)
    if name is None:
        raise ValueError(
            f"method {wildcards.method} has no authors' checkpoint for dataset {wildcards.dataset}; "
            f"it has: {', '.join(config['methods'][wildcards.method]['official'])}. Fix: add it under methods.{wildcards.method}.official"
        )
    return f"{RAW}/official/{name}.pth"


def official_options(wildcards):
    """Option file (or packaged network name) of the checkpoint that official_checkpoint() names."""
    name = Path(official_checkpoint(wildcards)).stem
    folder = config["downloads"]["official_options"]
    return str(Path(folder) / f"{name}.yml") if folder else name


def bbbc006_planes(wildcards):
    """Raw plane folders (in focus + every configured level) and the label masks of one channel dataset."""
    ds = config["datasets"][wildcards.dataset]
    planes = ["z16"] + [lvl for lvl in ds["levels"]]
    return {
        "planes": [f"{RAW}/bbbc006/{p}" for p in planes],
        "labels": f"{RAW}/bbbc006/labels",
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


def table_levels(dataset):
    """Levels the main tables average over: test levels the models were trained on (else all)."""
    ds = config["datasets"][dataset]
    seen = [lvl for lvl in ds["test_levels"] if lvl in ds["train_levels"]]
    return seen or ds["test_levels"]


def experiment_summaries(name):
    """Summaries an experiment's table needs: every (method, level) of its dataset(s) + the input row."""
    spec = EXPERIMENTS[name]
    rows = list(spec["methods"]) + list(spec.get("deconvolution", []))
    return [
        s
        for ds in experiment_datasets(name)
        for s in summaries(ds, rows, spec.get("levels", table_levels(ds)))
    ]


def seidel_base_inputs(wildcards):
    """The sharp images to blur; no calibration: the data are made with the true coefficients."""
    base = config["datasets"][wildcards.dataset]["base"]
    return {
        "split": f"results/data/{base}/split.csv",
        "gt": f"results/data/{base}/gt",
    }


def seidel_data_settings(wildcards):
    """What the blurred data depend on: the true coefficients and the camera noise (not the calibration's frame count)."""
    seidel = config["datasets"][wildcards.dataset].get("seidel", {})
    return canonical(
        {k: seidel[k] for k in ("coeffs", "convention", "noise") if k in seidel}
    )


def deconv_settings():
    """Wiener / Richardson-Lucy / ring settings of experiments.nonblind (schema defaults filled)."""
    nb = EXPERIMENTS.get("nonblind", {})
    return canonical({m: nb.get(m, {}) for m in ("wiener", "richardson_lucy", "ring")})


def sensitivity_inputs(wildcards):
    """Noise-free blurred test images, the calibration and the blind networks of experiments.nonblind."""
    ds = wildcards.dataset
    methods = EXPERIMENTS.get("nonblind", {}).get("methods", [])
    return {
        "split": f"results/data/{ds}/split.csv",
        "gt": f"results/data/{ds}/gt",
        "clean": f"results/nonblind/{ds}/clean",
        "calibration": f"results/nonblind/{ds}/calibration.json",
        "models": [
            trained_model(SimpleNamespace(dataset=ds, method=m)) for m in methods
        ],
    }


def seidel_image_size(wildcards):
    """Calibration frames have the size of the base dataset's images."""
    return config["datasets"][config["datasets"][wildcards.dataset]["base"]]["size"]


def train_settings(dataset):
    """The training recipe of one dataset: the top-level `train` with the dataset's own settings on
    top (e.g. the authors' 3DHistech schedule). prefetch only changes speed, not results: it is left
    out so that changing it does not retrain; the script reads it from the config."""
    merged = {**config["train"], **config["datasets"][dataset].get("train", {})}
    merged.pop("prefetch", None)
    return canonical(merged)


def method_settings(dataset, method):
    """A method's spec on one dataset: its overrides plus the dataset's `method_overrides` for it
    (e.g. the authors' DGNO-Face on BBBC006 w2 uses jump + neumann)."""
    spec = {k: v for k, v in config["methods"][method].items() if k != "label"}
    extra = config["datasets"][dataset].get("method_overrides", {}).get(method)
    if extra:
        spec["overrides"] = {**spec.get("overrides", {}), **extra}
    return canonical(spec)


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


def paper_cost_methods():
    """Methods whose parameters/FLOPs are also counted at paper scale (`evaluate.paper_scale_cost`)."""
    choice = config["evaluate"]["paper_scale_cost"]
    if isinstance(choice, bool):
        return METHODS if choice else []
    return [m for m in METHODS if m in choice]


def gg_dg_pair(methods):
    """(GG method, best-guess DG method) for the residual figure: the first gg and the first dgno-*."""
    gg = [m for m in methods if config["methods"][m]["model"] == "gg"]
    dg = [m for m in methods if config["methods"][m]["model"].startswith("dgno")]
    return [gg[0], dg[-1]] if gg and dg else []


def experiment_dataset_set():
    """Datasets with trained methods, except the non-blind one (its figures come from its own rules) and
    the robustness set (only its table: the demo stays cheap)."""
    skip = {EXPERIMENTS.get(n, {}).get("dataset") for n in ("nonblind", "robustness")}
    return [ds for ds in DATASETS if experiment_methods(ds) and ds not in skip]


def robustness_summaries():
    """Summaries of the robustness table: each method and the blurred input on the out-of-range set and,
    for comparison, on the same levels of the dataset the models were trained on."""
    if "robustness" not in EXPERIMENTS:
        return []
    spec = EXPERIMENTS["robustness"]
    ds = spec["dataset"]
    levels = config["datasets"][ds]["test_levels"]
    trained = config["datasets"][ds]["trained_on"]
    return summaries(ds, spec["methods"], levels) + summaries(
        trained, spec["methods"], levels
    )


def photometry_of(dataset):
    """Photometry ranges of a generated nuclei dataset ({} for other kinds, which have none)."""
    ds = config["datasets"][dataset]
    return canonical(ds["photometry"]) if ds["source"] == "demo_nuclei" else {}


@functools.cache
def restored_readers():
    """(dataset, method, level) of the evaluations whose restored images are read later by the
    edge-band table and error-difference figure (experiment methods at the table levels), the
    visual comparison (its rows at the first table level) and StarDist (its methods at its level).
    Every other evaluation (ablation grid points, other levels) writes scores only."""
    nb = EXPERIMENTS.get("nonblind", {}).get("dataset")
    need = set()
    for ds in experiment_dataset_set() + ([nb] if nb else []):
        levels = table_levels(ds)
        need |= {(ds, m, lvl) for m in experiment_methods(ds) for lvl in levels}
        need |= {(ds, m, levels[0]) for m in figure_rows(ds)}
    if "stardist" in EXPERIMENTS:
        spec = EXPERIMENTS["stardist"]
        need |= {(spec["dataset"], m, spec["level"]) for m in spec["methods"]}
    return frozenset(need)


def keep_restored(wildcards):
    method = wildcards.get("method", "input")
    return (wildcards.dataset, method, wildcards.level) in restored_readers()


def stardist_inputs(wildcards):
    spec = EXPERIMENTS["stardist"]
    ds, lvl = spec["dataset"], spec["level"]
    return {
        "model": f"results/stardist/{ds}/model.json",
        "restored": [f"results/eval/{ds}/{m}/{lvl}/restored" for m in spec["methods"]],
        "blur": blur_dirs(ds, [lvl]),
    }


def ablation_summaries(wildcards):
    rows = ABLATIONS[wildcards.ablation]
    return [
        f"results/eval/{r['dataset']}/{r['method']}/{lvl}/summary.json"
        for r in rows
        for lvl in table_levels(r["dataset"])
    ]


def report_inputs():
    files = [
        "results/tables/model_summary.csv",
        "results/tables/edge_band_definition.txt",
    ]
    if "nonblind" in EXPERIMENTS:
        ds = EXPERIMENTS["nonblind"]["dataset"]
        files += [
            "results/tables/nonblind.csv",
            f"results/nonblind/{ds}/calibration.json",
            f"results/data/{ds}/manifest.json",
            f"results/figures/nonblind_sensitivity_{ds}.png",
            f"results/figures/visual_{ds}.png",
            f"results/figures/training_curves_{ds}.png",
        ]
    files += [f"results/tables/ablation_{name}.csv" for name in ABLATIONS]
    if "stardist" in EXPERIMENTS:
        files.append(
            f"results/tables/stardist_{EXPERIMENTS['stardist']['dataset']}.csv"
        )
    for name in ("main", "lifting", "defocus"):
        if name in EXPERIMENTS:
            files.append(f"results/tables/{name}.csv")
    for name in ("dpdd", "realdof"):
        if name in EXPERIMENTS:
            files += experiment_summaries(name)
    if "operators" in EXPERIMENTS:
        files.append("results/tables/operators.csv")
    if "robustness" in EXPERIMENTS:
        files.append("results/tables/robustness.csv")
    if "synthetic" in EXPERIMENTS:
        files += ["results/tables/synthetic.csv", "results/figures/synthetic_psnr.png"]
    for ds in experiment_dataset_set():
        files += [
            f"results/tables/edge_band_{ds}.csv",
            f"results/figures/visual_{ds}.png",
        ]
        if "trained_on" not in config["datasets"][ds]:  # no training of its own to plot
            files.append(f"results/figures/training_curves_{ds}.png")
        if gg_dg_pair(experiment_methods(ds)):
            files.append(f"results/figures/error_difference_{ds}.png")
    return files


DECONV_LABELS = {
    "wiener": "Wiener (centre PSF)",
    "richardson_lucy": "Richardson-Lucy (centre PSF)",
    "ring": "Ring deconvolution",
}


def figure_rows(dataset):
    """{results folder: label} of every restoration shown for `dataset` (methods, then deconvolution)."""
    rows = method_labels(experiment_methods(dataset))
    if EXPERIMENTS.get("nonblind", {}).get("dataset") == dataset:
        rows.update({d: DECONV_LABELS[d] for d in DECONVOLUTION})
    return rows


# Analyses behind the paper's figures (rules in analysis.smk).
# Methods of the experiments (ablation grid points are variants of these, with the same cost).
COST_METHODS = [
    m
    for m in METHODS
    if m not in {r["method"] for runs in ABLATIONS.values() for r in runs}
]
# Methods whose decoder has per-scale operator stacks (the rank figure compares GG/LG with DG).
RANK_MODELS = ("gg", "lg", "dgno-face", "dgno-cell")
RANK_DATASETS = (
    [EXPERIMENTS["operators"]["dataset"]] if "operators" in EXPERIMENTS else []
)
# Benchmark results written by `dgno bench` / benchmarks/bench_models.py (tracked in the repository).
BENCH_FILES = sorted(glob("benchmarks/results/*.json"))


def rank_methods(dataset):
    return [
        m
        for m in EXPERIMENTS["operators"]["methods"]
        if config["methods"][m]["model"] in RANK_MODELS
        and "official" not in config["methods"][m]
    ]


def rank_level(dataset):
    return config["analysis"]["rank_level"] or table_levels(dataset)[0]


def rank_inputs(wildcards):
    """Test split and blurred images of the analysed level, and one checkpoint per method (in order)."""
    ds = wildcards.dataset
    return {
        "split": f"results/data/{ds}/split.csv",
        "gt": f"results/data/{ds}/gt",
        "blur": blur_dirs(ds, [rank_level(ds)]),
        "models": [f"results/train/{ds}/{m}/model.pt" for m in rank_methods(ds)],
    }


# Test images whose operator maps are averaged in the interface-energy statistics (the figure shows the first).
OPERATOR_MAP_IMAGES = 8


def operator_map_inputs(wildcards):
    """The operator-map figure reads what the rank analysis reads: same level, images and checkpoints."""
    return rank_inputs(wildcards)


# Local attribution maps (paper fig. "LAM-based interpretability"): one dataset, its experiment's methods.
LAM = EXPERIMENTS.get("lam", {})
LAM_DATASETS = [LAM["dataset"]] if LAM else []


def lam_level(dataset):
    return LAM.get("level") or table_levels(dataset)[0]


def lam_inputs(wildcards):
    """Test split and blurred images of the analysed level, and one checkpoint per method (in order)."""
    ds = wildcards.dataset
    return {
        "split": f"results/data/{ds}/split.csv",
        "gt": f"results/data/{ds}/gt",
        "blur": blur_dirs(ds, [lam_level(ds)]),
        "models": [f"results/train/{ds}/{m}/model.pt" for m in LAM["methods"]],
    }


def main_dataset():
    return EXPERIMENTS["main"]["datasets"][0] if "main" in EXPERIMENTS else None


def analysis_report_inputs():
    """Files the report's analysis figures need in this configuration."""
    files = [
        "results/tables/cost_vs_resolution.csv",
        "results/figures/cost_vs_resolution.png",
    ]
    for ds in RANK_DATASETS:
        if rank_methods(ds):
            files += [
                f"results/tables/effective_rank_{ds}.csv",
                f"results/figures/effective_rank_{ds}.png",
                f"results/tables/operator_maps_{ds}.csv",
                f"results/figures/operators_{ds}.png",
            ]
    for ds in LAM_DATASETS:
        files += [f"results/tables/lam_{ds}.csv", f"results/figures/lam_{ds}.png"]
    if main_dataset():
        files.append("results/figures/psnr_vs_params.png")
    if BENCH_FILES:
        files.append("results/figures/runtime_memory.png")
    return files
