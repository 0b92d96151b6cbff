"""Issue 27 on one GPU in one run: which training-step levers pay, bf16, inference ratios, whole-test-set evaluation.

    python benchmarks/bench_issue27.py OUT_JSON --commit SHA [--budget-s 420]
    python benchmarks/bench_issue27.py OUT_JSON --smoke          # CPU, toy sizes: checks the script (< 1 min)

One process measures everything in the same run on the same device, writes OUT_JSON after every record,
and stops starting new work when ``--budget-s`` is spent (what it skipped, and why, is in the file). The
step timed is the training loop's own (``dgno.train.step.TrainStep`` + the EMA update), the evaluation is
``dgno.inference.evaluate.evaluate_checkpoint``; only the data are synthetic (``dgno.data.demo`` nuclei).

  levers        training step, DGNO-Cell and DGNO-Face, 8 crops of 256², float32: today's step, each lever
                alone, the combination of those that paid (≥ 2 %) and all of them: ms/it and peak memory.
  grad_check    the fastest step's gradients against today's at the same weights and batch (relative L2),
                with deterministic routing (argmax in place of Gumbel noise: the decisive check) and with
                Gumbel noise from the same seed; today's step against itself gives the noise floor.
  bf16          two short trainings of DGNO-Cell (``dgno.train.train``, same seed, the levers that paid):
                float32 and bf16 autocast; validation PSNR of each, the gap, step times.
  inference     batch 1, DGNO-Cell / DGNO-Face / Restormer at 256² and 512²: eager, CUDA graphs, each with
                channels-last weights; best mode each and the ratios to Restormer; the paper's protocol
                (eager, autograd on) with peak memory.
  evaluation    a test set of 696×520 frames in 512-px tiles (crossfade, the authors' protocol): today's
                settings, 4 tiles per pass, CUDA graphs, and reading/writing overlapped: images/s, GPU
                utilisation, and whether the scores stay identical.
  compile       torch.compile of the step (with the levers that paid, then alone): first-step (compile)
                time, ms/it, break-even iterations. Late, because its duration is the least predictable.
  dg_layers     forward + backward of the six DG operator layers at the training shapes (their share of
                the step) and, with time left, of the full-resolution pair compiled (what fusing could gain).

``decisions`` sums up: the levers to keep (faster by ≥ 2 % on both models, gradient check passed), the
``train:`` / ``evaluate:`` settings to put in config/paper.yaml, whether ``train.bf16`` may be true
(gap ≤ 0.05 dB), and the inference ratios against the paper's 2.45 (256²) and 3.33 (512²).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gpu_speed as base  # noqa: E402  (Run, timed, memory, release, build: the issue-21 script's helpers)

from dgno.checkpoint import CHECKPOINT_VERSION, save_checkpoint  # noqa: E402
from dgno.data.demo import write_demo_dataset  # noqa: E402
from dgno.inference.cuda_graphs import GraphedForward  # noqa: E402
from dgno.inference.evaluate import evaluate_checkpoint  # noqa: E402
from dgno.layers.mambair import ASSM, set_scan_backend  # noqa: E402
from dgno.models.registry import build_model  # noqa: E402
from dgno.train import ModelChoice, TrainConfig, train  # noqa: E402
from dgno.train.loop import ema_update  # noqa: E402
from dgno.train.schedule import ema_decay_at  # noqa: E402
from dgno.train.step import TrainStep, backend_flags, make_optimizer, prepare_model  # noqa: E402

DGNO = ("dgno-cell", "dgno-face")
LEVERS: dict[str, dict[str, Any]] = {
    "channels_last": {"channels_last": True},
    "cudnn_benchmark": {"cudnn_benchmark": True},
    "fused_layernorm": {"fused_layernorm": True},
    "adamw_fused": {"adamw_impl": "fused"},
    "cuda_graphs": {"cuda_graphs": True},
}
CUDA_ONLY = {"cudnn_benchmark", "cuda_graphs"}
PAYS = 0.98  # a lever is kept when it takes at most 98 % of today's step time
BF16_GAP_DB = 0.05  # issue 27: train.bf16 stays false unless float32 − bf16 validation PSNR ≤ 0.05 dB
PAPER_RATIO = {256: 2.45, 512: 3.33}
SIZES = {
    "paper": dict(scale="paper", batch=8, crop=256, grad_batch=4, infer=(256, 512), bf16_its=300, bf16_patch=128, bf16_train=24,
                  frame=(520, 696), frames=32, unique_frames=8, tile=512, overlap=32, tile_batch=4, compile_backend="inductor", target_s=1.5, time_scale=1.0, warmup=3, repeats=5),
    "smoke": dict(scale="smoke", batch=2, crop=32, grad_batch=2, infer=(32,), bf16_its=4, bf16_patch=32, bf16_train=4,
                  frame=(72, 80), frames=6, unique_frames=2, tile=32, overlap=8, tile_batch=2, compile_backend="eager", target_s=0.05, time_scale=0.02, warmup=1, repeats=2),
}  # fmt: skip
P: dict[str, Any] = SIZES["paper"]


def scan_for(dev: torch.device) -> str:
    return "triton" if dev.type == "cuda" else "torch"  # the Triton interpreter would take minutes on a CPU


def build(name: str, dev: torch.device, scan: str | None = "fixed") -> torch.nn.Module:
    """The registry model at this run's scale, seeded; DGNO's ASSMs on the Triton scan on a GPU (``scan=None``: "auto")."""
    torch.manual_seed(0)
    model = build_model(name, scale=P["scale"]).to(dev)
    if scan is not None and any(isinstance(m, ASSM) for m in model.modules()):
        set_scan_backend(model, scan_for(dev))
    return model


def has_time(run: base.Run, seconds: float, what: str, why: str = "time budget spent") -> bool:
    """Whether ``seconds`` (at paper scale; scaled down for --smoke) are left; if not, ``what`` is listed as skipped."""
    if run.left() >= seconds * P["time_scale"]:
        return True
    run.skip(what, why)
    return False


def _cfg(**settings) -> TrainConfig:
    return TrainConfig(batch_size=P["batch"], patch_size=P["crop"], bf16=False, **settings)


def _merge(names) -> dict[str, Any]:
    return {k: v for name in names for k, v in LEVERS[name].items()}


class LoopStep:
    """The training loop's step on a fixed batch: TrainStep (with ``settings``' levers) plus the EMA update."""

    def __init__(self, name: str, dev: torch.device, settings: dict[str, Any], *, batch: int | None = None, warmup: int = 3) -> None:
        self.cfg = _cfg(**settings)
        self.model = prepare_model(build(name, dev).train(), self.cfg)
        self.ema = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.step = TrainStep(self.model, self.model, make_optimizer(self.model, self.cfg, dev), self.cfg, dev,
                              compile_backend=P["compile_backend"], warmup=warmup)  # fmt: skip
        g = torch.Generator().manual_seed(0)
        b = batch or P["batch"]
        self.x, self.y = (torch.rand(b, 1, P["crop"], P["crop"], generator=g).to(dev) for _ in range(2))
        self.it = 0

    def __call__(self) -> torch.Tensor:
        loss = self.step(self.x, self.y, self.it)
        ema_update(self.ema, self.model, ema_decay_at(self.it, self.cfg.ema_decay))
        self.it += 1
        return loss

    def grads(self) -> dict[str, torch.Tensor]:
        return {n: p.grad.detach().float().clone() for n, p in self.model.named_parameters() if p.grad is not None}


# levers ------------------------------------------------------------------------------------------


def measure_step(run: base.Run, name: str, label: str, settings: dict[str, Any]) -> dict | None:
    dev, what = run.device, f"levers {name} {label}"
    try:
        with backend_flags(_cfg(**settings)):
            step = LoopStep(name, dev, settings)
            warm = 5 if settings.get("cuda_graphs") or settings.get("compile") else P["warmup"]
            t0 = time.perf_counter()
            times = base.timed(step, dev, warmup=warm, min_repeats=P["repeats"], target_s=P["target_s"], max_repeats=12)
        sec = statistics.median(times)
        rec = {
            "model": name, "scan_backend": scan_for(dev), "size": P["crop"], "batch": P["batch"], "dtype": "fp32", "levers": label,
            "settings": settings, "seconds_per_iteration": sec, "iterations_per_second": 1 / sec, "projected_hours_60k": 60000 * sec / 3600,
            "first_step_seconds": step.step.first_step_seconds, "phase_seconds": time.perf_counter() - t0, **base.memory(dev), "times": times,
        }  # fmt: skip
        run.add("train", rec)
        return rec
    except torch.cuda.OutOfMemoryError as exc:
        run.skip(what, f"out of memory: {str(exc).splitlines()[0][:200]}")
    except Exception as exc:  # noqa: BLE001
        run.error(what, exc)
    finally:
        step = None
        base.release(dev)
    return None


def levers(run: base.Run) -> None:
    """Today's step, each lever alone, the levers that paid together, all of them; per DGNO model."""
    summary = run.blob["lever_summary"]
    usable = [n for n in LEVERS if run.device.type == "cuda" or n not in CUDA_ONLY]
    for n in set(LEVERS) - set(usable):
        run.skip(f"lever {n}", "CUDA only")
    for name in DGNO:
        if not has_time(run, 40, f"levers {name}"):
            continue
        today = measure_step(run, name, "today", {})
        if today is None:
            continue
        alone = {}
        for lever in usable:
            if not has_time(run, 25, f"levers {name} {lever}"):
                continue
            alone[lever] = measure_step(run, name, lever, LEVERS[lever])
        paid = [n for n, r in alone.items() if r and r["seconds_per_iteration"] <= PAYS * today["seconds_per_iteration"]]
        combos = {}
        if len(paid) > 1:
            combos["paid: " + "+".join(paid)] = _merge(paid)
        if set(paid) != set(usable):
            combos["all"] = _merge(usable)
        for label, settings in combos.items():
            if not has_time(run, 25, f"levers {name} {label}"):
                continue
            measure_step(run, name, label, settings)
        mine = [r for r in run.blob["train"] if r["model"] == name]
        fastest = min(mine, key=lambda r: r["seconds_per_iteration"])
        summary[name] = {
            "today_ms": 1e3 * today["seconds_per_iteration"],
            "alone_speedup": {n: today["seconds_per_iteration"] / r["seconds_per_iteration"] for n, r in alone.items() if r},
            "paid": paid,
            "fastest": fastest["levers"], "fastest_settings": fastest["settings"], "fastest_ms": 1e3 * fastest["seconds_per_iteration"],
        }  # fmt: skip
        run.save()


