"""How many files a change touches: each test makes one change a user makes — a baseline, a dataset, a
paired-set source, a report figure — in a copy of the repository's code, file by file, counts the files it
edited, and checks that the change took effect (the config validates, the network builds, Snakemake's dry
run plans the added jobs, the report lists the added figure). The metric set's one-edit path is
tests/test_metric_spec.py. The counts are the project's promise in docs/extending.md."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, SNAKEMAKE, patient

COPIED = ("src", "workflow", "Snakefile", "config", "profiles", "envs", "tests/smoke.yaml")


class Checkout:
    """A copy of the repository's code in which a change is made one file at a time."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.touched: set[str] = set()
        for rel in COPIED:
            src, dst = ROOT / rel, root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                shutil.copy2(src, dst)

    def edit(self, rel: str, old: str, replacement: str) -> None:
        """Replace the one occurrence of ``old`` in file ``rel``."""
        path = self.root / rel
        text = path.read_text()
        assert text.count(old) == 1, f"{rel}: {old!r} occurs {text.count(old)} times"
        path.write_text(text.replace(old, replacement))
        self.touched.add(rel)

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.touched.add(rel)

    def python(self, code: str) -> str:
        env = {**os.environ, "PYTHONPATH": str(self.root / "src"), "OMP_NUM_THREADS": "1"}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=patient(300), env=env, cwd=self.root)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return proc.stdout

    def dry_run(self, configfile: str, *targets: str) -> str:
        """Snakemake's dry run of the copy's workflow; returns its plan (stdout)."""
        workdir = self.root / "run"
        workdir.mkdir(exist_ok=True)
        cmd = [SNAKEMAKE, "-n", *targets, "--snakefile", str(self.root / "Snakefile"), "--directory", str(workdir), "--configfile", str(self.root / configfile)]
        env = {**os.environ, "PYTHONPATH": str(self.root / "src")}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=patient(300), env=env, cwd=self.root)
        assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
        return proc.stdout

    def occurrences(self, text: str) -> list[str]:
        """Files of the copy (code, rules, configs) that contain ``text``."""
        return [
            str(p.relative_to(self.root))
            for p in self.root.rglob("*")
            if p.is_file() and p.suffix in (".py", ".smk", ".yaml", ".rst", "") and "run" not in p.relative_to(self.root).parts[:1]
            and text in p.read_text(errors="ignore")
        ]


@pytest.fixture
def checkout(tmp_path) -> Checkout:
    return Checkout(tmp_path / "repo")


def _smoke(checkout: Checkout) -> dict:
    return yaml.safe_load((checkout.root / "tests" / "smoke.yaml").read_text())


def _write_config(checkout: Checkout, config: dict, rel: str = "config/mine.yaml") -> str:
    checkout.write(rel, yaml.safe_dump(config, sort_keys=False))
    return rel


TINY_NET = '''"""TinyNet: one 3x3 convolution, a baseline as small as a registry network can be."""

from torch import nn


class TinyNet(nn.Module):
    def __init__(self, *, in_channels: int = 1, width: int = 4) -> None:
        super().__init__()
        self.hparams = {"in_channels": in_channels, "width": width}
        self.body = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.GELU(), nn.Conv2d(width, in_channels, 3, padding=1))

    def forward(self, x):
        return [x + self.body(x)]
'''


@pytest.mark.slow  # copies the checkout and plans the workflow: make test
def test_a_baseline_is_its_network_file_one_registry_entry_and_a_config_entry(checkout):
    checkout.write("src/dgno/models/tinynet.py", TINY_NET)
    checkout.edit(
        "src/dgno/models/registry.py",
        "BASELINES: dict[str, Entry] = {\n",
        'BASELINES: dict[str, Entry] = {\n    "tinynet": Entry("dgno.models.tinynet:TinyNet", {"paper": {"width": 32}, "demo": {"width": 8}, "smoke": {"width": 4}}),\n',
    )
    config = _smoke(checkout)
    config["methods"]["tinynet"] = {"model": "tinynet", "label": "TinyNet"}
    config["experiments"]["operators"]["methods"].append("tinynet")
    rel = _write_config(checkout, config)
    assert len(checkout.touched) <= 3, sorted(checkout.touched)
    out = checkout.python(
        "import torch; from dgno.models.registry import build_model, list_models; from dgno.workflow.config import load_config\n"
        f"load_config({rel!r})\n"
        "model = build_model('tinynet', scale='smoke')\n"
        "print('tinynet' in list_models(), model(torch.rand(1, 1, 16, 16))[-1].shape, model.hparams['width'])\n"
    )
    assert out.split() == ["True", "torch.Size([1,", "1,", "16,", "16])", "4"]
    plan = checkout.dry_run(rel, "operators")
    assert "results/train/nuclei/tinynet/model.pt" in plan and "results/eval/nuclei/tinynet/z02/summary.json" in plan


