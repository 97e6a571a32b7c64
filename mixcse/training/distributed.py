"""torch.distributed glue: process group from torchrun's environment, and global-batch gathering."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from mixcse.errors import ConfigError


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    owns_group: bool = False  # this context created the process group, so it also tears it down

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_from_env(device: str | None = None) -> DistContext:
    """Join the process group torchrun describes (WORLD_SIZE > 1), else a single-process context.

    NCCL on CUDA, gloo on CPU; each rank drives the GPU of its LOCAL_RANK.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device in (None, "auto") else device.startswith("cuda")
    if use_cuda:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    owns_group = world_size > 1 and not dist.is_initialized()
    if owns_group:
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistContext(rank, world_size, local_rank, dev, owns_group)


def close(ctx: DistContext) -> None:
    """Wait for every rank; then tear down the process group if this context created it.

    Left to interpreter exit, a gloo group's worker threads can be destroyed while a peer is closing its sockets,
    and a rank then dies with SIGABRT ("terminate called without an active exception") after finishing its work.
    """
    barrier(ctx)
    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()
        ctx.owns_group = False


def gather_with_local_grad(x: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Concatenate every rank's ``x`` (rank order); only this rank's slice carries gradient.

    Every rank then computes the loss of the whole global batch. The local slice appears in that loss as anchors,
    positives, negatives and mixed negatives, so its gradient is complete on this rank; DDP's gradient averaging
    divides by the world size, which the caller undoes by scaling the loss by ``world_size``.
    """
    if not ctx.enabled:
        return x
    parts = [torch.empty_like(x) for _ in range(ctx.world_size)]
    dist.all_gather(parts, x.detach().contiguous())
    parts[ctx.rank] = x
    return torch.cat(parts, dim=0)


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        dist.barrier()


def broadcast_object(obj, ctx: DistContext):
    if not ctx.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def check_batch_split(batch_size: int, mini_batch_size: int | None, ctx) -> None:
    """The global batch splits evenly over the processes, and each share over ``mini_batch_size``."""
    if batch_size % ctx.world_size:
        raise ConfigError(f"batch_size {batch_size} is not divisible by the {ctx.world_size} processes")
    per_rank = batch_size // ctx.world_size
    if mini_batch_size is not None and per_rank % mini_batch_size:
        raise ConfigError(f"mini_batch_size {mini_batch_size} does not divide the per-process batch "
                          f"(batch_size {batch_size} / {ctx.world_size} processes = {per_rank})")
