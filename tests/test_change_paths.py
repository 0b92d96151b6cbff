"""The change paths of docs/extending.md, walked as a newcomer walks them: in a copy of the repository, each
documented change (a baseline, a dataset, a paired source, a metric, a report figure, an experiment) is made
file by file as the docs say, and then what it affects is run: the files it edited are counted against the
docs' promise, Snakemake plans the jobs it adds, and the copy's own fast tests that touch the concept pass
with the change in place (a list that a change extends, such as the baselines the any-size tests cover,
picks it up by itself).

All six changes are made in one copy and the fast tests run once over it (a few minutes on 2 cores, so the
module is marked slow: `make test`); each test below checks its own change's share.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, SNAKEMAKE, patient

pytestmark = pytest.mark.slow  # copies the checkout, plans the workflow and runs fast tests there: make test

COPIED = ("src", "workflow", "Snakefile", "config.yaml", "config", "profiles", "envs", "tests", "benchmarks", "pyproject.toml")
FAST = "not e2e and not slow and not slurm and not rehearsal and not cluster and not long"  # make test-fast's selection
# The fast tests that touch each concept: they read its declaration, its config or its outputs.
AFFECTED = {
    "baseline": ("tests/test_baselines.py", "tests/test_architecture.py"),
    "dataset": ("tests/test_catalogue.py",),
    "paired source": ("tests/test_paired_sets.py", "tests/test_data_check.py", "tests/test_schema_constants.py", "tests/test_architecture.py"),
    "metric": ("tests/test_metric_spec.py", "tests/test_metrics.py"),
    "figure": ("tests/test_catalogue.py", "tests/test_profiles.py", "tests/test_architecture.py"),
    "experiment": ("tests/test_catalogue.py", "tests/test_schema_constants.py"),
}


@dataclass
class Checkout:
    """A copy of the repository in which changes are made one file at a time, each edit filed under a change."""

    root: Path
    touched: dict[str, set[str]] = field(default_factory=dict)
    change: str = ""

    @classmethod
    def copy_of(cls, root: Path) -> Checkout:
        for rel in COPIED:
            src, dst = ROOT / rel, root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache", "results"))
            else:
                shutil.copy2(src, dst)
        return cls(root)

    def _touch(self, rel: str) -> None:
        self.touched.setdefault(self.change, set()).add(rel)

    def edit(self, rel: str, old: str, replacement: str) -> None:
        """Replace the one occurrence of ``old`` in file ``rel``."""
        path = self.root / rel
        text = path.read_text()
        assert text.count(old) == 1, f"{rel}: {old!r} occurs {text.count(old)} times"
        path.write_text(text.replace(old, replacement))
        self._touch(rel)

    def append(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.write_text(path.read_text() + text)
        self._touch(rel)

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self._touch(rel)

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.root / "src"), "OMP_NUM_THREADS": "1"}

    def python(self, code: str) -> str:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=patient(300), env=self.env(), cwd=self.root)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return proc.stdout

    def dry_run(self, configfile: str, *targets: str) -> str:
        """Snakemake's dry run of the copy's workflow; returns its plan (stdout)."""
        workdir = self.root / "run"
        workdir.mkdir(exist_ok=True)
        cmd = [SNAKEMAKE, "-n", *targets, "--snakefile", str(self.root / "Snakefile"), "--directory", str(workdir), "--configfile", str(self.root / configfile)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=patient(300), env=self.env(), cwd=self.root)
        assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
        return proc.stdout

    def fast_tests(self, files: list[str]) -> dict[str, dict[str, str]]:
        """The copy's fast tests in ``files``, run there: {file: {test name: "passed" / "failed" / "skipped"}}."""
        report = self.root / "fast.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", FAST, f"--junitxml={report}", *files]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=patient(1200), env=self.env(), cwd=self.root)
        assert report.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
        outcomes: dict[str, dict[str, str]] = {}
        for case in ET.parse(report).getroot().iter("testcase"):
            rel = "tests/" + case.get("classname", "").split(".")[-1] + ".py"
            kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
            outcomes.setdefault(rel, {})[case.get("name", "")] = {"error": "failed", "failure": "failed"}.get(kind, kind)
        outcomes["_output"] = {"tail": proc.stdout[-6000:]}
        return outcomes

    def occurrences(self, text: str) -> list[str]:
        """Files of the copy's code, rules and configs (not its tests) that contain ``text``."""
        return sorted(
            str(p.relative_to(self.root))
            for top in ("src", "workflow", "Snakefile", "config.yaml", "config")
            for p in ([self.root / top] if (self.root / top).is_file() else (self.root / top).rglob("*"))
            if p.is_file() and p.suffix in (".py", ".smk", ".yaml", ".rst", "") and text in p.read_text(errors="ignore")
        )


