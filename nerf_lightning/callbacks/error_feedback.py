"""Reports each training step's per-ray errors back to the data module's pixel selection."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from nerf_lightning.system.contract import RayErrorObserver, conforms


class ErrorFeedback(pl.Callback):
    """After every training step, hands the step's per-ray squared errors to the data module.

    The training step returns ``ray_error`` (``[P]``, one per pixel) beside its loss, and the batch
    carries each pixel's index; a data module with an ``observe_ray_errors(batch, errors)`` method
    (:class:`~nerf_lightning.system.contract.RayErrorObserver`, such as ``NerfDataModule`` with
    ``pixel_selection="error"``) updates its error map from them. With
    uniform selection this does nothing. Under data parallelism each rank reports its own rays.
    """

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        datamodule = trainer.datamodule
        if not isinstance(outputs, dict) or "ray_error" not in outputs:
            return
        if conforms(datamodule, RayErrorObserver):
            datamodule.observe_ray_errors(batch, outputs["ray_error"])
