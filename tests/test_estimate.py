"""`dgno estimate`: GPU-hours of a configuration and target before anything runs (dgno.workflow.estimate).
The paper config's estimate is the sum of its parts, each part the recorded rate times the work; rates
without a record of their own say what was assumed; the claims config fits its budget; no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, patient

from dgno.cli import main
from dgno.workflow import estimate as est
from dgno.workflow.config import load_config

PAPER = ROOT / "config" / "paper.yaml"
CLAIMS = ROOT / "config" / "claims.yaml"


@pytest.fixture(scope="module")
def paper_estimate():
    return est.estimate(PAPER)


def test_dry_run_text_is_read_as_jobs_with_wildcards():
    text = (
        "[Fri Nov 27 02:00:09 2026]\nrule train:\n    input: a\n    output: results/train/x/gg/model.pt\n"
        "    wildcards: dataset=x, method=dgno-cell/flux=jump/boundary=dirichlet\n    resources: tmpdir=/tmp\n"
        "[Fri Nov 27 02:00:09 2026]\nlocalrule report:\n    input: b\n\n"
        "Job stats:\njob count\n"
    )
    jobs = est.parse_dry_run(text)
    assert [j.rule for j in jobs] == ["train", "report"]
    assert jobs[0].wildcards == {"dataset": "x", "method": "dgno-cell/flux=jump/boundary=dirichlet"} and jobs[1].wildcards == {}


def _records():
    where = {"file": "benchmarks/results/x.json", "device": "cuda: NVIDIA H100 80GB HBM3", "index": "train[0]"}
    train = [
        {**where, "model": "dgno-cell", "batch": 8, "size": 256, "dtype": "fp32", "seconds_per_iteration": 0.3},
        {**where, "model": "dgno-cell", "batch": 8, "size": 256, "dtype": "bf16", "seconds_per_iteration": 0.2},
        {**where, "model": "dgno-face", "batch": 8, "size": 256, "dtype": "fp32", "seconds_per_iteration": 0.4},
        {**where, "model": "restormer", "batch": 8, "size": 256, "dtype": "bf16", "seconds_per_iteration": 0.5},
    ]
    forward = [
        {**where, "model": "dgno-cell", "size": 256, "images_per_second": 40.0},
        {**where, "model": "dgno-face", "size": 256, "images_per_second": 30.0},
        {**where, "model": "dgno-face", "size": 512, "images_per_second": 10.0},
        {**where, "model": "swinir", "size": 256, "images_per_second": 4.0},
    ]
    return train, forward, []


def test_rates_are_recorded_or_derived_and_say_which():
    rates = est.Rates(_records())
    assert rates.train_step("dgno-cell", "fp32").value == 0.3 and not rates.train_step("dgno-cell", "fp32").assumed
    restormer = rates.train_step("restormer", "fp32")  # only a bf16 record: × DGNO-Cell's fp32/bf16 ratio
    assert restormer.value == pytest.approx(0.5 * 0.3 / 0.2) and "ratio 1.50" in restormer.assumed
    swinir = rates.train_step("swinir", "fp32")  # no training record: DGNO-Cell's step × the forward-time ratio
    assert swinir.value == pytest.approx(0.3 * 40 / 4) and "forward-time ratio" in swinir.assumed
    gg = rates.train_step("gg", "fp32")  # nothing recorded at all: DGNO-Face's step, said so
    assert gg.value == 0.4 and "assumed equal to dgno-face" in gg.assumed
    assert rates.forward("dgno-face", 520).size == 512 and rates.forward("gg", 256).assumed


def test_a_training_costs_its_pixels_per_step_and_progressive_stages(tmp_path):
    config = load_config(PAPER)
    rates = est.Rates(_records())
    job = est.Job("train", {"dataset": "bbbc006_w1", "method": "dgno-cell"})
    hours, key, _ = est.train_cost(config, job, rates)
    assert key == "train dgno-cell fp32"  # the paper trains in fp32 (train.bf16: false)
    assert hours == pytest.approx(60000 * 0.3 * 4 / 3600)  # 32 crops of 256² = 4 × the recorded 8
    progressive = est.Job("train", {"dataset": "3dhistech", "method": "dgno-cell"})
    stages = config["datasets"]["3dhistech"]["train"]["progressive"]
    expected = sum(s["iterations"] * 0.3 * s["batch_size"] * s["patch_size"] ** 2 / (8 * 256**2) for s in stages) / 3600
    assert est.train_cost(config, progressive, rates)[0] == pytest.approx(expected)


@pytest.mark.slow
def test_the_paper_estimate_is_the_sum_of_its_parts(paper_estimate):
    rows = paper_estimate.per_rule()
    assert paper_estimate.total == pytest.approx(sum(j.gpu_hours for j in paper_estimate.jobs))
    assert paper_estimate.total == pytest.approx(sum(r["gpu_hours"] for r in rows.values()))
    assert rows["train"]["jobs"] == sum(1 for j in paper_estimate.jobs if j.rule == "train") and rows["train"]["gpu_hours"] > 1000
    # each part is its rate times its work: one evaluation, by hand from the record it names
    config = load_config(PAPER)
    job = next(j for j in paper_estimate.jobs if j.rule == "evaluate" and j.wildcards == {"dataset": "bbbc006_w1", "method": "dgno-cell", "level": "z02"})
    record = est.Rates().forward("dgno-cell", 512)
    assert job.gpu_hours == pytest.approx(153 * 520 * 696 / 512**2 / record.value / 3600)
    assert config["evaluate"]["tile"] == 512 and "gpu_speed_h100" in paper_estimate.rates["forward dgno-cell 512"]
    # GPU work without a recorded rate is outside the total, bounded by its runtime limit, and listed
    assert rows["nonblind_sensitivity"]["gpu_hours"] == 0 and rows["nonblind_sensitivity"]["bound_hours"] == 16
    text = est.render(paper_estimate)
    assert f"{paper_estimate.total:10.2f}" in text and "train gg fp32" in text and "assumed equal to dgno-face" in text


def test_the_claims_config_fits_twelve_gpu_hours():
    claims = est.estimate(CLAIMS, ["results/tables/claims.csv"])
    rows = claims.per_rule()
    assert claims.total <= 12.0 and claims.bound == 0
    assert rows["train"]["jobs"] == 13 and rows["train_replicate"]["jobs"] == 26  # 13 trainings × 3 seeds
    assert all(key.endswith("bf16") for key in claims.rates if key.startswith("train"))


@pytest.mark.slow
def test_cli_and_an_unknown_target(capsys):
    assert main(["estimate", "--configfile", str(CLAIMS), "--json", "results/tables/synthetic.csv"]) == 0
    out = capsys.readouterr().out
    assert '"total_gpu_hours"' in out and '"train_replicate"' in out
    with pytest.raises(ValueError, match="dry run of no_such_target"):
        est.estimate(CLAIMS, ["no_such_target"])


def test_the_estimate_imports_no_torch():
    code = "import sys, dgno.cli, dgno.workflow.estimate; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=patient(120), env={"PYTHONPATH": str(ROOT / "src")})
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr[-2000:]
