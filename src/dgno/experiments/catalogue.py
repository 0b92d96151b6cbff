"""The paper's experiments as data: one entry each, read by the workflow's targets and rules and by the report.

An entry says what an experiment is — the paper's catalogue line, the report section's title and the
function that renders it — what it produces — its results table (how the table compares its rows) and
the figures its section shows, each figure's path written once, in :data:`FIGURES` — and how its rows are
replicated (``seeded``: the config may train its methods with several seeds). *What* a run does with an
experiment (its datasets, methods, levels) is the config's ``experiments.<name>`` (or
``ablations.<name>``); the config schema gives each entry's keys. The whole-slide restorations are an
entry too (``slides``: not the paper's, configured by the top-level ``slides`` block), so that they get
a target, a report section and figure paths written once (:data:`SLIDE_FILES`) the same way.

Why a Python module and not a YAML file beside the config: the entries are checked when they are made
(a typo in a figure key or a section function fails on import, in the test suite), they need no loader
or schema of their own, and the Snakefile and the report import them the same way, without torch (this
module imports nothing heavier than the standard library). The report's section functions are named as
``"module:function"`` strings because the report is a layer above this one.

Adding an experiment: its config keys in ``workflow/schemas/config.schema.yaml``, an entry in
:data:`EXPERIMENTS` and its section function (docs/extending.md walks through it); targets, the
table rule, the report and the claims pick it up from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Config = Mapping[str, Any]
# Where the config runs an entry: under experiments.<name>, ablations.<name>, or (slides) as a top-level block of its name.
ConfigKey = Literal["experiments", "ablations", "slides"]

TABLE = "results/tables/{table}.csv"  # the long-form table of the evaluation summaries behind one report table
TABLE_STATS = "results/tables/{table}_stats.csv"  # its statistics (dgno.report.comparisons.table_stats)
TABLE_LOG = "results/logs/tables/{table}.log"
# What the workflow keeps of one slide's restoration (dgno.slides.restore.output_files, in one folder; the
# pictures are FIGURES["slide_focus"] and FIGURES["slide_before_after"]). {slide}: the slide's name.
SLIDE_FILES = {
    "slide": "results/slides/restored/{slide}.ome.tif",
    "tiles": "results/slides/restored/{slide}.tiles.csv",
    "summary": "results/slides/restored/{slide}.summary.json",
}
# A generated slide (slides.synthetic): the slide and the manifest of where it was defocused on purpose, which
# the report's Slides section checks the focus map against.
SYNTHETIC_SLIDE = {"slide": "results/slides/synthetic/{slide}.ome.tif", "manifest": "results/slides/synthetic/{slide}.json"}


@dataclass(frozen=True)
class Figure:
    """A figure of the report: its file (``{dataset}`` for one per dataset), the report's title for it and the
    Snakemake report's caption and category. Title and caption may name ``{dataset}``."""

    path: str
    title: str
    caption: str
    category: str

    @property
    def per_dataset(self) -> bool:
        return "{dataset}" in self.path

    @property
    def per_slide(self) -> bool:
        return "{slide}" in self.path

    def files(self, datasets: Iterable[str]) -> list[str]:
        return [self.path.format(dataset=d) for d in datasets] if self.per_dataset else [self.path]


