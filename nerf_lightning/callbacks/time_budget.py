"""Says so, in one line, when a resumed run has (almost) no training time left under ``max_time``."""

from __future__ import annotations

import sys
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.trainer.states import TrainerFn

NEARLY_SPENT = 0.05
"""Share of ``max_time`` below which the time a resumed run has left counts as nearly spent."""


def _clock(seconds: float) -> str:
    """``seconds`` as ``DD:HH:MM:SS`` (whole seconds), the format ``--trainer.max_time`` takes."""
    total = max(0, round(seconds))
    minutes, secs = divmod(total, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return f"{days:02d}:{hours:02d}:{minutes:02d}:{secs:02d}"


def _human(seconds: float) -> str:
    """A duration for reading: ``3.1 s``, ``2 min 55 s``, ``5 h 02 min``."""
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    minutes = round(seconds) // 60
    if minutes < 60:
        return f"{minutes} min {round(seconds) % 60:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def resume_time_notice(elapsed: float, max_time: float, step: int) -> str | None:
    """The line to print when a run resumed at ``step`` has used all or nearly all of ``max_time``.

    Args:
        elapsed: training time the checkpoint had already used (seconds; Lightning's ``Timer``
            saves it and counts it against ``max_time`` on resume).
        max_time: the resumed run's ``trainer.max_time`` (seconds).
        step: the checkpoint's global step.

    Returns:
        One line, or ``None`` when more than ``NEARLY_SPENT`` of ``max_time`` is left.
    """
    left = max_time - elapsed
    if left > NEARLY_SPENT * max_time:
        return None
    # Timer stops once elapsed >= max_time; it checks right after the restore, then after every step.
    outcome = "so training stops at once" if left <= 0 else f"so training stops after about {_human(left)}"
    # Suggest another max_time's worth of training from where the checkpoint is.
    larger = round(max(elapsed, max_time)) + round(max_time)
    return (
        f"nerf-lightning: warning: the checkpoint (step {step}) already used {_human(elapsed)} of "
        f"--trainer.max_time {_clock(max_time)}, the training-time budget counted across resumes, "
        f"{outcome}; to train on, pass a larger --trainer.max_time ({_clock(larger)}: about "
        f"{_human(larger - elapsed)} more) or --trainer.max_time null --trainer.max_steps N (N > {step})"
    )


class ResumeTimeNotice(pl.Callback):
    """Prints one warning line (stderr, rank 0) when ``fit`` resumes from a checkpoint that has
    already used all, or all but ``NEARLY_SPENT``, of ``trainer.max_time``.

    ``trainer.max_time`` is the training-time budget of a run across resumes: Lightning's ``Timer``
    saves the time spent in checkpoints and counts it on resume (a run killed after 2 of 3 minutes
    trains 1 more minute), which keeps equal-time comparisons fair. A finished run resumed with the
    same ``max_time`` therefore stops at once, which Lightning does silently; this callback says
    why and how to train on. It reads the spent time from the checkpoint itself, so it does not
    depend on when the strategy restores the ``Timer``. ``NerfCLI`` adds it to every trainer.
    """

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        if trainer.state.fn != TrainerFn.FITTING or not trainer.is_global_zero:
            return
        timer = next((callback for callback in trainer.callbacks if isinstance(callback, Timer)), None)
        if timer is None:  # no max_time: nothing limits the resumed run's time
            return
        remaining = timer.time_remaining("train")
        if remaining is None:
            return
        # remaining + elapsed is the Timer's max_time, restored or not (public API only).
        max_time = remaining + timer.time_elapsed("train")
        state = checkpoint.get("callbacks", {}).get(timer.state_key, {})
        elapsed = float(state.get("time_elapsed", {}).get("train", 0.0))
        line = resume_time_notice(elapsed, max_time, int(checkpoint.get("global_step", 0)))
        if line is not None:
            print(line, file=sys.stderr, flush=True)