# ----------------------------------------------------------------------------------- the changes, as documented

TINY_NET = '''"""TinyNet: one 3x3 convolution each way, a baseline as small as a registry network can be."""

from torch import nn


class TinyNet(nn.Module):
    def __init__(self, *, in_channels: int = 1, width: int = 4) -> None:
        super().__init__()
        self.hparams = {"in_channels": in_channels, "width": width}
        self.body = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.GELU(), nn.Conv2d(width, in_channels, 3, padding=1))

    def forward(self, x):
        return [x + self.body(x)]
'''


def add_baseline(c: Checkout) -> None:
    c.write("src/dgno/models/tinynet.py", TINY_NET)
    c.edit(
        "src/dgno/models/registry.py",
        "BASELINES: dict[str, Entry] = {\n",
        'BASELINES: dict[str, Entry] = {\n    "tinynet": Entry("dgno.models.tinynet:TinyNet", {"paper": {"width": 32}, "demo": {"width": 8}, "smoke": {"width": 4}}),\n',
    )
    c.edit("config.yaml", "\nmethods:\n", "\nmethods:\n  tinynet: {model: tinynet, label: TinyNet}\n")
    c.edit("config.yaml", "    methods: [gg, lg, dgno-face, dgno-cell]\n    seeds: 2", "    methods: [gg, lg, dgno-face, dgno-cell, tinynet]\n    seeds: 2")


def add_dataset(c: Checkout) -> None:
    """A third set of shapes, with scenes of its own (its own seed) and a narrower blur range."""
    dataset = """  shapes_tall:
    source: synthetic_shapes
    seed: 7
    size: [96, 96]
    n_train: 8
    n_val: 2
    n_test: 4
    correlation_length: 24
    levels:
      sigma: [1.0, 1.5]
    train_levels: [sigma]
    test_levels: [sigma]
"""
    c.edit("config.yaml", "\ndatasets:\n", "\ndatasets:\n" + dataset)
    c.edit("config.yaml", "datasets: [shapes_narrow, shapes_wide]", "datasets: [shapes_narrow, shapes_wide, shapes_tall]")


LAYOUT = '''    "labpairs": PairedLayout(
        name="labpairs",
        title="A lab's own (blurred, sharp) pairs",
        counts={"": 10},
        blur_names=("blur",),
        sharp_names=("sharp",),
        shape=None,
        url=None,
        url_note="placed by hand",
        page="https://example.org/labpairs",
        citation="the lab's own data",
    ),
'''


def add_paired_source(c: Checkout) -> None:
    c.edit("src/dgno/data/paired_sets.py", 'Source = Literal["3dhistech", "dpdd", "realdof"]', 'Source = Literal["3dhistech", "dpdd", "realdof", "labpairs"]')
    c.edit("src/dgno/data/paired_sets.py", '    "realdof": {"": "test"},\n}', '    "realdof": {"": "test"},\n    "labpairs": {"": "test"},\n}')
    c.edit("src/dgno/data/paired_sets.py", "LAYOUTS: dict[str, PairedLayout] = {\n", "LAYOUTS: dict[str, PairedLayout] = {\n" + LAYOUT)
    c.edit(
        "workflow/schemas/config.schema.yaml",
        "enum: [demo_nuclei, synthetic_shapes, seidel, sigma_map, bbbc006, 3dhistech, dpdd, realdof]",
        "enum: [demo_nuclei, synthetic_shapes, seidel, sigma_map, bbbc006, 3dhistech, dpdd, realdof, labpairs]",
    )
    config = yaml.safe_load((c.root / "tests" / "smoke.yaml").read_text())  # its data are placed by hand: a config of its own
    config["datasets"]["lab"] = {"source": "labpairs", "trained_on": "nuclei", "train_levels": ["real"], "test_levels": ["real"]}
    config["experiments"]["dpdd"] = {"dataset": "lab", "methods": ["gg", "dgno-cell"]}
    c.write("config/lab.yaml", yaml.safe_dump(config, sort_keys=False))