# gradient check --------------------------------------------------------------------------------


@contextlib.contextmanager
def deterministic_routing():
    """ASSM training routes by the argmax of the router (straight-through), without Gumbel noise."""
    real = torch.nn.functional.gumbel_softmax

    def argmax_straight_through(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):  # noqa: ARG001 - same signature
        soft = logits.softmax(dim)
        return torch.zeros_like(soft).scatter_(dim, soft.argmax(dim, keepdim=True), 1.0) - soft.detach() + soft

    torch.nn.functional.gumbel_softmax = argmax_straight_through
    try:
        yield
    finally:
        torch.nn.functional.gumbel_softmax = real


def _difference(ref: tuple, other: tuple) -> dict[str, float]:
    """Relative L2 differences of the gradients (all together, and per tensor with the norm floored at 1e-3 of
    the largest tensor's: some gradients are zero up to rounding, e.g. a convolution's bias before an instance norm)."""
    (la, ga), (lb, gb) = ref, other
    floor = 1e-3 * max(float(g.norm()) for g in ga.values())
    per = [float((gb[k] - ga[k]).norm()) / max(float(ga[k].norm()), floor) for k in ga]
    num = sum(float((gb[k] - ga[k]).square().sum()) for k in ga)
    den = sum(float(ga[k].square().sum()) for k in ga)
    return {"grad_rel_l2": (num / den) ** 0.5, "grad_max_tensor_rel_l2": max(per), "grad_median_tensor_rel_l2": statistics.median(per),
            "loss_rel": abs(float(lb) - float(la)) / abs(float(la))}  # fmt: skip


