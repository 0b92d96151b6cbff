"""What the speed settings do beyond the step time (``benchmarks.gpu.levers_and_evaluation``): bf16 training,
inference modes against Restormer, a whole test set through the evaluation pipeline, the DG layers' share."""

from __future__ import annotations

import csv
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpu.levers_step import DEFAULT, DGNO, LEVERS, build, merge, scan_for
from benchmarks.gpu.session import Run, autograd_forward, eager_forward, memory, release, timed
from dgno.analysis.timing import device_sync
from dgno.checkpoint import CHECKPOINT_VERSION, save_checkpoint
from dgno.data.demo import write_demo_dataset
from dgno.inference.cuda_graphs import GraphedForward
from dgno.inference.evaluate import evaluate_checkpoint
from dgno.train import ModelChoice, TrainConfig, train

BF16_GAP_DB = 0.05  # train.bf16 stays false unless float32 − bf16 validation PSNR ≤ 0.05 dB


def _nuclei(root: Path, *, size, n_train: int, n_val: int, n_test: int) -> Path:
    return write_demo_dataset(root, kind="nuclei", size=size, n_train=n_train, n_val=n_val, n_test=n_test,
                              levels={"z02": [2.8, 4.6]}, seed=0, correlation_length=24, progress=False)  # fmt: skip


