"""A fit's validations as they happen, one JSON line each, for another process to read while the fit
runs (a sweep worker deciding whether to prune the trial: :mod:`nerf_lightning.sweeps.pruning`)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, TextIO

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn

CURVE_FILE = "validation_curve.jsonl"
"""The file's name in the run folder when no ``path`` is given."""


class ValidationCurve(pl.Callback):
    """At the end of each validation of a fit, rank zero appends to ``path`` (default: the run folder's
    ``validation_curve.jsonl``) the line ``{"train_s": T, "global_step": S, "metrics": {"val/psnr": ...}}``
    and flushes it: every scalar ``val/*`` metric, at ``T`` seconds of training.

    Training time is this callback's own clock: from the start of training, without the time spent
    validating, counted across resumes (the clock is in the checkpoint, :meth:`state_dict`). So runs of
    samplers whose steps cost differently are compared at equal training time, whatever their
    validations cost. A resumed fit appends to the same file; each line is whole when it is written
    (a reader keeps only lines that end), so a reader never sees half a record.

    Args:
        path: the file; ``None``: ``<log_dir>/validation_curve.jsonl``.
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._base = 0.0  # training time before this process (from a checkpoint)
        self._started: float | None = None  # time.monotonic() when this process's training began
        self._validating = 0.0  # time spent validating since then
        self._opened: float | None = None  # time.monotonic() when the running validation began
        self._file: TextIO | None = None

    def train_seconds(self) -> float:
        """Training time so far, validations left out (seconds, across resumes)."""
        if self._started is None:
            return self._base
        now = time.monotonic()
        open_validation = now - self._opened if self._opened is not None else 0.0
        return self._base + now - self._started - self._validating - open_validation

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != TrainerFn.FITTING:
            return
        log_dir = trainer.log_dir  # a collective under data parallelism: every rank asks
        if not trainer.is_global_zero:
            return
        target = Path(self.path) if self.path else Path(log_dir or ".") / CURVE_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(target, "a", encoding="utf-8")  # noqa: SIM115  # closed in teardown

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started = time.monotonic()
        self._validating = 0.0
        self._opened = None

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._started is not None and not trainer.sanity_checking:
            self._opened = time.monotonic()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._opened is None:  # sanity checking, or a validate command
            return
        seconds = self.train_seconds()
        self._validating += time.monotonic() - self._opened
        self._opened = None
        if self._file is None:  # not rank zero
            return
        metrics = {name: float(value) for name, value in trainer.callback_metrics.items()
                   if name.startswith("val/") and isinstance(value, torch.Tensor) and value.numel() == 1}
        line = {"train_s": round(seconds, 3), "global_step": trainer.global_step,
                "metrics": {name: value for name, value in metrics.items() if math.isfinite(value)}}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == TrainerFn.FITTING and self._file is not None:
            self._file.close()
            self._file = None

    def state_dict(self) -> dict[str, Any]:
        return {"train_s": self.train_seconds()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._base = float(state_dict.get("train_s", 0.0))