@dataclass(frozen=True)
class Table:
    """How an experiment's results table compares its rows (dgno.report.comparisons.table_spec).

    caption: the Snakemake report's caption (``{datasets}`` and ``{trained_on}`` filled from the config).
    versus: registry models whose first configured row every row is compared with, besides the blurred input.
    by_level: one group per level (the defocus table) instead of pooling the levels.
    datasets: "experiment" = the experiment's dataset(s); "trained_on_and_experiment" = the dataset its
    models were trained on, then its own, at its own test levels (the robustness table).
    metrics: the metrics its report table shows (names of dgno.metric_spec; None = every shown metric).
    """

    caption: str
    category: str
    versus: tuple[str, ...] = ()
    by_level: bool = False
    datasets: Literal["experiment", "trained_on_and_experiment"] = "experiment"
    metrics: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Experiment:
    """One experiment of the paper's catalogue (see the module docstring)."""

    name: str
    paper: str | None  # the paper's catalogue line, as the report's list of experiments shows it (None: not the paper's)
    title: str  # the report section's title
    section: str  # "module:function" of the report section, called (name, config, summaries, results)
    config_key: ConfigKey = "experiments"
    table: Table | None = None
    figures: tuple[str, ...] = ()  # keys of FIGURES the section shows, in order
    files: tuple[str, ...] = ()  # other results the report reads ({dataset}: one per dataset)
    seeded: bool = False  # the config may give it `seeds` (trained rows replicated)
    dataset_outputs: bool = True  # its datasets get the per-dataset tables and figures (DATASET_FIGURES)
    claims_config: bool = False  # config/claims.yaml runs it at paper scale (claims point there)

    def __post_init__(self) -> None:
        unknown = [f for f in self.figures if f not in FIGURES]
        if unknown:
            raise ValueError(f"experiment {self.name!r}: figures {unknown} are not keys of FIGURES ({', '.join(FIGURES)})")
        if ":" not in self.section:
            raise ValueError(f"experiment {self.name!r}: section {self.section!r} is not 'module:function'")

    @property
    def table_name(self) -> str:
        """The name of its table: the experiment's, ``ablation_<name>`` for an ablation grid."""
        return f"ablation_{self.name}" if self.config_key == "ablations" else self.name


