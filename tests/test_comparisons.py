"""Results tables with their uncertainty (dgno.report.comparisons): the stated differences with intervals
that cover the truth, mean ± sd over seeds, the highlight that a tie does not get — in the statistics and
in the rendered report — and the edge-band and StarDist gains from per-image values."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dgno.io import replicate_dir, write_json
from dgno.report.build import build_report
from dgno.report.comparisons import Resampling, edge_band_stats, select_replicates, stardist_stats, table_spec, table_stats
from dgno.report.reading import read_scores
from dgno.workflow.config import validate_config

FAST = Resampling(n_resamples=2000)


def _config(seeds: int = 1) -> dict:
    raw = {
        "name": "demo",
        "seed": 0,
        "scale": "smoke",
        "datasets": {"nuclei": {"source": "demo_nuclei", "levels": {"z02": [2.0, 3.0], "z06": [1.0, 2.0]}, "train_levels": ["z02", "z06"], "test_levels": ["z02", "z06"]}},
        "methods": {m: {"model": m, "label": m.upper()} for m in ("gg", "lg", "dgno-face", "dgno-cell")},
        "train": {},
        "evaluate": {"lpips": False},
        "experiments": {"operators": {"dataset": "nuclei", "methods": ["gg", "lg", "dgno-face", "dgno-cell"], "seeds": seeds}},
    }
    return validate_config(raw)


def _evaluations(results: Path, shifts: dict[str, float], *, n: int = 20, seeds: int = 1, noise: float = 0.05) -> list[Path]:
    """summary.json + per_image.csv of every row at both levels: a shared image difficulty, a method shift,
    per-image noise and, for trained rows, a per-seed offset."""
    rng = np.random.default_rng(7)
    base = {lvl: rng.normal(28, 2, n) for lvl in ("z02", "z06")}
    paths = []
    for method, shift in shifts.items():
        for r in range(seeds if method != "input" else 1):
            offset = rng.normal(0, 0.02) if method != "input" else 0.0
            for lvl in ("z02", "z06"):
                folder = results / "eval" / "nuclei" / replicate_dir(method, r) / lvl
                folder.mkdir(parents=True, exist_ok=True)
                psnr = base[lvl] + shift + offset + rng.normal(0, noise, n)
                pd.DataFrame({"id": [f"i{k:02d}" for k in range(n)], "psnr": psnr, "ssim": 0.5 + psnr / 100}).to_csv(folder / "per_image.csv", index=False)
                summary = {"dataset": "nuclei", "method": method, "level": lvl, "n_images": n, "psnr": float(psnr.mean()), "ssim": float((0.5 + psnr / 100).mean()), "lpips": None}
                write_json(folder / "summary.json", {**summary, **({"replicate": r} if r else {})})
                paths.append(folder / "summary.json")
    return paths


def _stats(config: dict, results: Path, shifts: dict[str, float], **kw) -> pd.DataFrame:
    frame = read_scores(_evaluations(results, shifts, **kw))
    return table_stats(select_replicates(frame, config, "operators"), table_spec(config, "operators"), FAST)


def _row(stats: pd.DataFrame, method: str, versus: str = "", metric: str = "psnr") -> pd.Series:
    hit = stats[(stats["method"] == method) & (stats["versus"] == versus) & (stats["metric"] == metric)]
    assert len(hit) == 1, (method, versus, metric)
    return hit.iloc[0]


def test_stated_differences_cover_the_truth_and_the_leader_is_highlighted(tmp_path):
    config = _config()
    stats = _stats(config, tmp_path / "results", {"input": -3.0, "gg": 0.0, "lg": 0.1, "dgno-face": 0.3, "dgno-cell": 1.0})
    assert table_spec(config, "operators")["versus"] == ["input", "gg"]  # DG − GG and LG − GG, each against the blurred input
    cell_gg = _row(stats, "dgno-cell", "gg")
    assert cell_gg["low"] < 1.0 < cell_gg["high"] and cell_gg["low"] > 0.8  # paired: image difficulty cancels
    assert cell_gg["n_images"] == 20 and cell_gg["interval_method"] == "BCa"
    assert _row(stats, "lg", "input")["estimate"] == pytest.approx(3.1, abs=0.05)
    assert _row(stats, "dgno-cell")["highlight"] == "best"
    assert set(stats[stats["versus"] == ""]["highlight"]) == {"best", ""}
    assert _row(stats, "input")["highlight"] == ""  # the blurred input is a reference row, never a candidate


def test_a_tie_is_marked_as_a_tie_not_highlighted(tmp_path):
    stats = _stats(_config(), tmp_path / "results", {"input": -3.0, "gg": 0.0, "lg": 0.0, "dgno-face": 0.0, "dgno-cell": -1.0}, noise=0.3)
    values = stats[(stats["versus"] == "") & (stats["metric"] == "psnr")]
    marks = dict(zip(values["method"], values["highlight"]))
    assert "best" not in marks.values()
    tied = {m for m, h in marks.items() if h == "tie"}
    assert len(tied) >= 2 and tied <= {"gg", "lg", "dgno-face"} and marks["dgno-cell"] == ""  # 1 dB behind: out of the tie


def test_seed_replicates_give_mean_and_sd_over_seeds(tmp_path):
    config = _config(seeds=3)
    stats = _stats(config, tmp_path / "results", {"input": -3.0, "gg": 0.0, "lg": 0.0, "dgno-face": 0.5, "dgno-cell": 0.5}, seeds=3)
    face = _row(stats, "dgno-face")
    assert face["n_seeds"] == 3 and 0 < face["seed_sd"] < 0.1
    gain = _row(stats, "dgno-face", "gg")
    assert gain["n_seeds"] == 3 and gain["interval_method"] == "percentile, images × seeds" and gain["low"] > 0
    assert _row(stats, "lg", "input")["n_seeds"] == 3  # the blurred input, evaluated once, pairs with every seed
    # an experiment without seeds reads replicate 0 only, even where the files of other seeds exist
    single = table_stats(select_replicates(read_scores(sorted((tmp_path / "results").rglob("summary.json"))), _config(), "operators"), table_spec(_config(), "operators"), FAST)
    assert set(single["n_seeds"].dropna()) == {1}


def test_the_rendered_report_highlights_a_resolved_lead_only(tmp_path):
    """The operators table as the report renders it: the tie of GG and LG gets no highlight; a resolved
    lead does; the Δ columns carry their intervals."""
    config = _config()
    results = tmp_path / "results"
    stats = _stats(config, results, {"input": -3.0, "gg": 0.0, "lg": 0.0, "dgno-face": 0.0, "dgno-cell": 0.0}, noise=0.4)
    (results / "tables").mkdir(parents=True, exist_ok=True)
    stats.to_csv(results / "tables" / "operators_stats.csv", index=False)
    build_report(config, results, tmp_path / "tie.html")
    section = (tmp_path / "tie.html").read_text().split('id="operators"')[1].split("</section>")[0]
    assert 'class="best"' not in section and section.count('<span class="tie">tie</span>') >= 2
    assert "Δ PSNR vs GG" in section and re.search(r'<span class="ci">\[[-+]\d\.\d\d, [-+]\d\.\d\d\]</span>', section)

    again = tmp_path / "again" / "results"
    resolved = _stats(config, again, {"input": -3.0, "gg": 0.0, "lg": 0.0, "dgno-face": 0.0, "dgno-cell": 1.5})
    (again / "tables").mkdir(parents=True, exist_ok=True)
    resolved.to_csv(again / "tables" / "operators_stats.csv", index=False)
    build_report(config, again, tmp_path / "lead.html")
    section = (tmp_path / "lead.html").read_text().split('id="operators"')[1].split("</section>")[0]
    row = re.search(r"<tr><td>DGNO-CELL</td>(.*?)</tr>", section, re.S).group(1)
    assert row.split("</td>")[0].strip().startswith('<td class="best">')
    others = [r for r in re.findall(r"<tr><td>([^<]+)</td>(.*?)</tr>", section, re.S) if r[0] != "DGNO-CELL"]
    assert others and not [name for name, cells in others if 'class="best"' in cells]


def test_edge_band_gains_pool_squared_errors_over_images(tmp_path):
    rng = np.random.default_rng(2)
    rows = []
    for i in range(15):
        for region, gain_db in (("edge", 1.0), ("interior", 0.0)):
            sse_gg = rng.gamma(4.0, 1.0)
            for method, sse in (("input", 3 * sse_gg), ("gg", sse_gg), ("dgno-cell", sse_gg * 10 ** (-gain_db / 10) * rng.lognormal(0, 0.03))):
                rows.append({"dataset": "d", "level": "z", "method": method, "replicate": 0, "id": f"i{i}", "region": region, "sse": sse, "n_values": 100, "pixels": 100})
    stats = edge_band_stats(pd.DataFrame(rows), ["input", "gg"], FAST)
    edge = stats[(stats["metric"] == "psnr_edge") & (stats["method"] == "dgno-cell") & (stats["versus"] == "gg")].iloc[0]
    assert edge["estimate"] == pytest.approx(1.0, abs=0.05) and edge["low"] > 0.8
    interior = stats[(stats["metric"] == "psnr_interior") & (stats["method"] == "dgno-cell") & (stats["versus"] == "gg")].iloc[0]
    assert interior["low"] < 0 < interior["high"]
    marks = stats[(stats["metric"] == "psnr_interior") & (stats["versus"] == "")].set_index("method")["highlight"]
    assert marks["gg"] == marks["dgno-cell"] == "tie" and marks["input"] == ""


def test_stardist_gain_over_blurred_and_the_best_restoration(tmp_path):
    rng = np.random.default_rng(5)
    rows = []
    for i in range(20):
        for cond, p in (("blurred", 0.3), ("gg", 0.6), ("dgno-cell", 0.62), ("sharp", 0.9)):
            for iou in (0.5, 0.7, 0.9):
                tp = rng.binomial(30, p * (1.3 - iou))
                rows.append({"condition": cond, "level": "z02", "id": f"i{i}", "iou": iou, "tp": tp, "fp": 30 - tp, "fn": 30 - tp})
    stats = stardist_stats(pd.DataFrame(rows), FAST)
    gain = stats[(stats["metric"] == "map") & (stats["method"] == "dgno-cell") & (stats["versus"] == "blurred")].iloc[0]
    assert gain["low"] > 0 and gain["n_images"] == 20
    marks = stats[(stats["metric"] == "map") & (stats["versus"] == "")].set_index("method")["highlight"]
    assert marks["blurred"] == marks["sharp"] == "" and {marks["gg"], marks["dgno-cell"]} == {"tie"}  # 0.60 against 0.62: no lead
