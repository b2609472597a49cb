"""ModelCheckpoint whose ``last.ckpt`` follows ``every_n_train_steps`` from the first step and whose
best-by-metric files are written at each validation, with the weights that score was measured on."""

from __future__ import annotations

import warnings
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint


class NerfCheckpoint(ModelCheckpoint):
    """Keeps the best checkpoints by the monitored metric and refreshes ``last.ckpt`` every
    ``every_n_train_steps`` steps.

    Lightning's ``ModelCheckpoint`` defers *every* save, ``last.ckpt`` included, until the
    monitored metric exists, i.e. until the first validation; a run killed before then would
    lose everything. Here ``last.ckpt`` is written on schedule regardless, while the
    best-by-metric files are still chosen at validation. When training ends between two
    scheduled saves (``max_time``, ``max_steps``, a stop request), ``last.ckpt`` is written once
    more so it always holds the final weights.

    With ``every_n_train_steps``, Lightning would also rank the weights of every scheduled step by
    the last validation's score, which belongs to older weights, and would not rank a validation
    that falls between scheduled steps (one by time, :class:`~.timed_validation.TimedValidation`).
    Here a best file is written only right after a validation, for the weights it scored.

    A fit resumed from a checkpoint goes on in its run folder, whose ``checkpoints/`` holds that run's
    files: Lightning's warning that the folder is not empty is left out then (it is said for a new run).
    ``validate``, ``test`` and ``predict`` write no checkpoints: Lightning's warning that the
    checkpoint's folder differs from theirs (``RUN/test``) is left out too.
    """

    _evaluating = False

    last_step_in_last: int = -1
    """The global step of the weights in ``last.ckpt`` (``-1``: none written by this run yet)."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        with warnings.catch_warnings():
            if trainer.ckpt_path is not None:  # resuming: the run's own checkpoints are in the folder
                warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
            super().setup(trainer, pl_module, stage)
        self._evaluating = stage != "fit"

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        with warnings.catch_warnings():
            if self._evaluating:
                warnings.filterwarnings("ignore", message=r"The dirpath has changed from")
            super().load_state_dict(state_dict)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if self._every_n_train_steps < 1:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        every = self._every_n_train_steps
        if not self.save_last or every < 1 or trainer.global_step % every != 0:
            return
        if self._should_skip_saving_checkpoint(trainer):  # includes "already saved at this step"
            return
        self.save_last_now(trainer)

    def save_last_now(self, trainer: pl.Trainer) -> None:
        """Write ``last.ckpt`` for the current step now (a stop between scheduled saves needs it), leaving
        the best-by-metric files to validation."""
        saved_step = self._last_global_step_saved
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        self._last_global_step_saved = saved_step  # leave the best-by-metric save at validation alone
        self.last_step_in_last = trainer.global_step

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._every_n_train_steps < 1:
            super().on_validation_end(trainer, pl_module)
        elif not self._should_skip_saving_checkpoint(trainer):
            candidates = self._monitor_candidates(trainer)
            if self.monitor is None or self.monitor in candidates:
                self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)
        if self.save_last and self._last_global_step_saved == trainer.global_step:
            self.last_step_in_last = trainer.global_step  # Lightning refreshed last.ckpt with it

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        if not self.save_last or trainer.fast_dev_run or trainer.sanity_checking:
            return
        if self.last_step_in_last != trainer.global_step and trainer.global_step > 0:
            self.save_last_now(trainer)
