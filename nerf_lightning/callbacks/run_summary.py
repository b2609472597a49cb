"""Says where a run is while it starts, and what it made and what to run next when ``fit`` ends."""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.trainer.states import TrainerFn

from nerf_lightning.callbacks.time_budget import _clock, _human
from nerf_lightning.callbacks.timed_validation import TimedValidation

RUN_CONFIG = "config.yaml"
"""The resolved config ``fit`` saves in the run's folder, which ``test --config`` takes back."""


def _shown(path: str | Path) -> str:
    """``path`` for a command line: relative to the current directory when under it, shell-quoted."""
    path = Path(path)
    if path.is_absolute():
        with contextlib.suppress(ValueError):  # elsewhere: kept absolute
            path = path.relative_to(Path.cwd())
    return shlex.quote(os.fspath(path))


def next_commands(checkpoint: str | Path, run_dir: str | Path, run_config: str | Path | None) -> list[str]:
    """The commands that use a trained checkpoint, as the command line accepts them.

    Args:
        checkpoint: the run's ``last.ckpt`` (or the checkpoint to use).
        run_dir: the run's folder, where ``render`` and ``export`` are told to write.
        run_config: the run's saved ``config.yaml`` (the data ``test`` needs); ``None``: unknown, and
            the ``test`` line asks for the config the run was started with.

    Every command takes the run folder for its ``last.ckpt`` (and ``test`` reads the folder's
    ``config.yaml``): the run folder is named when ``checkpoint`` is its ``last.ckpt`` and the
    config is there, else the checkpoint and the config are named.
    """
    run = Path(run_dir)
    whole_run = (run_config is not None and Path(run_config) == run / "config.yaml"
                 and Path(checkpoint) == run / "checkpoints" / "last.ckpt")
    ckpt = _shown(run) if whole_run else _shown(checkpoint)
    if whole_run:
        test = f"nerf-lightning test --ckpt_path {ckpt}"
    else:
        config = _shown(run_config) if run_config is not None else "CONFIG"
        test = f"nerf-lightning test --config {config} --ckpt_path {ckpt}"
    return [
        test,
        f"nerf-lightning view --ckpt_path {ckpt}",
        f"nerf-lightning render --ckpt_path {ckpt} --out {_shown(run / 'render.mp4')}",
        f"nerf-lightning export --ckpt_path {ckpt} --format mesh --out {_shown(run / 'mesh.ply')}",
    ]


def _timer(trainer: pl.Trainer) -> Timer | None:
    return next((callback for callback in trainer.callbacks if isinstance(callback, Timer)), None)


