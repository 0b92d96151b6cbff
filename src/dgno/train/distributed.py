"""Data-parallel training under ``torchrun``: where this process stands and what the ranks exchange.

Every function here is a no-op (or the one-process answer) when the world has one process, so the
training loop calls them unconditionally. Gradients are averaged by DistributedDataParallel; what
DDP does not synchronise (buffers, the stop decision, the final weights' digests) goes through these.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm


@dataclass(frozen=True)
class Ranks:
    """Where this process stands in a data-parallel run (world 1 = an ordinary single process).

    ``torchrun`` sets WORLD_SIZE, RANK and LOCAL_RANK; everything else follows from them.
    """

    world: int = 1
    rank: int = 0
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Ranks:
        return cls(world=int(os.environ.get("WORLD_SIZE", "1")), rank=int(os.environ.get("RANK", "0")), local_rank=int(os.environ.get("LOCAL_RANK", "0")))

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        """Rank 0 alone writes checkpoints, metrics, the model file and progress output."""
        return self.rank == 0

    def share(self, batch: int) -> slice:
        """This rank's part of a step's batch (check_batches makes it split evenly)."""
        per = batch // self.world
        return slice(self.rank * per, (self.rank + 1) * per)


def setup_distributed(ranks: Ranks, device: torch.device, batch_size: int) -> tuple[torch.device, bool]:
    """Join the process group (NCCL on CUDA, gloo on CPU); return this rank's device and whether we
    created the group (and so must destroy it). Each rank drives the GPU numbered by its local rank."""
    import torch.distributed as dist

    if device.type == "cuda":
        device = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(device)
    if dist.is_initialized():
        own_group = False
    else:
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        own_group = True
    if ranks.main:  # the job log says how the run was split (a one-process run says nothing)
        tqdm.write(
            f"data-parallel training: world size {ranks.world} ({dist.get_backend()}), {batch_size} crops per step "
            f"= {batch_size // ranks.world} per process"
        )
    return device, own_group


def leave_distributed() -> None:
    """Leave the process group that :func:`setup_distributed` created."""
    import torch.distributed as dist

    dist.destroy_process_group()


def sync_buffers(model: torch.nn.Module, ranks: Ranks) -> None:
    """Copy rank 0's buffers (BatchNorm running statistics) to every rank after a step.

    Gradients are averaged by DDP, so the weights agree; running statistics are updated from each
    rank's own crops and would not. DDP broadcasts them only at the start of the next forward;
    doing it before the EMA update keeps the EMA, and so model.pt, identical on every rank. One
    broadcast per dtype, of all buffers flattened (models without buffers skip it).
    """
    import torch.distributed as dist

    if not ranks.distributed:
        return
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for b in model.buffers():
        by_dtype.setdefault(b.dtype, []).append(b)
    for bufs in by_dtype.values():
        flat = torch.cat([b.reshape(-1) for b in bufs])
        dist.broadcast(flat, src=0)
        offset = 0
        for b in bufs:
            b.copy_(flat[offset : offset + b.numel()].view_as(b))
            offset += b.numel()


def agree(loss: torch.Tensor, stop: bool, ranks: Ranks) -> tuple[float, bool]:
    """(mean loss over ranks, whether any rank was signalled): one all-reduce per iteration.

    Every rank must checkpoint and stop at the same iteration, because checkpoints are collective
    and a rank that leaves early makes torchrun kill the others (possibly mid-write).
    """
    if not ranks.distributed:
        return loss.item(), stop
    import torch.distributed as dist

    both = torch.stack([loss.detach().float(), loss.new_tensor(float(stop), dtype=torch.float32)])
    dist.all_reduce(both)
    total, stops = both.tolist()
    return total / ranks.world, stops > 0


def gather(obj: Any, ranks: Ranks) -> list[Any]:
    """[obj of rank 0, obj of rank 1, ...] on every rank (just [obj] in a single process)."""
    if not ranks.distributed:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * ranks.world
    dist.all_gather_object(out, obj)
    return out


def barrier(ranks: Ranks) -> None:
    """Wait for every rank (nothing to wait for in a single process)."""
    if ranks.distributed:
        import torch.distributed as dist

        dist.barrier()
