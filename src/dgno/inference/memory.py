"""How large a tile one forward pass can take within a memory budget, and what to do when it cannot.

A network's activation memory grows with the pixels of a pass: a paper-scale DGNO holds about 600 bytes
per pixel at its peak on the CPU, so one pass over a 4000² image needs about 10 GB. The peak is measured
once per model, on a small probe image, by following every tensor the forward pass allocates until it
is freed (:class:`PeakMemory`: a torch dispatch mode, the mechanism of ``torch.utils.flop_counter``,
which sees CPU and GPU tensors alike). The tile side is then capped so that ``tile_batch`` tiles plus the
whole-image buffers fit the budget: half the memory available when the run starts on a CPU, 80 % of the
free memory of a GPU, or ``--max-memory``. A pass that still runs out of memory is retried with tiles
half as large (:func:`smaller_tile`).
"""

from __future__ import annotations

import math
import os
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from dgno.inference.preflight import MIN_TILE

PROBE_SIDE = 128  # a multiple of every network's stride; large enough that per-pixel costs dominate
TILE_MULTIPLE = 32  # tiles are cut to multiples of the networks' total stride: no padding inside a tile
CPU_SHARE, GPU_SHARE = 0.5, 0.8  # of the available memory: the rest is for the OS, the caches, a second run
FALLBACK_BYTES = 4 << 30  # when the available memory cannot be read


class PeakMemory(TorchDispatchMode):
    """The largest number of bytes held by tensors the wrapped code allocated, at any one time.

    Each operator's output storage is counted from its creation until Python frees it (a weak
    reference's callback); views share their storage and are counted once.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.now = self.peak = 0

    def _free(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                storage = value.untyped_storage()
                key = id(storage)
                if key not in self.live:
                    self.live[key] = storage.nbytes()
                    self.now += storage.nbytes()
                    self.peak = max(self.peak, self.now)
                    weakref.finalize(storage, self._free, key)
        return out


@torch.no_grad()
def activation_bytes_per_pixel(model: torch.nn.Module, device: torch.device, in_channels: int) -> float:
    """Peak activation bytes per input pixel of one forward pass of ``model`` (one image, fp32)."""
    probe = torch.rand(1, in_channels, PROBE_SIDE, PROBE_SIDE, device=device)
    with PeakMemory() as meter:
        model(probe)
    return meter.peak / PROBE_SIDE**2


def available_bytes(device: torch.device) -> int:
    """Memory free for this run now: the GPU's free memory, or the system's available memory (Linux, else sysconf)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return FALLBACK_BYTES


def memory_budget(device: torch.device, max_memory_gb: float | None = None) -> int:
    """Bytes one pass may use: ``max_memory_gb`` when given, else a share of what is available (module docstring)."""
    if max_memory_gb is not None:
        return int(max_memory_gb * (1 << 30))
    return int(available_bytes(device) * (GPU_SHARE if device.type == "cuda" else CPU_SHARE))


def image_buffer_bytes(pixels: int, in_channels: int, out_channels: int) -> int:
    """The whole-image float32 buffers beside the passes: input, its tensor, the blended output and its weights."""
    return pixels * 4 * (2 * in_channels + 2 * out_channels + 1)


def tile_cap(bytes_per_pixel: float, budget: int, *, tile_batch: int, buffers: int = 0) -> int:
    """The largest tile side (a multiple of 32, at least :data:`MIN_TILE`) whose passes fit ``budget``."""
    room = max(budget - buffers, 0)
    side = math.isqrt(int(room / max(bytes_per_pixel * tile_batch, 1.0)))
    return max(MIN_TILE, side // TILE_MULTIPLE * TILE_MULTIPLE)


def smaller_tile(tile: int, overlap: int) -> int | None:
    """The tile side to retry with after running out of memory at ``tile``: half, or None below the minimum."""
    half = tile // 2 // TILE_MULTIPLE * TILE_MULTIPLE
    return half if half >= MIN_TILE and half > overlap else None


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure (GPU or CPU allocator, or numpy)."""
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text or "not enough memory" in text)