def _grads_at(step: LoopStep, state: dict, seed: int) -> tuple:
    step.model.load_state_dict(state)
    torch.manual_seed(seed)
    loss = step()
    return float(loss.detach()), step.grads()


def grad_check(run: base.Run) -> None:
    """Fastest DGNO-Cell step vs today's, one step at the same weights, batch, RNG seed (after the fast step's warm-up/capture)."""
    best = run.blob["lever_summary"].get("dgno-cell", {})
    label, settings = best.get("fastest"), best.get("fastest_settings")
    if not settings:  # nothing was faster than today's step: check all the levers together
        label, settings = "all", _merge(n for n in LEVERS if run.device.type == "cuda" or n not in CUDA_ONLY)
    for routing in ("deterministic", "gumbel"):
        if not has_time(run, 30, f"grad_check {routing}"):
            continue
        fast = ref = again = None
        try:
            with contextlib.ExitStack() as stack:
                if routing == "deterministic":
                    stack.enter_context(deterministic_routing())
                stack.enter_context(backend_flags(_cfg(**settings)))
                fast = LoopStep("dgno-cell", run.device, settings, batch=P["grad_batch"], warmup=2)
                for _ in range(4):  # eager warm-up, capture, first replay
                    fast()
                state = {k: v.detach().clone() for k, v in fast.model.state_dict().items()}
                ref = LoopStep("dgno-cell", run.device, {}, batch=P["grad_batch"])
                again = LoopStep("dgno-cell", run.device, {}, batch=P["grad_batch"])
                for s in (ref, again):
                    s.it = fast.it
                a, b, c = _grads_at(ref, state, 7), _grads_at(fast, state, 7), _grads_at(again, state, 7)
            run.add("grad_check", {"model": "dgno-cell", "routing": routing, "levers": label, "settings": settings,
                                   "fastest_vs_today": _difference(a, b), "today_vs_today": _difference(a, c)})  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            run.error(f"grad_check {routing}", exc)
        finally:
            fast = ref = again = None
            base.release(run.device)


