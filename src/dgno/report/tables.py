"""Results tables: gather evaluation summaries into long-form CSVs, and pair them with the paper's numbers.

Long form (one row per dataset × method × level) keeps every CSV mergeable and plottable; the
report pivots them for display. Paper numbers come from ``paper_values.yaml`` and only ever sit
*beside* measured values, in their own columns.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from dgno.io import read_json, replicate_of

PAPER_VALUES = Path(__file__).with_name("paper_values.yaml")
METRICS = ("psnr", "ssim", "lpips")
HIGHER_IS_BETTER = {"psnr": True, "ssim": True, "lpips": False, "psnr_edge": True, "psnr_interior": True, "psnr_edge_gain": True, "psnr_interior_gain": True}


def load_paper_values(path: str | Path = PAPER_VALUES) -> dict[str, Any]:
    """The paper's tables, keyed by table id (see the file's header for the layout)."""
    return yaml.safe_load(Path(path).read_text())["tables"]


def load_claims(path: str | Path = PAPER_VALUES) -> dict[str, Any]:
    """The paper's claims: {"statements": summary sentences by key, "list": claims} (see the file's claims header)."""
    return yaml.safe_load(Path(path).read_text())["claims"]


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
    (``<level>/gumbel/...``: the reproduction table reads them; a results table shows the plain evaluation)."""
    root = Path(results) / "eval"
    return sorted(p for p in root.rglob("summary.json") if "gumbel" not in p.relative_to(root).parts)


SUMMARY_COLUMNS = ["dataset", "method", "level", "replicate", "n_images", "psnr", "ssim", "lpips", "lpips_source", "psnr_y8"]


def collect_summaries(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per summary.json: dataset, method, level, seed replicate (0 unless ``seed=<r>``), n_images,
    metrics and the LPIPS weight source."""
    rows = []
    for p in paths:
        s = read_json(p)
        rows.append(
            {
                "dataset": s["dataset"],
                "method": s["method"],
                "level": s["level"],
                "replicate": int(s.get("replicate", replicate_of(p))),
                "n_images": s["n_images"],
                "psnr": s["psnr"],
                "ssim": s["ssim"],
                "lpips": s.get("lpips"),
                "lpips_source": s.get("lpips_source"),
                "psnr_y8": s.get("psnr_y8"),
            }
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def mean_over_levels(frame: pd.DataFrame) -> pd.DataFrame:
    """Average the metrics over blur levels per (dataset, method) — the paper pools its z-planes."""
    agg = {m: "mean" for m in METRICS if m in frame}
    agg["n_images"] = "sum"
    out = frame.groupby(["dataset", "method"], sort=False).agg(agg).reset_index()
    out["levels"] = frame.groupby(["dataset", "method"], sort=False)["level"].apply(lambda s: "+".join(s)).values
    return out
