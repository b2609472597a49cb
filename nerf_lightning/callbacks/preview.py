"""Logs one preview image per validation view: truth | prediction | depth | opacity | samples per ray."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from nerf_lightning.data.batch import RayBatch
from nerf_lightning.rendering.colormap import heatmap
from nerf_lightning.system.image_render import ImageRender


def _gray(values: Tensor, low: float, high: float) -> Tensor:
    """``[H, W, 1]`` values scaled to ``[0, 1]`` over ``[low, high]`` → ``[H, W, 3]``."""
    scaled = ((values - low) / max(high - low, 1e-6)).clamp(0, 1)
    return scaled.expand(*values.shape[:2], 3)


def preview_panel(image: ImageRender) -> Tensor:
    """``[H, 5 W, 3]`` side-by-side panel: target, prediction, depth (near→far bright→dark),
    opacity, and samples spent per pixel (``heatmap`` up to the image's maximum)."""
    depth = 1.0 - _gray(image.depth, image.near, image.far) * (image.opacity > 0.5)
    counts = image.samples_per_ray.to(image.rgb)
    spent = heatmap(counts, max(float(counts.max()), 1.0))
    panels = [image.target, image.rgb, depth, _gray(image.opacity, 0.0, 1.0), spent]
    return torch.cat([panel.to(image.rgb) for panel in panels], dim=1).clamp(0, 1)


class PreviewImages(pl.Callback):
    """Writes ``val/preview/<view>`` images to TensorBoard at every validation.

    ``<view>`` is the image's index in the validation split. Under data parallelism each view is
    rendered by one rank and only rank zero writes to TensorBoard, so the previews are those of
    rank zero's views (every ``world_size``-th view).

    Args:
        max_views: log at most this many validation views (``-1`` for all).
    """

    def __init__(self, max_views: int = -1) -> None:
        self.max_views = max_views

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                                batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if trainer.sanity_checking or not isinstance(outputs, ImageRender):
            return
        view = batch.image_index if isinstance(batch, RayBatch) else -1
        view = batch_idx if view < 0 else view
        if 0 <= self.max_views <= view or not trainer.is_global_zero:
            return
        panel = preview_panel(outputs).float().cpu()
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_image(f"val/preview/{view:03d}", panel, trainer.global_step,
                                            dataformats="HWC")
