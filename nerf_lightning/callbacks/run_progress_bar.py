"""A progress bar for the whole run: steps of ``max_steps`` and time of ``max_time``, not epochs."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm, TQDMProgressBar
from tqdm.contrib.logging import logging_redirect_tqdm

BAR_STEPS = 1000
"""The bar's length in units: progress is shown as a share of the run, whichever limit it comes from."""
BAR_FRAME = len("Training 100%|") + 4 + len("| ")
"""Columns the bar takes besides its text, with a bar of at least four columns."""
FIRST_METRICS = ("val/psnr", "train/psnr", "train/loss")
"""The progress-bar metrics shown first, when the terminal is too narrow for all of them."""


def fitted(text: str, metrics: dict[str, Any], columns: int) -> str:
    """``text`` and as many of ``metrics`` (``name=value``, those of :data:`FIRST_METRICS` first) as
    fit whole in ``columns``: a metric is left out, never cut mid-number."""
    ordered = sorted(metrics, key=lambda name: FIRST_METRICS.index(name) if name in FIRST_METRICS
                     else len(FIRST_METRICS))
    shown = text
    for name in ordered:
        value = metrics[name]
        item = f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
        longer = f"{shown}{' · ' if shown == text else ', '}{item}"
        if len(longer) > columns:
            break
        shown = longer
    return shown


def _clock(seconds: float) -> str:
    return str(dt.timedelta(seconds=max(0, round(seconds))))


@dataclass(frozen=True)
class RunProgress:
    """Where a run stands against its limits.

    Attributes:
        step: the global step now.
        first_step: the global step this process started from (a resumed run's checkpoint step).
        max_steps: the step limit (``max_steps``, or ``max_epochs`` epochs of steps); ``None``: none.
        elapsed: training time so far, counted across resumes as ``max_time`` counts it (seconds).
        max_time: the time limit (seconds); ``None``: none.
        run_seconds: wall time of this process's training so far (validation included).
    """

    step: int
    first_step: int
    max_steps: int | None
    elapsed: float
    max_time: float | None
    run_seconds: float

    @property
    def fraction(self) -> float | None:
        """Share of the run done: that of whichever limit is nearest (``None`` without limits)."""
        shares = []
        if self.max_steps:
            shares.append(self.step / self.max_steps)
        if self.max_time:
            shares.append(self.elapsed / self.max_time)
        return min(1.0, max(shares)) if shares else None

    @property
    def steps_per_s(self) -> float | None:
        done = self.step - self.first_step
        return done / self.run_seconds if done > 0 and self.run_seconds > 0 else None

    @property
    def remaining(self) -> float | None:
        """Seconds left until the first limit is reached, at this process's pace so far."""
        left = []
        if self.max_time:
            left.append(max(0.0, self.max_time - self.elapsed))
        rate = self.steps_per_s
        if self.max_steps and rate:
            left.append(max(0, self.max_steps - self.step) / rate)
        return min(left) if left else None

    def describe(self) -> str:
        """``step 146/2000 · 0:00:37/0:01:30 · ETA 0:00:53 · 3.9 steps/s`` (the parts that are known)."""
        parts = [f"step {self.step}" + (f"/{self.max_steps}" if self.max_steps else "")]
        parts.append(_clock(self.elapsed) + (f"/{_clock(self.max_time)}" if self.max_time else ""))
        if self.remaining is not None:
            parts.append(f"ETA {_clock(self.remaining)}")
        if self.steps_per_s is not None:
            parts.append(f"{self.steps_per_s:.3g} steps/s")
        return " · ".join(parts)


class RunProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar with one training bar for the whole run instead of one per epoch.

    The bar fills towards whichever limit comes first, ``max_steps`` (or ``max_epochs``'s steps)
    or ``max_time``, and its text gives the step, the training time (across resumes, as
    ``max_time`` counts it, against ``max_time``), the estimated time left (the time budget left,
    or the steps left at this run's pace, whichever is shorter) and the steps per second, then the
    progress-bar metrics (``val/psnr``, ``train/psnr``, ``train/loss``...: in a terminal, as many as
    fit its width whole; in a file, all). A run without limits shows the same text without the bar.
    Validation keeps Lightning's own bar below it. While the bar is shown, Lightning's messages
    (``Trainer.fit stopped...``) are written above it instead of after its text on the same line.

    Args:
        refresh_rate: update the bar every this many steps (0: no bar).
        process_position: lines to offset the bars by (several bars in one terminal).
    """

    def __init__(self, refresh_rate: int = 1, process_position: int = 0) -> None:
        super().__init__(refresh_rate=refresh_rate, process_position=process_position, leave=False)
        self._limited = True
        self._first_step = 0
        self._started = 0.0
        self._messages_above = contextlib.ExitStack()

    def progress(self, trainer: pl.Trainer) -> RunProgress:
        """The run's progress now."""
        max_steps = trainer.max_steps if trainer.max_steps is not None and trainer.max_steps > 0 else None
        batches = trainer.num_training_batches
        if max_steps is None and trainer.max_epochs is not None and trainer.max_epochs > 0 \
                and isinstance(batches, int):
            max_steps = trainer.max_epochs * batches
        run_seconds = time.monotonic() - self._started
        elapsed, max_time = run_seconds, None
        timer = next((callback for callback in trainer.callbacks if isinstance(callback, Timer)), None)
        if timer is not None and timer.time_remaining("train") is not None:
            elapsed = timer.time_elapsed("train")
            max_time = elapsed + float(timer.time_remaining("train") or 0.0)
        return RunProgress(trainer.global_step, self._first_step, max_steps, elapsed, max_time, run_seconds)

    def init_train_tqdm(self) -> Tqdm:
        # The text goes in the description, after the bar: tqdm puts ", " before a postfix.
        bar = "Training {percentage:3.0f}%|{bar}| {desc}" if self._limited else "Training {desc}"
        return Tqdm(desc="", position=2 * self.process_position, disable=self.is_disabled, leave=True,
                    dynamic_ncols=True, file=sys.stdout, smoothing=0,
                    total=BAR_STEPS if self._limited else None, bar_format=bar)

    def _show(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        bar = self._train_progress_bar
        if bar is None or bar.disable:
            return
        progress = self.progress(trainer)
        metrics = {name: value for name, value in self.get_metrics(trainer, pl_module).items()
                   if name != "v_num"}  # Lightning's logger version: the run folder names the run
        if progress.fraction is not None:
            bar.n = round(progress.fraction * BAR_STEPS)
        columns = sys.maxsize  # a log file: every metric
        if getattr(bar.fp, "isatty", lambda: False)():
            columns = shutil.get_terminal_size().columns - (BAR_FRAME if self._limited else len("Training "))
        bar.set_description_str(fitted(progress.describe(), metrics, columns), refresh=False)
        bar.refresh()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._first_step = trainer.global_step
        self._started = time.monotonic()
        self._limited = self.progress(trainer).fraction is not None
        self.train_progress_bar = self.init_train_tqdm()
        if not self.train_progress_bar.disable:
            self._messages_above.enter_context(
                logging_redirect_tqdm(loggers=[logging.getLogger("lightning.pytorch")], tqdm_class=Tqdm))
        self._show(trainer, pl_module)

    def on_train_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        pass  # one bar for the whole run: nothing restarts with an epoch

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if self.refresh_rate > 0 and trainer.global_step % self.refresh_rate == 0:
            self._show(trainer, pl_module)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pass

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.val_progress_bar.close()
        self.reset_dataloader_idx_tracker()
        if trainer.state.fn == "fit":
            self._show(trainer, pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._show(trainer, pl_module)
        self.train_progress_bar.close()
        self._messages_above.close()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._messages_above.close()  # a fit that ended by an exception
        super().teardown(trainer, pl_module, stage)
