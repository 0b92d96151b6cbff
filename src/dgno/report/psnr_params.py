"""PSNR against parameter count (the paper's Fig. 1, left): this run's points and the paper's.

The measured points pair each method's PSNR with the size of the network that produced it
(``results/tables/model_summary.csv``); the paper's points need both numbers printed somewhere,
in the DGNO paper or in the method's own paper (``paper_values.yaml``): nothing is estimated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dgno.report.reading import load_paper_values


def measured_psnr_params(
    summaries: pd.DataFrame,
    model_summary: pd.DataFrame,
    *,
    dataset: str,
    levels: Sequence[str],
    scale: str,
    labels: Mapping[str, str],
) -> pd.DataFrame:
    """(label, method, params_m, psnr) of every method with all `levels` evaluated on `dataset`.

    params_m is counted at `scale` (the scale the measured PSNR was trained at), so each point
    pairs a run's accuracy with the size of the network that produced it.
    """
    rows = []
    sizes = model_summary[model_summary["scale"] == scale].drop_duplicates("method").set_index("method")
    for method, label in labels.items():
        sub = summaries[(summaries["dataset"] == dataset) & (summaries["method"] == method)]
        if method not in sizes.index or not set(levels) <= set(sub["level"]):
            continue
        psnr = float(sub[sub["level"].isin(levels)]["psnr"].mean())
        rows.append({"label": label, "method": method, "params_m": float(sizes.loc[method, "params_m"]), "psnr": psnr, "source": f"this run, {scale} scale"})
    return pd.DataFrame(rows, columns=["label", "method", "params_m", "psnr", "source"])


def published_params(paper_key: str) -> dict[str, Any] | None:
    """{params_m, source} printed for a method: DGNO's own table/text, else the baseline's original paper."""
    tables = load_paper_values()
    row = tables.get("operators", {}).get("rows", {}).get(paper_key)
    if row and row.get("params_m") is not None:
        return {"params_m": float(row["params_m"]), "source": "DGNO paper, " + tables["operators"]["source"].split(":")[0]}
    if paper_key.startswith("dgno"):
        row = tables.get("params_flops", {}).get("rows", {}).get("dgno")
        if row and row.get("params_m") is not None:
            return {"params_m": float(row["params_m"]), "source": "DGNO paper, text (line 689)"}
    row = tables.get("baseline_params", {}).get("rows", {}).get(paper_key)
    if row and row.get("params_m") is not None:
        return {"params_m": float(row["params_m"]), "source": str(row["source"])}
    return None


def paper_psnr_params(paper_keys: Mapping[str, str], *, paper_column: str | None) -> pd.DataFrame:
    """The paper's points: PSNR of the main table's `paper_column` against a published parameter count.

    paper_keys: {label: paper row key}. A method is drawn only when both numbers are printed
    somewhere (DGNO paper or the method's own paper); nothing is estimated.
    """
    rows = []
    main = load_paper_values().get("main", {}).get("rows", {})
    for label, key in paper_keys.items():
        psnr = main.get(key, {}).get(paper_column or "", {}).get("psnr")
        pub = published_params(key)
        if psnr is None or pub is None:
            continue
        rows.append({"label": label, "method": key, "params_m": pub["params_m"], "psnr": float(psnr), "source": pub["source"]})
    return pd.DataFrame(rows, columns=["label", "method", "params_m", "psnr", "source"])
