"""Cost vs resolution, PSNR-vs-parameters points, benchmark-file reading and the rank table from a checkpoint."""

from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import patient

from dgno.analysis.cost import _forward_flops, cost_table
from dgno.analysis.rank import dataset_rank_table
from dgno.analysis.runtime import load_bench_results
from dgno.io import write_tiff
from dgno.models.registry import build_model
from dgno.report.psnr_params import measured_psnr_params, paper_psnr_params, published_params


@pytest.mark.slow
def test_cost_table_counts_every_method_and_size():
    frame = cost_table(
        {"gg": {"model": "gg"}, "cell": {"model": "dgno-cell", "overrides": {"flux": "jump"}}}, sizes=[32, 64], scale="smoke"
    )
    assert list(frame["method"]) == ["gg", "gg", "cell", "cell"]
    assert list(frame["size"]) == [32, 64, 32, 64]
    gg = frame[frame["method"] == "gg"]
    assert gg["params"].nunique() == 1  # parameters do not depend on the input size
    assert gg["gmacs"].iloc[1] > 3.5 * gg["gmacs"].iloc[0]  # ~4× pixels → ~4× MACs
    assert np.allclose(frame["gmacs"], frame["gflops"] / 2)
    with pytest.raises(ValueError, match="size"):
        cost_table({"gg": {"model": "gg"}}, sizes=[], scale="smoke")


def test_dgno_flops_are_counted_from_shapes_on_meta_and_match_a_real_pass():
    """The float32 islands (SCM, operator assembly) must not refuse the shape-only ``meta`` device: a
    refusal fell back to a real pass, which on a CPU does not count fused attention (SDPA) at all."""
    torch.manual_seed(0)
    model = build_model("dgno-cell", scale="smoke").eval()
    shapes_only = _forward_flops(copy.deepcopy(model).to("meta"), torch.empty(1, 1, 32, 32, device="meta"))
    assert shapes_only == _forward_flops(model, torch.rand(1, 1, 32, 32)) > 0


def test_published_params_name_their_source_and_never_guess():
    dg = published_params("dgno_cell")
    assert dg["params_m"] == 12.79 and "DGNO paper" in dg["source"]
    restormer = published_params("restormer")
    assert restormer["params_m"] == 26.13 and "Restormer" in restormer["source"]
    assert published_params("gkmnet") is None  # not confirmed from its paper → left out
    paper = paper_psnr_params({"Restormer": "restormer", "GKMNet": "gkmnet", "DGNO-Cell": "dgno_cell"}, paper_column="bbbc006_w1")
    assert list(paper["label"]) == ["Restormer", "DGNO-Cell"]
    assert paper.set_index("label").loc["Restormer", "psnr"] == 35.35
    assert paper_psnr_params({"Restormer": "restormer"}, paper_column=None).empty


def test_measured_points_need_every_level_and_a_count():
    summaries = pd.DataFrame(
        [
            {"dataset": "d", "method": "a", "level": "z1", "psnr": 30.0},
            {"dataset": "d", "method": "a", "level": "z2", "psnr": 32.0},
            {"dataset": "d", "method": "b", "level": "z1", "psnr": 29.0},  # z2 missing
        ]
    )
    sizes = pd.DataFrame(
        [
            {"method": "a", "scale": "demo", "params_m": 0.5},
            {"method": "a", "scale": "paper", "params_m": 9.0},
            {"method": "b", "scale": "demo", "params_m": 0.2},
        ]
    )
    out = measured_psnr_params(summaries, sizes, dataset="d", levels=["z1", "z2"], scale="demo", labels={"a": "A", "b": "B"})
    assert out.to_dict("records") == [{"label": "A", "method": "a", "params_m": 0.5, "psnr": 31.0, "source": "this run, demo scale"}]