_BAND = "Boundary analysis"
FIGURES: dict[str, Figure] = {
    "visual": Figure(
        "results/figures/visual_{dataset}.png",
        "Visual comparison on {dataset}",
        "Blurred input, each method's restoration and the sharp image for the first test images; the cyan box is enlarged "
        "below each panel. PSNR against the sharp image in each title.",
        "Visual comparisons",
    ),
    "training_curves": Figure(
        "results/figures/training_curves_{dataset}.png",
        "Training curves on {dataset}",
        "Training loss (log scale) and PSNR of the EMA weights on fixed held-out validation crops.",
        "Training",
    ),
    "error_difference": Figure(
        "results/figures/error_difference_{dataset}.png",
        "Residual analysis: |e_GG| − |e_DG| (red: DG closer to the sharp image)",
        "Absolute error difference \\|e_GG\\| − \\|e_DG\\| between the global Galerkin and a DG operator: red where DG is "
        "closer to the sharp image.",
        _BAND,
    ),
    "edge_band": Figure(
        "results/figures/edge_band_{dataset}.png",
        "Edge-band vs interior PSNR on {dataset}",
        "PSNR on the band around ground-truth edges, on the interior (everything else) and on the whole image, pooled over "
        "the test images.",
        _BAND,
    ),
    "synthetic_psnr": Figure(
        "results/figures/synthetic_psnr.png",
        "PSNR per method and sigma range (bars: measured; black ticks: paper)",
        "Measured PSNR per method and sigma range (bars) with the paper's value as a black tick. Demo-scale values are not "
        "comparable with the paper's.",
        "Controlled synthetic experiment",
    ),
    "nonblind_sensitivity": Figure(
        "results/figures/nonblind_sensitivity_{dataset}.png",
        "Noise sensitivity on {dataset}: mean test PSNR against the read-noise sigma (shot noise as above); each "
        "deconvolution with the settings above, the blind networks as trained at the table's noise level",
        "Non-blind comparison: mean test PSNR against the camera's read-noise sigma (shot noise fixed), for the blurred "
        "input, Wiener and Richardson-Lucy with the centre PSF, ring deconvolution, and the blind network trained at the "
        "config's noise level. The data are made by brute-force Seidel PSF superposition with the true coefficients; every "
        "restoration uses the fitted coefficients.",
        "Non-blind comparison",
    ),
    # the analyses behind the paper's figures (workflow/rules/analysis.smk), shown by the operators, LAM and cost sections
    "effective_rank": Figure(
        "results/figures/effective_rank_{dataset}.png",
        'Effective rank of the latent z per scale (s1 = 1/4, s2 = 1/2, s3 = 1) and operator step t: (a) r_eff = '
        'exp(entropy of the normalised singular values of the tokens × channels matrix), (b) utilisation r_eff / d '
        '(paper: rank figure)',
        'Effective rank of the latent functions z after each operator layer t of the decoder, at the three scales '
        's1 (1/4), s2 (1/2), s3 (1), averaged over the blurred test images of one level. Effective rank (Roy & '
        'Vetterli, 2007) = exp(entropy of the normalised singular values σ_i / Σσ_j) of the (tokens × channels) '
        'matrix of one feature map; utilisation = effective rank / channels.',
        "GG vs LG vs DGNO",
    ),
    "operator_maps": Figure(
        "results/figures/operators_{dataset}.png",
        'Learned operators on {dataset}',
        'Learned operators of each GG/LG/DGNO method on one blurred test image of {dataset} (finest decoder scale, '
        'first and last operator step t; a centred window of at most 128 px). Columns: (a) blurred input; (b) the '
        'three channels of the queries Q (the input-dependent "dynamic" basis) with the largest spatial variation; '
        '(c) channel norm of the volume term Q(K̃ᵀṼ) of each element (of the whole image for GG); (d) channel norm '
        'of the DG flux term Q·ΣK^flux, cyan lines = element borders, "iface ×r" = mean squared flux norm within 1 '
        'px of an interior element interface divided by that mean elsewhere (1 = no concentration at interfaces); '
        '(e) restored output. Each map is scaled to its own 99.5th percentile. The table gives, averaged over the '
        'first (up to 8) test images: the interface-energy ratios of the latent and flux maps, the flux energy in '
        'the elements touching the image border ÷ the other elements (the domain-boundary response: Dirichlet adds '
        'a flux against a zero ghost on the border faces, Neumann none) and the flux-to-latent energy ratio.',
        "GG vs LG vs DGNO",
    ),
    "lam": Figure(
        "results/figures/lam_{dataset}.png",
        'Local attribution maps: input pixels each method uses for the cyan window (dashed: r₅₀); bottom: restored',
        'Local attribution maps (LAM, Gu & Dong 2021) of each method on one blurred test image of {dataset}: which '
        'input pixels each network draws on to restore one output window. The window (cyan) is the one with the '
        'most edge content in the sharp image, the same for every method. The map is the path-integrated gradient '
        "of the window's edge content (sum of gradient magnitudes of the output) along a progressive-blur path "
        'from a strongly blurred copy of the input to the input, absolute value summed over channels, each scaled '
        'to its own 99.5th percentile. DI = (1 − Gini) × 100 of the map (0: one pixel carries all attribution; '
        '100: every pixel the same); r₅₀ (dashed circle) = radius about the window centre that holds half of the '
        'attribution. Bottom row: restored image and its PSNR on this image. The paper shows such maps (NAFNet, '
        "MPT, SRNO, DGNO) without numbers; its claim is that DGNO's attributions are more localised and "
        'boundary-aligned.',
        "Interpretability",
    ),
    "cost_vs_resolution": Figure(
        "results/figures/cost_vs_resolution.png",
        'GMACs of one forward pass vs image size, per method (legend: parameters)',
        'Multiply-accumulates (GMACs = FLOPs / 2, torch.utils.flop_counter) of one forward pass on a 1-channel '
        "square image, against its side; the legend gives each network's parameters. Scale and sizes: config key "
        '`analysis`.',
        "Model cost",
    ),
    "psnr_vs_params": Figure(
        "results/figures/psnr_vs_params.png",
        "PSNR vs parameters: filled circles = measured in this run (parameters at the run's scale); hollow "
        "diamonds = the paper's PSNR with printed parameter counts (never measured values; sources in "
        'results/tables/psnr_vs_params.csv)',
        "PSNR against parameter count. Filled circles: this run's measured PSNR with parameters counted at the "
        "run's scale. Hollow diamonds: the paper's PSNR with the parameter count printed in the DGNO paper or in "
        "the method's original paper (source per point in results/tables/psnr_vs_params.csv).",
        "Model cost",
    ),
    "runtime_memory": Figure(
        "results/figures/runtime_memory.png",
        'Forward-pass throughput and peak memory vs image size, per device (from the files named in the tables)',
        'Forward-pass throughput (images/s, batch 1) and peak memory against image size, per device, from the '
        'benchmark JSON files in benchmarks/results (written by `dgno bench` and benchmarks/cpu/models.py).',
        "Model cost",
    ),
    # one per slide of the config's slides block (workflow/rules/slides.smk), shown by the slides section
    "slide_focus": Figure(
        "results/slides/restored/{slide}.focus.png",
        "Focus map of {slide}: tissue outline (cyan), restored tiles (red)",
        "Focus map of a whole slide: its thumbnail, the tissue outline (cyan) and the tiles restored because the focus "
        "rule found them out of focus (red): blur effect (Crété-Roffet et al. 2007) above the slide's in-focus reference "
        "(25th percentile of its tissue tiles) by the margin. Every decision is in the slide's tiles.csv.",
        "Slides",
    ),
    "slide_before_after": Figure(
        "results/slides/restored/{slide}.before_after.png",
        "Before and after on {slide}: the most blurred restored tile, at full resolution, one contrast for both",
        "The restored tile that scored most blurred, before and after restoration, at full resolution with one contrast "
        "for both (with no tile restored: the most blurred tissue tile, unchanged).",
        "Slides",
    ),
}
# What every dataset an experiment trains on gets (besides its edge-band table): the figures below, where
# they apply (dgno.workflow.targets: training curves only where it trains, the residual figure only with GG
# and a DG method).
DATASET_FIGURES = ("visual", "training_curves", "error_difference", "edge_band")

