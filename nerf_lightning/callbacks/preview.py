"""Logs one preview image per validation view: truth | prediction | depth | opacity | samples per ray."""

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


# Stops of a perceptually ordered colour map (dark blue → green → yellow), as in viridis.
_HEAT_STOPS = (
    (0.267, 0.005, 0.329),
    (0.229, 0.322, 0.546),
    (0.128, 0.567, 0.551),
    (0.369, 0.789, 0.383),
    (0.993, 0.906, 0.144),
)


def heatmap(values: Tensor, high: float) -> Tensor:
    """``[H, W, 1]`` non-negative values → ``[H, W, 3]`` colours on a log scale up to ``high``.

    Zero is the darkest colour; ``high`` and above the brightest.
    """
    scaled = (torch.log1p(values.float().clamp(min=0)) / max(float(torch.log1p(torch.tensor(high))), 1e-6))
    position = scaled.clamp(0, 1)[..., 0] * (len(_HEAT_STOPS) - 1)
    stops = torch.tensor(_HEAT_STOPS, dtype=torch.float32, device=values.device)
    low_index = position.floor().long().clamp(max=len(_HEAT_STOPS) - 2)
    fraction = (position - low_index)[..., None]
    return stops[low_index] * (1 - fraction) + stops[low_index + 1] * fraction


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
        view = getattr(batch, "image_index", -1)
        view = batch_idx if view < 0 else view
        if 0 <= self.max_views <= view or not trainer.is_global_zero:
            return
        panel = preview_panel(outputs).float().cpu()
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_image(f"val/preview/{view:03d}", panel, trainer.global_step,
                                            dataformats="HWC")
