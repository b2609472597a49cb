"""Logs one preview image per validation view: ground truth | prediction | depth | opacity."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from nerf_lightning.module import ImageRender


def _gray(values: Tensor, low: float, high: float) -> Tensor:
    """``[H, W, 1]`` values scaled to ``[0, 1]`` over ``[low, high]`` → ``[H, W, 3]``."""
    scaled = ((values - low) / max(high - low, 1e-6)).clamp(0, 1)
    return scaled.expand(*values.shape[:2], 3)


def preview_panel(image: ImageRender) -> Tensor:
    """``[H, 4 W, 3]`` side-by-side panel: target, prediction, depth (near→far bright→dark), opacity."""
    depth = 1.0 - _gray(image.depth, image.near, image.far) * (image.opacity > 0.5)
    return torch.cat([image.target, image.rgb, depth, _gray(image.opacity, 0.0, 1.0)], dim=1).clamp(0, 1)


class PreviewImages(pl.Callback):
    """Writes ``val/preview/<view>`` images to TensorBoard at every validation.

    Args:
        max_views: log at most this many validation views (``-1`` for all).
    """

    def __init__(self, max_views: int = -1) -> None:
        self.max_views = max_views

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                                batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if trainer.sanity_checking or not isinstance(outputs, ImageRender):
            return
        if 0 <= self.max_views <= batch_idx:
            return
        panel = preview_panel(outputs).float().cpu()
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_image(f"val/preview/{batch_idx:03d}", panel, trainer.global_step,
                                            dataformats="HWC")
