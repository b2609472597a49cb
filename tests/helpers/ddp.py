"""Test-only plugins for looking inside every rank of a real multi-process run.

Passed on the command line: ``--trainer.callbacks+=tests.helpers.ddp.DumpRankState
--trainer.callbacks.dirpath DIR``; each rank writes ``DIR/rank<R>.pt`` when training ends.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from nerf_lightning.callbacks import SampleBudget, Viewer
from nerf_lightning.samplers import OccupancyGrid


def _cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {key: _cpu(item) for key, item in value.items()}
    return value


class DumpRankState(pl.Callback):
    """Writes, per rank: the module's state dict (parameters and buffers), the data module's state
    (error map), the batch size and ``SampleBudget`` state, and the pixels and size of this
    process's first training batch.

    Args:
        dirpath: folder for ``rank<R>.pt``.
    """

    def __init__(self, dirpath: str) -> None:
        self.dirpath = dirpath
        self._first: dict[str, Any] | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self._first is None:
            self._first = {"global_step": trainer.global_step, "rays": len(batch),
                           "pixels": batch.pixel_indices.cpu().clone()}

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        budgets = [c for c in trainer.callbacks if isinstance(c, SampleBudget)]
        state = {
            "rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "global_step": trainer.global_step,
            "state_dict": _cpu(pl_module.state_dict()),
            "datamodule": _cpu(trainer.datamodule.state_dict()),
            "rays_per_batch": trainer.datamodule.rays_per_batch,
            "budget": _cpu(budgets[0].state_dict()) if budgets else None,
            "first_batch": self._first,
        }
        Path(self.dirpath).mkdir(parents=True, exist_ok=True)
        torch.save(state, Path(self.dirpath) / f"rank{trainer.global_rank}.pt")


class StampedOccupancyGrid(OccupancyGrid):
    """``OccupancyGrid`` that also writes its process's local rank into a buffer at every update.

    A deliberately rank-dependent update: after training, every rank (and the checkpoint) must
    hold rank 0's stamp, which shows that the training system broadcasts updated sampler buffers.
    """

    stamp: torch.Tensor

    def __init__(self, resolution: int = 64, update_every: int = 16, warmup_steps: int = 256) -> None:
        super().__init__(resolution=resolution, update_every=update_every, warmup_steps=warmup_steps)
        self.register_buffer("stamp", torch.full((2,), -1, dtype=torch.int64))

    def update(self, step: int, density_fn: Any, *, generator: torch.Generator | None = None) -> None:
        super().update(step, density_fn, generator=generator)
        if step % self.update_every == 0:
            self.stamp.copy_(torch.tensor([int(os.environ.get("LOCAL_RANK", 0)), step]))


class StopWhenWatched(pl.Callback):
    """Ends a run, on every rank at the same step, once a browser has been sent ``frames`` frames by
    rank 0's viewer and ``min_steps`` steps have run: a run as long as the watching needs, whatever a
    busy machine makes the browser's start-up cost (the run's ``max_time`` stays as the safety net).

    Every rank joins one boolean reduction per step (``reduce_boolean_decision``, any rank's ``True``
    wins), so none stops alone.
    """

    def __init__(self, frames: int = 1, min_steps: int = 0) -> None:
        self.frames = frames
        self.min_steps = min_steps

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        viewers = [callback for callback in trainer.callbacks if isinstance(callback, Viewer)]
        session = viewers[0].session if viewers else None
        watched = session is not None and session.frames_sent >= self.frames
        done = watched and trainer.global_step >= self.min_steps
        if trainer.strategy.reduce_boolean_decision(done, all=False):
            trainer.should_stop = True
