"""A test-only callback that fills the file system of its run's folder at a chosen training step: a disk
that becomes full at a known moment, for a fit that must stop at its last good checkpoint.

Passed on the command line: ``--trainer.callbacks+=tests.helpers.fill_disk.FillDiskAtStep
--trainer.callbacks.step 3 --trainer.callbacks.leave 65536``; the run's folder must be on a small file
system of its own (``tests/helpers/small_disk.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from tests.helpers.small_disk import fill


class FillDiskAtStep(pl.Callback):
    """At the start of training step ``step`` (so ``last.ckpt`` holds step ``step`` when checkpoints are
    written every step), fill the file system of ``trainer.default_root_dir`` until ``leave`` bytes are
    free: room for the run's small files (events, records), none for another checkpoint."""

    def __init__(self, step: int, leave: int = 65536) -> None:
        self.step, self.leave = step, leave

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if trainer.global_step == self.step:
            fill(Path(trainer.default_root_dir), self.leave)