def test_bench_files_of_both_layouts_are_read_with_device(tmp_path):
    prov = {"device": "cuda: Test GPU"}
    (tmp_path / "fwd.json").write_text(
        json.dumps(
            {
                "results": [
                    {
                        "kind": "forward",
                        "model": "dgno-cell",
                        "scale": "paper",
                        "size": 128,
                        "batch": 1,
                        "images_per_second": 10.0,
                        "peak_memory_mb": 100.0,
                        "provenance": prov,
                    }
                ]
            }
        )
    )
    (tmp_path / "train.json").write_text(
        json.dumps(
            {
                "results": [
                    {
                        "kind": "train",
                        "model": "gg",
                        "scale": "paper",
                        "size": 256,
                        "batch": 8,
                        "iterations_per_second": 2.0,
                        "peak_memory_mb": 5.0,
                        "provenance": prov,
                    }
                ]
            }
        )
    )
    (tmp_path / "cpu.json").write_text(
        json.dumps({"device": "cpu: X", "settings": {"forward_size": 256}, "models": {"nafnet": {"forward_s": 0.5, "peak_rss_mb": 900.0}}})
    )
    (tmp_path / "backends.json").write_text(
        json.dumps(
            {
                "device": "cuda: Test GPU",
                "scan_backends": ["torch", "mamba_ssm"],
                "forward": [
                    {"model": "dgno-cell", "size": 256, "scan_backend": b, "images_per_second": ips, "peak_memory_mb": 9.0}
                    for b, ips in (("torch", 15.0), ("mamba_ssm", 30.0))
                ],
                "train": [
                    {
                        "kind": "train",
                        "model": "dgno-cell",
                        "scale": "paper",
                        "size": 256,
                        "batch": 8,
                        "iterations_per_second": 5.0,
                        "scan_backend": "mamba_ssm",
                        "provenance": prov,
                    }
                ],
            }
        )
    )
    (tmp_path / "other.json").write_text(json.dumps([1, 2]))
    (tmp_path / "broken.json").write_text('{"results": [')  # truncated
    (tmp_path / "fields.json").write_text(json.dumps({"results": [{"model": "x"}]}))  # a runtime layout missing fields
    frame = load_bench_results(sorted(tmp_path.glob("*.json")))
    problems = frame.set_index("file")
    assert problems.loc["broken.json", "kind"] == "unreadable" and "JSONDecodeError" in problems.loc["broken.json", "problem"]
    assert problems.loc["fields.json", "kind"] == "unreadable" and "KeyError" in problems.loc["fields.json", "problem"]
    assert problems.loc["other.json", "kind"] == "other"
    assert problems.loc["cpu.json", "commit"] == "unknown"  # stated, not guessed
    frame = frame[~frame["kind"].isin(["unreadable", "other"])]
    backends = frame[frame["file"] == "backends.json"]
    fwd = backends[backends["kind"] == "forward"].set_index("model")["images_per_second"].to_dict()
    assert fwd == {"dgno-cell [scan: torch]": 15.0, "dgno-cell [scan: mamba_ssm]": 30.0}  # one row per backend, not averaged
    assert backends[backends["kind"] == "train"]["model"].tolist() == ["dgno-cell [scan: mamba_ssm]"]
    frame = frame[frame["file"] != "backends.json"]
    by = frame.set_index("file")
    assert by.loc["fwd.json", "device"] == "cuda: Test GPU" and by.loc["fwd.json", "memory"].startswith("CUDA")
    assert by.loc["train.json", "images_per_second"] == 16.0  # batch × iterations/s
    assert by.loc["cpu.json", "images_per_second"] == 2.0 and by.loc["cpu.json", "memory"].startswith("process peak RSS")
    assert "other.json" not in by.index and by.loc["fwd.json", "commit"] == prov.get("git_commit", "unknown")


def test_dataset_rank_table_from_checkpoints(tmp_path):
    data = tmp_path / "data"
    rng = np.random.default_rng(0)
    (data / "gt").mkdir(parents=True)
    (data / "blur" / "z02").mkdir(parents=True)
    (data / "split.csv").write_text("id,split\na,train\nb,test\nc,test\n")
    for i in "abc":
        img = rng.random((24, 32), dtype=np.float32)
        write_tiff(data / "gt" / f"{i}.tif", img)
        write_tiff(data / "blur" / "z02" / f"{i}.tif", img)
    ckpts = {}
    for name in ("gg", "dgno-cell"):
        model = build_model(name, scale="smoke")
        spec = {"name": name, "scale": "smoke", "hparams": model.hparams, "overrides": {}}
        path = tmp_path / f"{name}.pt"
        torch.save({"spec": spec, "state_dict": model.state_dict()}, path)
        ckpts[name] = str(path)
    table = dataset_rank_table(ckpts, data_dir=str(data), level="z02", max_images=1)
    assert set(table["method"]) == {"gg", "dgno-cell"}
    assert (table["n_images"] == 1).all() and (table["level"] == "z02").all()
    assert len(table) == 2 * 3 * 2  # methods × scales × T