class RunSummary(pl.Callback):
    """Prints, on rank zero to stdout, one line when training starts (the run's folder and the
    TensorBoard command; when the first validation comes, with :class:`TimedValidation`) and a
    closing summary when ``fit`` ends: the step, the training time and why training stopped, the
    last ``val/psnr`` (with how many validations ran and how long they took), the checkpoint (the
    ``last.ckpt`` written) and the best one, and the ``test``, ``view``, ``render`` and ``export``
    commands with that checkpoint filled in.

    The ``test`` command takes the run's saved ``config.yaml`` (model, data and settings as
    trained); ``render``, ``view`` and ``export`` find it from the checkpoint themselves. Nothing
    is printed for ``validate``, ``test`` or ``predict``, nor when ``fit`` fails. The last
    ``val/psnr``, the count of validations and their time are kept in checkpoints
    (``state_dict``), so a resumed run's summary counts from the start of the run.
    """

    def __init__(self) -> None:
        self._log_dir: str | None = None
        self._first_step = 0
        self._started: float | None = None
        self._train_seconds = 0.0
        self._val_psnr: tuple[float, int] | None = None
        self._validations = 0
        self._val_seconds = 0.0  # time spent validating during fit, across resumes
        self._val_started: float | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == TrainerFn.FITTING:
            self._log_dir = trainer.log_dir  # a collective under data parallelism: asked on every rank

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._first_step = trainer.global_step
        self._started = time.monotonic()
        if not trainer.is_global_zero or self._log_dir is None:
            return
        run = _shown(self._log_dir)
        line = f"nerf-lightning: training in {run} (tensorboard --logdir {run})"
        scheduler = next((each for each in trainer.callbacks if isinstance(each, TimedValidation)), None)
        if scheduler is not None and scheduler.clock.last_end is None and trainer.enable_validation:
            line += f"; first validation after {_human(scheduler.first_after_s)} of training"
        print(line, flush=True)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._val_started = time.monotonic()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking:
            return
        self._validations += 1
        if self._val_started is not None:
            self._val_seconds += time.monotonic() - self._val_started
            self._val_started = None
        psnr = trainer.callback_metrics.get("val/psnr")
        if psnr is not None:
            self._val_psnr = (float(psnr), trainer.global_step)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._started is not None:
            self._train_seconds = time.monotonic() - self._started

    def _stop_reason(self, trainer: pl.Trainer) -> str:
        timer = _timer(trainer)
        if trainer.max_steps is not None and 0 < trainer.max_steps <= trainer.global_step:
            return f"trainer.max_steps {trainer.max_steps} reached"
        if timer is not None and (remaining := timer.time_remaining("train")) is not None and remaining <= 0:
            return f"trainer.max_time {_clock(timer.time_elapsed('train') + remaining)} reached"
        if trainer.max_epochs is not None and 0 < trainer.max_epochs <= trainer.current_epoch:
            return f"trainer.max_epochs {trainer.max_epochs} reached"
        return "stopped before its limits"

    def lines(self, trainer: pl.Trainer) -> list[str]:
        """The closing summary."""
        step = trainer.global_step
        steps = f"step {step}" + (f" ({step - self._first_step} this run)" if self._first_step else "")
        timer = _timer(trainer)
        spent = f"{_human(self._train_seconds)} of training"
        if timer is not None and self._first_step:
            spent += f", {_human(timer.time_elapsed('train'))} counted across resumes"
        lines = [f"nerf-lightning: fit done: {steps}, {spent}; {self._stop_reason(trainer)}"]
        if self._val_psnr is not None:
            psnr, at = self._val_psnr
            count = f"{self._validations} validation{'s' if self._validations != 1 else ''}"
            lines.append(f"  last val/psnr: {psnr:.2f} dB at step {at} ({count}, "
                         f"{_human(self._val_seconds)} of validating)")
        else:
            lines.append("  last val/psnr: none (no validation ran)")
        checkpoint_callback = trainer.checkpoint_callback
        last = getattr(checkpoint_callback, "last_model_path", "") or ""
        best = getattr(checkpoint_callback, "best_model_path", "") or ""
        checkpoint = next((path for path in (last, best) if path and Path(path).is_file()), None)
        run_dir = Path(self._log_dir) if self._log_dir is not None else None
        if checkpoint is None or run_dir is None:
            lines.append("  checkpoint:    none written")
            return lines
        lines.append(f"  checkpoint:    {_shown(checkpoint)}")
        score = getattr(checkpoint_callback, "best_model_score", None)
        if best and best != checkpoint and Path(best).is_file() and score is not None:
            lines.append(f"  best:          {_shown(best)} (val/psnr {float(score):.2f})")
        lines.append(f"  TensorBoard:   tensorboard --logdir {_shown(run_dir)}")
        config = run_dir / RUN_CONFIG
        lines.append("  next:")
        lines.extend(f"    {command}" for command in next_commands(checkpoint, run_dir,
                                                                  config if config.is_file() else None))
        return lines

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            print("\n".join(self.lines(trainer)), flush=True)

    def state_dict(self) -> dict[str, Any]:
        """The last ``val/psnr`` and its step, the validations so far and the time they took: a
        resumed run that validates no more still reports them."""
        psnr, at = self._val_psnr if self._val_psnr is not None else (None, None)
        return {"val_psnr": psnr, "val_step": at, "validations": self._validations,
                "val_seconds": self._val_seconds}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        psnr, at = state_dict.get("val_psnr"), state_dict.get("val_step")
        self._val_psnr = (float(psnr), int(at)) if psnr is not None and at is not None else None
        self._validations = int(state_dict.get("validations", 0))
        self._val_seconds = float(state_dict.get("val_seconds", 0.0))
