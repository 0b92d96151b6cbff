"""Reading the results and the paper's numbers: evaluation summaries and per-image scores, a table's
statistics, and ``paper_values.yaml``.

The tables are computed in :mod:`dgno.report.comparisons` and rendered in :mod:`dgno.report.render`; this
module only reads. Long form (one row per dataset × method × level) keeps every CSV mergeable and
plottable; the report pivots them for display. Paper numbers come from ``paper_values.yaml`` and only
ever sit *beside* measured values, in their own columns.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from dgno import metric_spec
from dgno.io import InputError, read_json, replicate_of

PAPER_VALUES = Path(__file__).with_name("paper_values.yaml")


def load_paper_values(path: str | Path = PAPER_VALUES) -> dict[str, Any]:
    """The paper's tables, keyed by table id (see the file's header for the layout)."""
    return yaml.safe_load(Path(path).read_text())["tables"]


def load_claims(path: str | Path = PAPER_VALUES) -> dict[str, Any]:
    """The paper's claims: {"statements": summary sentences by key, "list": claims} (see the file's claims header)."""
    return yaml.safe_load(Path(path).read_text())["claims"]


def load_paper(table_id: str) -> dict[str, Any]:
    """One table of paper_values.yaml ({} when the paper has no such table)."""
    return load_paper_values().get(table_id, {})


def paper_key(method_cfg: dict[str, Any], method: str) -> str:
    """Row key of a configured method in paper_values.yaml (its paper_key, else the registry name with '_' for '-')."""
    return method_cfg.get("paper_key") or method_cfg.get("model", method).replace("-", "_")


def paper_row(rows: dict[str, Any], method_cfg: dict[str, Any], method: str) -> dict[str, Any]:
    """The paper's row of a method in one table: under its paper_key, else under its model's name.

    Tables name one method differently (MPT is "MPT+EFCR" = mpt_efcr in Table 1 and StarDist, "MPT" = mpt
    in the lifting, defocus and DPDD tables): a method configured with paper_key mpt_efcr must still find
    its row in the tables that call it mpt, not silently lose its paper values there.
    """
    for key in (paper_key(method_cfg, method), method_cfg.get("model", method).replace("-", "_")):
        if isinstance(rows.get(key), dict):
            return rows[key]
    return {}


def summary_files(results: str | Path) -> list[Path]:
    """Every evaluation's summary.json under ``results/eval``, except those of Gumbel-routing repeats
    (``<level>/gumbel/...``: the authors' table reads them; a results table shows the plain evaluation)."""
    root = Path(results) / "eval"
    return sorted(p for p in root.rglob("summary.json") if "gumbel" not in p.relative_to(root).parts)


SUMMARY_KEYS = ["dataset", "method", "level", "replicate", "n_images"]


def summary_columns() -> list[str]:
    """The columns of a results table: what each row is, then every metric of dgno.metric_spec (and the LPIPS weight source)."""
    return SUMMARY_KEYS + metric_spec.summary_columns()


def collect_summaries(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per summary.json: dataset, method, level, seed replicate (0 unless ``seed=<r>``), n_images,
    metrics and the LPIPS weight source."""
    rows = []
    for p in paths:
        s = read_json(p)
        row = {"dataset": s["dataset"], "method": s["method"], "level": s["level"], "replicate": int(s.get("replicate", replicate_of(p))), "n_images": s["n_images"]}
        rows.append(row | {c: s.get(c) for c in metric_spec.summary_columns()})
    return pd.DataFrame(rows, columns=summary_columns())


def mean_over_levels(frame: pd.DataFrame) -> pd.DataFrame:
    """Average the metrics over blur levels per (dataset, method) — the paper pools its z-planes."""
    agg = {m: "mean" for m in metric_spec.shown_names() if m in frame}
    agg["n_images"] = "sum"
    out = frame.groupby(["dataset", "method"], sort=False).agg(agg).reset_index()
    out["levels"] = frame.groupby(["dataset", "method"], sort=False)["level"].apply(lambda s: "+".join(s)).values
    return out


def read_scores(summary_paths: Iterable[str | Path]) -> pd.DataFrame:
    """Per-image scores of the evaluations listed by their summary.json: one row per (dataset, method,
    level, replicate, image) with every metric of its per_image.csv."""
    frames = []
    for path in summary_paths:
        summary = read_json(path)
        per_image = Path(path).with_name("per_image.csv")
        if not per_image.exists():
            raise InputError(f"{per_image}: missing beside {path}. Fix: rerun that evaluation (snakemake --cores all {per_image})")
        frame = pd.read_csv(per_image, dtype={"id": str})
        replicate = int(summary.get("replicate", replicate_of(path)))
        frames.append(frame.assign(dataset=summary["dataset"], method=summary["method"], level=summary["level"], replicate=replicate))
    if not frames:
        return pd.DataFrame(columns=["dataset", "method", "level", "replicate", "id"])
    return pd.concat(frames, ignore_index=True)


def read_stats(path: str | Path) -> pd.DataFrame | None:
    """A ``<table>_stats.csv`` (None when the table rule has not written it), blanks as empty strings."""
    path = Path(path)
    if not path.exists():
        return None
    frame = pd.read_csv(path, dtype={"level": str, "versus": str, "highlight": str, "dataset": str})
    return frame.fillna({"level": "", "versus": "", "highlight": "", "dataset": ""})
