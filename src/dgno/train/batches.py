"""Training batches: random crops cut ahead by a background thread, progressive sub-batches, validation crops."""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np
import torch

from dgno.data.paired import CropSampler
from dgno.train.recipe import TrainConfig


class BatchStream:
    """Training batches from a CropSampler, optionally cut ahead of time by one background thread.

    The thread calls ``sampler.next_batch()`` in order, so the sequence of batches is exactly the
    sampler's, whatever the timing; numpy releases the GIL while it copies crops, so the thread
    runs while the model steps. :meth:`state` is the sampler state *after the last batch handed
    out*, not the live one: a checkpoint written with it makes a resumed run regenerate the
    batches that were cut but never used, so resume stays exact. With ``depth=0`` batches are cut
    on demand in the caller's thread. ``pin_device`` (a CUDA device) page-locks the batches so
    that their copy to that GPU can overlap with compute.
    """

    def __init__(self, sampler: CropSampler, *, depth: int, pin_device: torch.device | None = None):
        self.sampler, self.pin_device = sampler, pin_device
        self._state = sampler.state()
        self._queue: queue.Queue | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if depth > 0:
            self._queue = queue.Queue(maxsize=depth)
            self._thread = threading.Thread(target=self._fill, name="dgno-batches", daemon=True)
            self._thread.start()

    def _cut(self) -> tuple[tuple[torch.Tensor, torch.Tensor], dict]:
        blur, gt = (torch.from_numpy(a) for a in self.sampler.next_batch())  # (B, C, P, P) each
        if self.pin_device is not None:
            blur, gt = blur.pin_memory(), gt.pin_memory()
        return (blur, gt), self.sampler.state()

    def _fill(self) -> None:
        """Producer: cut batches until stopped; an error is passed on to be raised by the consumer."""
        assert self._queue is not None
        if self.pin_device is not None and self.pin_device.index is not None:
            # A new thread starts on the default GPU; pinning from there would give every rank of a
            # multi-GPU run a context on GPU 0. (A bare "cuda" device is that default anyway.)
            torch.cuda.set_device(self.pin_device)
        while not self._stop.is_set():
            try:
                item: Any = self._cut()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the training thread
                item = exc
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next (blur, gt) batch as CPU tensors, (B, C, P, P) float32."""
        if self._queue is None:
            batch, self._state = self._cut()
            return batch
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        batch, self._state = item
        return batch

    def state(self) -> dict:
        """Sampler state after the last batch returned by :meth:`next` (what a checkpoint must hold)."""
        return self._state

    def close(self) -> None:
        """Stop the producer thread (idempotent); the batches it cut ahead are dropped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def cut_batch(blur: torch.Tensor, gt: torch.Tensor, *, patch: int, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random ``batch`` of the crops and a random ``patch``×``patch`` window of them (same for blur and gt).

    The authors' progressive training: the loader cuts full-size crops and each step keeps a random
    subset and sub-window.  Seeded by step, so a resumed run cuts the same windows.
    """
    if patch == blur.shape[-1] and batch == blur.shape[0]:
        return blur, gt
    g = torch.Generator().manual_seed(seed)
    keep = torch.randperm(blur.shape[0], generator=g)[:batch].sort().values.to(blur.device)
    y, x = (int(torch.randint(blur.shape[d] - patch + 1, (1,), generator=g)) for d in (-2, -1))
    window = (keep, slice(None), slice(y, y + patch), slice(x, x + patch))
    return blur[window], gt[window]


def val_batches(val_pairs, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """A fixed set of held-out crops (same every evaluation), so validation curves are comparable."""
    if not val_pairs:
        return None
    patch = min(cfg.patch_size, *(min(p.shape[:2]) for p in val_pairs))
    sampler = CropSampler(val_pairs, patch=patch, batch_size=cfg.val_crops, seed=cfg.seed + 12345, augment=False)
    return sampler.next_batch()
