"""Report sections of the analysis figures: effective rank (operators), model cost (Fig. 1), runtime/memory."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from dgno.report.build import build_report
from dgno.report.figures import cost_vs_resolution, effective_rank_bars, psnr_vs_params, runtime_memory
from dgno.workflow.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def _section(page: str, sid: str) -> str:
    return page.split(f'id="{sid}"')[1].split("</section>")[0]


def _rank_frame() -> pd.DataFrame:
    rows = []
    for method, label, base in (("gg", "SRNO (GG)", 3.0), ("dgno-face", "DGNO-Face", 5.0)):
        for scale, c in (("s1", 48), ("s2", 24), ("s3", 12)):
            for t in (0, 1):
                e = base + t
                rows.append({"method": method, "label": label, "scale": scale, "t": t, "stride": 1, "channels": c, "tokens": 100, "erank": e, "erank_std": 0.1, "utilization": e / c, "n_images": 6, "level": "z02"})
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_analysis_sections_render_from_results_files(tmp_path):
    cfg = load_config(ROOT / "config.yaml")
    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    (results / "figures").mkdir()
    rank = _rank_frame()
    rank.to_csv(results / "tables" / "effective_rank_nuclei.csv", index=False)
    effective_rank_bars(rank, results / "figures" / "effective_rank_nuclei.png", title="t")
    cost = pd.DataFrame(
        [{"method": m, "label": m, "model": m, "scale": "demo", "size": n, "params_m": 0.5, "gmacs": n / 100, "gflops": n / 50} for m in ("gg", "restormer") for n in (64, 128)]
    )
    cost.to_csv(results / "tables" / "cost_vs_resolution.csv", index=False)
    cost_vs_resolution(cost, results / "figures" / "cost_vs_resolution.png", title="t")
    pd.DataFrame(
        [{"method": "restormer", "scale": s, "params_m": p, "gmacs": 1.0} for s, p in (("demo", 0.2), ("paper", 26.0))]
    ).to_csv(results / "tables" / "model_summary.csv", index=False)
    pts = pd.DataFrame([{"label": "A", "params_m": 1.0, "psnr": 30.0}])
    psnr_vs_params(pts, pts.assign(params_m=10.0), results / "figures" / "psnr_vs_params.png", title="t")
    bench = pd.DataFrame(
        [
            {"file": "gpu.json", "device": "cuda: G", "kind": "forward", "model": "dgno-cell", "scale": "paper", "size": n, "batch": 1, "amp_bf16": False, "images_per_second": 10.0, "peak_memory_mb": 2048.0, "memory": "CUDA max_memory_allocated", "commit": "abc123", "recorded_utc": "2026-11-20T10:00:00+00:00", "problem": None}
            for n in (128, 256)
        ]
        + [{"file": "bad.json", "kind": "unreadable", "problem": "JSONDecodeError: Expecting value"}]
    )
    bench.to_csv(results / "tables" / "runtime_memory.csv", index=False)
    runtime_memory(bench, results / "figures" / "runtime_memory.png", title="t")

    build_report(cfg, results, tmp_path / "index.html")
    page = (tmp_path / "index.html").read_text()
    ops = _section(page, "operators")
    assert "exp(−Σ p_i log p_i)" in ops and "effective_rank_nuclei.csv" in ops  # definition stated in the caption
    assert "DGNO-Face &gt; SRNO (GG) at 6 of 6 latents" in ops
    assert re.search(r"<img src=\"data:image/png;base64,[^\"]+\" alt=\"Effective rank", ops)
    cost_sec = _section(page, "cost")
    assert "Zamir et al." in cost_sec  # published Restormer count named with its source
    assert '<span class="p">26.13</span>' in cost_sec
    assert cost_sec.count("data:image/png;base64,") == 2  # PSNR vs params + cost vs resolution
    rt = _section(page, "runtime_memory")
    assert "benchmarks/results/gpu.json" in rt and "cuda: G" in rt
    assert "Recorded benchmark (not measured in this run)" in rt and "commit abc123" in rt and "recorded 2026-11-20" in rt
    assert "measured in this run" not in rt.replace("not measured in this run", "")  # never claimed as this run's
    assert "benchmarks/results/bad.json: JSONDecodeError" in rt  # reported, not dropped
    catalogue = _section(page, "catalogue")
    assert re.search(r"Runtime / memory vs image size</td><td[^>]*><a href=\"#runtime_memory\">recorded benchmarks \(not measured in this run\)", catalogue)
    assert '<span class="m">2.00</span>' in rt  # 2048 MB shown as 2.00 GB, paper 1 GB at 128 px below it
    assert '<span class="p">1.00</span>' in rt


def test_runtime_section_without_benchmarks_gives_the_command(tmp_path):
    cfg = load_config(ROOT / "config.yaml")
    build_report(cfg, tmp_path / "results", tmp_path / "index.html")
    page = (tmp_path / "index.html").read_text()
    rt = _section(page, "runtime_memory")
    assert "Not run" in rt and "dgno bench forward" in rt
    assert "figure not produced" in _section(page, "cost")