def test_a_dataset_of_an_existing_source_is_config_only(checkout):
    config = _smoke(checkout)
    config["datasets"]["shapes_wide"] = {**config["datasets"]["shapes_narrow"], "levels": {"sigma": [0.5, 2.5]}}
    config["datasets"]["shapes_wide"].pop("paper_column")
    config["experiments"]["synthetic"]["datasets"].append("shapes_wide")
    rel = _write_config(checkout, config)
    assert checkout.touched == {rel}
    plan = checkout.dry_run(rel, "synthetic")
    for path in ("results/data/shapes_wide/split.csv", "results/eval/shapes_wide/dgno-cell/sigma/summary.json", "results/figures/visual_shapes_wide.png"):
        assert path in plan, path


def test_a_paired_set_source_is_its_layout_the_schemas_enum_and_a_config(checkout):
    layout = '''    "labpairs": PairedLayout(
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
    checkout.edit("src/dgno/data/paired_sets.py", 'Source = Literal["3dhistech", "dpdd", "realdof"]', 'Source = Literal["3dhistech", "dpdd", "realdof", "labpairs"]')
    checkout.edit("src/dgno/data/paired_sets.py", '    "realdof": {"": "test"},\n}', '    "realdof": {"": "test"},\n    "labpairs": {"": "test"},\n}')
    checkout.edit("src/dgno/data/paired_sets.py", "LAYOUTS: dict[str, PairedLayout] = {\n", "LAYOUTS: dict[str, PairedLayout] = {\n" + layout)
    checkout.edit(
        "workflow/schemas/config.schema.yaml",
        "enum: [demo_nuclei, synthetic_shapes, seidel, sigma_map, bbbc006, 3dhistech, dpdd, realdof]",
        "enum: [demo_nuclei, synthetic_shapes, seidel, sigma_map, bbbc006, 3dhistech, dpdd, realdof, labpairs]",
    )
    config = _smoke(checkout)
    config["datasets"]["lab"] = {"source": "labpairs", "trained_on": "nuclei", "train_levels": ["real"], "test_levels": ["real"]}
    config["experiments"]["dpdd"] = {"dataset": "lab", "methods": ["gg", "dgno-cell"]}
    rel = _write_config(checkout, config)
    assert len(checkout.touched) <= 4, sorted(checkout.touched)
    out = checkout.python("from dgno.data.check import NAMES; from dgno.workflow.config import load_config, PAIRED_SOURCES\n"
                          f"load_config({rel!r}); print('labpairs' in NAMES, 'labpairs' in PAIRED_SOURCES)")  # fmt: skip
    assert out.split() == ["True", "True"]
    plan = checkout.dry_run(rel, "results/tables/dpdd.csv")
    assert "results/data/lab/manifest.json" in plan and "results/eval/lab/dgno-cell/real/summary.json" in plan


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


@pytest.mark.slow  # copies the checkout and plans the workflow: make test
def test_a_report_figure_is_its_script_its_rule_and_its_catalogue_entry_with_its_path_written_once(checkout):
    path = "results/figures/histogram_{dataset}.png"
    checkout.write("workflow/scripts/figure_histogram.py", HISTOGRAM_SCRIPT)
    rules = (checkout.root / "workflow/rules/report.smk").read_text()
    checkout.edit("workflow/rules/report.smk", rules[-200:], rules[-200:] + HISTOGRAM_RULE)
    checkout.edit(
        "src/dgno/experiments/catalogue.py",
        "FIGURES: dict[str, Figure] = {\n",
        f'FIGURES: dict[str, Figure] = {{\n    "histogram": Figure("{path}", "Per-image PSNR on {{dataset}}", "Histogram of per-image PSNR.", "Visual comparisons"),\n',
    )
    checkout.edit("src/dgno/experiments/catalogue.py", 'figures=("visual", "error_difference", "edge_band", "training_curves"), seeded=True', 'figures=("visual", "error_difference", "edge_band", "training_curves", "histogram"), seeded=True')
    assert len(checkout.touched) <= 3, sorted(checkout.touched)
    assert checkout.occurrences(path) == ["src/dgno/experiments/catalogue.py"]
    plan = checkout.dry_run("tests/smoke.yaml", "report/index.html")
    assert re.search(r"rule figure_histogram:\n(.*\n)*?\s+output: results/figures/histogram_nuclei.png", plan)
    out = checkout.python(
        "from pathlib import Path; from dgno.report.section import experiment_figures; from dgno.workflow.config import load_config\n"
        "print([f.title for f in experiment_figures(Path('nowhere'), load_config('tests/smoke.yaml'), 'operators')][-1])"
    )
    assert out.strip() == "Per-image PSNR on nuclei"


SECTION = """

def sharpness_section(name: str, config: dict, summaries, results=None):
    \"\"\"A throwaway experiment's section: its title and its metric table.\"\"\"
    exp = config["experiments"][name]
    sec = experiment_section(name)
    sec.tables.append(
        metric_table(summaries, datasets=[exp["dataset"]], methods=exp["methods"], method_cfgs=config["methods"],
                     levels={exp["dataset"]: table_levels(config, exp["dataset"])}, metrics=table_metrics(name), paper_rows=None)
    )
    return sec
"""


def test_an_experiment_is_its_schema_keys_its_catalogue_entry_and_its_section(checkout):
    checkout.edit(
        "workflow/schemas/config.schema.yaml",
        "    description: Which experiments of the paper's catalogue this run performs\n    properties:\n",
        "    description: Which experiments of the paper's catalogue this run performs\n    properties:\n"
        "      sharpness:\n        type: object\n        additionalProperties: false\n        required: [dataset, methods]\n"
        "        properties:\n          seeds: {$ref: \"#/$defs/seeds\"}\n          dataset: {type: string}\n"
        "          methods: {type: array, items: {type: string}, minItems: 1}\n",
    )
    checkout.edit(
        "src/dgno/experiments/catalogue.py",
        "EXPERIMENTS: tuple[Experiment, ...] = (\n",
        "EXPERIMENTS: tuple[Experiment, ...] = (\n"
        '    Experiment("sharpness", None, "Sharpness check", "dgno.report.results:sharpness_section", seeded=True,\n'
        '               table=Table("Sharpness check on {datasets}.", "Main results", versus=("gg",)), figures=("visual",)),\n',
    )
    results = (checkout.root / "src/dgno/report/results.py").read_text()
    checkout.edit("src/dgno/report/results.py", results[-300:], results[-300:] + SECTION)
    config = _smoke(checkout)
    config["experiments"]["sharpness"] = {"dataset": "nuclei", "methods": ["gg", "dgno-cell"], "seeds": 2}
    rel = _write_config(checkout, config)
    assert len(checkout.touched) <= 4, sorted(checkout.touched)  # the three, and the config that runs it
    plan = checkout.dry_run(rel, "sharpness")
    for path in ("results/tables/sharpness.csv", "results/eval/nuclei/dgno-cell/seed=1/z02/summary.json", "results/figures/visual_nuclei.png"):
        assert path in plan, path
    out = checkout.python(
        "import pandas as pd; from pathlib import Path; from dgno.report.build import experiment_section; from dgno.experiments import catalogue\n"
        f"from dgno.workflow.config import load_config; cfg = load_config({rel!r})\n"
        "sec = experiment_section(catalogue.experiment('sharpness'), cfg, pd.DataFrame(columns=['dataset', 'method', 'level', 'replicate']), Path('nowhere'))\n"
        "print(sec.title, '|', sec.tables[0].rows[1][1][0].command, '|', sec.figures[0].title, '|', catalogue.table_caption(cfg, 'sharpness'))"
    )
    assert out.strip() == (
        "Sharpness check | snakemake --cores all results/eval/nuclei/gg/z02/summary.json | Visual comparison on nuclei | Sharpness check on nuclei."
    )