def test_gpu_speed_file_rows_and_tables(tmp_path):
    """A benchmarks/gpu/speed.py file: every mode becomes a row; graph replays carry no (understated) memory;
    the paper-protocol table shows DGNO ÷ Restormer beside the paper's ratio."""
    from dgno.report.cost_section import speed_tables

    prov = {"device": "cuda: test GPU", "git_commit": "abc123", "time_utc": "2026-11-26T18:00:00+00:00"}

    def inf(model, mode, ips, mb, size=256, batch=1, dtype="fp32"):
        scan = "triton" if model.startswith("dgno") else None
        return {"model": model, "scan_backend": scan, "size": size, "batch": batch, "dtype": dtype, "mode": mode, "images_per_second": ips, "peak_allocated_mb": mb}

    blob = {
        "provenance": prov,
        "inference": [
            inf("dgno-cell", "autograd", 27.0, 4096.0), inf("restormer", "autograd", 13.5, 12288.0),
            inf("dgno-cell", "eager", 40.0, 400.0), inf("dgno-cell", "graphs", 60.0, 10.0), inf("restormer", "graphs", 30.0, 10.0),
        ],
        "train": [{"model": "dgno-cell", "scan_backend": "triton", "size": 256, "batch": 8, "dtype": "fp32", "seconds_per_iteration": 0.18, "iterations_per_second": 1 / 0.18, "peak_allocated_mb": 2048.0, "tag": None}],
    }  # fmt: skip
    (tmp_path / "gpu_speed_x.json").write_text(json.dumps(blob))
    frame = load_bench_results([tmp_path / "gpu_speed_x.json"])
    graphs = frame[frame["mode"] == "graphs"]
    assert len(frame) == 6 and graphs["peak_memory_mb"].isna().all()
    assert frame.loc[frame["mode"] == "autograd", "memory"].iloc[0] == "CUDA max_memory_allocated, forward with autograd on"
    prows = {"s256": {"dgno": {"mem_gb": 4, "img_per_s": 27}, "restormer": {"mem_gb": 12, "img_per_s": 11}}}
    tables = speed_tables(frame[frame["kind"] == "forward"], frame[frame["kind"] == "train"], prows, "gpu_speed_x.json", "cuda: test GPU")
    protocol, inference, train = tables
    ratio = dict(protocol.rows)["dgno-cell [scan: triton] ÷ Restormer"]
    assert ratio[0].measured == pytest.approx(2.0) and ratio[0].paper == pytest.approx(27 / 11)
    assert ratio[1].measured == pytest.approx(1 / 3) and ratio[1].paper == pytest.approx(4 / 12)
    rows = dict(inference.rows)
    assert rows["dgno-cell [scan: triton] (graphs)"][0].measured == 60.0  # the fastest mode, named
    assert rows["dgno-cell [scan: triton] ÷ Restormer"][0].measured == pytest.approx(2.0)
    assert train.rows[0][1][1].measured == pytest.approx(60000 * 0.18 / 3600)
    assert "abc123" in protocol.caption and "autograd on" in protocol.caption


def test_a_results_list_of_another_benchmark_is_other_not_unreadable(tmp_path):
    """memory_streaming_cpu.json also has a "results" list, but of peak-RSS rows without a model."""
    (tmp_path / "memory.json").write_text(json.dumps({"results": [{"kind": "train", "mode": "streamed", "pairs": 150, "peak_rss_mb": 846.2}]}))
    frame = load_bench_results([tmp_path / "memory.json"])
    assert frame["kind"].tolist() == ["other"]