_TABLE1 = "Main results"
EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "main", "Table 1 — main results (BBBC006 w1, w2, 3DHistech; 9 methods)", "Main results (Table 1)",
        "dgno.report.results:main_section",
        table=Table("Evaluation summaries behind Table 1 on {datasets}: one row per method, dataset and blur level.", _TABLE1, versus=("dgno-cell",)),
        figures=("visual",), seeded=True,
    ),
    Experiment(
        "operators", "GG vs LG vs DGNO (+ params, FLOPs)", "GG vs LG vs DGNO", "dgno.report.operators_section:operators_section",
        table=Table(
            "GG vs LG vs DGNO: PSNR, SSIM and LPIPS of the global Galerkin (SRNO), windowed local Galerkin and the two DGNO "
            "variants on the {datasets} test split (long form: one row per method and blur level).",
            "GG vs LG vs DGNO", versus=("gg",),
        ),
        figures=("visual", "error_difference", "edge_band", "training_curves"), seeded=True, claims_config=True,
    ),
    Experiment(
        "lam", "LAM interpretability figure (NAFNet / MPT / SRNO / DGNO)", "Local attribution maps (LAM)",
        "dgno.report.operators_section:lam_section",
    ),
    Experiment(
        "synthetic", "Controlled synthetic sigma-map experiment", "Controlled synthetic experiment under spatially varying blur",
        "dgno.report.synthetic:synthetic_section",
        table=Table(
            "Controlled synthetic experiment: shapes (filled squares, hollow boxes, thin lines) blurred with spatially varying "
            "Gaussian blur from random sigma maps; PSNR and SSIM per method and sigma range.",
            "Controlled synthetic experiment", versus=("gg",), metrics=("psnr", "ssim"),
        ),
        figures=("synthetic_psnr", "visual", "training_curves"), seeded=True, claims_config=True,
    ),
    Experiment(
        "synthetic_bbbc006", "Controlled synthetic experiment on BBBC006 w1 (sigma 0.6–13, GG vs DG, boundary gain)",
        "Controlled synthetic experiment on BBBC006 w1 (sigma-map blur)", "dgno.report.synthetic:synthetic_bbbc006_section",
        table=Table("Evaluation summaries behind the controlled synthetic experiment on {datasets}: one row per method and blur level.", _TABLE1, versus=("gg",)),
        figures=("visual", "edge_band"), seeded=True, claims_config=True,
    ),
    Experiment(
        "nonblind", "Seidel-PSF non-blind comparison", "Non-blind comparison under Seidel-PSF blur", "dgno.report.downstream:nonblind_section",
        table=Table(
            "Seidel-PSF non-blind comparison: blurred input, single-centre-PSF deconvolution (Wiener, Richardson-Lucy), ring "
            "deconvolution with the fitted spatially varying PSFs, and the blind DGNO trained on the same blur.",
            "Non-blind comparison",
        ),
        figures=("nonblind_sensitivity", "visual", "training_curves"),
        files=("results/nonblind/{dataset}/calibration.json", "results/data/{dataset}/manifest.json"),
        dataset_outputs=False,
    ),
    Experiment(
        "stardist", "StarDist AP downstream", "StarDist downstream check", "dgno.report.downstream:stardist_section",
        files=("results/tables/stardist_{dataset}.csv", "results/tables/stardist_{dataset}_stats.csv"),
    ),
    Experiment(
        "lifting", "Lifting modules (NAFNet / Restormer / MPT ± DGNO)", "Lifting modules with and without DGNO operator layers",
        "dgno.report.results:lifting_section",
        table=Table("Evaluation summaries behind the lifting-module ablation on {datasets}: one row per method and blur level.", _TABLE1),
        seeded=True,
    ),
    Experiment(
        "defocus", "Defocus levels z = 01 / 05 / 13 (w1, w2)", "Generalisation to unseen defocus levels", "dgno.report.results:defocus_section",
        table=Table("Evaluation summaries behind the defocus-level generalisation on {datasets}: one row per method, dataset and blur level.", _TABLE1, by_level=True),
        seeded=True,
    ),
    Experiment(
        "dpdd", "DPDD", "Real-world defocus deblurring on DPDD (Table 5)", "dgno.report.results:real_defocus_section",
        table=Table("Evaluation summaries behind Table 5 (DPDD) on {datasets}: one row per method.", _TABLE1), seeded=True,
    ),
    Experiment(
        "realdof", "RealDOF", "RealDOF test set (Table 10)", "dgno.report.results:real_defocus_section",
        table=Table("Evaluation summaries behind Table 10 (RealDOF) on {datasets}: one row per method.", _TABLE1), seeded=True,
    ),
    Experiment(
        "robustness", None,
        "Robustness: demo models on photometry outside the training range", "dgno.report.results:robustness_section",
        table=Table(
            "Robustness to photometry: PSNR, SSIM and LPIPS of the models trained on {trained_on} and of the blurred input, on "
            "the out-of-range set {datasets} (brighter background, fewer photons than the training range) and on the same blur "
            "levels of the training dataset's test split (long form: one row per dataset, method and level).",
            "Robustness", datasets="trained_on_and_experiment",
        ),
        dataset_outputs=False,
    ),
    Experiment("flux_boundary", "Flux × boundary condition (Face / Cell)", "Ablation: numerical flux × boundary condition",
               "dgno.report.ablations:ablation_section", config_key="ablations"),
    Experiment("penalty", "Flux penalty τ", "Ablation: flux penalty τ", "dgno.report.ablations:ablation_section", config_key="ablations"),
    Experiment("element_size_T", "Element size × T", "Ablation: element size × number of operator layers T",
               "dgno.report.ablations:ablation_section", config_key="ablations"),
    Experiment("slides", None, "Whole slides restored where they are out of focus", "dgno.report.slides_section:slides_section",
               config_key="slides", figures=("slide_focus", "slide_before_after"), dataset_outputs=False),
)  # fmt: skip