# bf16 trainings ----------------------------------------------------------------------------------


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


def bf16_training(run: base.Run, tmp: Path) -> None:
    """Two short trainings from the same seed, float32 and bf16 autocast, with the levers that paid (no compile)."""
    if not has_time(run, 60, "bf16 trainings"):
        return
    data = _nuclei(tmp / "bf16_data", size=(256, 256) if P["scale"] == "paper" else (48, 48), n_train=P["bf16_train"], n_val=4, n_test=0)
    paid = [n for n in run.blob["lever_summary"].get("dgno-cell", {}).get("paid", []) if n in LEVERS]
    for levers_used in ([paid, []] if paid else [[]]):  # without the levers if a run with them fails
        rec = _bf16_pair(run, data, tmp, levers_used)
        if rec is not None:
            run.add("bf16_training", rec)
            return


def _bf16_pair(run: base.Run, data: Path, tmp: Path, levers_used: list[str]) -> dict | None:
    its = P["bf16_its"]
    rec: dict[str, Any] = {"model": "dgno-cell", "iterations": its, "batch": P["batch"], "patch": P["bf16_patch"], "levers": levers_used}
    for bf16 in (False, True):
        name = "bf16" if bf16 else "fp32"
        cfg = TrainConfig(iterations=its, batch_size=P["batch"], patch_size=P["bf16_patch"], val_every=its, log_every=max(its // 10, 1),
                          checkpoint_every=its, val_crops=8, device=str(run.device), bf16=bf16, seed=0, **_merge(levers_used))  # fmt: skip
        out = tmp / f"bf16_run_{name}_{len(levers_used)}"
        try:
            t0 = time.perf_counter()
            train(data, out, model_choice=ModelChoice(name="dgno-cell", scale=P["scale"]), levels=["z02"], cfg=cfg, progress=False)
            rec[f"{name}_seconds"] = time.perf_counter() - t0
            rec[f"{name}_val_psnr"], rec[f"{name}_seconds_per_iteration"] = _curve(out)
        except Exception as exc:  # noqa: BLE001
            run.error(f"bf16 training {name} with levers {levers_used}", exc)
            return None
        finally:
            base.release(run.device)
    rec["gap_db_fp32_minus_bf16"] = rec["fp32_val_psnr"] - rec["bf16_val_psnr"]
    rec["bf16_allowed"] = rec["gap_db_fp32_minus_bf16"] <= BF16_GAP_DB
    return rec


# inference -------------------------------------------------------------------------------------


def _forward_record(run: base.Run, model, name: str, size: int, mode: str) -> None:
    dev = run.device
    x = torch.rand(1, 1, size, size, device=dev)
    if mode.startswith("graphs"):
        fn = GraphedForward(model, max_graphs=1)
        step = lambda: fn(x)  # noqa: E731
    elif mode == "autograd":
        step = lambda: base.autograd_forward(model, x)  # noqa: E731
    else:
        step = lambda: base.eager_forward(model, x, False)  # noqa: E731
    times = base.timed(step, dev)
    sec = statistics.median(times)
    run.add("inference", {"model": name, "scan_backend": scan_for(dev) if name in DGNO else None, "size": size, "batch": 1, "dtype": "fp32",
                          "mode": mode, "phase": "issue27", "seconds": sec, "images_per_second": 1 / sec, **base.memory(dev), "times": times})  # fmt: skip


def inference(run: base.Run) -> None:
    """Batch 1: eager / CUDA graphs, NCHW / channels-last weights, and the paper's protocol (autograd on)."""
    modes = ["eager", "eager+cl", "autograd"] + (["graphs", "graphs+cl"] if run.device.type == "cuda" else [])
    for name in (*DGNO, "restormer"):
        for mode in modes:
            if not has_time(run, 15, f"inference {name} {mode}"):
                continue
            model = None
            try:
                model = build(name, run.device).eval()  # the paper's protocol too: eval mode, autograd on
                if mode.endswith("+cl"):
                    model.to(memory_format=torch.channels_last)
                for size in P["infer"]:
                    try:
                        _forward_record(run, model, name, size, mode)
                    except torch.cuda.OutOfMemoryError as exc:
                        run.skip(f"inference {name} {mode} {size}", f"out of memory: {str(exc).splitlines()[0][:200]}")
                    finally:
                        base.release(run.device)
            except Exception as exc:  # noqa: BLE001
                run.error(f"inference {name} {mode}", exc)
            finally:
                model = None
                base.release(run.device)


# whole-test-set evaluation -------------------------------------------------------------------------


def _frames(tmp: Path) -> Path:
    """A test split of P["frames"] 696×520 frames (P["unique_frames"] generated, the rest byte copies under new ids)."""
    data = _nuclei(tmp / "eval_data", size=P["frame"], n_train=0, n_val=0, n_test=P["unique_frames"])
    ids = [f"test_{i:04d}" for i in range(P["unique_frames"])]
    rows = [("id", "split")] + [(i, "test") for i in ids]
    for k in range(P["unique_frames"], P["frames"]):
        new, src = f"test_{k:04d}", ids[k % len(ids)]
        for folder in (data / "gt", data / "blur" / "z02"):
            shutil.copyfile(folder / f"{src}.tif", folder / f"{new}.tif")
        rows.append((new, "test"))
    with (data / "split.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return data


def evaluation(run: base.Run, tmp: Path) -> None:
    """evaluate_checkpoint on the frames: today's settings, 4 tiles per pass, + CUDA graphs, + overlapped I/O."""
    if not has_time(run, 40, "evaluation"):
        return
    data = _frames(tmp)
    model = build("dgno-cell", run.device, scan=None).eval()  # scan "auto": what evaluation picks
    ckpt = tmp / "eval_model.pt"
    save_checkpoint(ckpt, {"version": CHECKPOINT_VERSION, "spec": {"name": "dgno-cell", "scale": P["scale"], "hparams": model.hparams, "overrides": {}},
                           "state_dict": model.state_dict()})  # fmt: skip
    model = None
    cuda = run.device.type == "cuda"
    try:  # Triton and cuDNN warm-up on two frames, so the first timed setting does not pay for them
        warm = shutil.copytree(data, tmp / "eval_warm")
        (warm / "split.csv").write_text("id,split\n" + "".join(f"test_{i:04d},test\n" for i in range(min(2, P["unique_frames"]))))
        evaluate_checkpoint(ckpt, warm, "z02", tmp / "eval_warm_out", tile=P["tile"], overlap=P["overlap"], blend="crossfade", device=str(run.device),
                            with_lpips=False, progress=False, tile_batch=P["tile_batch"], save_restored=False)  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        run.error("evaluation warm-up", exc)
    configs = [("today", {}), (f"tile_batch={P['tile_batch']}", {"tile_batch": P["tile_batch"]}),
               ("graphs", {"tile_batch": P["tile_batch"], "cuda_graphs": cuda}),
               ("graphs+overlap_io", {"tile_batch": P["tile_batch"], "cuda_graphs": cuda, "overlap_io": True})]  # fmt: skip
    scores = {}
    for label, settings in configs:
        if not has_time(run, 15, f"evaluation {label}"):
            continue
        out = tmp / f"eval_{label.replace('=', '')}"
        try:
            summary = evaluate_checkpoint(ckpt, data, "z02", out, tile=P["tile"], overlap=P["overlap"], blend="crossfade", device=str(run.device),
                                          with_lpips=False, progress=False, **settings)  # fmt: skip
            scores[label] = (out / "per_image.csv").read_text()
            rt = summary["runtime"]
            run.add("eval_pipeline", {"model": "dgno-cell", "config": label, "settings": settings, "frames": P["frames"], "frame": list(P["frame"]),
                                      "tile": P["tile"], "tile_batch": summary["tile_batch"], "cuda_graphs": summary["cuda_graphs"],
                                      "psnr": summary["psnr"], **rt})  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            run.error(f"evaluation {label}", exc)
        finally:
            base.release(run.device)
    if "graphs" in scores and "graphs+overlap_io" in scores:
        run.blob["settings"]["eval_overlap_identical_scores"] = scores["graphs"] == scores["graphs+overlap_io"]
        run.save()


# DG operator layers ----------------------------------------------------------------------------


def _fwd_bwd(layers, x: torch.Tensor, dev: torch.device) -> float:
    def once():
        layers(x).backward(torch.ones_like(x))

    return statistics.median(base.timed(once, dev, warmup=P["warmup"], min_repeats=P["repeats"], target_s=P["target_s"], max_repeats=8))


def dg_layers(run: base.Run) -> None:
    """The decoder's DG layers, forward + backward at the training shapes, eager; the full-resolution pair compiled too."""
    if not has_time(run, 45, "dg_layers"):
        return
    dev = run.device
    model = build("dgno-cell", dev).train()
    rec: dict[str, Any] = {"model": "dgno-cell", "batch": P["batch"], "crop": P["crop"], "levels": []}
    try:
        for ops, div in ((model.ops4, 4), (model.ops2, 2), (model.ops1, 1)):
            side, dim = P["crop"] // div, ops[0].dim
            x = torch.randn(P["batch"], dim, side, side, device=dev, requires_grad=True)
            rec["levels"].append({"dim": dim, "side": side, "layers": len(ops), "fwd_bwd_ms": 1e3 * _fwd_bwd(ops, x, dev)})
        rec["total_ms"] = sum(r["fwd_bwd_ms"] for r in rec["levels"])
        today = run.blob["lever_summary"].get("dgno-cell", {}).get("today_ms")
        rec["share_of_todays_step"] = rec["total_ms"] / today if today else None
        run.add("dg_layers", rec)
        if not has_time(run, 90, "dg_layers compiled"):
            return
        x = torch.randn(P["batch"], model.ops1[0].dim, P["crop"], P["crop"], device=dev, requires_grad=True)
        compiled = torch.compile(model.ops1, backend=P["compile_backend"])
        t0 = time.perf_counter()
        compiled(x).backward(torch.ones_like(x))
        base.sync(dev)
        rec["full_res_compile_seconds"] = time.perf_counter() - t0
        rec["full_res_compiled_fwd_bwd_ms"] = 1e3 * _fwd_bwd(compiled, x, dev)
        run.save()
    except Exception as exc:  # noqa: BLE001
        run.error("dg_layers", exc)
    finally:
        model = None
        torch._dynamo.reset()
        base.release(dev)


# torch.compile -----------------------------------------------------------------------------------


def compile_step(run: base.Run) -> None:
    """torch.compile of the step with the levers that paid, then alone: compile time, ms/it, break-even."""
    summary = run.blob["lever_summary"].get("dgno-cell", {})
    today = summary.get("today_ms")
    paid = summary.get("paid", [])
    plans = [("compile+" + "+".join(paid), {**_merge(paid), "compile": True})] if paid else []
    plans.append(("compile", {"compile": True}))
    if P["scale"] == "smoke":
        plans = plans[:1]  # one compiled step checks the code path; tracing takes 10-20 s on a CPU
    for label, settings in plans:
        if not has_time(run, 120, f"compile {label}", "time budget spent (compiling a paper-scale step takes minutes)"):
            continue
        rec = measure_step(run, "dgno-cell", label, settings)
        torch._dynamo.reset()
        if rec is None or not today:
            continue
        reference = today if label == "compile" else min((r["seconds_per_iteration"] * 1e3 for r in run.blob["train"]
                                                          if r["model"] == "dgno-cell" and r["settings"] == _merge(paid)), default=today)  # fmt: skip
        gain_s = (reference - 1e3 * rec["seconds_per_iteration"]) / 1e3
        extra_s = rec["first_step_seconds"] - rec["seconds_per_iteration"]
        run.add("compile", {"model": "dgno-cell", "levers": label, "compile_seconds": extra_s, "ms_per_it": 1e3 * rec["seconds_per_iteration"],
                            "reference_ms": reference, "break_even_iterations": extra_s / gain_s if gain_s > 0 else None})  # fmt: skip


# decisions ---------------------------------------------------------------------------------------


def decide(run: base.Run) -> None:
    """What the numbers say for config/paper.yaml (written after every phase, so a cut run still has them)."""
    summary, blob = run.blob["lever_summary"], run.blob
    measured = [m for m in DGNO if m in summary]
    keep = [n for n in LEVERS if measured and all(summary[m]["alone_speedup"].get(n, 0) >= 1 / PAYS for m in measured)]
    checks = [g for g in blob["grad_check"] if g["routing"] == "deterministic"]
    grads_ok = bool(checks) and all(g["fastest_vs_today"]["grad_rel_l2"] <= max(1e-2, 10 * g["today_vs_today"]["grad_rel_l2"]) for g in checks)
    compiled = [c for c in blob["compile"] if c["break_even_iterations"] is not None]
    bf16 = blob["bf16_training"][-1] if blob["bf16_training"] else None
    best = {}
    for r in blob["inference"]:
        if r["mode"] != "autograd":
            key = (r["model"], r["size"])
            best[key] = max(best.get(key, 0.0), r["images_per_second"])
    ratios = {f"{m} {s}": {"measured": best[(m, s)] / best[("restormer", s)], "paper": PAPER_RATIO.get(s)}
              for m in DGNO for s in P["infer"] if (m, s) in best and ("restormer", s) in best}  # fmt: skip
    evals = {e["config"]: e for e in blob["eval_pipeline"]}
    fastest_eval = max(evals.values(), key=lambda e: e["images_per_second"] or 0, default=None)
    blob["decisions"] = {
        "train_levers_keep": keep,
        "gradient_check_passed": grads_ok if checks else "not measured",
        "train_settings_for_paper_config": {**_merge(keep), **({"compile": True} if any(c["break_even_iterations"] < 3000 for c in compiled) else {})},
        "compile_break_even_iterations": {c["levers"]: c["break_even_iterations"] for c in blob["compile"]},
        "bf16": {"gap_db_fp32_minus_bf16": bf16["gap_db_fp32_minus_bf16"], "threshold_db": BF16_GAP_DB, "train.bf16 may be true": bf16["bf16_allowed"],
                 "step_ratio_bf16_over_fp32": bf16["bf16_seconds_per_iteration"] / bf16["fp32_seconds_per_iteration"]} if bf16 else "not measured",
        "inference_ratio_best_mode": ratios,
        "evaluate_settings_for_paper_config": fastest_eval["settings"] if fastest_eval else "not measured",
        "todays_train_ms": {m: summary[m]["today_ms"] for m in measured},
        "fastest_train_ms": {m: {"levers": summary[m]["fastest"], "ms": summary[m]["fastest_ms"]} for m in measured},
        "goal_train_ms": 200,
    }  # fmt: skip
    run.save()


PHASES = ("levers", "grad_check", "bf16", "inference", "evaluation", "compile", "dg_layers")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--commit", help="git commit of the code (the GPU machine gets a copy of the tree without .git)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true", help="toy sizes and smoke-scale models (a CPU check of the script)")
    ap.add_argument("--phases", nargs="+", choices=PHASES, help="run only these phases (a rerun of what a cut run missed)")
    args = ap.parse_args(argv)
    global P
    P = SIZES["smoke" if args.smoke else "paper"]
    base.SCALE = P["scale"]
    dev = torch.device(args.device)
    run = base.Run(args.out, args.budget_s, dev, args.commit)
    run.blob["benchmark"] = "Issue 27: training-step levers, bf16, inference ratios, whole-test-set evaluation"
    run.blob["settings"].update({"sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in P.items()}, "pays_below": PAYS})
    for section in ("lever_summary",):
        run.blob[section] = {}
    for section in ("grad_check", "bf16_training", "eval_pipeline", "dg_layers", "compile"):
        run.blob[section] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench27_", dir=os.environ.get("TMPDIR")))
    steps = {
        "levers": lambda: levers(run),
        "grad_check": lambda: grad_check(run),
        "bf16": lambda: bf16_training(run, tmp),
        "inference": lambda: inference(run),
        "evaluation": lambda: evaluation(run, tmp),
        "compile": lambda: compile_step(run),
        "dg_layers": lambda: dg_layers(run),
    }
    try:
        for label in args.phases or PHASES:
            t0 = time.monotonic()
            print(f"[{time.strftime('%H:%M:%S')}] {label} ({run.left():.0f} s left)", file=sys.stderr, flush=True)
            try:
                steps[label]()
            except Exception as exc:  # noqa: BLE001
                run.error(label, exc)
            run.blob.setdefault("phase_seconds", {})[label] = time.monotonic() - t0
            decide(run)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print({k: len(v) for k, v in run.blob.items() if isinstance(v, list)}, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
