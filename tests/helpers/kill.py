"""A test-only callback that SIGKILLs the training run it is part of at a chosen step: a crash at a
known moment, instead of a test polling for a checkpoint and killing the process from outside. With
``sig SIGINT`` and the process group, it is a Ctrl-C in the terminal the run's command was started from.

Passed on the command line of a run the test started with ``start_new_session=True``:
``--trainer.callbacks+=tests.helpers.kill.KillAtStep --trainer.callbacks.step 3
--trainer.callbacks.process_group true`` (``PYTHONPATH`` naming the repository).
"""

from __future__ import annotations

import os
import signal
from typing import Any

import lightning.pytorch as pl


class KillAtStep(pl.Callback):
    """At the start of training step ``step`` (so ``last.ckpt`` holds step ``step`` when checkpoints
    are written every step), SIGKILL this process, or its whole process group: a pipeline and the
    fit it runs, both ranks of a DDP run. A resumed run (``--ckpt_path``) is not killed again.

    Args:
        step: the global step at which to die.
        process_group: kill the process group rather than this process alone. Only for a run
            started in a session of its own (``start_new_session=True``), which this refuses
            otherwise: the group of a process started plainly holds the test runner too.
        rank: under data parallelism, only the process of this global rank dies (a lost peer);
            ``None``: every rank that runs the callback.
        sig: the signal's name (``SIGINT``: what a terminal's Ctrl-C sends to its foreground group).
    """

    def __init__(self, step: int, process_group: bool = False, rank: int | None = None,
                 sig: str = "SIGKILL") -> None:
        self.step = step
        self.process_group = process_group
        self.rank = rank
        self.signal = signal.Signals[sig]

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if trainer.global_step != self.step or trainer.ckpt_path is not None:
            return
        if self.rank is not None and trainer.global_rank != self.rank:
            return
        if not self.process_group:
            os.kill(os.getpid(), self.signal)
            return
        group = os.getpgid(0)
        if group != os.getsid(0):
            raise RuntimeError("KillAtStep(process_group=True): this run's process group is not a session "
                               "of its own (start it with start_new_session=True)")
        os.killpg(group, self.signal)
