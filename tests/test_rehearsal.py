"""Rehearsal of the whole paper DAG: config/paper.yaml end to end on a real single-node SLURM, offline.

`make rehearsal` (or `pytest -m rehearsal tests/test_rehearsal.py`). Deselected from the default
`pytest` run (pyproject addopts) because it takes minutes. What stands in for the outside world:

- every download (the authors' BBBC006 archive, the Broad planes and labels of its fields, DPDD, RealDOF,
  the six released checkpoints at toy size) comes from a loopback server (tests/fixtures_http.py), with
  miniature archives of the real layouts (tests/bbbc006_replica.py, tests/fixtures_official.py);
- 3DHistech, which is placed by hand (no public download), is a tiny folder in its layout;
- StarDist's published model, downloaded from GitHub at run time, is replaced by a tiny StarDist
  trained here for one step and named through DGNO_STARDIST_PRETRAINED_DIR (the offline copy switch).

tests/rehearsal.yaml shrinks sizes and iterations and keeps one point per experiment and ablation
grid; the test checks that every rule name of the full paper DAG (its dry run) really ran.
Measured: 8 min 13 s and 8 min 41 s on the reference machine (2 CPU cores; 120 jobs, 40 rule names) before
issue 25; with its authors' archive, Gumbel repeats and reproduction table (44 rule names) 19 min 30 s once, on
the same 2 cores shared with other work (load average about 3). The fast test
below (part of `make test`) checks on every run that the overlay still plans every rule of the paper DAG.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from bbbc006_replica import archive_members, broad_zips, targz_bytes
from conftest import ROOT, SNAKEMAKE
from fixtures_http import make_image, make_mask, serve
from fixtures_official import toy_release
from fixtures_paired import dpdd_zip, realdof_zip, write_histech

pytest_plugins = ["slurm_cluster"]

from slurm_cluster import terminate_with_parent  # noqa: E402

OFFICIAL_NAME = "DGNO_BBBC006_w1_Cell"  # an authors' checkpoint the overlay evaluates (operators experiment, reproduction)
RULE_LINE = re.compile(r"^(?:local)?rule (\w+):", re.MULTILINE)


def paper_rule_names(workdir: Path, *configfiles: Path) -> set[str]:
    """Rule names of a dry run's job table: what a full run of that config executes."""
    cmd = [SNAKEMAKE, "-n", "--quiet", "rules", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir), "--configfile", *map(str, configfiles)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    table = (proc.stdout + proc.stderr).split("Job stats:")[1].split("total")[0]
    names = set(re.findall(r"^(\w+)\s+\d+\s*$", table, re.MULTILINE))
    assert names, table
    return names


def write_overlay(path: Path, *, loopback: str, histech: Path, options: Path) -> Path:
    """tests/rehearsal.yaml with its placeholders filled in (the servers' ports are only known at run time)."""
    text = (ROOT / "tests" / "rehearsal.yaml").read_text()
    text = text.replace("@LOOPBACK@", loopback).replace("@HISTECH@", str(histech)).replace("@OPTIONS@", str(options))
    assert "@" not in text, "unfilled placeholder in tests/rehearsal.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_overlay_plans_every_rule_of_the_paper_dag(tmp_path):
    """Seconds: a new rule in the paper DAG that the shrunken rehearsal would not reach fails here, in `make test`."""
    paper = ROOT / "config" / "paper.yaml"
    config = write_overlay(tmp_path / "rehearsal.yaml", loopback="http://127.0.0.1:9", histech=tmp_path / "h", options=tmp_path / "o")
    expected = paper_rule_names(tmp_path / "dry_paper", paper)
    planned = paper_rule_names(tmp_path / "dry_rehearsal", paper, config)
    assert len(expected) >= 30 and "report" in expected and "stardist_ap" in expected
    assert expected - planned == set(), f"the overlay drops rules of the paper DAG: {sorted(expected - planned)}"


