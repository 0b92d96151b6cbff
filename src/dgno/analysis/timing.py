"""Wall-clock timing of a call, shared by ``dgno bench`` and every script under ``benchmarks/``.

One loop for all of them, so that every recorded time means the same thing: ``warmup`` untimed calls
(first-call costs such as kernel selection, lazy imports and caches are not what is measured), then
timed calls, each between two device synchronisations (a GPU call returns before its work is done, so
an unsynchronised timer measures the launch). Every duration is kept: a record states its minimum (the
run least disturbed by other processes on a busy machine), its median and how many there were.

The module imports no torch: a benchmark of numpy code stays free of it, and ``device_sync`` imports it
only for a CUDA device.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    """The timed calls of one :func:`wall_times`: durations in seconds, in call order, and the last result."""

    times: tuple[float, ...]
    result: Any

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def _no_wait() -> None:
    """A CPU's work is done when the call returns: nothing to wait for."""


def device_sync(device: Any) -> Callable[[], None]:
    """A function that waits until ``device`` (a ``torch.device`` or a string such as "cuda:0") has finished its queued work."""
    kind = getattr(device, "type", str(device).split(":")[0])
    if kind != "cuda":
        return _no_wait
    import torch  # only for a CUDA device: CPU timings of numpy code do not need torch

    return functools.partial(torch.cuda.synchronize, device)


def wall_times(
    fn: Callable[[], Any],
    *,
    repeats: int,
    warmup: int = 0,
    sync: Callable[[], None] = _no_wait,
    target_s: float = 0.0,
    max_repeats: int | None = None,
    on_warm: Callable[[], None] | None = None,
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then at least ``repeats`` timed ones.

    With ``target_s``, timing goes on until the timed calls add up to ``target_s`` seconds (at most
    ``max_repeats`` calls), so that a fast call is timed often enough to rise above the timer's noise.
    ``on_warm`` runs once between the warm-up and the first timed call (e.g. to reset a peak-memory
    counter, so that the peak is the timed calls').
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats!r}: at least one timed call is needed")
    result = None
    for _ in range(warmup):
        result = fn()
    sync()
    if on_warm is not None:
        on_warm()
    limit = max(repeats, max_repeats or repeats)
    times: list[float] = []
    while len(times) < repeats or (sum(times) < target_s and len(times) < limit):
        sync()
        t0 = time.perf_counter()
        result = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return Timing(tuple(times), result)
