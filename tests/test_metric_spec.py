"""The metrics as data (dgno.metric_spec): one entry per metric, read by evaluation, the results tables, their
statistics, the report's tables and the claims. Changing the set is one edit: a throwaway metric added to
the spec alone reaches the evaluation summary, the table's columns, the statistics and the report."""

from __future__ import annotations

import ast

import numpy as np
import pytest
from conftest import ROOT

from dgno import metric_spec
from dgno.inference.evaluate import identity_restorer, score_dataset
from dgno.report.comparisons import table_spec, table_stats
from dgno.report.reading import collect_summaries, read_scores
from dgno.report.render import metric_table


def _max_abs_error(pred: np.ndarray, gt: np.ndarray) -> float:
    return float(np.max(np.abs(np.clip(pred, 0, 1) - gt)))


# A name no documented example uses (docs/extending.md adds "mae"), declared with its function as one entry.
THROWAWAY = metric_spec.Metric("throwaway_max_err", _max_abs_error, "lower", 4, "Max error")


def test_every_metric_names_a_function_that_scores_an_image_pair():
    rng = np.random.default_rng(0)
    gt = rng.random((40, 40, 3))
    for m in metric_spec.METRICS:
        if m.needs_lpips_weights:
            continue  # LPIPS needs AlexNet weights (tests/test_lpips_offline.py)
        value = m.compute()(np.clip(gt + 0.05, 0, 1), gt)
        assert np.isfinite(value), m.name
    assert metric_spec.metric("psnr_y8").applies((8, 8, 3)) and not metric_spec.metric("psnr_y8").applies((8, 8))
    with pytest.raises(ValueError, match="direction 'up'"):
        metric_spec.Metric("x", "dgno.metrics:psnr", "up", 2, "X")
    with pytest.raises(ValueError, match="not one of psnr, ssim"):
        metric_spec.metric("psnr_ghost")


def test_digits_labels_and_directions_come_from_the_spec_only():
    assert (metric_spec.digits("psnr"), metric_spec.digits("lpips"), metric_spec.digits("ap50")) == (2, 3, 4)
    assert metric_spec.label("lpips") == "LPIPS ↓" and metric_spec.label("psnr") == "PSNR (dB) ↑"
    assert metric_spec.higher_is_better("lpips") is False and metric_spec.higher_is_better("psnr_edge") is True
    assert metric_spec.higher_is_better("params_m") is None
    columns = metric_spec.summary_columns()
    for m in metric_spec.METRICS:  # the LPIPS weights' source right after a metric that needs them, and only there
        after = columns[columns.index(m.name) + 1 : columns.index(m.name) + 2]
        assert (after == [metric_spec.LPIPS_SOURCE]) == m.needs_lpips_weights, m.name
    assert [c for c in columns if c != metric_spec.LPIPS_SOURCE] == metric_spec.metric_names()
    # no other module keeps a table of digits, units or directions (the spec is their one home)
    for path in (ROOT / "src" / "dgno").rglob("*.py"):
        if path.name == "metric_spec.py":
            continue
        tree = ast.parse(path.read_text())
        names = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
        assert not names & {"DIGITS", "UNITS", "HIGHER_IS_BETTER", "METRIC_LABELS", "METRICS"}, path


def test_a_metric_added_to_the_spec_alone_reaches_summaries_tables_statistics_and_the_report(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.setattr(metric_spec, "METRICS", (*metric_spec.METRICS, THROWAWAY))
    name = THROWAWAY.name
    # evaluation: a column of per_image.csv and a mean in summary.json
    paths = []
    for method, restore in [("input", identity_restorer), ("m", lambda img: np.clip(img * 1.02, 0, 1))]:
        summary = score_dataset(restore, tiny_dataset, "a", tmp_path / "eval" / method, method=method, with_lpips=False, progress=False)
        assert summary[name] > 0
        paths.append(tmp_path / "eval" / method / "summary.json")
    # the results table's columns and its statistics
    table = collect_summaries(paths)
    assert name in table.columns and list(table.columns).index(name) == len(table.columns) - 1
    config = {
        "datasets": {"tiny": {"test_levels": ["a"], "train_levels": ["a"]}},
        "methods": {"m": {"model": "gg", "label": "M"}},
        "experiments": {"operators": {"dataset": "tiny", "methods": ["m"]}},
    }
    spec = table_spec(config, "operators")
    assert name in spec["metrics"]
    stats = table_stats(read_scores(paths), spec)
    row = stats[(stats["metric"] == name) & (stats["versus"] == "input")]
    means = table.set_index("method")[name]
    assert len(row) == 1 and row["estimate"].iloc[0] == pytest.approx(means["m"] - means["input"])
    # the report's table shows it with the spec's digits and label
    shown = metric_table(
        table, datasets=["tiny"], methods=["m"], method_cfgs=config["methods"], levels={"tiny": ["a"]},
        metrics=metric_spec.shown_names(), paper_rows=None,
    )  # fmt: skip
    column = shown.columns.index(("tiny", name))
    assert shown.rows[1][1][column].digits == 4 and shown.rows[1][1][column].measured > 0 and metric_spec.label(name) == "Max error ↓"
