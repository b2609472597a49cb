"""The few collectives data-parallel training needs, in one place (see ``docs/distributed.md``).

Every helper is a no-op in a single process. Under a ``torch.distributed`` strategy (DDP) they
call ``torch.distributed`` directly on the default group: no barrier, and no read back to the
host, so on an accelerator they only queue work. Other multi-process strategies fall back on
the Lightning strategy's own ``reduce``/``broadcast``. Samplers and fields never call these:
the training system does, around them.
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning.pytorch as pl
import torch
from torch import Tensor, nn


def world_size(trainer: pl.Trainer | None) -> int:
    """Processes taking part in training (``1`` without a trainer)."""
    return int(trainer.world_size) if trainer is not None else 1


def _uses_torch_distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def all_reduce_sum_(tensor: Tensor, trainer: pl.Trainer | None) -> Tensor:
    """Sums ``tensor`` over all processes, in place; returns it."""
    if world_size(trainer) <= 1:
        return tensor
    if _uses_torch_distributed():
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.SUM)
        return tensor
    assert trainer is not None
    return tensor.copy_(trainer.strategy.reduce(tensor, reduce_op="sum"))


def all_reduce_min_(tensor: Tensor, trainer: pl.Trainer | None) -> Tensor:
    """The minimum of ``tensor`` over all processes, in place; returns it."""
    if world_size(trainer) <= 1:
        return tensor
    if _uses_torch_distributed():
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MIN)
        return tensor
    assert trainer is not None
    return tensor.copy_(trainer.strategy.reduce(tensor, reduce_op="min"))


def broadcast_(tensors: Sequence[Tensor], trainer: pl.Trainer | None, src: int = 0) -> None:
    """Overwrites ``tensors`` on every process with rank ``src``'s values, in place."""
    if world_size(trainer) <= 1 or not tensors:
        return
    for tensor in tensors:
        if _uses_torch_distributed():
            # bool is sent as its bytes: not every backend reduces or broadcasts bool.
            torch.distributed.broadcast(tensor.view(torch.uint8) if tensor.dtype == torch.bool else tensor,
                                        src=src)
        else:
            assert trainer is not None
            tensor.copy_(trainer.strategy.broadcast(tensor, src=src))


BufferVersions = dict[str, tuple[int, int]]


def buffer_versions(module: nn.Module) -> BufferVersions:
    """Identity and in-place version counter of each buffer of ``module`` (a cheap host-side snapshot)."""
    return {name: (id(buffer), buffer._version) for name, buffer in module.named_buffers()}


def changed_buffers(module: nn.Module, before: BufferVersions) -> list[Tensor]:
    """Buffers of ``module`` written in place or replaced since ``before`` was taken, in name order."""
    return [buffer for name, buffer in sorted(module.named_buffers(), key=lambda item: item[0])
            if before.get(name) != (id(buffer), buffer._version)]


def sync_changed_buffers(module: nn.Module, before: BufferVersions, trainer: pl.Trainer | None) -> int:
    """Broadcasts from rank 0 every buffer of ``module`` changed since ``before``; returns how many.

    Which buffers changed must not depend on the rank (it does not when the change depends only
    on the step, the parameters and a rank-independent generator, as a sampler's ``update``
    does); otherwise the processes would wait on different broadcasts.
    """
    changed = changed_buffers(module, before)
    broadcast_(changed, trainer)
    return len(changed)