# ------------------------------------------------------------------------------------------ look-ups


def experiment(name: str) -> Experiment:
    """The entry called ``name`` (ValueError listing the known ones otherwise)."""
    for e in EXPERIMENTS:
        if e.name == name:
            return e
    raise ValueError(f"experiment {name!r} is not in the catalogue; known: {', '.join(e.name for e in EXPERIMENTS)} (dgno.experiments.catalogue)")


def names(config_key: ConfigKey = "experiments") -> list[str]:
    """The experiments of one config section (``experiments`` or ``ablations``), in catalogue order."""
    return [e.name for e in EXPERIMENTS if e.config_key == config_key]


def configured(config: Config) -> list[Experiment]:
    """The entries this config runs, in catalogue (= report) order."""
    runs = {"experiments": config.get("experiments", {}), "ablations": config.get("ablation_runs", {}), "slides": {"slides": config.get("slides")}}
    return [e for e in EXPERIMENTS if runs[e.config_key].get(e.name) is not None]


def by_table(table: str) -> Experiment:
    """The entry whose results table is ``table`` (an experiment's name, or ``ablation_<name>``)."""
    for e in EXPERIMENTS:
        if e.table_name == table and (e.table is not None or e.config_key == "ablations"):
            return e
    raise ValueError(f"no experiment of the catalogue has a results table {table!r} (dgno.experiments.catalogue)")