def stardist_stand_in(folder: Path) -> Path:
    """A StarDist model folder trained one step on a fixture image (a child process: TensorFlow stays out of pytest)."""
    img, mask = make_image(16, "a01", 1, "w1"), make_mask("a01", 1)
    code = textwrap.dedent(f"""
        import numpy as np
        from dgno.experiments.stardist import PRETRAINED_NAME, train_stardist
        img = np.array({img.tolist()}, np.float32); mask = np.array({mask.tolist()}, np.uint16)
        train_stardist([img / img.max()], [mask], {str(folder)!r} + "/" + PRETRAINED_NAME, epochs=1, steps_per_epoch=1,
                       patch=16, seed=0, dataset="rehearsal stand-in", n_rays=8)
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder / "2D_versatile_fluo"


@pytest.fixture
def rehearsal_server(tmp_path):
    """Loopback downloads of the paper DAG: the authors' BBBC006 archive (replica) with the Broad archives of its
    fields, DPDD, RealDOF and the six released checkpoints at toy size (yields the server and their options)."""
    release, options = toy_release(tmp_path / "release")
    archives = {"BBBC006.tar.gz": targz_bytes(archive_members()), **broad_zips(), **release, "DPDD.zip": dpdd_zip(), "RealDOF.zip": realdof_zip()}
    with serve(archives) as srv:
        yield srv, options


@pytest.mark.rehearsal
def test_paper_dag_rehearsal(slurm_cluster, rehearsal_server, tmp_path):
    t0 = time.perf_counter()
    srv, options = rehearsal_server
    histech = write_histech(tmp_path / "3dhistech")
    stardist_dir = stardist_stand_in(tmp_path / "stardist")

    work = tmp_path / "run"
    config = write_overlay(work / "rehearsal.yaml", loopback=srv.base_url.removesuffix("/bbbc/BBBC006/"), histech=histech, options=options)
    paper = ROOT / "config" / "paper.yaml"
    expected = paper_rule_names(tmp_path / "dry_paper", paper)
    planned = paper_rule_names(tmp_path / "dry_rehearsal", paper, config)
    assert expected - planned == set(), f"the overlay drops rules of the paper DAG: {sorted(expected - planned)}"

    env = {**os.environ, **slurm_cluster.env, "OMP_NUM_THREADS": "1", "DGNO_STARDIST_PRETRAINED_DIR": str(stardist_dir)}
    cmd = [
        SNAKEMAKE,
        "--snakefile", str(ROOT / "Snakefile"),
        "--directory", str(work),
        "--profile", str(ROOT / "slurm"),
        "--profile", str(ROOT / "profiles" / "slurm-test"),
        "--configfile", str(paper), str(config),
        "--keep-going",  # one run shows every failing rule
    ]  # fmt: skip
    t_run = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3000, preexec_fn=terminate_with_parent)
    run_s = time.perf_counter() - t_run
    out = proc.stdout + proc.stderr
    (tmp_path / "snakemake.log").write_text(out)
    assert proc.returncode == 0, out[-8000:] + "\n" + slurm_cluster.diagnostics()

    ran = set(RULE_LINE.findall(out))
    assert expected - ran == set(), f"rules of the paper DAG that did not run: {sorted(expected - ran)}"
    assert len(set(re.findall(r"SLURM jobid (\d+)", out))) >= 20  # the heavy rules really went through SLURM
    assert (work / "report" / "index.html").is_file()
    for path in (  # a grid point of each ablation (paths with = and /), the non-blind table, StarDist
        "results/train/bbbc006_w1/dgno-face/flux=upwind/boundary=periodic/model.pt",
        "results/train/bbbc006_w1/dgno-cell/tau=0.25/model.pt",
        "results/train/bbbc006_w1/dgno-cell/element_size=4/T=1/model.pt",
        "results/tables/nonblind.csv",
        "results/tables/stardist_bbbc006_w1.csv",
        "results/eval/realdof/dgno-face/real/summary.json",
        "results/official/bbbc006_w1/dgno-cell-authors/model.pt",
        "results/tables/reproduction.csv",
        "results/eval/3dhistech/dgno-face-authors/real/gumbel/summary.json",
    ):
        assert (work / path).exists(), path
    for name in ("BBBC006.tar.gz", "BBBC006_v1_images_z_16.zip", "BBBC006_v1_labels.zip", "DPDD.zip", "RealDOF.zip", f"{OFFICIAL_NAME}.pth", "DGNO_3DHistech_Cell.pth"):
        assert srv.served(name), f"{name} was never downloaded from the loopback server"
    print(f"rehearsal: {len(expected)} rules, snakemake {run_s:.0f} s, whole test {time.perf_counter() - t0:.0f} s")