def _curve(out: Path) -> tuple[float, float]:
    """(last validation PSNR, seconds per iteration between the first and last logged rows)."""
    with (out / "train_metrics.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    psnr = [float(r["val_psnr"]) for r in rows if r["val_psnr"]]
    first, last = rows[0], rows[-1]
    per_it = (float(last["seconds"]) - float(first["seconds"])) / max(int(last["iteration"]) - int(first["iteration"]), 1)
    return psnr[-1], per_it


def bf16_training(run: Run, tmp: Path) -> None:
    """Two short trainings from the same seed, float32 and bf16 autocast, with the levers that paid (no compile)."""
    if not run.has_time(60, "bf16 trainings"):
        return
    size = (256, 256) if run.sizes["scale"] == "paper" else (48, 48)
    data = _nuclei(tmp / "bf16_data", size=size, n_train=run.sizes["bf16_train"], n_val=4, n_test=0)
    paid = [n for n in run.blob["lever_summary"].get("dgno-cell", {}).get("paid", []) if n in LEVERS]
    for levers_used in ([paid, []] if paid else [[]]):  # without the levers if a run with them fails
        rec = _bf16_pair(run, data, tmp, levers_used)
        if rec is not None:
            run.add("bf16_training", rec)
            return


def _bf16_pair(run: Run, data: Path, tmp: Path, levers_used: list[str]) -> dict | None:
    sz = run.sizes
    its = sz["bf16_its"]
    rec: dict[str, Any] = {"model": "dgno-cell", "iterations": its, "batch": sz["batch"], "patch": sz["bf16_patch"], "levers": levers_used}
    for bf16 in (False, True):
        name = "bf16" if bf16 else "fp32"
        cfg = TrainConfig(iterations=its, batch_size=sz["batch"], patch_size=sz["bf16_patch"], val_every=its, log_every=max(its // 10, 1),
                          checkpoint_every=its, val_crops=8, device=str(run.device), bf16=bf16, seed=0, **merge(levers_used))  # fmt: skip
        out = tmp / f"bf16_run_{name}_{len(levers_used)}"
        try:
            t0 = time.perf_counter()
            train(data, out, model_choice=ModelChoice(name="dgno-cell", scale=sz["scale"]), levels=["z02"], cfg=cfg, progress=False)
            rec[f"{name}_seconds"] = time.perf_counter() - t0
            rec[f"{name}_val_psnr"], rec[f"{name}_seconds_per_iteration"] = _curve(out)
        except Exception as exc:  # noqa: BLE001
            run.error(f"bf16 training {name} with levers {levers_used}", exc)
            return None
        finally:
            release(run.device)
    rec["gap_db_fp32_minus_bf16"] = rec["fp32_val_psnr"] - rec["bf16_val_psnr"]
    rec["bf16_allowed"] = rec["gap_db_fp32_minus_bf16"] <= BF16_GAP_DB
    return rec


def _forward_record(run: Run, model, name: str, size: int, mode: str) -> None:
    dev = run.device
    x = torch.rand(1, 1, size, size, device=dev)
    if mode.startswith("graphs"):
        fn = GraphedForward(model, max_graphs=1)
        step = lambda: fn(x)  # noqa: E731
    elif mode == "autograd":
        step = lambda: autograd_forward(model, x)  # noqa: E731
    else:
        step = lambda: eager_forward(model, x, False)  # noqa: E731
    times = timed(step, dev)
    sec = statistics.median(times)
    run.add("inference", {"model": name, "scan_backend": scan_for(dev) if name in DGNO else None, "size": size, "batch": 1, "dtype": "fp32",
                          "mode": mode, "phase": "levers", "seconds": sec, "images_per_second": 1 / sec, **memory(dev), "times": times})  # fmt: skip


def inference(run: Run) -> None:
    """Batch 1: eager / CUDA graphs, NCHW / channels-last weights, and the paper's protocol (autograd on)."""
    modes = ["eager", "eager+cl", "autograd"] + (["graphs", "graphs+cl"] if run.device.type == "cuda" else [])
    for name in (*DGNO, "restormer"):
        for mode in modes:
            if not run.has_time(15, f"inference {name} {mode}"):
                continue
            model = None
            try:
                model = build(run, name).eval()  # the paper's protocol too: eval mode, autograd on
                if mode.endswith("+cl"):
                    model.to(memory_format=torch.channels_last)
                for size in run.sizes["infer"]:
                    try:
                        _forward_record(run, model, name, size, mode)
                    except torch.cuda.OutOfMemoryError as exc:
                        run.out_of_memory(f"inference {name} {mode} {size}", exc)
                    finally:
                        release(run.device)
            except Exception as exc:  # noqa: BLE001
                run.error(f"inference {name} {mode}", exc)
            finally:
                model = None
                release(run.device)


def _frames(run: Run, tmp: Path) -> Path:
    """A test split of ``frames`` 696×520 frames (``unique_frames`` generated, the rest byte copies under new ids)."""
    sz = run.sizes
    data = _nuclei(tmp / "eval_data", size=sz["frame"], n_train=0, n_val=0, n_test=sz["unique_frames"])
    ids = [f"test_{i:04d}" for i in range(sz["unique_frames"])]
    rows = [("id", "split")] + [(i, "test") for i in ids]
    for k in range(sz["unique_frames"], sz["frames"]):
        new, src = f"test_{k:04d}", ids[k % len(ids)]
        for folder in (data / "gt", data / "blur" / "z02"):
            shutil.copyfile(folder / f"{src}.tif", folder / f"{new}.tif")
        rows.append((new, "test"))
    with (data / "split.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return data


def _eval_checkpoint(run: Run, tmp: Path) -> Path:
    """DGNO-Cell at this run's scale saved as a project checkpoint, for ``evaluate_checkpoint``."""
    model = build(run, "dgno-cell", scan=None).eval()  # scan "auto": what evaluation picks
    ckpt = tmp / "eval_model.pt"
    save_checkpoint(ckpt, {"version": CHECKPOINT_VERSION, "spec": {"name": "dgno-cell", "scale": run.sizes["scale"], "hparams": model.hparams, "overrides": {}},
                           "state_dict": model.state_dict()})  # fmt: skip
    return ckpt


def _warm_up(run: Run, data: Path, ckpt: Path, tmp: Path) -> None:
    """Triton and cuDNN warm-up on two frames, so the first timed setting does not pay for them."""
    sz = run.sizes
    try:
        warm = shutil.copytree(data, tmp / "eval_warm")
        (warm / "split.csv").write_text("id,split\n" + "".join(f"test_{i:04d},test\n" for i in range(min(2, sz["unique_frames"]))))
        evaluate_checkpoint(ckpt, warm, "z02", tmp / "eval_warm_out", tile=sz["tile"], overlap=sz["overlap"], blend="crossfade", device=str(run.device),
                            with_lpips=False, progress=False, tile_batch=sz["tile_batch"], save_restored=False)  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        run.error("evaluation warm-up", exc)


def evaluation(run: Run, tmp: Path) -> None:
    """evaluate_checkpoint on the frames: default settings, 4 tiles per pass, + CUDA graphs, + overlapped I/O."""
    if not run.has_time(40, "evaluation"):
        return
    sz, cuda = run.sizes, run.device.type == "cuda"
    data = _frames(run, tmp)
    ckpt = _eval_checkpoint(run, tmp)
    _warm_up(run, data, ckpt, tmp)
    configs = [(DEFAULT, {}), (f"tile_batch={sz['tile_batch']}", {"tile_batch": sz["tile_batch"]}),
               ("graphs", {"tile_batch": sz["tile_batch"], "cuda_graphs": cuda}),
               ("graphs+overlap_io", {"tile_batch": sz["tile_batch"], "cuda_graphs": cuda, "overlap_io": True})]  # fmt: skip
    scores = {}
    for label, settings in configs:
        if not run.has_time(15, f"evaluation {label}"):
            continue
        out = tmp / f"eval_{label.replace('=', '')}"
        try:
            summary = evaluate_checkpoint(ckpt, data, "z02", out, tile=sz["tile"], overlap=sz["overlap"], blend="crossfade", device=str(run.device),
                                          with_lpips=False, progress=False, **settings)  # fmt: skip
            scores[label] = (out / "per_image.csv").read_text()
            run.add("eval_pipeline", {"model": "dgno-cell", "config": label, "settings": settings, "frames": sz["frames"], "frame": list(sz["frame"]),
                                      "tile": sz["tile"], "tile_batch": summary["tile_batch"], "cuda_graphs": summary["cuda_graphs"],
                                      "psnr": summary["psnr"], **summary["runtime"]})  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            run.error(f"evaluation {label}", exc)
        finally:
            release(run.device)
    if "graphs" in scores and "graphs+overlap_io" in scores:
        run.blob["settings"]["eval_overlap_identical_scores"] = scores["graphs"] == scores["graphs+overlap_io"]
        run.save()


def _fwd_bwd(run: Run, layers, x: torch.Tensor) -> float:
    def once():
        layers(x).backward(torch.ones_like(x))

    sz = run.sizes
    return statistics.median(timed(once, run.device, warmup=sz["warmup"], min_repeats=sz["repeats"], target_s=sz["target_s"], max_repeats=8))


def _compiled_pair(run: Run, model, rec: dict[str, Any]) -> None:
    """The full-resolution pair of DG layers under torch.compile: compile time and forward + backward ms."""
    sz = run.sizes
    x = torch.randn(sz["batch"], model.ops1[0].dim, sz["crop"], sz["crop"], device=run.device, requires_grad=True)
    compiled = torch.compile(model.ops1, backend=sz["compile_backend"])
    t0 = time.perf_counter()
    compiled(x).backward(torch.ones_like(x))
    device_sync(run.device)()
    rec["full_res_compile_seconds"] = time.perf_counter() - t0
    rec["full_res_compiled_fwd_bwd_ms"] = 1e3 * _fwd_bwd(run, compiled, x)
    run.save()


def dg_layers(run: Run) -> None:
    """The decoder's DG layers, forward + backward at the training shapes, eager; the full-resolution pair compiled too."""
    if not run.has_time(45, "dg_layers"):
        return
    sz = run.sizes
    model = build(run, "dgno-cell").train()
    rec: dict[str, Any] = {"model": "dgno-cell", "batch": sz["batch"], "crop": sz["crop"], "levels": []}
    try:
        for ops, div in ((model.ops4, 4), (model.ops2, 2), (model.ops1, 1)):
            side, dim = sz["crop"] // div, ops[0].dim
            x = torch.randn(sz["batch"], dim, side, side, device=run.device, requires_grad=True)
            rec["levels"].append({"dim": dim, "side": side, "layers": len(ops), "fwd_bwd_ms": 1e3 * _fwd_bwd(run, ops, x)})
        rec["total_ms"] = sum(r["fwd_bwd_ms"] for r in rec["levels"])
        default = run.blob["lever_summary"].get("dgno-cell", {}).get("default_ms")
        rec["share_of_default_step"] = rec["total_ms"] / default if default else None
        run.add("dg_layers", rec)
        if run.has_time(90, "dg_layers compiled"):
            _compiled_pair(run, model, rec)
    except Exception as exc:  # noqa: BLE001
        run.error("dg_layers", exc)
    finally:
        model = None
        torch._dynamo.reset()
        release(run.device)
