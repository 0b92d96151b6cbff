"""Scoring a test set at the GPU's speed: decoding, restoring and scoring/writing overlapped.

    reader thread   load item i+1, i+2, …   (decode the blurred and sharp images)
    caller thread   compute item i          (restore it on the device: tiles batched, CUDA graphs)
    writer thread   finish item i−1, …      (PSNR, SSIM, LPIPS; write the restored TIFF)

Why: on a GPU the restoration of a 696×520 frame takes tens of milliseconds, about what decoding its
two TIFFs, an SSIM and a compressed float32 TIFF cost on the host. Run one after the other, the GPU
idles for most of an evaluation; overlapped, it is busy while the host works. Decoding, zlib and most
of numpy's and scikit-image's work release the GIL, so the threads run side by side.

Same results whatever the overlap: every item is loaded, computed and finished by the same functions
as in the sequential loop, and the writer finishes items one at a time in their order, so rows, files
and any state the finishing function keeps (e.g. the LPIPS weight source) come out as they would
sequentially (``tests/test_eval_pipeline.py`` compares scores and files bit for bit). The queues are
bounded (``depth`` items each), so memory stays a few images whatever the size of the test set.
An error in any stage stops the others and is raised in the caller's thread.

GPU utilisation: :class:`UtilisationSampler` samples NVML's utilisation (the share of time a kernel
was running) while the evaluation runs; "n/a" on a CPU or without NVML.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import torch

T = TypeVar("T")
_DONE = object()


class _Stage(threading.Thread):
    """A daemon thread that runs ``body`` and keeps the exception that ended it, for the caller to raise."""

    def __init__(self, name: str, body: Callable[[], None]) -> None:
        super().__init__(name=name, daemon=True)
        self.body, self.error = body, None

    def run(self) -> None:
        try:
            self.body()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self.error = exc


def _put(q: queue.Queue, item: Any, stop: threading.Event, consumer: _Stage | None = None) -> bool:
    """Put unless stopped or the consuming stage died (checked every 0.1 s, so nothing blocks forever on a full queue)."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            if consumer is not None and not consumer.is_alive():
                return False
    return False


def _get(q: queue.Queue, stop: threading.Event, stage: _Stage | None = None) -> Any:
    """Get unless stopped or the producing stage died (its error is raised by the caller)."""
    while not stop.is_set():
        try:
            return q.get(timeout=0.1)
        except queue.Empty:
            if stage is not None and not stage.is_alive() and q.empty():
                return _DONE
    return _DONE


def run_pipeline(
    items: Sequence[T],
    load: Callable[[T], Any],
    compute: Callable[[T, Any], Any],
    finish: Callable[[T, Any], None],
    *,
    overlap: bool,
    depth: int = 2,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> None:
    """``finish(item, compute(item, load(item)))`` for every item, in order.

    With ``overlap`` ``load`` runs in a reader thread and ``finish`` in a writer thread, each at most
    ``depth`` items ahead of / behind ``compute``, which runs in the caller's thread (the one that
    owns the GPU work). ``progress`` wraps the caller's loop (e.g. tqdm).
    """
    wrap = progress or (lambda it: it)
    if not overlap:
        for item in wrap(items):
            finish(item, compute(item, load(item)))
        return
    stop = threading.Event()
    loaded: queue.Queue = queue.Queue(maxsize=depth)
    computed: queue.Queue = queue.Queue(maxsize=depth)

    def read() -> None:
        for item in items:
            if not _put(loaded, (item, load(item)), stop):
                return

    def write() -> None:
        while (entry := _get(computed, stop)) is not _DONE:
            finish(*entry)

    reader, writer = _Stage("dgno-eval-reader", read), _Stage("dgno-eval-writer", write)
    reader.start()
    writer.start()
    try:
        for _ in wrap(range(len(items))):
            entry = _get(loaded, stop, reader)
            if entry is _DONE or writer.error is not None:
                break
            item, data = entry
            if not _put(computed, (item, compute(item, data)), stop, writer):
                break
        _put(computed, _DONE, stop, writer)
        writer.join()
    finally:
        stop.set()
        reader.join()
        writer.join()
    for stage in (reader, writer):
        if stage.error is not None:
            raise stage.error


class UtilisationSampler:
    """Mean GPU utilisation (NVML, percent of time a kernel ran) while the ``with`` block runs.

    ``result()``: {"gpu_utilisation_percent": mean or "n/a", "gpu_utilisation_samples": n,
    "gpu_utilisation_source": what was sampled, or why nothing was}.
    """

    def __init__(self, device: torch.device, *, every_s: float = 0.2) -> None:
        self.device, self.every_s = device, every_s
        self.samples: list[float] = []
        self.why_none = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> UtilisationSampler:
        if self.device.type != "cuda":
            self.why_none = f"not a CUDA device ({self.device})"
            return self
        try:
            torch.cuda.utilization(self.device)
        except Exception as exc:  # noqa: BLE001 - NVML missing (pynvml / nvidia-ml-py) or unreadable
            self.why_none = f"NVML not available ({type(exc).__name__}: {str(exc)[:120]})"
            return self
        self._thread = threading.Thread(target=self._sample, name="dgno-gpu-util", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.samples.append(float(torch.cuda.utilization(self.device)))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def result(self) -> dict[str, Any]:
        if not self.samples:
            return {"gpu_utilisation_percent": "n/a", "gpu_utilisation_samples": 0, "gpu_utilisation_source": self.why_none or "no sample (too short)"}
        return {
            "gpu_utilisation_percent": statistics.fmean(self.samples),
            "gpu_utilisation_samples": len(self.samples),
            "gpu_utilisation_source": f"NVML utilisation of {self.device}, sampled every {self.every_s} s",
        }


def timed_pipeline(items: Sequence[T], load, compute, finish, *, overlap: bool, device: torch.device, depth: int = 2, progress=None) -> dict[str, Any]:
    """:func:`run_pipeline` with its wall time, throughput and GPU utilisation, for the evaluation summary."""
    t0 = time.perf_counter()
    with UtilisationSampler(device) as util:
        run_pipeline(items, load, compute, finish, overlap=overlap, depth=depth, progress=progress)
    seconds = time.perf_counter() - t0
    return {
        "device": str(device),
        "overlap_io": overlap,
        "seconds": seconds,
        "images_per_second": len(items) / seconds if seconds > 0 else None,
        **util.result(),
    }
