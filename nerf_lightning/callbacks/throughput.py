"""Shows training rays per second in the progress bar and logs it."""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl

from nerf_lightning.system.step_logging import logs_this_step


class RaysPerSecond(pl.Callback):
    """Logs ``train/rays_per_s``: rays of a batch over the wall time since the previous batch began.

    Wall time on the host: on an accelerator it includes waiting for queued work, which over
    consecutive steps is the true throughput, and no synchronisation is forced.

    Args:
        smoothing: weight of the newest step in an exponential moving average.
    """

    def __init__(self, smoothing: float = 0.1) -> None:
        self.smoothing = smoothing
        self._last_start: float | None = None
        self._rate: float | None = None
        self._last_rays = 0

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        if self._last_start is not None and self._last_rays:
            rate = self._last_rays / max(now - self._last_start, 1e-9)
            self._rate = (
                rate if self._rate is None else (1 - self.smoothing) * self._rate + self.smoothing * rate
            )
            if logs_this_step(trainer):
                pl_module.log("train/rays_per_s", self._rate, prog_bar=True, batch_size=1)
        self._last_start = now
        self._last_rays = 0  # set when the step ends: the rays it trained on

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        # The step's own count: a step cut at the sample ceiling trains on fewer rays than it drew.
        trained = outputs.get("num_rays") if isinstance(outputs, dict) else None
        self._last_rays = int(trained) if trained is not None else len(batch)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_start = None  # validation time is not training time