def _levers_blob() -> dict:
    """A benchmarks/gpu/levers_and_evaluation.py result as the GPU run writes it (constructed: no GPU here)."""
    prov = {"device": "cuda: NVIDIA H100 80GB HBM3", "git_commit": "def456", "time_utc": "2026-12-01T10:00:00+00:00"}

    def step(levers, ms):
        return {"model": "dgno-cell", "scan_backend": "triton", "size": 256, "batch": 8, "dtype": "fp32", "levers": levers, "settings": {},
                "seconds_per_iteration": ms / 1e3, "iterations_per_second": 1e3 / ms, "peak_allocated_mb": 29000.0}  # fmt: skip

    def inf(model, mode, ips):
        return {"model": model, "scan_backend": "triton" if model.startswith("dgno") else None, "size": 256, "batch": 1, "dtype": "fp32",
                "mode": mode, "images_per_second": ips, "peak_allocated_mb": 400.0}  # fmt: skip

    return {
        "benchmark": "Training-step levers, bf16, inference ratios, whole-test-set evaluation", "provenance": prov,
        "inference": [inf("dgno-cell", "graphs+cl", 90.0), inf("dgno-cell", "eager", 30.0), inf("restormer", "graphs", 36.0), inf("restormer", "autograd", 15.0), inf("dgno-cell", "autograd", 27.0)],
        "train": [step("default", 323.0), step("channels_last", 280.0), step("paid: channels_last+cuda_graphs", 190.0)],
        "eval_pipeline": [{"model": "dgno-cell", "config": "graphs+overlap_io", "frames": 32, "frame": [520, 696], "tile": 512, "tile_batch": 4,
                           "cuda_graphs": True, "overlap_io": True, "images_per_second": 12.5, "gpu_utilisation_percent": 87.0}],
        "grad_check": [{"model": "dgno-cell", "routing": "deterministic", "levers": "paid: channels_last+cuda_graphs",
                        "fastest_vs_default": {"grad_rel_l2": 2e-4, "loss_rel": 1e-6}, "default_vs_default": {"grad_rel_l2": 1e-4, "loss_rel": 0.0}}],
        "bf16_training": [{"model": "dgno-cell", "iterations": 300, "fp32_val_psnr": 30.12, "bf16_val_psnr": 30.02, "gap_db_fp32_minus_bf16": 0.1,
                           "bf16_allowed": False, "fp32_seconds_per_iteration": 0.08, "bf16_seconds_per_iteration": 0.06}],
        "compile": [{"model": "dgno-cell", "levers": "compile", "compile_seconds": 95.0, "ms_per_it": 250.0, "reference_ms": 323.0, "break_even_iterations": 1301.0}],
        "dg_layers": [{"model": "dgno-cell", "total_ms": 24.0, "share_of_default_step": 0.074, "levels": [{"fwd_bwd_ms": 12.0}], "full_res_compiled_fwd_bwd_ms": 5.0}],
        "decisions": {"train_levers_keep": ["channels_last", "cuda_graphs"], "gradient_check_passed": True,
                      "train_settings_for_paper_config": {"channels_last": True, "cuda_graphs": True}, "evaluate_settings_for_paper_config": {"cuda_graphs": True}},
    }  # fmt: skip


def test_levers_file_gives_lever_rows_evaluations_and_findings(tmp_path):
    """levers_and_evaluation.py records reach the report's runtime section and benchmarks/tools/gpu_speed_table.py:
    training rows name their levers, evaluations get their own table, findings are sentences."""
    import subprocess
    import sys

    from conftest import ROOT

    from dgno.report.cost_section import runtime_section, speed_tables

    path = tmp_path / "levers_h100.json"
    path.write_text(json.dumps(_levers_blob()))
    frame = load_bench_results([path])
    assert sorted(frame["kind"].unique()) == ["decision", "evaluate", "forward", "train"]
    train = frame[frame["kind"] == "train"]
    assert train["mode"].tolist() == ["train+levers"] * 3 and train["detail"].tolist()[:2] == ["the default step (no lever)", "levers: channels_last"]
    findings = frame[frame["kind"] == "decision"].set_index("model")["detail"]
    assert "gap +0.100 dB" in findings["bf16 training"] and "stays false" in findings["bf16 training"]
    assert "pays after 1301 iterations" in findings["torch.compile"] and "2.0e-04" in findings["gradient check"]
    assert '"cuda_graphs": true' in findings["recommended settings"] and "7%" in findings["DG layers"]

    tables = speed_tables(frame[frame["kind"] == "forward"], train, {}, path.name, "cuda: H100", evaluate=frame[frame["kind"] == "evaluate"])
    inference = next(t for t in tables if t.caption.startswith("Inference"))
    assert dict(inference.rows)["dgno-cell [scan: triton] (graphs+cl)"][0].measured == 90.0  # channels-last graphs are a mode like any
    training = next(t for t in tables if t.caption.startswith("Training"))
    assert any("levers: paid: channels_last+cuda_graphs" in label for label, _ in training.rows)
    (evaluation,) = [t for t in tables if t.caption.startswith("Evaluation")]
    assert evaluation.rows[0][1][0].measured == 12.5 and "GPU utilisation 87 %" in evaluation.rows[0][0]

    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    frame.to_csv(results / "tables" / "runtime_memory.csv", index=False)  # what rule runtime_memory writes
    sec, measured = runtime_section(results)
    assert measured and any(t.caption.startswith("Evaluation") for t in sec.tables)
    (head, rows), *_ = sec.text_tables
    assert head == ["file", "topic", "finding"] and {r[1] for r in rows} >= {"bf16 training", "torch.compile", "gradient check"}

    cmd = [sys.executable, "-m", "benchmarks.tools.gpu_speed_table", str(path)]
    printed = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True, timeout=patient(120)).stdout
    assert "Findings of the training-step levers benchmark" in printed and "graphs+overlap_io" in printed
