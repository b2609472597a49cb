"""Validation by training time as well as by steps: the first soon after the start, then every few
minutes within a bounded share of the time, and always one when training ends."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

NEVER = 2**62
"""A ``trainer.val_check_batch`` that no count of batches reaches: no validation after this batch."""


@dataclass
class ValidationClock:
    """What the schedule knows, in seconds of training time (the run's, counted across resumes).

    Attributes:
        elapsed: training time when this was last saved (a resumed run's clock starts from it).
        validations: validations run during ``fit`` so far.
        spent: training time spent validating, from a validation's start to the next training step
            (the checkpoints written at its end included).
        last_end: training time when the last validation ended; ``None`` before the first.
        last_duration: how long the last validation took.
    """

    elapsed: float = 0.0
    validations: int = 0
    spent: float = 0.0
    last_end: float | None = None
    last_duration: float = 0.0


def time_validation_due(now: float, clock: ValidationClock, first_after_s: float, every_s: float,
                        max_share: float) -> bool:
    """Whether a validation is due by time at training time ``now``.

    The first is due at ``first_after_s``. A later one is due ``every_s`` after the last one ended,
    and only once the time spent validating, this one included (estimated to take as long as the
    last), stays within ``max_share`` of the training time: ``spent + d <= max_share * (now + d)``.
    A validation slower than ``every_s * max_share`` is thus postponed, never skipped for good.
    """
    if clock.last_end is None:
        return now >= first_after_s
    if now - clock.last_end < every_s:
        return False
    return clock.spent + clock.last_duration <= max_share * (now + clock.last_duration)


class TimedValidation(pl.Callback):
    """Runs validation (``val/psnr``, the ``val/preview`` images, the best checkpoint) by training
    time as well as by steps, so that a short or slow run shows how it is doing within its first
    minute.

    The step schedule stays the trainer's: every ``trainer.check_val_every_n_epoch`` epochs of
    ``data.steps_per_epoch`` steps (or ``trainer.val_check_interval`` steps). On top of it this
    callback validates

    - by time: the first after ``first_after_s`` seconds of training, then ``every_s`` seconds
      after the last validation (of either kind), whichever of time and steps comes first; a
      validation by time waits while validating would take more than ``max_share`` of the training
      time (:func:`time_validation_due`), and none is started when ``max_time`` leaves less than
      ``every_s * max_share`` seconds of training (the one at the end follows); validations by steps
      are run as the config asks;
    - at the end: after the last step of a run limited by ``max_steps`` or ``max_epochs``, and when
      anything stops training early (``max_time``, a stop request), unless the last step was just
      validated; when ``max_time`` runs out during a validation, training ends with it.

    Training time is the run's across resumes, validation included (as ``trainer.max_time``
    counts it). The schedule's state is in :class:`ValidationClock` (the callback's
    ``state_dict``), so a resumed run keeps the schedule where the checkpoint left it.

    How: for ``fit`` it sets ``trainer.check_val_every_n_epoch`` to ``None`` and, after every
    training batch, ``trainer.val_check_batch`` to 1 (validate after this batch) or :data:`NEVER`;
    Lightning then validates after that batch, and also whenever training is asked to stop, which
    is the end validation of a ``max_time`` run. Under data parallelism the decision by time is
    rank zero's, broadcast to every rank; the others follow from the step counts all ranks share.
    A time-valued ``trainer.val_check_interval`` (Lightning's own schedule by time) is left to
    Lightning: this callback then does nothing and says so.

    Args:
        first_after_s: seconds of training before the first validation by time.
        every_s: seconds between validations by time.
        max_share: largest share of the training time that validations by time may bring the time
            spent validating to (``0 < max_share <= 1``).
    """

    def __init__(self, first_after_s: float = 30.0, every_s: float = 120.0, max_share: float = 0.1) -> None:
        if not first_after_s >= 0:
            raise ValueError(f"first_after_s must be >= 0 seconds, got {first_after_s}")
        if not every_s > 0:
            raise ValueError(f"every_s must be > 0 seconds, got {every_s}")
        if not 0 < max_share <= 1:
            raise ValueError(f"max_share must be in (0, 1], got {max_share}")
        self.first_after_s = float(first_after_s)
        self.every_s = float(every_s)
        self.max_share = float(max_share)
        self.clock = ValidationClock()
        self._active = False
        self._epoch_every: int | None = None  # the trainer's check_val_every_n_epoch
        self._step_every: int | float | None = None  # the trainer's val_check_batch
        self._started: float | None = None  # time.monotonic() when this process's training began
        self._base = 0.0  # training time before this process (restored from a checkpoint)
        self._open: float | None = None  # time.monotonic() since which validation time is uncounted

    # ------------------------------------------------------------------------------------ clock
    def now(self) -> float:
        """Training time so far (seconds, across resumes)."""
        if self._started is None:
            return self.clock.elapsed
        return self._base + time.monotonic() - self._started

    def _count_open(self) -> None:
        """Adds the validation time since ``_open`` to the clock."""
        if self._open is None:
            return
        now = time.monotonic()
        self.clock.spent += now - self._open
        self.clock.last_duration += now - self._open
        self.clock.last_end = self.now()
        self._open = now

    # ---------------------------------------------------------------------------------- set-up
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != TrainerFn.FITTING:
            return
        self._epoch_every = trainer.check_val_every_n_epoch
        trainer.check_val_every_n_epoch = None  # every batch may validate: val_check_batch decides
        self._active = True

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == TrainerFn.FITTING and self._active:
            trainer.check_val_every_n_epoch = self._epoch_every
            self._active = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._active:
            return
        if getattr(trainer, "_val_check_time_interval", None) is not None:
            trainer.check_val_every_n_epoch = self._epoch_every
            self._active = False
            rank_zero_warn("TimedValidation does nothing: trainer.val_check_interval is a duration, "
                           "which schedules validation by time itself")
            return
        self._step_every = trainer.val_check_batch  # Lightning's, from val_check_interval
        trainer.val_check_batch = NEVER
        self._base = self.clock.elapsed
        self._started = time.monotonic()

    # ---------------------------------------------------------------------------------- schedule
    def _step_due(self, trainer: pl.Trainer, batch_idx: int) -> bool:
        """The trainer's own step schedule (as Lightning decides it with the original settings)."""
        every = self._step_every
        if every is None or not math.isfinite(every) or every < 1:
            return False
        if self._epoch_every is None:  # val_check_interval steps across epochs
            return trainer.global_step % int(every) == 0
        if (trainer.current_epoch + 1) % self._epoch_every != 0:
            return False
        return (batch_idx + 1) % int(every) == 0

    @staticmethod
    def _last_step(trainer: pl.Trainer, batch_idx: int) -> bool:
        """Whether this batch is the last of a run limited by ``max_steps`` or ``max_epochs``."""
        max_steps = trainer.max_steps
        if max_steps is not None and max_steps > 0 and trainer.global_step >= max_steps:
            return True
        max_epochs = trainer.max_epochs
        batches = trainer.num_training_batches
        return (max_epochs is not None and max_epochs > 0 and trainer.current_epoch + 1 >= max_epochs
                and math.isfinite(batches) and batch_idx + 1 >= batches)

    @staticmethod
    def _time_left(trainer: pl.Trainer) -> float | None:
        """Seconds of training ``trainer.max_time`` leaves (Lightning's ``Timer``); ``None`` without one."""
        for callback in trainer.callbacks:
            if isinstance(callback, Timer):
                return callback.time_remaining()
        return None

    def _budget_ends_soon(self, trainer: pl.Trainer) -> bool:
        """Whether ``trainer.max_time`` leaves less training than a validation by time may take
        (``every_s * max_share``): the validation at the end of training comes within it, and one by time
        now would all but repeat it."""
        left = self._time_left(trainer)
        return left is not None and left <= self.every_s * self.max_share

    def _time_due(self, trainer: pl.Trainer) -> bool:
        due = trainer.is_global_zero and not self._budget_ends_soon(trainer) and time_validation_due(
            self.now(), self.clock, self.first_after_s, self.every_s, self.max_share)
        if trainer.world_size > 1:  # rank zero's clock decides for every rank
            due = bool(trainer.strategy.broadcast(due, src=0))
        return due

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._count_open()  # a validation's tail: what ran after it and before this step
        self._open = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if not self._active:
            return
        # Each rank reaches the same answer: steps are shared, time is rank zero's (broadcast).
        due = (self._step_due(trainer, batch_idx) or self._last_step(trainer, batch_idx)
               or self._time_due(trainer))
        trainer.val_check_batch = 1 if due else NEVER

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._active and not trainer.sanity_checking:
            self._open = time.monotonic()
            self.clock.last_duration = 0.0

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._active or trainer.sanity_checking or self._open is None:
            return
        self._count_open()
        self.clock.validations += 1
        # max_time ran out while validating: training ends here, with this step validated, rather than
        # after one more step and a validation of it (Lightning's timer looks only after a step).
        left = self._time_left(trainer)
        spent = trainer.is_global_zero and left is not None and left <= 0
        if trainer.world_size > 1:
            spent = bool(trainer.strategy.broadcast(spent, src=0))
        if spent:
            trainer.should_stop = True

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._count_open()
        self._open = None
        self.clock.elapsed = self.now()

    # ------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        state = asdict(self.clock)
        state["elapsed"] = self.now()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        last_end = state_dict.get("last_end")
        self.clock = ValidationClock(elapsed=float(state_dict.get("elapsed", 0.0)),
                                     validations=int(state_dict.get("validations", 0)),
                                     spent=float(state_dict.get("spent", 0.0)),
                                     last_end=None if last_end is None else float(last_end),
                                     last_duration=float(state_dict.get("last_duration", 0.0)))
