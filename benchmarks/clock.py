"""A benchmark callback: a training-time budget that excludes evaluation, and a PSNR-over-time curve."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from nerf_lightning.callbacks import Telemetry


class TrainClock(pl.Callback):
    """Stops training after ``budget_s`` seconds of *training* time and records a curve.

    Training time runs from the start of fit and excludes the curve's own evaluations (and any
    validation), so samplers whose evaluation is slow are not penalised for the frequent
    evaluations a curve needs. Every ``curve_every_s`` training seconds, and once at the end
    (whether the budget or something else, such as ``max_steps``, ended training), the first
    ``curve_views`` validation images are rendered and their mean PSNR (per image, as the test metric
    computes it) is appended as ``{"train_s", "step", "val_psnr"}`` to ``<log_dir>/bench_curve.jsonl``;
    each step appends ``{"train_s", "step", "rays", "samples"}``.

    Args:
        budget_s: training seconds before the run stops.
        curve_every_s: training seconds between curve points (``0``: only at the end).
        curve_views: validation images rendered for each curve point.
    """

    def __init__(self, budget_s: float = 180.0, curve_every_s: float = 10.0, curve_views: int = 2) -> None:
        self.budget_s = budget_s
        self.curve_every_s = curve_every_s
        self.curve_views = curve_views
        self._train_s = 0.0
        self._next_point = curve_every_s if curve_every_s > 0 else float("inf")
        self._since: float | None = None
        self._file: Any = None
        self._last_point_step = -1

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
        done = self._train_s >= self.budget_s
        if done or self._train_s >= self._next_point:
            self._curve_point(trainer, pl_module)
            while self._next_point <= self._train_s:
                self._next_point += self.curve_every_s
        if done:
            trainer.should_stop = True
        self._since = time.perf_counter()

    @torch.no_grad()
    def _curve_point(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        views = min(self.curve_views, len(datamodule.splits["val"]))
        if views == 0:
            return
        was_training = pl_module.training
        pl_module.eval()
        scores = []
        for index in range(views):
            batch = datamodule.image_batch("val", index, pl_module.device)
            image = pl_module.render_image(batch)
            mse = torch.mean((image.rgb - image.target) ** 2)
            scores.append(float(-10.0 * torch.log10(mse.clamp(min=1e-10))))
        pl_module.train(was_training)
        for callback in trainer.callbacks:  # this evaluation is not part of the next training step
            if isinstance(callback, Telemetry):
                callback.pause()
        self._write({"train_s": self._train_s, "step": trainer.global_step,
                     "val_psnr": sum(scores) / len(scores)})
        self._last_point_step = trainer.global_step

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._pause()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._since = time.perf_counter() if trainer.state.fn == "fit" else None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._pause()
        if self._file is not None and self._last_point_step != trainer.global_step:
            self._curve_point(trainer, pl_module)  # stopped by something else than the budget
        if self._file is not None:
            self._file.close()
