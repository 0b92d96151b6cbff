"""The paper's claims, each with the measured difference, its interval and a verdict.

The claims are data (``paper_values.yaml``, ``claims.list``): the paper's sentence and numbers, and the
quantity of this pipeline that tests it. Here each is measured from the results files of one
configuration — per-image scores of the evaluations, per-image edge-band and StarDist counts, recorded
benchmarks — with a bootstrap interval over the test images (and seeds), and given a verdict:
supported, contradicted, not resolved, or not run (with the command that runs it). Every verdict says
the scale it was measured at and whether it rests on a model still improving when training stopped,
because a demo-scale "contradicted" is a statement about the demo, not about the paper.

Nothing here computes science beyond statistics of the results files: no torch, no model. Where the
files live and how each kind of claim is measured is :mod:`dgno.report.claim_measures`; this module
holds the list's handling, the verdicts and the report section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dgno import metric_spec, stats
from dgno.experiments import catalogue
from dgno.report.claim_measures import Layout, NotConfigured, NotRun, Options, measure, resolve, training_flags
from dgno.report.reading import load_claims
from dgno.report.section import Section

KINDS = ("paired_difference", "best_of_difference", "edge_band_difference", "stardist_difference", "benchmark_ratio")
# Experiments config/claims.yaml runs at paper scale on one GPU (3 seeds each): a claim of theirs that this
# configuration lacks points there first (tests/test_claims.py checks the list against the file).
CLAIMS_CONFIG_EXPERIMENTS = tuple(e.name for e in catalogue.EXPERIMENTS if e.claims_config)
CLAIMS_CONFIG_COMMAND = (
    "snakemake --profile slurm --configfile config/claims.yaml results/tables/claims.csv "
    "(about 12 GPU-hours: dgno estimate --configfile config/claims.yaml results/tables/claims.csv)"
)
PAPER_COMMAND = "snakemake --profile slurm all (config/paper.yaml)"
PAPER_ITERATIONS = 60000  # the authors' BBBC006 recipe (their option files' total_iter; config/paper.yaml train.iterations)

# --------------------------------------------------------------------------------------------- the list


def expand_claims(claims: list[dict]) -> list[dict]:
    """One entry per measurement: a claim whose ``measure.a`` lists variants (the paper's 'DG', 'DGNO')
    becomes one entry per variant, id ``<id>[<variant>]``, so each variant gets its own verdict."""
    out = []
    for c in claims:
        a = c["measure"]["a"]
        for variant in a if isinstance(a, list) else [a]:
            entry = {**c, "measure": {**c["measure"], "a": variant}}
            if isinstance(a, list):
                entry.update(id=f"{c['id']}[{variant}]", variant=variant)
            out.append(entry)
    return out


def validate_claims(claims: list[dict]) -> None:
    """Refuse a malformed claims list, naming the claim and the field (a typo must not read as 'not run')."""
    seen = set()
    for c in claims:
        cid = c.get("id", "<no id>")
        missing = [k for k in ("id", "claim", "paper", "measure") if k not in c]
        m = c.get("measure", {})
        missing += [f"measure.{k}" for k in ("kind", "a", "b", "direction") if k not in m]
        if m.get("kind") != "benchmark_ratio":
            missing += [f"measure.{k}" for k in ("experiment", "metric") if k not in m]
        problems = [f"missing {', '.join(missing)}"] if missing else []
        if m.get("kind") not in KINDS:
            problems.append(f"measure.kind {m.get('kind')!r} is not one of {', '.join(KINDS)}")
        if m.get("direction") not in ("greater", "less"):
            problems.append(f"measure.direction {m.get('direction')!r} is not 'greater' or 'less'")
        if cid in seen:
            problems.append("duplicate id")
        seen.add(cid)
        if problems:
            raise ValueError(f"paper_values.yaml claims.list, claim {cid!r}: {'; '.join(problems)}. Fix the entry")


def measurement_scale(config: dict) -> str:
    """The scale a verdict is measured at: the models' size (config key ``scale``) and how long they train, never the config's name.

    'paper' only for paper-size models trained for at least the paper's iterations (:data:`PAPER_ITERATIONS`);
    paper-size models trained for fewer say so with their iterations; otherwise the registry scale ('demo', 'smoke').
    """
    scale = config.get("scale", "demo")
    if scale != "paper":
        return scale
    default = config.get("train", {}).get("iterations", PAPER_ITERATIONS)
    trained = {int(ds.get("train", {}).get("iterations", default)) for ds in config.get("datasets", {}).values() if ds.get("n_train", 1) != 0}
    fewest = min(trained, default=default)
    if fewest >= PAPER_ITERATIONS:
        return "paper"
    span = f"{fewest:,}" if fewest == max(trained, default=fewest) else f"{fewest:,}–{max(trained):,}"
    return f"paper-size models, {span} training iterations (the paper's: {PAPER_ITERATIONS:,})"


# ----------------------------------------------------------------------------------------- verdicts


def _command_for(experiment: str | None, config: dict) -> str:
    """The claims config runs its experiments at paper scale: point there, unless this config already runs that experiment at paper scale."""
    here = config.get("scale") == "paper" and experiment in config.get("experiments", {})
    return CLAIMS_CONFIG_COMMAND if experiment in CLAIMS_CONFIG_EXPERIMENTS and not here else PAPER_COMMAND


def evaluate_claim(claim: dict, config: dict, layout: Layout, opts: Options) -> dict[str, Any]:
    """One claim (one variant) measured in this configuration's results: plain data, see :func:`evaluate_claims`."""
    m = claim["measure"]
    row = {
        "id": claim["id"], "claim": claim["claim"], "variant": claim.get("variant"), "backs": list(claim.get("backs", [])),
        "paper_value": claim["paper"].get("value"), "paper_where": claim["paper"].get("where", ""), "kind": m["kind"],
        "metric": m.get("metric", m.get("column")), "a": m["a"], "b": m["b"] if isinstance(m["b"], str) else None,
        "direction": m["direction"], "null": m.get("null", 1.0 if m["kind"] == "benchmark_ratio" else 0.0),
        "dataset": None, "levels": [], "measured": None, "low": None, "high": None, "confidence": opts.confidence,
        "interval_method": None, "n_images": 0, "n_seeds": 0, "seed_mean": None, "seed_sd": None,
        "verdict": "not run", "scale": measurement_scale(config), "under_trained": [], "no_training_curve": [],
        "command": None, "reason": None, "notes": [n for n in [claim.get("note")] if n],
    }  # fmt: skip
    try:
        row["dataset"], row["levels"] = resolve(config, m)
        measured = measure(config, m, row["dataset"], row["levels"], layout, opts)
    except NotConfigured as exc:
        row.update(
            reason=f"not measured by configuration {config.get('name', '')!r}: {exc}",
            command=_command_for(m.get("experiment"), config),
        )
        return row
    except NotRun as exc:
        where = exc.path.relative_to(layout.root.parent) if exc.path.is_relative_to(layout.root.parent) else exc.path
        row.update(reason=exc.reason or f"missing {where}", command=exc.command)
        return row
    iv = measured.interval
    row.update(
        b=measured.b, measured=iv.estimate, low=iv.low, high=iv.high, interval_method=iv.method, n_images=iv.n_images,
        n_seeds=iv.n_seeds, verdict=stats.verdict(iv, m["direction"], row["null"]), notes=row["notes"] + measured.notes,
    )  # fmt: skip
    if measured.scale:
        row["scale"] = measured.scale
    if measured.spread is not None and measured.spread.n_seeds > 1:
        row.update(seed_mean=measured.spread.mean, seed_sd=measured.spread.sd)
    if row["dataset"] is not None:
        row["under_trained"], row["no_training_curve"] = training_flags(layout, config, m.get("experiment"), row["dataset"], [m["a"], measured.b], opts)
    return row


def evaluate_claims(
    config: dict,
    results_root: str | Path,
    claims: list[dict] | None = None,
    *,
    layout: Layout | None = None,
    options: Options | None = None,
) -> list[dict[str, Any]]:
    """Every claim of the list (default: paper_values.yaml) measured in one configuration's results tree.

    Returns one dict per measurement (a claim with variants gives one per variant): the claim and the
    paper's value and location; the dataset, levels, methods (b: the one compared with, resolved for a
    best-of), the measured estimate with its interval [low, high] and how it was made, images and seeds
    it rests on, mean ± sd over seeds; the verdict (supported / contradicted / not resolved / not run);
    the scale; models flagged as under-trained; and, when not run, the reason and the command.
    """
    claims = load_claims()["list"] if claims is None else claims
    validate_claims(claims)
    layout = layout or Layout(Path(results_root))
    opts = options or Options.from_config(config)
    return [evaluate_claim(c, config, layout, opts) for c in expand_claims(claims)]


def claims_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The claims' rows as a table (lists joined by '; '), e.g. to write results/tables/claims.csv."""
    flat = [{k: "; ".join(map(str, v)) if isinstance(v, list) else v for k, v in r.items()} for r in rows]
    return pd.DataFrame(flat)


# ------------------------------------------------------------------------------------------ section


def _measured_text(r: dict) -> str:
    if r["measured"] is None:
        return "—"
    if r["kind"] == "benchmark_ratio":
        return f"{r['measured']:.2f}× — {r['interval_method']}"
    digits, unit = metric_spec.digits(r["metric"]), metric_spec.unit(r["metric"])
    text = f"{r['measured']:+.{digits}f}{unit}"
    if r["low"] is not None and np.isfinite(r["low"]):
        text += f" [{r['low']:+.{digits}f}, {r['high']:+.{digits}f}]"
    if r["n_images"]:
        text += f"; {r['n_images']} images" + (f" × {r['n_seeds']} seeds" if r["n_seeds"] > 1 else "")
    text += f" ({r['interval_method']})"
    if r["seed_sd"] is not None:
        text += f"; over seeds {r['seed_mean']:+.{digits}f} ± {r['seed_sd']:.{digits}f}"
    return text


def _remarks(r: dict) -> str:
    parts = []
    if r["verdict"] == "not run":
        parts.append(f"{r['reason']}" + (f" — run: {r['command']}" if r["command"] else ""))
    else:
        parts.append(f"{r['a']} − {r['b']} on {r['dataset']} ({', '.join(r['levels'])})" if r["dataset"] else f"{r['a']} ÷ {r['b']}")
    if r["under_trained"]:
        parts.append("rests on an under-trained model: " + "; ".join(r["under_trained"]))
    return ". ".join(p.rstrip(". ") for p in parts + r["notes"]) + "."


def claims_section(config: dict, results_root: str | Path, *, rows: list[dict] | None = None, options: Options | None = None) -> Section:
    """The report section: every claim with the paper's number, the measured Δ and interval, the verdict and scale.

    Generated from the results files only (``rows`` may be passed when already evaluated); a claim that
    cannot be measured here says "not run" and gives the command, or the configuration, that measures it.
    """
    opts = options or Options.from_config(config)
    rows = evaluate_claims(config, results_root, options=opts) if rows is None else rows
    statements = load_claims().get("statements", {})
    sec = Section(
        id="claims",
        title="The paper's claims, each with a verdict",
        paper_source="paper_values.yaml, claims (each entry names its table or sentence and tex line)",
    )
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("supported", "contradicted", "not resolved", "not run")}
    scale = measurement_scale(config)
    sec.notes.append(
        f"Measured at scale: {scale}."
        + ("" if scale == "paper" else " A verdict is about this scale: these models are smaller, or trained on less data or for fewer "
           "iterations, than the paper's, so a verdict here tests the claim at this scale, not the paper's numbers.")
    )  # fmt: skip
    sec.notes.append(
        f"Each measured Δ is paired on the same test images, with a bootstrap {opts.confidence:.0%} interval over images "
        f"({opts.n_resamples} resamples, seed {opts.seed}; BCa with one training seed, images × seeds resampled with several). "
        "Supported: the interval excludes 0 (1 for a ratio) on the paper's side; contradicted: on the other side; not resolved: it contains it. "
        f"A model is flagged under-trained when its validation PSNR still rose by more than {opts.rise_db:g} dB over the last "
        f"{opts.tail_fraction:.0%} of its iterations."
    )
    sec.verdicts.append(", ".join(f"{n} {v}" for v, n in counts.items()) + f" (of {len(rows)} measurements).")
    table = [
        [f"{r['id']}: {r['claim']}", f"{r['paper_value']:g} — {r['paper_where']}" if r["paper_value"] is not None else r["paper_where"], _measured_text(r),
         r["verdict"] + (" (under-trained model)" if r["under_trained"] else ""), r["scale"], _remarks(r)]
        for r in rows
    ]  # fmt: skip
    sec.text_tables.append(
        (["claim", "paper (where)", f"measured Δ [{opts.confidence:.0%} interval]", "verdict", "scale", "remarks"], table)
    )
    summary = []
    for key, st in statements.items():
        backing = [r for r in rows if key in r["backs"]]
        tally = ", ".join(f"{sum(r['verdict'] == v for r in backing)} {v}" for v in counts)
        summary.append([f"{st['text']} (tex line {st['tex_line']})", ", ".join(sorted({r["id"].split("[")[0] for r in backing})), tally])
    sec.text_tables.append((["the paper's summary statement", "claims that test it", "verdicts here"], summary))
    return sec