METRIC = '''

def mean_absolute_error(pred, gt) -> float:
    """Mean |pred - gt| over the image, the prediction clipped to [0, 1] as every metric clips it."""
    import numpy as np

    return float(np.mean(np.abs(np.clip(pred, 0, 1) - gt)))


# Table order: the columns'''


def add_metric(c: Checkout) -> None:
    """The docs' example: mean absolute error, its function written beside its entry."""
    c.edit("src/dgno/metric_spec.py", "\n\n# Table order: the columns", METRIC)
    c.edit("src/dgno/metric_spec.py", '    Metric("ssim", "dgno.metrics:ssim", "higher", 3, "SSIM"),\n',
           '    Metric("ssim", "dgno.metrics:ssim", "higher", 3, "SSIM"),\n    Metric("mae", mean_absolute_error, "lower", 4, "MAE"),\n')  # fmt: skip


HISTOGRAM_PATH = "results/figures/histogram_{dataset}.png"
HISTOGRAM_SCRIPT = '''"""Rule figure_histogram: the histogram of every method's per-image PSNR on one dataset."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

sm = snakemake  # noqa: F821
fig, ax = plt.subplots()
for path in sm.input.summaries:
    ax.hist(pd.read_csv(path.replace("summary.json", "per_image.csv"))["psnr"], alpha=0.5)
fig.savefig(sm.output[0])
'''
HISTOGRAM_RULE = """

rule figure_histogram:
    input:
        summaries=lambda wc: summaries(wc.dataset, experiment_methods(wc.dataset), table_levels(wc.dataset)),
    output:
        figure_output("histogram"),
    log:
        "results/logs/figures/histogram_{dataset}.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_histogram")
    resources:
        **resources_for("figure_histogram"),
    params:
        caption=figure_caption("histogram"),
    script:
        "../scripts/figure_histogram.py"
"""


def add_figure(c: Checkout) -> None:
    c.write("workflow/scripts/figure_histogram.py", HISTOGRAM_SCRIPT)
    c.append("workflow/rules/report.smk", HISTOGRAM_RULE)
    c.edit(
        "src/dgno/experiments/catalogue.py",
        "FIGURES: dict[str, Figure] = {\n",
        f'FIGURES: dict[str, Figure] = {{\n    "histogram": Figure("{HISTOGRAM_PATH}", "Per-image PSNR on {{dataset}}", "Histogram of per-image PSNR.", "Visual comparisons"),\n',
    )
    c.edit("src/dgno/experiments/catalogue.py", 'figures=("visual", "error_difference", "edge_band", "training_curves"), seeded=True',
           'figures=("visual", "error_difference", "edge_band", "training_curves", "histogram"), seeded=True')  # fmt: skip


SECTION = """

def sharpness_section(name: str, config: dict, summaries, results=None):
    \"\"\"A newcomer's experiment's section: its title and its metric table.\"\"\"
    exp = config["experiments"][name]
    sec = empty_section(name)
    sec.tables.append(
        metric_table(summaries, datasets=[exp["dataset"]], methods=exp["methods"], method_cfgs=config["methods"],
                     levels={exp["dataset"]: table_levels(config, exp["dataset"])}, metrics=table_metrics(name), paper_rows=None)
    )
    return sec
"""


