"""The SLURM profiles name real rules, give GPUs only to GPU work, and keep downloads on the head node."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from conftest import ROOT, SNAKEMAKE

PROFILES = ["slurm", "slurm-test", "local"]
GPU_RULES = {"train", "evaluate"}


def _rules(configfile: str) -> set[str]:
    proc = subprocess.run(
        [SNAKEMAKE, "--list-rules", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(ROOT), "--configfile", configfile],
        capture_output=True,
        text=True,
        timeout=120,
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


@pytest.mark.parametrize("name", PROFILES)
def test_set_resources_name_real_rules(name, rule_names):
    assert {"train", "evaluate", "train_stardist", "stardist_pretrained", "official_checkpoint"} <= rule_names
    unknown = sorted(set(_profile(name).get("set-resources", {})) - rule_names)
    assert not unknown, f"profiles/{name}: set-resources for rules that do not exist: {unknown}"


def test_gpus_only_for_gpu_work_and_on_the_gpu_partition():
    profile = _profile("slurm")
    default = profile["default-resources"]
    assert "gpu" not in default and default["slurm_partition"] != "gpu"  # CPU-only work asks for no GPU
    for rule, res in profile["set-resources"].items():
        if rule in GPU_RULES:
            assert res["gpu"] >= 1 and res["slurm_partition"] != default["slurm_partition"], rule
        else:
            assert not res.get("gpu") and "slurm_partition" not in res, rule
    text = (ROOT / "profiles" / "slurm" / "config.yaml").read_text()
    assert re.search(r'slurm_partition: "cpu"\s+# EDIT', text) and re.search(r'slurm_partition: "gpu"\s+# EDIT', text)


def test_downloads_are_local_rules_and_heavy_jobs_are_not():
    snakefile = (ROOT / "Snakefile").read_text()
    block = re.search(r"^localrules:\n((?:    \w+,\n)+)", snakefile, re.M).group(1)
    local = set(re.findall(r"(\w+),", block))
    assert {"bbbc006_plane", "bbbc006_labels", "paired_source", "official_checkpoint"} <= local
    assert "edge_band" not in local and not GPU_RULES & local
    downstream = (ROOT / "workflow" / "rules" / "downstream.smk").read_text()
    assert re.search(r"localrules:\s+stardist_pretrained,", downstream)  # the published StarDist model is fetched locally
