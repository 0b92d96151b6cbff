"""The training step with each speed lever (``benchmarks.gpu.levers_and_evaluation``): timings, gradient check, torch.compile.

The step timed is the training loop's own (``dgno.train.step.TrainStep`` plus the EMA update) on a fixed
batch. "default" is the step with no lever switched on, the reference every lever is compared with.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from typing import Any

import torch

from benchmarks.gpu.session import Run, memory, release, timed
from dgno.layers.mambair import ASSM, set_scan_backend
from dgno.models.registry import build_model
from dgno.train import TrainConfig
from dgno.train.loop import ema_update
from dgno.train.schedule import ema_decay_at
from dgno.train.step import TrainStep, backend_flags, make_optimizer, prepare_model

DGNO = ("dgno-cell", "dgno-face")
DEFAULT = "default"  # the label of the step with no lever on
LEVERS: dict[str, dict[str, Any]] = {
    "channels_last": {"channels_last": True},
    "cudnn_benchmark": {"cudnn_benchmark": True},
    "fused_layernorm": {"fused_layernorm": True},
    "adamw_fused": {"adamw_impl": "fused"},
    "cuda_graphs": {"cuda_graphs": True},
}
CUDA_ONLY = {"cudnn_benchmark", "cuda_graphs"}
PAYS = 0.98  # a lever is kept when it takes at most 98 % of the default step's time


def scan_for(dev: torch.device) -> str:
    return "triton" if dev.type == "cuda" else "torch"  # the Triton interpreter would take minutes on a CPU


def build(run: Run, name: str, scan: str | None = "fixed") -> torch.nn.Module:
    """The registry model at this run's scale, seeded; DGNO's ASSMs on the Triton scan on a GPU (``scan=None``: "auto")."""
    torch.manual_seed(0)
    model = build_model(name, scale=run.sizes["scale"]).to(run.device)
    if scan is not None and any(isinstance(m, ASSM) for m in model.modules()):
        set_scan_backend(model, scan_for(run.device))
    return model


def train_config(run: Run, **settings) -> TrainConfig:
    return TrainConfig(batch_size=run.sizes["batch"], patch_size=run.sizes["crop"], bf16=False, **settings)


def merge(names) -> dict[str, Any]:
    """The ``train:`` settings of several levers together."""
    return {k: v for name in names for k, v in LEVERS[name].items()}


def usable_levers(run: Run) -> list[str]:
    return [n for n in LEVERS if run.device.type == "cuda" or n not in CUDA_ONLY]


class LoopStep:
    """The training loop's step on a fixed batch: TrainStep (with ``settings``' levers) plus the EMA update."""

    def __init__(self, run: Run, name: str, settings: dict[str, Any], *, batch: int | None = None, warmup: int = 3) -> None:
        self.cfg = train_config(run, **settings)
        dev, crop = run.device, run.sizes["crop"]
        self.model = prepare_model(build(run, name).train(), self.cfg)
        self.ema = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.step = TrainStep(self.model, self.model, make_optimizer(self.model, self.cfg, dev), self.cfg, dev,
                              compile_backend=run.sizes["compile_backend"], warmup=warmup)  # fmt: skip
        g = torch.Generator().manual_seed(0)
        b = batch or run.sizes["batch"]
        self.x, self.y = (torch.rand(b, 1, crop, crop, generator=g).to(dev) for _ in range(2))
        self.it = 0

    def __call__(self) -> torch.Tensor:
        loss = self.step(self.x, self.y, self.it)
        ema_update(self.ema, self.model, ema_decay_at(self.it, self.cfg.ema_decay))
        self.it += 1
        return loss

    def grads(self) -> dict[str, torch.Tensor]:
        return {n: p.grad.detach().float().clone() for n, p in self.model.named_parameters() if p.grad is not None}


def measure_step(run: Run, name: str, label: str, settings: dict[str, Any]) -> dict | None:
    """ms/it and peak memory of the step with ``settings``; None (recorded as skipped or an error) if it failed."""
    dev, sz, what = run.device, run.sizes, f"levers {name} {label}"
    step = None
    try:
        with backend_flags(train_config(run, **settings)):
            step = LoopStep(run, name, settings)
            warm = 5 if settings.get("cuda_graphs") or settings.get("compile") else sz["warmup"]
            t0 = time.perf_counter()
            times = timed(step, dev, warmup=warm, min_repeats=sz["repeats"], target_s=sz["target_s"], max_repeats=12)
        sec = statistics.median(times)
        rec = {
            "model": name, "scan_backend": scan_for(dev), "size": sz["crop"], "batch": sz["batch"], "dtype": "fp32", "levers": label,
            "settings": settings, "seconds_per_iteration": sec, "iterations_per_second": 1 / sec, "projected_hours_60k": 60000 * sec / 3600,
            "first_step_seconds": step.step.first_step_seconds, "phase_seconds": time.perf_counter() - t0, **memory(dev), "times": times,
        }  # fmt: skip
        run.add("train", rec)
        return rec
    except torch.cuda.OutOfMemoryError as exc:
        run.out_of_memory(what, exc)
    except Exception as exc:  # noqa: BLE001
        run.error(what, exc)
    finally:
        step = None
        release(dev)
    return None


def _combinations(paid: list[str], usable: list[str]) -> dict[str, dict[str, Any]]:
    """The levers that paid together (when more than one did) and all of them (when not all paid)."""
    combos = {}
    if len(paid) > 1:
        combos["paid: " + "+".join(paid)] = merge(paid)
    if set(paid) != set(usable):
        combos["all"] = merge(usable)
    return combos


def levers(run: Run) -> None:
    """The default step, each lever alone, the levers that paid together, all of them; per DGNO model."""
    summary, usable = run.blob["lever_summary"], usable_levers(run)
    for n in set(LEVERS) - set(usable):
        run.skip(f"lever {n}", "CUDA only")
    for name in DGNO:
        if not run.has_time(40, f"levers {name}"):
            continue
        default = measure_step(run, name, DEFAULT, {})
        if default is None:
            continue
        alone = {lever: measure_step(run, name, lever, LEVERS[lever]) for lever in usable if run.has_time(25, f"levers {name} {lever}")}
        paid = [n for n, r in alone.items() if r and r["seconds_per_iteration"] <= PAYS * default["seconds_per_iteration"]]
        for label, settings in _combinations(paid, usable).items():
            if run.has_time(25, f"levers {name} {label}"):
                measure_step(run, name, label, settings)
        fastest = min((r for r in run.blob["train"] if r["model"] == name), key=lambda r: r["seconds_per_iteration"])
        summary[name] = {
            "default_ms": 1e3 * default["seconds_per_iteration"],
            "alone_speedup": {n: default["seconds_per_iteration"] / r["seconds_per_iteration"] for n, r in alone.items() if r},
            "paid": paid,
            "fastest": fastest["levers"], "fastest_settings": fastest["settings"], "fastest_ms": 1e3 * fastest["seconds_per_iteration"],
        }  # fmt: skip
        run.save()


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


def _compare_steps(run: Run, routing: str, settings: dict[str, Any]) -> tuple[tuple, tuple, tuple]:
    """(default, fastest, default again): one step each at the fastest step's weights after its warm-up and capture."""
    grad_batch = run.sizes["grad_batch"]
    with contextlib.ExitStack() as stack:
        if routing == "deterministic":
            stack.enter_context(deterministic_routing())
        stack.enter_context(backend_flags(train_config(run, **settings)))
        fast = LoopStep(run, "dgno-cell", settings, batch=grad_batch, warmup=2)
        for _ in range(4):  # eager warm-up, capture, first replay
            fast()
        state = {k: v.detach().clone() for k, v in fast.model.state_dict().items()}
        ref = LoopStep(run, "dgno-cell", {}, batch=grad_batch)
        again = LoopStep(run, "dgno-cell", {}, batch=grad_batch)
        for s in (ref, again):
            s.it = fast.it
        return _grads_at(ref, state, 7), _grads_at(fast, state, 7), _grads_at(again, state, 7)