def add_experiment(c: Checkout) -> None:
    c.edit(
        "workflow/schemas/config.schema.yaml",
        "    description: Which experiments of the paper's catalogue this run performs\n    properties:\n",
        "    description: Which experiments of the paper's catalogue this run performs\n    properties:\n"
        "      sharpness:\n        type: object\n        additionalProperties: false\n        required: [dataset, methods]\n"
        "        properties:\n          seeds: {$ref: \"#/$defs/seeds\"}\n          dataset: {type: string}\n"
        "          methods: {type: array, items: {type: string}, minItems: 1}\n",
    )
    c.edit(
        "src/dgno/experiments/catalogue.py",
        "EXPERIMENTS: tuple[Experiment, ...] = (\n",
        "EXPERIMENTS: tuple[Experiment, ...] = (\n"
        '    Experiment("sharpness", None, "Sharpness check", "dgno.report.results:sharpness_section", seeded=True,\n'
        '               table=Table("Sharpness check: PSNR, SSIM and LPIPS of each method on {datasets}.", "Main results", versus=("gg",)), figures=("visual",)),\n',
    )
    c.append("src/dgno/report/results.py", SECTION)
    c.edit("config.yaml", "\nexperiments:\n", "\nexperiments:\n  sharpness:\n    dataset: nuclei\n    methods: [gg, dgno-cell]\n    seeds: 2\n")


CHANGES = {"baseline": add_baseline, "dataset": add_dataset, "paired source": add_paired_source, "metric": add_metric, "figure": add_figure, "experiment": add_experiment}


@dataclass
class Changed:
    checkout: Checkout
    plan: str  # the dry run of the demo config with the changes, for their targets
    lab_plan: str  # the dry run of the paired source's config
    tests: dict[str, dict[str, str]]  # the copy's fast tests: file -> test -> outcome


@pytest.fixture(scope="module")
def changed(tmp_path_factory) -> Changed:
    c = Checkout.copy_of(tmp_path_factory.mktemp("newcomer") / "repo")
    for name, make in CHANGES.items():
        c.change = name
        make(c)
    plan = c.dry_run("config.yaml", "operators", "synthetic", "sharpness")
    lab_plan = c.dry_run("config/lab.yaml", "results/tables/dpdd.csv")
    files = sorted({f for fs in AFFECTED.values() for f in fs})
    return Changed(c, plan, lab_plan, c.fast_tests(files))


def _fast_tests_pass(changed: Changed, change: str) -> None:
    for rel in AFFECTED[change]:
        outcomes = changed.tests.get(rel, {})
        failed = sorted(name for name, outcome in outcomes.items() if outcome == "failed")
        assert outcomes and not failed, f"{change}: {rel} with the change: failed {failed}\n{changed.tests['_output']['tail']}"


def test_the_docs_promise_the_counts_these_changes_touch():
    """docs/extending.md's table is the promise each test below holds the copy to."""
    text = (ROOT / "docs" / "extending.md").read_text()
    for row, count in [("a baseline network", 3), ("a dataset of an existing source", 1), ("a paired (blurred, sharp) source", 3),
                       ("a report figure", 3), ("a metric", 1), ("an experiment", 3)]:  # fmt: skip
        assert re.search(rf"^\| {re.escape(row)} \| {count}\b", text, re.M), row


def test_a_baseline_is_its_network_file_one_registry_entry_and_a_config_entry(changed):
    c = changed.checkout
    assert c.touched["baseline"] == {"src/dgno/models/tinynet.py", "src/dgno/models/registry.py", "config.yaml"}
    assert "results/train/nuclei/tinynet/model.pt" in changed.plan and "results/eval/nuclei/tinynet/z02/summary.json" in changed.plan
    _fast_tests_pass(changed, "baseline")
    ran = changed.tests["tests/test_baselines.py"]  # the registry's list: the new network's own any-size, gradient and rebuild tests
    for test in ("test_any_size_forward[tinynet]", "test_gradients_reach_every_parameter[tinynet]", "test_hparams_rebuild_identical_outputs[tinynet]"):
        assert ran.get(test) == "passed", test


def test_a_dataset_of_an_existing_source_is_config_only_with_scenes_of_its_own(changed):
    c = changed.checkout
    assert c.touched["dataset"] == {"config.yaml"}
    for path in ("results/data/shapes_tall/split.csv", "results/eval/shapes_tall/dgno-cell/sigma/summary.json", "results/figures/visual_shapes_tall.png"):
        assert path in changed.plan, path
    out = c.python("from dgno.workflow import plan; from dgno.workflow.config import load_config; cfg = load_config('config.yaml')\n"
                   "print(plan.dataset_seed(cfg, 'shapes_tall'), plan.dataset_seed(cfg, 'shapes_narrow'), cfg['seed'])")  # fmt: skip
    assert out.split() == ["7", "0", "0"]  # its own seed; the others keep the run's
    _fast_tests_pass(changed, "dataset")


