"""GPU-hours of a configuration and target before anything runs, from the GPU step times recorded in
``benchmarks/results/*.json``, each rate with its provenance.

Why: the paper run is about 2,100 GPU-hours and the demo is minutes on a CPU; a configuration in between
(config/claims.yaml) has to be sized against a budget, and nobody should learn its cost from the
cluster bill. The estimate is generic over targets: the jobs are those of Snakemake's own dry run
(``snakemake TARGET -n --forceall``: every job the target needs, as if nothing had run), each priced
by a per-rule cost model:

- ``train`` (and seed replicates): iterations × seconds per iteration. The rate is a recorded training
  step of the same network and precision (batch 8 at 256² on an H100), scaled by the pixels one step
  processes (batch × patch², per progressive stage). A network without a recorded step gets the
  recorded DGNO-Cell step × its recorded forward-time ratio to DGNO-Cell, else DGNO-Face's step;
  the output says which.
- ``evaluate`` (and replicates): test images × pixels ÷ the recorded forward throughput (batch 1,
  float32, eager) at the nearest recorded size, scaled by pixel count.
- ``deconvolve_ring``: test images × the recorded ring deconvolution of a BBBC006 frame.
- Any other GPU rule has no recorded rate: it is listed with its runtime limit as an upper bound,
  outside the total. CPU rules cost no GPU time.

Nothing here imports torch; the dry run imports only the workflow's planning code.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgno.data import GENERATED_SOURCES
from dgno.workflow import resources
from dgno.workflow.config import load_config
from dgno.workflow.settings import method_settings, train_settings

ROOT = Path(__file__).resolve().parents[3]
BENCH_DIR = ROOT / "benchmarks" / "results"
# The device the estimate is for: records of this device win over others of the same model.
TARGET_DEVICE = "H100"
REFERENCE_STEP = (8, 256)  # batch, patch of the recorded training steps (benchmarks/gpu/speed.py)
TRAIN_RULES = ("train", "train_replicate")
EVAL_RULES = ("evaluate", "evaluate_replicate")


@dataclass(frozen=True)
class Rate:
    """A recorded rate, or one derived from records, and where it comes from."""

    value: float  # seconds per iteration at REFERENCE_STEP (training) or images per second at `size` (inference)
    source: str
    size: int = 256
    assumed: str = ""  # empty when the record is of this very network and precision


@dataclass
class Job:
    rule: str
    wildcards: dict[str, str]
    gpu_hours: float = 0.0
    rate: str = ""  # the key of the rate it used (see Estimate.rates), empty for CPU jobs
    bound_hours: float = 0.0  # GPU rules without a recorded rate: their runtime limit


@dataclass
class Estimate:
    config_name: str
    targets: list[str]
    jobs: list[Job]
    rates: dict[str, str] = field(default_factory=dict)  # rate key → provenance line
    splits: dict[str, str] = field(default_factory=dict)  # dataset → its test split and where that comes from

    def per_rule(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for job in self.jobs:
            row = out.setdefault(job.rule, {"jobs": 0, "gpu_hours": 0.0, "bound_hours": 0.0})
            row["jobs"] += 1
            row["gpu_hours"] += job.gpu_hours
            row["bound_hours"] += job.bound_hours
        return out

    @property
    def total(self) -> float:
        return sum(r["gpu_hours"] for r in self.per_rule().values())

    @property
    def bound(self) -> float:
        return sum(r["bound_hours"] for r in self.per_rule().values())


# ----------------------------------------------------------------------------------------- the jobs

_JOB = re.compile(r"^(?:local)?rule (\w+):\n((?:[ \t]+.*\n?)*)", re.M)


def parse_dry_run(text: str) -> list[Job]:
    """The jobs of ``snakemake -n`` output: one per ``rule NAME:`` block, with its wildcards."""
    jobs = []
    for name, body in _JOB.findall(text):
        found = re.search(r"^\s+wildcards: (.*)$", body, re.M)
        pairs = [p.split("=", 1) for p in found.group(1).split(", ")] if found else []
        jobs.append(Job(name, dict(pairs)))
    return jobs


def dry_run(configfile: str | Path, targets: Iterable[str] = (), snakefile: Path = ROOT / "Snakefile") -> list[Job]:
    """Every job of ``targets`` (default: the Snakefile's default target) as if nothing had run."""
    cmd = [sys.executable, "-m", "snakemake", *targets, "-n", "--forceall", "--nolock", "--snakefile", str(snakefile), "--configfile", str(configfile)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=snakefile.parent, timeout=600)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise ValueError(f"snakemake dry run of {' '.join(targets) or 'the default target'} with {configfile} failed:\n" + "\n".join(tail))
    return [job for job in parse_dry_run(proc.stdout + proc.stderr) if job.rule != "all"]


# ----------------------------------------------------------------------------------------- the records


def load_records(folder: Path = BENCH_DIR) -> tuple[list[dict], list[dict], list[dict]]:
    """(training steps, forward passes, ring deconvolutions) of every benchmark file, each with file and device."""
    train, forward, ring = [], [], []
    for path in sorted(folder.glob("*.json")):
        blob = json.loads(path.read_text())
        if not isinstance(blob, dict):
            continue
        device = str((blob.get("provenance") or {}).get("device") or blob.get("device") or "?")
        if not device.startswith("cuda"):  # CPU benchmarks say nothing about GPU-hours
            continue
        where = {"file": f"benchmarks/results/{path.name}", "device": device}
        for i, r in enumerate(blob.get("train") or []):
            if isinstance(r, dict) and r.get("seconds_per_iteration") and r.get("batch"):
                train.append({**r, **where, "index": f"train[{i}]"})
        for i, r in enumerate(blob.get("inference") or []):
            if isinstance(r, dict) and r.get("images_per_second") and r.get("batch") == 1 and r.get("dtype") == "fp32" and r.get("mode") == "eager":
                forward.append({**r, **where, "index": f"inference[{i}]"})
        deconv = blob.get("deconvolution")
        if isinstance(deconv, dict) and deconv.get("deconvolve_s"):
            ring.append({**deconv, **where, "index": "deconvolution"})
    return train, forward, ring


def _preferred(records: list[dict]) -> dict | None:
    """The record to use among equals: the target device first, the Triton scan first, then the file order."""
    ranked = sorted(records, key=lambda r: (TARGET_DEVICE not in r["device"], r.get("scan_backend") not in ("triton", None)))
    return ranked[0] if ranked else None


def _describe(r: dict, what: str) -> str:
    return f"{r['file']} {r['index']} ({r['device']}): {what}"


class Rates:
    """Rates by network and precision, derived from the records, each with its provenance."""

    def __init__(self, records: tuple[list[dict], list[dict], list[dict]] | None = None):
        self.train_records, self.forward_records, self.ring_records = records if records is not None else load_records()

    def _train_record(self, model: str, dtype: str) -> dict | None:
        return _preferred([r for r in self.train_records if r["model"] == model and r.get("dtype") == dtype and r["batch"] == REFERENCE_STEP[0] and r.get("size") == REFERENCE_STEP[1]])

    def _forward_record(self, model: str, size: int) -> dict | None:
        near = [r for r in self.forward_records if r["model"] == model]
        if not near:
            return None
        best = min(abs(r["size"] - size) for r in near)
        return _preferred([r for r in near if abs(r["size"] - size) == best])

    def train_step(self, model: str, dtype: str) -> Rate:
        """Seconds per iteration of `model` at batch 8 × 256² in `dtype` (fp32 / bf16), recorded or derived."""
        own = self._train_record(model, dtype)
        if own:
            return Rate(own["seconds_per_iteration"], _describe(own, f"{model} {dtype} {1e3 * own['seconds_per_iteration']:.1f} ms/it at batch 8 x 256²"))
        cell = self._train_record("dgno-cell", dtype)
        other = self._train_record(model, "bf16" if dtype == "fp32" else "fp32")
        if other and cell and self._train_record("dgno-cell", other["dtype"]):
            ratio = cell["seconds_per_iteration"] / self._train_record("dgno-cell", other["dtype"])["seconds_per_iteration"]
            return Rate(other["seconds_per_iteration"] * ratio, _describe(other, f"{model} {other['dtype']}"), assumed=f"no {dtype} record: its {other['dtype']} step × DGNO-Cell's {dtype}/{other['dtype']} ratio {ratio:.2f}")
        fwd, fwd_cell = self._forward_record(model, 256), self._forward_record("dgno-cell", 256)
        if cell and fwd and fwd_cell:
            ratio = fwd_cell["images_per_second"] / fwd["images_per_second"]
            return Rate(cell["seconds_per_iteration"] * ratio, _describe(cell, f"dgno-cell {dtype} step") + "; " + _describe(fwd, f"{model} forward"), assumed=f"no training record: DGNO-Cell's step × the forward-time ratio {ratio:.2f} at 256²")
        face = self._train_record("dgno-face", dtype) or cell
        if face is None:
            raise ValueError(f"no recorded {dtype} training step in {BENCH_DIR} to estimate from. Fix: run python -m benchmarks.gpu.speed on a GPU")
        return Rate(face["seconds_per_iteration"], _describe(face, f"{face['model']} {dtype}"), assumed=f"no training or forward record of {model}: assumed equal to {face['model']}'s step")

    def forward(self, model: str, size: int) -> Rate:
        """Images per second of one `size`² forward pass (batch 1, fp32, eager), recorded or assumed."""
        own = self._forward_record(model, size)
        if own:
            return Rate(own["images_per_second"], _describe(own, f"{model} {own['images_per_second']:.2f} img/s at {own['size']}²"), size=own["size"])
        face = self._forward_record("dgno-face", size)
        if face is None:
            raise ValueError(f"no recorded forward pass in {BENCH_DIR}. Fix: run python -m benchmarks.gpu.speed on a GPU")
        return Rate(face["images_per_second"], _describe(face, f"dgno-face {face['images_per_second']:.2f} img/s at {face['size']}²"), size=face["size"], assumed=f"no forward record of {model}: assumed DGNO-Face's")

    def ring_deconvolution(self) -> Rate | None:
        rec = _preferred(self.ring_records)
        if rec is None:
            return None
        frame = rec.get("frame", [520, 696])
        return Rate(rec["deconvolve_s"], _describe(rec, f"{rec['deconvolve_s']:.2f} s per {frame[0]}x{frame[1]} frame, {rec.get('n_iter')} steps"), size=int(math.sqrt(frame[0] * frame[1])))


# ----------------------------------------------------------------------------------------- the data

# Test splits of the downloaded datasets as recorded by benchmarks/estimates/disk_footprint.py; a dataset not in it
# falls back to its source's paper size (the paper's 153 BBBC006 test images of 520 x 696 px).
SPLIT_FILE = BENCH_DIR / "disk_footprint_paper.json"
SOURCE_SPLITS = {"bbbc006": (153, 520, 696)}


def test_split(config: Mapping[str, Any], dataset: str) -> tuple[int, int, int, str]:
    """(test images, height, width, where the numbers come from) of one dataset."""
    spec = config["datasets"][dataset]
    if spec["source"] in ("sigma_map", "seidel"):  # the sharp images of its base dataset, same split
        n, h, w, src = test_split(config, spec["base"])
        return n, h, w, f"{src} (its base {spec['base']})"
    if spec["source"] in GENERATED_SOURCES:  # generated here: the config says how many and how large
        return int(spec["n_test"]), int(spec["size"][0]), int(spec["size"][1]), "config"
    recorded = json.loads(SPLIT_FILE.read_text()).get("test_split_sizes", {}) if SPLIT_FILE.exists() else {}
    if dataset in recorded:
        r = recorded[dataset]
        return int(r["images"]), int(r["height"]), int(r["width"]), f"benchmarks/results/{SPLIT_FILE.name}"
    if spec["source"] in SOURCE_SPLITS:
        n, h, w = SOURCE_SPLITS[spec["source"]]
        return n, h, w, f"assumed: the paper's {spec['source']} test split"
    raise ValueError(f"dataset {dataset}: test split size unknown (not in {SPLIT_FILE.name}). Fix: run python -m benchmarks.estimates.disk_footprint")


# ----------------------------------------------------------------------------------------- the costs


def _model(config: Mapping[str, Any], job: Job) -> str:
    return method_settings(config, job.wildcards["dataset"], job.wildcards["method"])["model"]


def _stages(recipe: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """(iterations, batch, patch) of each stage of a training; the last progressive stage runs to the end."""
    stages = [(s["iterations"], s["batch_size"], s["patch_size"]) for s in recipe.get("progressive") or []]
    if not stages:
        return [(int(recipe["iterations"]), int(recipe["batch_size"]), int(recipe["patch_size"]))]
    done = sum(s[0] for s in stages)
    last = stages[-1]
    return stages[:-1] + [(last[0] + max(0, int(recipe["iterations"]) - done), last[1], last[2])]


def train_cost(config: Mapping[str, Any], job: Job, rates: Rates) -> tuple[float, str, str]:
    """(GPU-hours, rate key, provenance) of one training: Σ over stages of iterations × step, the recorded
    step scaled by the pixels of one step (batch × patch²) against the record's 8 × 256²."""
    recipe = train_settings(config, job.wildcards["dataset"])
    model = _model(config, job)
    dtype = "bf16" if recipe.get("bf16", True) and config.get("device") != "cpu" else "fp32"
    rate = rates.train_step(model, dtype)
    ref = REFERENCE_STEP[0] * REFERENCE_STEP[1] ** 2
    seconds = sum(it * rate.value * (b * p * p) / ref for it, b, p in _stages(recipe))
    key = f"train {model} {dtype}"
    return seconds / 3600, key, rate.source + (f" — {rate.assumed}" if rate.assumed else "")


def evaluate_cost(config: Mapping[str, Any], job: Job, rates: Rates) -> tuple[float, str, str]:
    """(GPU-hours, rate key, provenance) of one evaluation: test images × pixels ÷ the recorded throughput."""
    n, h, w, split = test_split(config, job.wildcards["dataset"])
    model = _model(config, job)
    tile = config["evaluate"].get("tile")
    rate = rates.forward(model, min(tile or max(h, w), max(h, w)))
    seconds = n * (h * w) / rate.size**2 / rate.value
    return seconds / 3600, f"forward {model} {rate.size}", f"{rate.source}{' — ' + rate.assumed if rate.assumed else ''}"


def ring_cost(config: Mapping[str, Any], job: Job, rates: Rates) -> tuple[float, str, str] | None:
    rate = rates.ring_deconvolution()
    if rate is None:
        return None
    n, h, w, _ = test_split(config, job.wildcards["dataset"])
    return n * rate.value * (h * w) / rate.size**2 / 3600, "ring deconvolution", rate.source


def gumbel_cost(config: Mapping[str, Any], job: Job, rates: Rates) -> tuple[float, str, str]:
    """Repeated evaluations with Gumbel routing (evaluate.gumbel_repeats): that many evaluations of the level."""
    hours, key, source = evaluate_cost(config, job, rates)
    repeats = int(config["evaluate"].get("gumbel_repeats", 1))
    return hours * repeats, f"{key} × {repeats} Gumbel repeats", source + " (evaluate.gumbel_repeats)"


COST_MODELS = {
    **dict.fromkeys(TRAIN_RULES, train_cost),
    **dict.fromkeys(EVAL_RULES, evaluate_cost),
    "evaluate_gumbel": gumbel_cost,
    "deconvolve_ring": ring_cost,
}


def price(config: Mapping[str, Any], jobs: list[Job], rates: Rates | None = None) -> dict[str, str]:
    """Fill each job's GPU-hours (or, for a GPU rule without a recorded rate, its runtime limit as a bound);
    returns {rate key: provenance}."""
    rates = rates or Rates()
    used: dict[str, str] = {}
    for job in jobs:
        gpu_rule = job.rule in COST_MODELS or (job.rule in resources.PAPER and resources.PAPER[job.rule].gpu)
        if not gpu_rule or config.get("device") == "cpu":
            continue
        priced = COST_MODELS[job.rule](config, job, rates) if job.rule in COST_MODELS else None
        if priced is None:
            job.bound_hours = resources.request(job.rule, config.get("scale", "demo")).runtime_min / 60
            used[f"bound {job.rule}"] = f"no recorded rate: at most its runtime limit, {resources.request(job.rule, config.get('scale', 'demo')).runtime_min} min (src/dgno/workflow/resources.py)"
            continue
        job.gpu_hours, job.rate, used[priced[1]] = priced
    return used


def estimate(configfile: str | Path, targets: Iterable[str] = (), rates: Rates | None = None) -> Estimate:
    """The GPU-hours of ``targets`` (default: the report) under ``configfile``, job by job."""
    config = load_config(configfile)
    jobs = dry_run(Path(configfile).resolve(), list(targets))
    used = price(config, jobs, rates)
    priced = {j.wildcards["dataset"] for j in jobs if (j.gpu_hours or j.bound_hours) and "dataset" in j.wildcards}
    splits = {ds: "{} test images of {}x{} ({})".format(*test_split(config, ds)) for ds in sorted(priced)}
    return Estimate(config["name"], list(targets) or ["(default target)"], jobs, used, splits)


def render(est: Estimate) -> str:
    """The estimate as text: GPU-hours per rule and in total, then the provenance of every rate used."""
    rows = est.per_rule()
    lines = [
        f"dgno estimate: config {est.config_name!r}, target {' '.join(est.targets)}: {len(est.jobs)} jobs (snakemake -n --forceall)",
        f"{'rule':28s} {'jobs':>6s} {'GPU-hours':>10s}",
    ]
    gpu = {rule: r for rule, r in rows.items() if r["gpu_hours"] or r["bound_hours"]}
    for rule, r in sorted(gpu.items(), key=lambda kv: (-kv[1]["gpu_hours"], kv[0])):
        extra = f"  (no recorded rate; at most {r['bound_hours']:.1f})" if r["bound_hours"] else ""
        lines.append(f"{rule:28s} {int(r['jobs']):6d} {r['gpu_hours']:10.2f}{extra}")
    cpu = {rule: r for rule, r in rows.items() if rule not in gpu}
    lines.append(f"{'CPU-only rules (' + str(len(cpu)) + ')':28s} {sum(int(r['jobs']) for r in cpu.values()):6d} {0:10.2f}")
    lines.append(f"{'total':28s} {len(est.jobs):6d} {est.total:10.2f}")
    if est.bound:
        lines.append(f"  + at most {est.bound:.1f} GPU-hours for GPU jobs without a recorded rate (their runtime limits)")
    lines.append("rates (one GPU; multi-GPU training assumed to scale linearly; data loading, LPIPS and start-up not counted):")
    lines += [f"  {key}: {source}" for key, source in sorted(est.rates.items())]
    lines.append("test splits:")
    lines += [f"  {ds}: {text}" for ds, text in est.splits.items()]
    return "\n".join(lines)


def as_json(est: Estimate) -> dict[str, Any]:
    return {
        "config": est.config_name,
        "targets": est.targets,
        "total_gpu_hours": est.total,
        "bound_gpu_hours": est.bound,
        "per_rule": est.per_rule(),
        "rates": est.rates,
        "splits": est.splits,
        "jobs": [vars(j) for j in est.jobs],
    }