def grad_check(run: Run) -> None:
    """Fastest DGNO-Cell step vs the default one, one step at the same weights, batch and RNG seed."""
    best = run.blob["lever_summary"].get("dgno-cell", {})
    label, settings = best.get("fastest"), best.get("fastest_settings")
    if not settings:  # nothing was faster than the default step: check all the levers together
        label, settings = "all", merge(usable_levers(run))
    for routing in ("deterministic", "gumbel"):
        if not run.has_time(30, f"grad_check {routing}"):
            continue
        try:
            a, b, c = _compare_steps(run, routing, settings)
            run.add("grad_check", {"model": "dgno-cell", "routing": routing, "levers": label, "settings": settings,
                                   "fastest_vs_default": _difference(a, b), "default_vs_default": _difference(a, c)})  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            run.error(f"grad_check {routing}", exc)
        finally:
            release(run.device)


def compile_step(run: Run) -> None:
    """torch.compile of the step with the levers that paid, then alone: compile time, ms/it, break-even."""
    summary = run.blob["lever_summary"].get("dgno-cell", {})
    default, paid = summary.get("default_ms"), summary.get("paid", [])
    plans = [("compile+" + "+".join(paid), {**merge(paid), "compile": True})] if paid else []
    plans.append(("compile", {"compile": True}))
    if run.sizes["scale"] == "smoke":
        plans = plans[:1]  # one compiled step checks the code path; tracing takes 10-20 s on a CPU
    for label, settings in plans:
        if not run.has_time(120, f"compile {label}", "time budget spent (compiling a paper-scale step takes minutes)"):
            continue
        rec = measure_step(run, "dgno-cell", label, settings)
        torch._dynamo.reset()
        if rec is None or not default:
            continue
        paid_ms = (r["seconds_per_iteration"] * 1e3 for r in run.blob["train"] if r["model"] == "dgno-cell" and r["settings"] == merge(paid))
        reference = default if label == "compile" else min(paid_ms, default=default)
        gain_s = (reference - 1e3 * rec["seconds_per_iteration"]) / 1e3
        extra_s = rec["first_step_seconds"] - rec["seconds_per_iteration"]
        run.add("compile", {"model": "dgno-cell", "levers": label, "compile_seconds": extra_s, "ms_per_it": 1e3 * rec["seconds_per_iteration"],
                            "reference_ms": reference, "break_even_iterations": extra_s / gain_s if gain_s > 0 else None})  # fmt: skip
