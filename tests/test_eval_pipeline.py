"""Evaluation with reading and writing overlapped (dgno.inference.pipeline) gives the sequential loop's
scores and files, bit for bit and in order; errors in any stage surface; GPU utilisation is "n/a" on a CPU."""

from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import write_tiny_dataset

from dgno.inference.evaluate import evaluate_checkpoint
from dgno.inference.pipeline import UtilisationSampler, run_pipeline
from dgno.io import read_json
from dgno.train import ModelChoice, TrainConfig, train


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A smoke DGNO-Cell trained for two steps and a test split of 7 images (more than the queues hold)."""
    root = tmp_path_factory.mktemp("pipeline")
    data = write_tiny_dataset(root / "data", n_train=2, n_val=1, n_test=7, size=(48, 40), seed=4)
    cfg = TrainConfig.from_dict(dict(iterations=2, batch_size=1, patch_size=32, val_every=10, log_every=1, checkpoint_every=10, device="cpu"))
    model = train(data, root / "run", model_choice=ModelChoice(name="dgno-cell", scale="smoke"), levels=["a"], cfg=cfg, progress=False)
    return model, data


def test_overlapped_evaluation_equals_the_sequential_one(trained, tmp_path):
    """Same per-image rows (same order), same summary scores, the same restored TIFFs byte for byte."""
    model, data = trained
    summaries = {}
    for overlap in (False, True):
        out = tmp_path / f"overlap={overlap}"
        summaries[overlap] = evaluate_checkpoint(
            model, data, "a", out, tile=32, overlap=8, device="cpu", with_lpips=False, progress=False, overlap_io=overlap
        )
    a, b = tmp_path / "overlap=False", tmp_path / "overlap=True"
    pd.testing.assert_frame_equal(pd.read_csv(a / "per_image.csv"), pd.read_csv(b / "per_image.csv"), check_exact=True)
    assert list(pd.read_csv(b / "per_image.csv")["id"]) == [f"img{i:02d}" for i in range(3, 10)]
    files = sorted(p.name for p in (a / "restored").iterdir())
    assert len(files) == 7 and files == sorted(p.name for p in (b / "restored").iterdir())
    for name in files:
        assert (a / "restored" / name).read_bytes() == (b / "restored" / name).read_bytes()
    for key in ("psnr", "ssim", "n_images"):
        assert summaries[False][key] == summaries[True][key]
    runtime = read_json(b / "summary.json")["runtime"]
    assert runtime["overlap_io"] is True and runtime["images_per_second"] > 0
    assert runtime["gpu_utilisation_percent"] == "n/a" and "not a CUDA device" in runtime["gpu_utilisation_source"]


def test_pipeline_keeps_order_and_really_overlaps():
    """Stages run in three threads at once (while one stage of an item sleeps, a stage of another item is
    running), and finish sees the items in order whatever their timing. Counted, not timed: a busy machine
    slows every stage, but only a sequential pipeline never has two stages inside at once."""
    seen, threads = [], set()
    inside, most = [0], [0]
    lock = threading.Lock()

    def stage(seconds):
        def run(*args):
            threads.add(threading.current_thread().name)
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(seconds)
            with lock:
                inside[0] -= 1
            return args[-1]

        return run

    items = list(range(12))

    def finish(item, result):
        stage(0.02)(item)
        seen.append((item, result))

    run_pipeline(items, stage(0.02), stage(0.02), finish, overlap=True, depth=2)
    assert seen == [(i, i) for i in items]
    assert {"dgno-eval-reader", "dgno-eval-writer", threading.current_thread().name} <= threads
    assert most[0] >= 2, "no two stages ever ran at once"
    most[0] = 0
    run_pipeline(items, stage(0.0), stage(0.0), finish, overlap=False, depth=2)
    assert most[0] == 1  # the sequential pipeline, for contrast


@pytest.mark.parametrize("where", ["load", "compute", "finish"])
def test_an_error_in_any_stage_is_raised_and_the_threads_end(where):
    def boom(item, *rest):
        if item == 5:
            raise ValueError(f"bad item {item} in {where}")
        return rest[-1] if rest else item

    ok = {"load": lambda i: i, "compute": lambda i, x: x, "finish": lambda i, r: None}
    stages = {**ok, where: boom}
    before = threading.active_count()
    with pytest.raises(ValueError, match=f"bad item 5 in {where}"):
        run_pipeline(list(range(40)), stages["load"], stages["compute"], stages["finish"], overlap=True, depth=2)
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == before


def test_utilisation_is_na_off_a_gpu():
    with UtilisationSampler(torch.device("cpu"), every_s=0.01) as util:
        time.sleep(0.05)
    assert util.result()["gpu_utilisation_percent"] == "n/a"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_utilisation_is_sampled_on_a_gpu():
    x = torch.rand(4096, 4096, device="cuda")
    with UtilisationSampler(torch.device("cuda"), every_s=0.05) as util:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.5:
            x = (x @ x).clamp(-1, 1)
        torch.cuda.synchronize()
    res = util.result()
    if res["gpu_utilisation_samples"]:
        assert 0 <= res["gpu_utilisation_percent"] <= 100
    else:
        assert "NVML" in res["gpu_utilisation_source"]


def test_sequential_pipeline_is_a_plain_loop():
    calls = []
    run_pipeline([1, 2], lambda i: calls.append(("load", i)) or i, lambda i, x: calls.append(("compute", i)) or x, lambda i, r: calls.append(("finish", i)), overlap=False)
    assert calls == [("load", 1), ("compute", 1), ("finish", 1), ("load", 2), ("compute", 2), ("finish", 2)]
    assert np.array_equal([c[1] for c in calls], [1, 1, 1, 2, 2, 2])


def test_dgno_evaluate_takes_the_pipeline_options(trained, tmp_path, capsys):
    from dgno.cli import main

    model, data = trained
    out = tmp_path / "cli"
    args = ["evaluate", "--checkpoint", str(model), "--data", str(data), "--level", "a", "--out", str(out), "--tile", "32", "--overlap", "8", "--no-lpips"]
    assert main([*args, "--tile-batch", "2", "--cuda-graphs", "--overlap-io"]) == 0
    summary = read_json(out / "summary.json")
    assert summary["tile_batch"] == 2 and summary["cuda_graphs"] is False  # graphs are a GPU option: off on a CPU
    assert summary["runtime"]["overlap_io"] is True and summary["n_images"] == 7
    assert '"n_images": 7' in capsys.readouterr().out
