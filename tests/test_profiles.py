"""The SLURM profiles name real rules, give GPUs only to GPU work, and keep downloads on the head node."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, SNAKEMAKE, patient

from dgno.experiments import catalogue
from dgno.workflow import resources

PROFILES = ["slurm", "slurm-test", "local"]
GPU_RULES = set(resources.gpu_rules())
EXPERIMENT_TARGETS = {e.name for e in catalogue.EXPERIMENTS}  # one aggregate rule per configured experiment (report.smk)


def _rules(configfile: str) -> set[str]:
    proc = subprocess.run(
        [SNAKEMAKE, "--list-rules", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(ROOT), "--configfile", configfile],
        capture_output=True,
        text=True,
        timeout=patient(120),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.strip() for line in proc.stdout.splitlines() if re.fullmatch(r"\s*[a-z_][a-z0-9_]*\s*", line)}


@pytest.fixture(scope="module")
def rule_names() -> set[str]:
    """Every rule of the demo (StarDist trained here) and the paper config (StarDist pretrained)."""
    return _rules(str(ROOT / "config.yaml")) | _rules(str(ROOT / "config" / "paper.yaml"))


def _profile(name: str) -> dict:
    path = ROOT / "profiles" / name / "config.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else {}


@pytest.mark.slow
@pytest.mark.parametrize("name", PROFILES)
def test_set_resources_name_real_rules(name, rule_names):
    assert {"train", "evaluate", "train_stardist", "stardist_pretrained", "authors_checkpoint"} <= rule_names
    unknown = sorted(set(_profile(name).get("set-resources", {})) - rule_names)
    assert not unknown, f"profiles/{name}: set-resources for rules that do not exist: {unknown}"


def rule_blocks() -> dict[str, str]:
    """The text of every rule of workflow/rules/*.smk, by name (a rule ends where the next begins). A rule
    derived with `use rule X as Y with:` gets X's text (what it inherits) followed by its own overrides."""
    blocks, derived = {}, {}
    for path in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        parts = re.split(r"^\s*(?:rule (\w+)|use rule (\w+ as \w+) with):\n", path.read_text(), flags=re.M)
        for plain, use, text in zip(parts[1::3], parts[2::3], parts[3::3]):
            if plain:
                blocks[plain] = text
            else:
                parent, child = use.split(" as ")
                derived[child] = (parent, text)
    for child, (parent, text) in derived.items():
        blocks[child] = blocks[parent] + text
    return blocks


@pytest.mark.slow
def test_every_rule_declares_threads_memory_runtime_and_gpu_from_the_table(rule_names):
    blocks = rule_blocks()
    assert set(blocks) == rule_names - {"all"} - EXPERIMENT_TARGETS
    runs = {name for name, text in blocks.items() if re.search(r"^\s+(script|shell|run):", text, re.M)}
    assert runs == set(resources.PAPER), "src/dgno/workflow/resources.py must list exactly the rules that run something"
    for name in runs:
        text = blocks[name]
        for line in (f'threads: threads_for("{name}")', f'**resources_for("{name}")'):
            assert line in text, f"rule {name}: missing `{line}`"
        for other in ("mem_mb=", "runtime=", "gpu=", "slurm_partition"):
            assert other not in text, f"rule {name}: `{other}` — memory, wall time and GPUs come from the table, partitions from the profile"


def test_a_rules_resources_hold_a_gpu_only_for_gpu_work():
    train = resources.rule_resources("train", "paper", "cuda")
    assert train["gpu"] == 1 and train["mem_mb"](None, 2) == 2 * resources.request("train", "paper").mem_mb
    assert resources.rule_resources("train", "demo", "cpu")["gpu"] == 0
    assert "gpu" not in resources.rule_resources("table", "paper", "cuda")


def test_resources_scale_with_the_config_and_the_retry():
    train = resources.request("train", "paper")
    assert resources.mem_mb("train", "paper")(None, 2) == 2 * train.mem_mb
    assert resources.runtime("train", "paper")(None, 3) == 3 * train.runtime_min
    assert resources.request("train", "demo").mem_mb < train.mem_mb and resources.threads("train", "demo") == 1
    assert resources.gpus("train", "cuda") == 1 and resources.gpus("train", "cpu") == 0 and resources.gpus("table", "cuda") == 0
    with pytest.raises(KeyError, match="resources.py"):
        resources.request("no_such_rule", "paper")
    assert resources.request("figure_of_something", "paper") == resources.FIGURE  # an unlisted plot: a figure's request
    assert resources.local_rules(["figure_of_something", "no_such_rule", "train"]) == resources.local_rules() + ["figure_of_something"]


def test_gpus_only_for_gpu_work_and_on_the_gpu_partition():
    profile = _profile("slurm")
    default = profile["default-resources"]
    assert "gpu" not in default and default["slurm_partition"] != "gpu"  # CPU-only work asks for no GPU
    assert set(profile["set-resources"]) == GPU_RULES, "every GPU rule, and only those, on the GPU partition"
    for rule, res in profile["set-resources"].items():
        assert res["slurm_partition"] != default["slurm_partition"], rule
        assert "--gpus" not in res.get("slurm_extra", "") and "--gres" not in res.get("slurm_extra", ""), rule
    assert re.search(r"--signal=(B:)?TERM@\d+", profile["set-resources"]["train"]["slurm_extra"])
    text = (ROOT / "profiles" / "slurm" / "config.yaml").read_text()
    assert re.search(r'slurm_partition: "cpu"\s+# EDIT', text) and re.search(r'slurm_partition: "gpu"\s+# EDIT', text)


def test_downloads_are_local_rules_and_heavy_jobs_are_not():
    local = set(resources.local_rules())
    assert {"bbbc006_plane", "bbbc006_labels", "paired_source", "authors_checkpoint", "stardist_pretrained", "table", "report"} <= local
    assert "edge_band" not in local and not GPU_RULES & local and "train" not in local
    # the table is the one place: the Snakefile declares exactly its local rules, no rule file adds any
    snakefile = (ROOT / "Snakefile").read_text()
    assert "dgno_resources.local_rules(defined)" in snakefile and "workflow.localrules(*local)" in snakefile
    assert not re.search(r"^\s*localrules:", snakefile, re.M)
    for path in (ROOT / "workflow" / "rules").glob("*.smk"):
        assert not re.search(r"^\s*localrules:", path.read_text(), re.M), path.name


def test_snakemake_sees_the_tables_local_rules():
    """The workflow built from the demo config marks exactly the table's local rules (of those it defines)
    local, and the plotting rules (`figure_` prefix) the table does not list."""
    code = (
        "from pathlib import Path; from snakemake.api import SnakemakeApi; from snakemake.settings import types as t\n"
        "with SnakemakeApi(t.OutputSettings(quiet={t.Quietness.ALL})) as api:\n"
        f"    wf = api.workflow(resource_settings=t.ResourceSettings(), config_settings=t.ConfigSettings(configfiles=[Path({str(ROOT / 'config.yaml')!r})]),"
        f" storage_settings=t.StorageSettings(), workflow_settings=t.WorkflowSettings(), snakefile=Path({str(ROOT / 'Snakefile')!r}), workdir=Path({str(ROOT)!r}))\n"
        "    w = wf._workflow\n"
        "    print(sorted(w._localrules)); print(sorted(r.name for r in w.rules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=patient(120), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    local, defined = (eval(line) for line in proc.stdout.strip().splitlines()[-2:])  # noqa: S307 (two printed lists)
    assert set(local) == set(resources.local_rules(defined)) & set(defined)