def tables(config: Config) -> list[str]:
    """The results tables this config makes: every configured experiment with a table, and every ablation grid."""
    return [e.table_name for e in configured(config) if e.table is not None or e.config_key == "ablations"]


def table_files(table: str) -> list[str]:
    """The table and its statistics."""
    return [TABLE.format(table=table), TABLE_STATS.format(table=table)]


# ------------------------------------------------------------------------------ what the config says


def table_levels(config: Config, dataset: str) -> list[str]:
    """Levels a results table averages over: the test levels the models were trained on (the paper's tables report
    in-distribution planes; unseen planes go to the defocus table), else every test level."""
    ds = config["datasets"][dataset]
    seen = [lvl for lvl in ds["test_levels"] if lvl in ds["train_levels"]]
    return seen or list(ds["test_levels"])


def experiment_datasets(config: Config, name: str) -> list[str]:
    """The dataset(s) of one configured experiment (``datasets`` or a single ``dataset``)."""
    spec = config["experiments"][name]
    return list(spec.get("datasets", [spec.get("dataset")]))


def experiment_seeds(config: Config, name: str) -> list[int]:
    """Replicates of one experiment: [0, 1, …, seeds − 1] ([0] without `seeds`, or for an unseeded experiment)."""
    spec = config["experiments"].get(name, {})
    seeded = any(e.name == name and e.seeded for e in EXPERIMENTS)
    return list(range(int(spec.get("seeds", 1)))) if seeded else [0]


def figure_files(config: Config, name: str) -> list[str]:
    """The figures a configured experiment's section shows, one per dataset where the figure is per dataset."""
    datasets = experiment_datasets(config, name)
    return [f for key in experiment(name).figures for f in FIGURES[key].files(datasets)]


def other_files(config: Config, name: str) -> list[str]:
    """The other results files a configured experiment's section reads (``Experiment.files``)."""
    datasets = experiment_datasets(config, name)
    return [p.format(dataset=d) if "{dataset}" in p else p for p in experiment(name).files for d in (datasets if "{dataset}" in p else [None])]


def table_caption(config: Config, table: str) -> str:
    """The Snakemake report's caption of one results table, its placeholders filled from the config."""
    entry = by_table(table)
    if entry.table is None:  # an ablation grid
        return (
            f"{entry.title}: evaluation summaries of every grid point, one row per method (named "
            "<variant>/<setting>=<value>/...) and blur level."
        )
    datasets = experiment_datasets(config, entry.name)
    trained = [config["datasets"][d].get("trained_on", d) for d in datasets]
    return entry.table.caption.format(datasets=", ".join(datasets), trained_on=", ".join(dict.fromkeys(trained)))


def table_category(table: str) -> str:
    entry = by_table(table)
    return entry.table.category if entry.table is not None else "Ablations"


def slide_files(slide: str) -> list[str]:
    """Every file the workflow keeps of one slide's restoration (:data:`SLIDE_FILES` and the slide figures)."""
    figures = [f.path for f in FIGURES.values() if f.per_slide]
    return [p.format(slide=slide) for p in (*SLIDE_FILES.values(), *figures)]


def figure_caption(key: str, dataset: str | None = None) -> str:
    figure = FIGURES[key]
    return figure.caption.format(dataset=dataset) if figure.per_dataset else figure.caption


__all__ = [
    "DATASET_FIGURES", "EXPERIMENTS", "FIGURES", "SLIDE_FILES", "TABLE", "TABLE_LOG", "TABLE_STATS", "Experiment", "Figure", "Table",
    "by_table", "configured", "experiment", "experiment_datasets", "experiment_seeds", "figure_caption", "figure_files",
    "names", "other_files", "slide_files", "table_caption", "table_category", "table_files", "table_levels", "tables",
]  # fmt: skip