def test_a_paired_set_source_is_its_layout_the_schemas_enum_and_a_config(changed):
    c = changed.checkout
    assert c.touched["paired source"] == {"src/dgno/data/paired_sets.py", "workflow/schemas/config.schema.yaml", "config/lab.yaml"}
    out = c.python("from dgno.data.check import NAMES; from dgno.workflow.config import load_config, PAIRED_SOURCES\n"
                   "load_config('config/lab.yaml'); print('labpairs' in NAMES, 'labpairs' in PAIRED_SOURCES)")  # fmt: skip
    assert out.split() == ["True", "True"]
    assert "results/data/lab/manifest.json" in changed.lab_plan and "results/eval/lab/dgno-cell/real/summary.json" in changed.lab_plan
    _fast_tests_pass(changed, "paired source")


def test_a_metric_is_one_entry_with_its_function_beside_it(changed):
    c = changed.checkout
    assert c.touched["metric"] == {"src/dgno/metric_spec.py"}
    out = c.python(
        "import numpy as np; from dgno import metric_spec\n"
        "m = metric_spec.metric('mae'); gt = np.full((8, 8), 0.5)\n"
        "print(m.compute()(gt + 0.25, gt), metric_spec.label('mae'), metric_spec.digits('mae'), 'mae' in metric_spec.summary_columns())"
    )
    assert out.split() == ["0.25", "MAE", "↓", "4", "True"]
    _fast_tests_pass(changed, "metric")


def test_a_report_figure_is_its_script_its_rule_and_its_catalogue_entry_with_its_path_written_once(changed):
    c = changed.checkout
    assert c.touched["figure"] == {"workflow/scripts/figure_histogram.py", "workflow/rules/report.smk", "src/dgno/experiments/catalogue.py"}
    assert c.occurrences(HISTOGRAM_PATH) == ["src/dgno/experiments/catalogue.py"]
    assert re.search(r"rule figure_histogram:\n(.*\n)*?\s+output: results/figures/histogram_nuclei.png", changed.plan)
    out = c.python(
        "from pathlib import Path; from dgno.report.section import experiment_figures; from dgno.workflow.config import load_config\n"
        "print([f.title for f in experiment_figures(Path('nowhere'), load_config('config.yaml'), 'operators')][-1])"
    )
    assert out.strip() == "Per-image PSNR on nuclei"
    _fast_tests_pass(changed, "figure")  # test_profiles: the figure_ rule is a local rule without a line in resources.py


def test_an_experiment_is_its_schema_keys_its_catalogue_entry_and_its_section(changed):
    c = changed.checkout
    assert c.touched["experiment"] == {"workflow/schemas/config.schema.yaml", "src/dgno/experiments/catalogue.py", "src/dgno/report/results.py", "config.yaml"}
    for path in ("results/tables/sharpness.csv", "results/eval/nuclei/dgno-cell/seed=1/z02/summary.json", "results/figures/visual_nuclei.png"):
        assert path in changed.plan, path
    out = c.python(
        "import pandas as pd; from pathlib import Path; from dgno.report.build import experiment_section; from dgno.experiments import catalogue\n"
        "from dgno.workflow.config import load_config; cfg = load_config('config.yaml')\n"
        "sec = experiment_section(catalogue.experiment('sharpness'), cfg, pd.DataFrame(columns=['dataset', 'method', 'level', 'replicate']), Path('nowhere'))\n"
        "print(sec.title, '|', sec.tables[0].rows[1][1][0].command, '|', sec.figures[0].title, '|', catalogue.table_caption(cfg, 'sharpness'))"
    )
    assert out.strip() == (
        "Sharpness check | snakemake --cores all results/eval/nuclei/gg/z02/summary.json | Visual comparison on nuclei | Sharpness check: PSNR, SSIM and LPIPS of each method on nuclei."
    )
    _fast_tests_pass(changed, "experiment")
