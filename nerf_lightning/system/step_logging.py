"""Whether step-level metrics logged now reach the loggers (so the ``self.log`` call is worth making)."""

from __future__ import annotations

from typing import Any


def logs_this_step(trainer: Any) -> bool:
    """``True`` when Lightning writes the step-level metrics of the current training step.

    Lightning writes ``on_step`` values every ``log_every_n_steps`` steps (and when training
    stops); values logged on the other steps are replaced before anyone reads them. Each
    ``self.log`` call still runs Lightning's bookkeeping, which is not negligible next to a small
    training step on a CPU, so per-step scalars are logged only on the steps that are written
    (``train/loss`` stays logged every step: callbacks may monitor it). Valid from
    ``on_train_batch_start`` to ``on_train_batch_end``; ``True`` outside a trainer.
    """
    if trainer is None or getattr(trainer, "fast_dev_run", False):
        return True
    connector = getattr(trainer, "_logger_connector", None)  # Lightning's own decision, when available
    return True if connector is None else bool(connector.should_update_logs)
