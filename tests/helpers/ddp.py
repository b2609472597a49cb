"""Test-only plugins for looking inside every rank of a real multi-process run.

Passed on the command line: ``--trainer.callbacks+=tests.helpers.ddp.DumpRankState
--trainer.callbacks.dirpath DIR``; each rank writes ``DIR/rank<R>.pt`` when training ends.
"""

from __future__ import annotations

import os
import time
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
    ``steps_per_diagonal`` and ``occupancy_threshold`` are ``OccupancyGrid``'s, with its defaults: fewer,
    longer steps make renders cheaper, with the threshold scaled alike (a cell's occupancy is its density
    times the step length) for the same share of cells occupied.
    """

    stamp: torch.Tensor

    def __init__(self, resolution: int = 64, update_every: int = 16, warmup_steps: int = 256,
                 steps_per_diagonal: int = 512, occupancy_threshold: float = 0.01) -> None:
        super().__init__(resolution=resolution, update_every=update_every, warmup_steps=warmup_steps,
                         steps_per_diagonal=steps_per_diagonal, occupancy_threshold=occupancy_threshold)
        self.register_buffer("stamp", torch.full((2,), -1, dtype=torch.int64))

    def update(self, step: int, density_fn: Any, *, generator: torch.Generator | None = None) -> None:
        super().update(step, density_fn, generator=generator)
        if step % self.update_every == 0:
            self.stamp.copy_(torch.tensor([int(os.environ.get("LOCAL_RANK", 0)), step]))


class HoldUntilWatched(pl.Callback):
    """Holds rank 0 at the end of each step from ``from_step`` on, sending its viewer's frames, until a
    browser has been sent a frame of that step, for ``frames`` steps: a run of a fixed number of steps
    that a browser watches during several of them, however long the browser takes to start on a busy
    machine. The other ranks wait in the next step's gradient reduction; what any rank computes is
    unchanged.

    Args:
        frames: steps for which a frame must be sent before training goes on.
        from_step: the first step held.
        timeout_s: how long one step is held at most before the run fails.
    """

    def __init__(self, frames: int = 3, from_step: int = 1, timeout_s: float = 180.0) -> None:
        self.frames = frames
        self.from_step = from_step
        self.timeout_s = timeout_s
        self._held = 0
        self._sent = 0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        viewer = next((c for c in trainer.callbacks if isinstance(c, Viewer)), None)
        session = viewer.session if viewer is not None else None
        if session is None or trainer.global_step < self.from_step or self._held >= self.frames:
            return  # rank 1 has no session: it goes on to the reduction, where it waits for rank 0
        deadline = time.monotonic() + self.timeout_s
        while session.frames_sent <= self._sent:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no frame sent to a browser within {self.timeout_s:.0f} s at step "
                                   f"{trainer.global_step}")
            if not viewer.send_waiting_frames(trainer, pl_module):
                time.sleep(0.05)
        self._sent = session.frames_sent
        self._held += 1
