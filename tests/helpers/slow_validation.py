"""A test-only callback that makes every validation batch of training take at least a given time: a
validation that surely outlasts what ``max_time`` leaves, however fast the machine renders the view.

In a run's config: ``{class_path: tests.helpers.slow_validation.SlowValidation, init_args: {seconds: 0.2}}``
(the run in this process, or ``PYTHONPATH`` naming the repository).
"""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl


class SlowValidation(pl.Callback):
    """Sleeps ``seconds`` after each validation batch of training (not of the sanity check)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                                batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if not trainer.sanity_checking:
            time.sleep(self.seconds)
