"""The paper's claims with a verdict (dgno.report.claims): every verdict against constructed results
files, "not run" with the command that runs it, seeds, the under-trained flag, and the claims list
in paper_values.yaml consistent with the paper's tables it quotes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dgno.io import replicate_dir
from dgno.report.claim_measures import Options
from dgno.report.claims import claims_frame, claims_section, evaluate_claims, expand_claims, measurement_scale, validate_claims
from dgno.report.reading import load_claims, load_paper_values

ROOT = Path(__file__).resolve().parents[1]
FAST = Options(n_resamples=2000)


def _config(seeds: int = 1) -> dict:
    """A small configuration: shapes (synthetic, `seeds` training seeds), nuclei (operators, StarDist, edge band)."""
    return {
        "name": "demo",
        "scale": "demo",
        "train": {},
        "datasets": {
            "shapes": {"test_levels": ["sigma"], "train_levels": ["sigma"], "paper_column": "sigma_8_10"},
            "nuclei": {"test_levels": ["z02", "z06", "z01"], "train_levels": ["z02", "z06"], "paper_column": "bbbc006_w1"},
        },
        "methods": {m: {"model": m} for m in ("gg", "lg", "dgno-face", "dgno-cell", "restormer", "mpt")},
        "experiments": {
            "synthetic": {"datasets": ["shapes"], "methods": ["gg", "lg", "dgno-face", "dgno-cell"], "seeds": seeds},
            "operators": {"dataset": "nuclei", "methods": ["gg", "lg", "dgno-face", "dgno-cell"]},
            "main": {"datasets": ["nuclei"], "methods": ["restormer", "mpt", "dgno-cell"]},
            "stardist": {"dataset": "nuclei", "level": "z02", "methods": ["gg", "dgno-cell"]},
        },
    }


def _claim(cid: str, a, b, *, kind="paired_difference", experiment="synthetic", direction="greater", **measure) -> dict:
    return {
        "id": cid,
        "claim": f"{a} beats {b}",
        "paper": {"value": 1.0, "where": "test"},
        "measure": {"kind": kind, "experiment": experiment, "a": a, "b": b, "metric": "psnr", "direction": direction, **measure},
        "target": "results/tables/synthetic.csv",
    }


def _per_image(results: Path, dataset: str, method: str, level: str, psnr: np.ndarray, seed=None) -> None:
    folder = results / "eval" / dataset / replicate_dir(method, seed or 0) / level
    folder.mkdir(parents=True, exist_ok=True)
    ids = [f"img{i:02d}" for i in range(len(psnr))]
    pd.DataFrame({"id": ids, "psnr": psnr, "ssim": 0.9, "lpips": 0.2}).to_csv(folder / "per_image.csv", index=False)


def _shapes(results: Path, shifts: dict[str, float], n: int = 30, seed: int = 0, seeds=(None,)) -> None:
    rng = np.random.default_rng(seed)
    base = rng.normal(30, 3, n)  # image difficulty, shared by every method
    for s in seeds:
        for method, shift in shifts.items():
            _per_image(results, "shapes", method, "sigma", base + shift + rng.normal(0, 0.2, n), seed=s)


def _one(rows: list[dict], cid: str) -> dict:
    return next(r for r in rows if r["id"] == cid)


def test_every_verdict_against_constructed_results(tmp_path):
    results = tmp_path / "results"
    _shapes(results, {"gg": 0.0, "dgno-face": 1.0, "dgno-cell": -0.6})
    claims = [
        _claim("face_gt_gg", "dgno-face", "gg"),  # +1.0 dB, the paper's side
        _claim("cell_gt_gg", "dgno-cell", "gg"),  # -0.6 dB, the other side
        _claim("gg_gt_gg_noise", "gg", "dgno-face", direction="less"),  # -1.0 dB, claimed 'less': supported
        _claim("lg_gt_gg", "lg", "gg"),  # lg never evaluated on shapes
        _claim("mpt_gt_gg", "mpt", "gg"),  # mpt is configured, but no experiment runs it on shapes
        _claim("lifting", "nafnet-dgno", "nafnet", experiment="lifting"),  # not in this configuration
    ]
    rows = evaluate_claims(_config(), results, claims, options=FAST)
    face = _one(rows, "face_gt_gg")
    assert face["verdict"] == "supported" and face["low"] > 0 and face["measured"] == pytest.approx(1.0, abs=0.15)
    assert face["n_images"] == 30 and face["interval_method"] == "BCa" and face["dataset"] == "shapes" and face["scale"] == "demo"
    assert _one(rows, "cell_gt_gg")["verdict"] == "contradicted" and _one(rows, "cell_gt_gg")["high"] < 0
    assert _one(rows, "gg_gt_gg_noise")["verdict"] == "supported"
    lg = _one(rows, "lg_gt_gg")
    assert lg["verdict"] == "not run" and lg["measured"] is None
    assert lg["command"] == "snakemake --cores all results/eval/shapes/lg/sigma/per_image.csv"
    mpt = _one(rows, "mpt_gt_gg")
    assert mpt["verdict"] == "not run" and "not run on shapes" in mpt["reason"] and "config/claims.yaml" in mpt["command"]
    lifting = _one(rows, "lifting")
    assert lifting["verdict"] == "not run" and "no experiment 'lifting'" in lifting["reason"] and "config/paper.yaml" in lifting["command"]


def test_a_tie_is_not_resolved(tmp_path):
    results = tmp_path / "results"
    _shapes(results, {"gg": 0.0, "dgno-face": 0.01})
    row = evaluate_claims(_config(), results, [_claim("tie", "dgno-face", "gg")], options=FAST)[0]
    assert row["verdict"] == "not resolved" and row["low"] < 0 < row["high"]


def test_best_of_picks_this_runs_best_baseline_and_levels_follow_the_table(tmp_path):
    results = tmp_path / "results"
    rng = np.random.default_rng(1)
    base = rng.normal(30, 2, 12)
    for level in ("z02", "z06", "z01"):
        for method, shift in {"restormer": 0.2, "mpt": 0.5, "dgno-cell": 1.5}.items():
            _per_image(results, "nuclei", method, level, base + shift + rng.normal(0, 0.1, 12))
    claim = _claim(
        "best", "dgno-cell", ["gkmnet", "restormer", "mpt"], kind="best_of_difference", experiment="main", paper_column="bbbc006_w1"
    )
    row = evaluate_claims(_config(), results, [claim], options=FAST)[0]
    assert row["b"] == "mpt" and row["levels"] == ["z02", "z06"] and row["verdict"] == "supported"
    assert row["measured"] == pytest.approx(1.0, abs=0.1) and any("best of restormer, mpt" in n for n in row["notes"])
    # the paper's w2 column has no dataset here: not measured by this configuration
    other = {**claim, "id": "w2", "measure": {**claim["measure"], "paper_column": "bbbc006_w2"}}
    assert "stands for the paper's 'bbbc006_w2'" in evaluate_claims(_config(), results, [other], options=FAST)[0]["reason"]


def test_seed_replicates_are_read_from_their_paths_and_aggregated(tmp_path):
    results = tmp_path / "results"
    _shapes(results, {"gg": 0.0, "dgno-face": 1.0}, seeds=(0, 1, 2))
    row = evaluate_claims(_config(seeds=3), results, [_claim("seeds", "dgno-face", "gg")], options=FAST)[0]
    assert row["n_seeds"] == 3 and row["interval_method"] == "percentile, images × seeds"
    assert row["seed_mean"] == pytest.approx(1.0, abs=0.1) and row["seed_sd"] < 0.2 and row["verdict"] == "supported"
    # a missing replicate is "not run", naming its path
    (results / "eval/shapes/dgno-face/seed=2/sigma/per_image.csv").unlink()
    missing = evaluate_claims(_config(seeds=3), results, [_claim("seeds", "dgno-face", "gg")], options=FAST)[0]
    assert missing["verdict"] == "not run" and missing["command"].endswith("results/eval/shapes/dgno-face/seed=2/sigma/per_image.csv")


def _curve(results: Path, dataset: str, method: str, values: list[float]) -> None:
    folder = results / "train" / dataset / method
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, v in enumerate(values, start=1):
        rows.append({"iteration": 50 * i - 25, "loss": 0.1, "lr": 1e-3, "val_psnr": "", "seconds": i})  # a log-only row
        rows.append({"iteration": 50 * i, "loss": 0.1, "lr": 1e-3, "val_psnr": v, "seconds": i})
    pd.DataFrame(rows).to_csv(folder / "train_metrics.csv", index=False)


def test_a_verdict_resting_on_an_under_trained_model_says_so(tmp_path):
    results = tmp_path / "results"
    _shapes(results, {"gg": 0.0, "dgno-face": 1.0})
    _curve(results, "shapes", "dgno-face", [20, 21, 21.5, 21.7, 21.8, 22.0, 22.2, 22.5, 22.8, 23.2])  # still climbing
    _curve(results, "shapes", "gg", [20, 21, 21.5, 21.6, 21.6, 21.6, 21.6, 21.6, 21.6, 21.6])  # converged
    row = evaluate_claims(_config(), results, [_claim("face_gt_gg", "dgno-face", "gg")], options=FAST)[0]
    assert row["verdict"] == "supported" and len(row["under_trained"]) == 1
    assert row["under_trained"][0].startswith("dgno-face: validation PSNR +") and row["no_training_curve"] == []
    sec = claims_section(_config(), results, rows=[row], options=FAST)
    assert "supported (under-trained model)" in sec.text_tables[0][1][0][3]
    assert "rests on an under-trained model" in sec.text_tables[0][1][0][5]


def _edge_band(results: Path, per_image: bool) -> None:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(25):
        for region, gain_db in (("edge", 0.8), ("interior", 0.0)):
            sse_gg = rng.gamma(5.0, 1.0)
            for method, sse in (("gg", sse_gg), ("dgno-cell", sse_gg * 10 ** (-gain_db / 10) * rng.lognormal(0, 0.05))):
                for level in ("z02", "z06"):
                    rows.append(
                        {
                            "dataset": "nuclei",
                            "level": level,
                            "method": method,
                            "id": f"i{i}",
                            "region": region,
                            "sse": sse,
                            "n_values": 100,
                        }
                    )
    frame = pd.DataFrame(rows)
    (results / "tables").mkdir(parents=True, exist_ok=True)
    if per_image:
        frame.to_csv(results / "tables" / "edge_band_nuclei_per_image.csv", index=False)
    pooled = frame.groupby(["dataset", "level", "method", "region"], as_index=False)[["sse", "n_values"]].sum()
    pooled["psnr"] = 10 * np.log10(pooled["n_values"] / pooled["sse"])
    pooled.to_csv(results / "tables" / "edge_band_nuclei.csv", index=False)


@pytest.mark.parametrize("per_image", [True, False])
def test_edge_band_gain_with_and_without_per_image_values(tmp_path, per_image):
    results = tmp_path / "results"
    _edge_band(results, per_image)
    claims = [
        _claim("edge", ["dgno-face", "dgno-cell"], "gg", kind="edge_band_difference", experiment="operators", region="edge"),
        _claim("interior", "dgno-cell", "gg", kind="edge_band_difference", experiment="operators", region="interior"),
    ]
    rows = {r["id"]: r for r in evaluate_claims(_config(), results, claims, options=FAST)}
    assert set(rows) == {"edge[dgno-face]", "edge[dgno-cell]", "interior"}
    assert rows["edge[dgno-face]"]["verdict"] == "not run"  # the table has no dgno-face rows
    edge = rows["edge[dgno-cell]"]
    assert edge["measured"] == pytest.approx(0.8, abs=0.1)
    if per_image:
        assert edge["verdict"] == "supported" and rows["interior"]["verdict"] == "not resolved"
    else:  # the pooled table alone gives the difference but no interval
        assert edge["verdict"] == "not resolved" and np.isnan(edge["low"])
        assert any("results/tables/edge_band_nuclei_per_image.csv" in n for n in edge["notes"])


def _stardist(results: Path, per_image: bool) -> None:
    rng = np.random.default_rng(4)
    rows = []
    for i in range(20):
        for cond, p_match in (("blurred", 0.4), ("gg", 0.7), ("dgno-cell", 0.72), ("sharp", 0.9)):
            for iou in (0.5, 0.7, 0.9):
                n = 30
                tp = rng.binomial(n, p_match * (1.3 - iou))
                rows.append({"condition": cond, "level": "z02", "id": f"i{i}", "iou": iou, "tp": tp, "fp": n - tp, "fn": n - tp})
    frame = pd.DataFrame(rows)
    (results / "tables").mkdir(parents=True, exist_ok=True)
    if per_image:
        frame.to_csv(results / "tables" / "stardist_nuclei_per_image.csv", index=False)
    table = []
    for cond, sub in frame.groupby("condition", sort=False):
        ap = {f"ap{round(t * 100)}": g["tp"].sum() / (g["tp"] + g["fp"] + g["fn"]).sum() for t, g in sub.groupby("iou")}
        table.append({"condition": cond, "level": "z02", **ap, "map": np.mean(list(ap.values())), "n_images": 20})
    pd.DataFrame(table).to_csv(results / "tables" / "stardist_nuclei.csv", index=False)


@pytest.mark.parametrize("per_image", [True, False])
def test_stardist_ap_against_blurred_and_between_restorations(tmp_path, per_image):
    results = tmp_path / "results"
    _stardist(results, per_image)
    claims = [
        _claim("vs_blurred", "dgno-cell", "blurred", kind="stardist_difference", experiment="stardist", metric="map"),
        _claim("best", "dgno-cell", ["gg", "dgno-cell"], kind="stardist_difference", experiment="stardist", metric="ap90"),
        _claim("face", "dgno-face", "blurred", kind="stardist_difference", experiment="stardist", metric="map"),
    ]
    rows = {r["id"]: r for r in evaluate_claims(_config(), results, claims, options=FAST)}
    table = pd.read_csv(results / "tables" / "stardist_nuclei.csv").set_index("condition")
    vs = rows["vs_blurred"]
    assert vs["measured"] == pytest.approx(table.loc["dgno-cell", "map"] - table.loc["blurred", "map"])  # pooled AP, as the table
    assert rows["best"]["b"] == "gg" and rows["best"]["levels"] == ["z02"]
    assert rows["face"]["verdict"] == "not run" and "not among the StarDist experiment's methods" in rows["face"]["reason"]
    if per_image:
        assert vs["verdict"] == "supported" and vs["n_images"] == 20
        assert rows["best"]["verdict"] == "not resolved"  # 0.72 against 0.70 matching on 20 images
    else:
        assert vs["verdict"] == "not resolved" and "stardist_nuclei_per_image.csv" in " ".join(vs["notes"])


def test_benchmark_ratio_uses_the_newest_file_with_both_models(tmp_path):
    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    base = {"kind": "forward", "mode": "autograd", "size": 256, "batch": 1, "amp_bf16": False, "scale": "paper", "device": "cuda: H100"}
    rows = [
        {**base, "file": "old.json", "recorded_utc": "2025-01-01", "model": "dgno-cell", "peak_memory_mb": 9000.0, "images_per_second": 5.0},
        {**base, "file": "old.json", "recorded_utc": "2025-01-01", "model": "restormer", "peak_memory_mb": 1000.0, "images_per_second": 10.0},
        {**base, "file": "new.json", "recorded_utc": "2026-01-01", "model": "dgno-cell [scan: triton]", "peak_memory_mb": 3000.0, "images_per_second": 28.0},
        {**base, "file": "new.json", "recorded_utc": "2026-01-01", "model": "restormer", "peak_memory_mb": 12000.0, "images_per_second": 14.0},
        {**base, "file": "new.json", "recorded_utc": "2026-01-01", "model": "restormer", "peak_memory_mb": 1.0, "images_per_second": 1.0, "mode": "eager"},
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(results / "tables" / "runtime_memory.csv", index=False)
    claims = [
        _claim("mem", "dgno-cell", "restormer", kind="benchmark_ratio", direction="less", column="peak_memory_mb", size=256),
        _claim("speed", "dgno-cell", "restormer", kind="benchmark_ratio", direction="less", column="images_per_second", size=256),
        _claim("mem512", "dgno-cell", "restormer", kind="benchmark_ratio", direction="less", column="peak_memory_mb", size=512),
    ]
    out = {r["id"]: r for r in evaluate_claims(_config(), results, claims, options=FAST)}
    assert out["mem"]["measured"] == pytest.approx(0.25) and out["mem"]["verdict"] == "supported"
    assert out["mem"]["scale"] == "paper scale (recorded benchmark)" and "new.json" in out["mem"]["notes"][0]
    assert out["speed"]["measured"] == pytest.approx(2.0) and out["speed"]["verdict"] == "contradicted"
    assert out["mem512"]["verdict"] == "not run" and "benchmarks.gpu.speed" in out["mem512"]["command"]


def test_claims_section_lists_every_claim_and_the_command_of_a_missing_one(tmp_path):
    results = tmp_path / "results"
    _shapes(results, {"gg": 0.0, "dgno-face": 1.0})
    claims = [_claim("face_gt_gg", "dgno-face", "gg"), _claim("lg_gt_gg", "lg", "gg")]
    rows = evaluate_claims(_config(), results, claims, options=FAST)
    sec = claims_section(_config(), results, rows=rows, options=FAST)
    assert sec.id == "claims" and sec.verdicts == ["1 supported, 0 contradicted, 0 not resolved, 1 not run (of 2 measurements)."]
    head, table = sec.text_tables[0]
    assert head[3] == "verdict" and [r[3] for r in table] == ["supported", "not run"]
    assert re.search(r"\+\d\.\d\d dB \[\+\d\.\d\d, \+\d\.\d\d\]; 30 images \(BCa\)", table[0][2])
    assert "run: snakemake --cores all results/eval/shapes/lg/sigma/per_image.csv" in table[1][5]
    frame = claims_frame(rows)
    assert list(frame["verdict"]) == ["supported", "not run"]


def test_the_scale_comes_from_the_models_and_their_training_not_the_configs_name():
    paper = {"scale": "paper", "train": {"iterations": 60000}, "datasets": {"w1": {}, "histech": {"train": {"iterations": 300000}}}}
    assert measurement_scale({**paper, "name": "paper"}) == "paper" == measurement_scale({**paper, "name": "my-paper-copy"})
    short = {"scale": "paper", "train": {"iterations": 6000}, "datasets": {"w1": {}, "shapes": {"train": {"iterations": 3000}}, "test_only": {"n_train": 0}}}
    assert measurement_scale({**short, "name": "paper"}) == "paper-size models, 3,000–6,000 training iterations (the paper's: 60,000)"
    assert measurement_scale({"name": "paper", "scale": "demo"}) == "demo"
    assert measurement_scale({"name": "mine", "scale": "smoke"}) == "smoke"


def test_a_malformed_claim_is_refused_by_name():
    bad = _claim("typo", "dgno-face", "gg", direction="bigger")
    with pytest.raises(ValueError, match="claim 'typo': measure.direction 'bigger'"):
        validate_claims([bad])
    with pytest.raises(ValueError, match="duplicate id"):
        validate_claims([_claim("x", "a", "b"), _claim("x", "a", "b")])


# ---------------------------------------------------------------------------------- the paper's list


def _table_numbers(node) -> set[float]:
    if isinstance(node, dict):
        return set().union(*(_table_numbers(v) for v in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(_table_numbers(v) for v in node)) if node else set()
    return {round(float(node), 4)} if isinstance(node, (int, float)) and not isinstance(node, bool) else set()


def test_the_paper_claims_list_is_consistent_with_the_papers_tables():
    """Every number a claim quotes is one of the transcribed table/text numbers; each derived Δ is
    the arithmetic it names (to the paper's rounding); each summary statement it backs exists."""
    block = load_claims()
    claims, statements = block["list"], block["statements"]
    validate_claims(claims)
    known = _table_numbers(load_paper_values())
    ids = [c["id"] for c in claims]
    for required in (
        "shapes_narrow_face_vs_gg",
        "sigma_map_dg_vs_gg",
        "sigma_map_dg_vs_gg_edge",
        "memory_256",
        "stardist_dgno_vs_blurred",
        "lg_vs_gg",
        "main_w1_cell_vs_best_baseline",
    ):
        assert required in ids
    for c in claims:
        paper = c["paper"]
        for name, value in paper.get("numbers", {}).items():
            assert round(float(value), 4) in known, (c["id"], name, value)
        if not paper.get("printed"):
            x, op, y = re.match(r"\s*([\d.]+)\s*([-/])\s*([\d.]+)", paper["derived"]).groups()
            expected = float(x) - float(y) if op == "-" else float(x) / float(y)
            assert paper["value"] == pytest.approx(expected, abs=0.006 if op == "-" else 0.01), c["id"]
        else:
            assert round(float(paper["value"]), 4) in known, c["id"]  # a printed Δ is in the text quotes
        assert set(c.get("backs", [])) <= set(statements), c["id"]
        assert re.search(r"tex line", paper["where"]), c["id"]


@pytest.mark.parametrize("config_file", ["config.yaml", "config/paper.yaml"])
def test_the_paper_list_resolves_in_the_shipped_configurations(tmp_path, config_file):
    """With no results, every claim is 'not run' with a command, never an error."""
    config = yaml.safe_load((ROOT / config_file).read_text())
    rows = evaluate_claims(config, tmp_path / "results", options=FAST)
    assert len(rows) == len(expand_claims(load_claims()["list"]))
    assert {r["verdict"] for r in rows} == {"not run"} and all(r["command"] for r in rows)
    if config["name"] == "paper":  # everything the paper claims is measured by the paper config
        assert not [r["id"] for r in rows if r["reason"].startswith("not measured")]


def test_the_claims_config_measures_every_claim_of_its_three_comparisons(tmp_path):
    """config/claims.yaml: the three comparisons the claims section points at, 3 seeds each, and every claim
    of theirs measurable there (before a run: 'not run' with the command of a missing file, not 'not measured')."""
    from dgno.report.claims import CLAIMS_CONFIG_EXPERIMENTS
    from dgno.workflow.config import load_config

    config = load_config(ROOT / "config" / "claims.yaml")
    assert set(config["experiments"]) == set(CLAIMS_CONFIG_EXPERIMENTS)
    assert {spec["seeds"] for spec in config["experiments"].values()} == {3}
    assert measurement_scale(config).startswith("paper-size models, 3,000–6,000 training iterations") and config["scale"] == "paper"
    rows = evaluate_claims(config, tmp_path / "results", options=FAST)
    ours = {c["id"] for c in load_claims()["list"] if c["measure"].get("experiment") in CLAIMS_CONFIG_EXPERIMENTS}
    unmeasured = {r["id"].split("[")[0] for r in rows if r["id"].split("[")[0] in ours and r["reason"].startswith("not measured")}
    assert unmeasured == {"gg_vs_mpt"}  # MPT belongs to Table 1, which the claims config does not train
