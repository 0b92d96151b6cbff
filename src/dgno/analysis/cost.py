"""Parameters and FLOPs against input resolution (the paper's Fig. 1, right).

Each method is built once per size by :func:`dgno.summary.summarize`, which runs one real
forward pass under ``torch.utils.flop_counter``; the counts therefore include whatever the
implementation does at that size (padding to the element grid, window partitions), which a
closed-form ``FLOPs ∝ H·W`` extrapolation would miss for attention-type models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd


def _summarize_on(name: str, *, scale: str, size: int, device: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`dgno.summary.summarize` on CPU; on a GPU the same count with model and input moved there.

    FlopCounterMode counts aten operations, which do not depend on the device; a GPU only makes
    the 1024² paper-scale passes of the slow baselines (MambaIRv2's scan, SwinIR) take seconds
    instead of tens of minutes.
    """
    from dgno.summary import summarize  # torch: imported here so that the report environment needs none

    if device == "cpu":
        return summarize(name, scale=scale, size=size, **dict(overrides))
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from dgno.models.overrides import registry_overrides
    from dgno.models.registry import build_model
    from dgno.summary import count_parameters

    torch.manual_seed(0)
    model = build_model(name, scale=scale, **registry_overrides(dict(overrides))).to(device).eval()
    n = count_parameters(model)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.rand(1, 1, size, size, device=device))
    flops = int(counter.get_total_flops())
    return {"params": n, "params_m": n / 1e6, "gflops": flops / 1e9, "gmacs": flops / 2e9, "size": size, "in_channels": 1}


def cost_table(methods: Mapping[str, Mapping[str, Any]], *, sizes: Sequence[int], scale: str, device: str = "cpu") -> pd.DataFrame:
    """One row per (method, size): params, params_m, gflops, gmacs (GMACs = GFLOPs / 2).

    methods: {method: config entry with 'model' and optional 'overrides'} as in the workflow config.
    """
    if not sizes:
        raise ValueError("cost_table needs at least one image size")
    rows = []
    for method, spec in methods.items():
        for size in sizes:
            s = _summarize_on(spec["model"], scale=scale, size=int(size), device=device, overrides=spec.get("overrides", {}))
            rows.append({"method": method, "model": spec["model"], "scale": scale, "device": device, **s})
            print(f"{method:<16} {size:>5}px  {s['params_m']:.3f} M  {s['gmacs']:.3f} GMACs", flush=True)
    return pd.DataFrame(rows)


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
    from dgno.report.tables import load_paper_values

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
    from dgno.report.tables import load_paper_values

    rows = []
    main = load_paper_values().get("main", {}).get("rows", {})
    for label, key in paper_keys.items():
        psnr = main.get(key, {}).get(paper_column or "", {}).get("psnr")
        pub = published_params(key)
        if psnr is None or pub is None:
            continue
        rows.append({"label": label, "method": key, "params_m": pub["params_m"], "psnr": float(psnr), "source": pub["source"]})
    return pd.DataFrame(rows, columns=["label", "method", "params_m", "psnr", "source"])
