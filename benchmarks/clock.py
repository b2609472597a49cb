"""A benchmark callback: a training-time budget that excludes validation, and a curve file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl


class TrainClock(pl.Callback):
    """Stops training after ``budget_s`` seconds of *training* time and records a curve.

    Training time runs from the start of fit and excludes every validation, so samplers whose
    evaluation is slow are not penalised for the frequent validations a curve needs. Each
    validation appends ``{"train_s", "step", "val_psnr"}`` and each step
    ``{"train_s", "step", "rays", "samples"}`` to ``<log_dir>/bench_curve.jsonl``.

    Args:
        budget_s: training seconds before the run stops.
    """

    def __init__(self, budget_s: float = 180.0) -> None:
        self.budget_s = budget_s
        self._train_s = 0.0
        self._since: float | None = None
        self._file: Any = None

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._file = open(Path(trainer.log_dir or ".") / "bench_curve.jsonl", "a")  # noqa: SIM115
        self._since = time.perf_counter()

    def _pause(self) -> None:
        if self._since is not None:
            self._train_s += time.perf_counter() - self._since
            self._since = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self._pause()
        if isinstance(outputs, dict) and "num_samples" in outputs:
            self._write({"train_s": self._train_s, "step": trainer.global_step,
                         "rays": int(outputs["num_rays"]), "samples": int(outputs["num_samples"])})
        if self._train_s >= self.budget_s:
            trainer.should_stop = True
        self._since = time.perf_counter()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._pause()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        psnr = trainer.callback_metrics.get("val/psnr")
        if self._file is not None and psnr is not None and not trainer.sanity_checking:
            self._write({"train_s": self._train_s, "step": trainer.global_step, "val_psnr": float(psnr)})
        self._since = time.perf_counter() if trainer.state.fn == "fit" else None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._pause()
        if self._file is not None:
            self._file.close()
