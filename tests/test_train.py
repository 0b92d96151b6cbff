"""Training loop: schedule, loss, resume exactness, SIGTERM checkpoint, atomic checkpoint writes, bad data."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from dgno.checkpoint import load_trained, save_checkpoint
from dgno.io import InputError
from dgno.train import Interrupted, ModelChoice, TrainConfig, train
from dgno.train.losses import restoration_loss
from dgno.train.schedule import lr_at

SMALL = dict(iterations=8, batch_size=2, patch_size=32, val_every=4, log_every=2, checkpoint_every=4, val_crops=2, device="cpu")


def _cfg(**kw) -> TrainConfig:
    return TrainConfig.from_dict({**SMALL, **kw})


def test_lr_schedule_flat_then_cosine():
    cfg = TrainConfig(iterations=100, lr=1e-3, lr_min=1e-6, flat_fraction=0.5)
    assert lr_at(0, cfg) == lr_at(49, cfg) == 1e-3
    assert lr_at(75, cfg) == pytest.approx(1e-6 + 0.5 * (1e-3 - 1e-6))
    assert lr_at(100, cfg) == pytest.approx(1e-6)
    assert all(lr_at(i, cfg) >= lr_at(i + 1, cfg) for i in range(100))


def test_loss_is_zero_for_perfect_multiscale_prediction_and_positive_otherwise():
    gt = torch.rand(2, 1, 32, 32)
    outs = [torch.nn.functional.interpolate(gt, size=s, mode="bilinear", align_corners=False) for s in (8, 16)] + [gt]
    assert restoration_loss(outs, gt, fft_weight=0.1).item() == pytest.approx(0.0, abs=1e-6)
    assert restoration_loss([gt + 0.1], gt, fft_weight=0.1).item() > 0.1


def test_unknown_training_setting_is_named():
    with pytest.raises(ValueError, match=r"unknown training setting\(s\) \['iteration'\]"):
        TrainConfig.from_dict({"iteration": 3})


def _final_weights(out_dir):
    model, blob = load_trained(out_dir / "model.pt")
    return {k: v.clone() for k, v in model.state_dict().items()}, blob


def test_resume_is_exact(tiny_dataset, tmp_path, monkeypatch):
    """N iterations straight == stopped by SIGTERM after N/2, then resumed for the rest (bit-exact)."""
    import dgno.train.loop as train_mod

    choice = ModelChoice(name="dgno-cell", scale="smoke")
    train(tiny_dataset, tmp_path / "straight", model_choice=choice, levels=["a"], cfg=_cfg(), progress=False)

    calls = {"n": 0}
    real_ema_update = train_mod.ema_update

    def ema_then_signal(*args):
        real_ema_update(*args)
        calls["n"] += 1
        if calls["n"] == 4:  # the pre-emption arrives during iteration 4
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(train_mod, "ema_update", ema_then_signal)
    half = tmp_path / "halves"
    with pytest.raises(Interrupted):
        train(tiny_dataset, half, model_choice=choice, levels=["a"], cfg=_cfg(), progress=False)
    monkeypatch.setattr(train_mod, "ema_update", real_ema_update)
    assert torch.load(half / "checkpoint.pt", weights_only=True)["iteration"] == 4
    train(tiny_dataset, half, model_choice=choice, levels=["a"], cfg=_cfg(), progress=False)
    a, _ = _final_weights(tmp_path / "straight")
    b, _ = _final_weights(half)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    straight_log = (tmp_path / "straight" / "train_metrics.csv").read_text().splitlines()
    resumed_log = (half / "train_metrics.csv").read_text().splitlines()
    assert [r.split(",")[:4] for r in straight_log] == [r.split(",")[:4] for r in resumed_log]


def _sigterm_once_logged(metrics: Path, rows: int) -> threading.Thread:
    """SIGTERM to this process from outside the loop once `metrics` holds `rows` rows: mid-training on
    any machine, where a fixed timer could fire before the handler is installed (killing pytest) or
    after a fast machine has finished."""

    def watch() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if metrics.exists() and len(metrics.read_text().splitlines()) > rows:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


@pytest.mark.slow
def test_sigterm_writes_checkpoint_and_rerun_resumes(tiny_dataset, tmp_path):
    choice = ModelChoice(name="gg", scale="smoke")
    out = tmp_path / "run"
    cfg = _cfg(iterations=400, checkpoint_every=1000, log_every=1)
    watcher = _sigterm_once_logged(out / "train_metrics.csv", rows=3)
    with pytest.raises(Interrupted):
        train(tiny_dataset, out, model_choice=choice, levels=["a"], cfg=cfg, progress=False)
    watcher.join()
    stopped_at = torch.load(out / "checkpoint.pt", weights_only=True)["iteration"]
    assert 0 < stopped_at < 400
    assert not (out / "model.pt").exists()
    before = (out / "train_metrics.csv").read_text().splitlines()
    assert before[0].startswith("iteration,") and len(before) > 2
    # Snakemake deletes a job's outputs before it reruns it: the curve must come back from the checkpoint
    (out / "train_metrics.csv").unlink()
    train(tiny_dataset, out, model_choice=choice, levels=["a"], cfg=cfg, progress=False)
    log = (out / "train_metrics.csv").read_text().splitlines()
    assert log[: len(before)] == before  # the interrupted part is kept, row for row
    iterations = [int(r.split(",")[0]) for r in log[1:]]
    assert iterations == sorted(set(iterations)) and iterations[-1] == 400


def test_interrupted_checkpoint_write_keeps_last_good(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"iteration": 1})

    def crash(obj, f, *a, **k):
        with open(f, "wb") as fh:
            fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError):
        save_checkpoint(path, {"iteration": 2})
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["iteration"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temp file left behind


def test_unreadable_training_image_is_named_before_training(tiny_dataset, tmp_path):
    bad = tiny_dataset / "blur" / "a" / "img01.tif"
    bad.write_bytes(b"II*\x00garbage")
    with pytest.raises(InputError, match=r"img01\.tif: cannot be decoded"):
        train(tiny_dataset, tmp_path / "out", model_choice=ModelChoice(name="gg", scale="smoke"), levels=["a"], cfg=_cfg(), progress=False)
    assert not (tmp_path / "out" / "checkpoint.pt").exists()


def test_nan_image_is_rejected(tiny_dataset, tmp_path):
    import tifffile

    img = np.full((40, 44), 0.5, dtype=np.float32)
    img[3, 4] = np.nan
    tifffile.imwrite(tiny_dataset / "gt" / "img00.tif", img)
    with pytest.raises(InputError, match=r"img00\.tif: contains 1 NaN"):
        train(tiny_dataset, tmp_path / "out", model_choice=ModelChoice(name="gg", scale="smoke"), levels=["a"], cfg=_cfg(), progress=False)


@pytest.mark.parametrize(
    ("change", "word"),
    [
        ({"choice": ModelChoice(name="dgno-cell", scale="smoke", overrides={"flux": "central"})}, "model"),
        ({"cfg": {"lr": 1e-3}}, "training recipe"),
        ({"cfg": {"seed": 5}}, "training recipe"),
        ({"data": True}, "dataset"),
    ],
    ids=["override", "lr", "seed", "data"],
)
def test_a_changed_run_retrains_and_keeps_the_old_checkpoint(tiny_dataset, tmp_path, capsys, change, word):
    """A finished run's checkpoint must not be 'resumed' by a different run (it would do no step and
    return the old weights): it is set aside, kept, and the new run trains from scratch."""
    out = tmp_path / "out"
    choice = ModelChoice(name="dgno-cell", scale="smoke")
    first = train(tiny_dataset, out, model_choice=choice, levels=["a"], cfg=_cfg(iterations=3), progress=False)
    old_weights = torch.load(first, weights_only=True)["state_dict"]
    if change.get("data"):
        import tifffile

        tifffile.imwrite(tiny_dataset / "gt" / "img00.tif", np.zeros((40, 44), dtype=np.uint16) + 1000)
    train(tiny_dataset, out, model_choice=change.get("choice", choice), levels=["a"], cfg=_cfg(iterations=3, **change.get("cfg", {})), progress=False)
    new_weights = torch.load(out / "model.pt", weights_only=True)["state_dict"]
    assert any(not torch.equal(old_weights[k], new_weights[k]) for k in old_weights if k in new_weights)
    assert (out / "checkpoint.stale-1.pt").exists() and torch.load(out / "checkpoint.stale-1.pt", weights_only=True)["iteration"] == 3
    rows = (out / "train_metrics.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows][-1] == 3 and len(rows) == len(set(rows))  # one fresh curve
    said = capsys.readouterr()
    assert f"written for a different {word}" in said.out + said.err


def test_a_finished_run_asked_again_trains_again(tiny_dataset, tmp_path, capsys):
    """snakemake -R (or a deleted model.pt) reruns train: it must train, not rewrite the old weights."""
    out = tmp_path / "out"
    choice = ModelChoice(name="gg", scale="smoke")
    train(tiny_dataset, out, model_choice=choice, levels=["a"], cfg=_cfg(iterations=3), progress=False)
    (out / "model.pt").unlink()
    train(tiny_dataset, out, model_choice=choice, levels=["a"], cfg=_cfg(iterations=3), progress=False)
    said = capsys.readouterr()
    assert "already finished (a rerun trains anew)" in said.out + said.err
    assert (out / "checkpoint.stale-1.pt").exists() and (out / "model.pt").exists()


def test_checkpoints_are_loaded_as_data_not_code(tmp_path):
    """A model file whose pickle would run code is refused, and the code does not run."""
    import pickle

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (tmp_path / "evil.pt").write_bytes(pickle.dumps({"spec": {}, "state_dict": Payload()}))
    with pytest.raises(InputError, match=r"evil\.pt: not a readable checkpoint.*never load model files from untrusted sources"):
        load_trained(tmp_path / "evil.pt")
    assert not marker.exists()


def _registry():
    from dgno.models.registry import list_models

    return list_models()


SLOW_TO_OVERFIT = {"mpt", "gkmnet", "mpt-dgno", "restormer-dgno", "nafnet-dgno"}  # 9-11 s each on a busy 2-core machine


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_TO_OVERFIT else n for n in _registry()])
def test_loss_decreases_when_overfitting(tiny_dataset, tmp_path, name):
    """Every model of the registry (DGNO family and baselines) learns a tiny set through dgno.train."""
    cfg = _cfg(iterations=40, lr=2e-3, log_every=1, val_every=1000, checkpoint_every=1000)
    train(tiny_dataset, tmp_path / name, model_choice=ModelChoice(name=name, scale="smoke"), levels=["a"], cfg=cfg, progress=False)
    import pandas as pd

    log = pd.read_csv(tmp_path / name / "train_metrics.csv")
    assert log["loss"].iloc[-10:].mean() < 0.8 * log["loss"].iloc[:5].mean()


def _sampler(tiny_dataset, seed=3):
    from dgno.data.paired import CropSampler, load_pairs

    pairs = load_pairs(tiny_dataset, split="train", levels=["a"])
    return CropSampler(pairs, patch=16, batch_size=3, seed=seed)


def test_prefetched_batches_equal_synchronous_ones_and_state_follows_consumption(tiny_dataset):
    """The background thread cuts exactly the sampler's sequence, and state() is the state after the
    last batch handed out (not the producer's, which runs ahead), so a checkpoint resumes exactly."""
    from dgno.train.batches import BatchStream

    sync = BatchStream(_sampler(tiny_dataset), depth=0)
    expected = [sync.next() for _ in range(6)]
    reference = _sampler(tiny_dataset)
    for _ in range(3):
        reference.next_batch()
    ahead = BatchStream(_sampler(tiny_dataset), depth=3)
    try:
        got = [ahead.next() for _ in range(3)]
        deadline = time.monotonic() + 60  # wait (no fixed sleep) until the producer has cut ahead
        while ahead.sampler.state() == reference.state() and time.monotonic() < deadline:
            time.sleep(0.01)
        state = ahead.state()
        assert ahead.sampler.state() != reference.state()  # the live sampler is ahead ...
        assert state == reference.state()  # ... and state() is that after the 3 batches handed out
        got += [ahead.next() for _ in range(3)]
    finally:
        ahead.close()
    for (b0, g0), (b1, g1) in zip(expected, got):
        assert torch.equal(b0, b1) and torch.equal(g0, g1)
    resumed = _sampler(tiny_dataset, seed=99)
    resumed.load_state(state)
    again = BatchStream(resumed, depth=2)
    try:
        for b0, g0 in expected[3:]:
            b1, g1 = again.next()
            assert torch.equal(b0, b1) and torch.equal(g0, g1)
    finally:
        again.close()


def test_prefetch_producer_error_is_raised_in_the_training_thread(tiny_dataset):
    from dgno.train.batches import BatchStream

    sampler = _sampler(tiny_dataset)

    def broken():
        raise RuntimeError("crop failed")

    sampler.next_batch = broken
    stream = BatchStream(sampler, depth=2)
    try:
        with pytest.raises(RuntimeError, match="crop failed"):
            stream.next()
    finally:
        stream.close()


@pytest.mark.slow
def test_prefetch_does_not_change_training_and_resume_stays_exact(tiny_dataset, tmp_path):
    """prefetch=0 and prefetch=3 train identical weights; with prefetch, a run resumed from a mid-run
    checkpoint (batches cut ahead were lost with the process) still ends bit-identical."""
    choice = ModelChoice(name="gg", scale="smoke")
    train(tiny_dataset, tmp_path / "sync", model_choice=choice, levels=["a"], cfg=_cfg(prefetch=0), progress=False)
    train(tiny_dataset, tmp_path / "ahead", model_choice=choice, levels=["a"], cfg=_cfg(prefetch=3), progress=False)
    half = tmp_path / "halves"
    train(tiny_dataset, half, model_choice=choice, levels=["a"], cfg=_cfg(prefetch=3, iterations=4, flat_fraction=1.0), progress=False)
    state = torch.load(half / "checkpoint.pt", weights_only=True)
    state["train_config"]["iterations"] = 8  # as if the 8-iteration run had been stopped at 4
    torch.save(state, half / "checkpoint.pt")
    (half / "model.pt").unlink()
    (half / "train_metrics.csv").unlink()
    train(tiny_dataset, half, model_choice=choice, levels=["a"], cfg=_cfg(prefetch=3, flat_fraction=1.0), progress=False)
    straight = tmp_path / "straight_flat"
    train(tiny_dataset, straight, model_choice=choice, levels=["a"], cfg=_cfg(prefetch=3, flat_fraction=1.0), progress=False)
    a, _ = _final_weights(tmp_path / "sync")
    b, _ = _final_weights(tmp_path / "ahead")
    c, _ = _final_weights(half)
    d, blob = _final_weights(straight)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
        torch.testing.assert_close(c[k], d[k], rtol=0, atol=0, msg=k)
    assert blob["world_size"] == 1 and blob["train_config"]["prefetch"] == 3


def test_negative_prefetch_is_refused():
    with pytest.raises(ValueError, match=r"prefetch=-1"):
        TrainConfig(prefetch=-1)


def test_loss_is_the_authors_form():
    """Σ scales L1 + 0.1 · mean ½(|ΔRe|+|ΔIm|) of fft2, with bilinear (no antialias) 1/2 and 1/4 targets."""
    import torch.nn.functional as F

    from dgno.train.losses import fft_l1, multiscale_targets

    g = torch.Generator().manual_seed(0)
    gt = torch.rand(2, 1, 32, 32, generator=g)
    outs = [torch.rand(2, 1, n, n, generator=g) for n in (8, 16, 32)]
    targets = multiscale_targets(gt, outs)
    for t, factor in zip(targets, (0.25, 0.5)):
        torch.testing.assert_close(t, F.interpolate(gt, scale_factor=factor, mode="bilinear", align_corners=False))
    d = torch.fft.fft2(outs[2]) - torch.fft.fft2(gt)
    assert_value = 0.5 * (d.real.abs() + d.imag.abs()).mean()
    torch.testing.assert_close(fft_l1(outs[2], gt), assert_value)
    expected = sum(F.l1_loss(o, t) + 0.1 * fft_l1(o, t) for o, t in zip(outs, targets))
    torch.testing.assert_close(restoration_loss(outs, gt, fft_weight=0.1), expected)


def test_authors_lr_periods_hold_exactly_20k_of_60k():
    cfg = _cfg(iterations=60000, flat_fraction=1 / 3, lr=3e-4, lr_min=1e-6)
    assert lr_at(19999, cfg) == 3e-4 and lr_at(20000, cfg) == 3e-4  # cosine starts at its top
    assert lr_at(20001, cfg) < 3e-4
    cfg = _cfg(iterations=300000, flat_fraction=0.30666666666666664)  # 3DHistech: periods [92000, 208000]
    assert lr_at(92000, cfg) == cfg.lr and lr_at(92001, cfg) < cfg.lr


def test_progressive_stages_cut_batches_reproducibly():
    from dgno.train.batches import cut_batch
    from dgno.train.schedule import progressive_stage

    stages = [{"iterations": 3, "patch_size": 16, "batch_size": 4}, {"iterations": 2, "patch_size": 24, "batch_size": 2}]
    cfg = _cfg(batch_size=4, patch_size=32, progressive=stages)
    assert [progressive_stage(i, cfg) for i in (0, 2, 3, 4, 99)] == [(16, 4), (16, 4), (24, 2), (24, 2), (24, 2)]
    blur, gt = torch.rand(4, 1, 32, 32), torch.rand(4, 1, 32, 32)
    b1, g1 = cut_batch(blur, gt, patch=24, batch=2, seed=7)
    b2, g2 = cut_batch(blur, gt, patch=24, batch=2, seed=7)
    assert b1.shape == (2, 1, 24, 24) and torch.equal(b1, b2) and torch.equal(g1, g2)
    # blur and gt are cut at the same place of the same crops
    hits = [(i, y, x) for i in range(4) for y in range(9) for x in range(9) if torch.equal(blur[i, :, y : y + 24, x : x + 24], b1[0])]
    assert len(hits) == 1
    i, y, x = hits[0]
    assert torch.equal(gt[i, :, y : y + 24, x : x + 24], g1[0])
    with pytest.raises(ValueError, match=r"progressive\[0\].*exceeds patch_size 32"):
        _cfg(progressive=[{"iterations": 1, "patch_size": 64, "batch_size": 1}])


def test_model_file_holds_the_raw_weights_when_asked(tiny_dataset, tmp_path):
    choice = ModelChoice(name="dgno-cell", scale="smoke")
    raw = train(tiny_dataset, tmp_path / "raw", model_choice=choice, levels=["a"], cfg=_cfg(iterations=3, eval_weights="raw"), progress=False)
    ema = train(tiny_dataset, tmp_path / "ema", model_choice=choice, levels=["a"], cfg=_cfg(iterations=3), progress=False)
    raw_blob, ema_blob = torch.load(raw, weights_only=True), torch.load(ema, weights_only=True)
    assert raw_blob["weights"] == "raw" and ema_blob["weights"] == "ema"
    ckpt = torch.load(tmp_path / "raw" / "checkpoint.pt", weights_only=True)
    key = "head1.weight"
    assert torch.equal(raw_blob["state_dict"][key], ckpt["model"][key])  # the optimizer's weights
    assert not torch.equal(ema_blob["state_dict"][key], ckpt["model"][key])  # same run, EMA differs from raw
