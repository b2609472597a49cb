"""A test-only callback that sends a real signal to the training run it is part of at a chosen step: a
scheduler's SIGTERM or a user's Ctrl-C at a known moment, without a test polling the run from outside.

Passed on the command line (``PYTHONPATH`` naming the repository) or in a callback list:
``--trainer.callbacks+=tests.helpers.signals.SignalAtStep --trainer.callbacks.step 4
--trainer.callbacks.signal SIGTERM``.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import lightning.pytorch as pl


class SignalAtStep(pl.Callback):
    """At the start of training step ``step`` (``trainer.global_step == step``), send ``signal`` to this
    process ``times`` times; the step then runs to its end, so a run that stops after it holds step
    ``step + 1``. A resumed run (``--ckpt_path``) is not signalled again. Under data parallelism every
    rank signals itself, or only rank ``rank``.

    Args:
        step: the global step at whose start to send the signal.
        signal: the signal's name (``SIGTERM``, ``SIGINT``, ``SIGUSR1``...).
        times: how often to send it (2: a second Ctrl-C).
        stall: seconds of busy work after sending it: a step that outlasts a grace period (Python code
            running, as in a training step between tensor operations).
        rank: the only global rank that signals itself (``None``: every rank).
    """

    def __init__(self, step: int, signal: str = "SIGTERM", times: int = 1, stall: float = 0.0,
                 rank: int | None = None) -> None:
        self.step = step
        self.signal = signal
        self.times = times
        self.stall = stall
        self.rank = rank

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if trainer.global_step != self.step or trainer.ckpt_path is not None:
            return
        if self.rank is not None and trainer.global_rank != self.rank:
            return
        for _ in range(self.times):
            os.kill(os.getpid(), signal.Signals[self.signal])
        end = time.monotonic() + self.stall
        while time.monotonic() < end:
            pass
