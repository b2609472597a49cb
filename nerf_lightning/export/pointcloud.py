"""``--format pointcloud``: surface points where rendered rays terminate, coloured by the render (PLY).

Every pixel of the chosen views is rendered with the model's own ``render_image``; a pixel whose
opacity exceeds ``opacity_threshold`` contributes the point at its expected termination depth
(``origin + depth * direction``) with its rendered colour. At most ``max_points`` are kept: a
uniform random subset (seeded), chosen on the fly so memory stays ``O(max_points)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.export.common import ExportError
from nerf_lightning.export.ply import write_ply
from nerf_lightning.system.module import NerfModule

DEFAULT_MAX_POINTS = 1_000_000
VIEW_SETS = ("train", "test", "all")


@dataclass(frozen=True)
class PointCloud:
    """Surface points.

    Attributes:
        points: ``[P, 3]`` float32 world positions.
        colors: ``[P, 3]`` uint8 RGB.
        candidates: pixels that passed the opacity test (``P`` is at most this).
    """

    points: np.ndarray
    colors: np.ndarray
    candidates: int


@torch.no_grad()
def surface_points(model: NerfModule, datamodule: NerfDataModule, views: str = "train",
                   max_points: int = DEFAULT_MAX_POINTS, opacity_threshold: float = 0.5,
                   seed: int = 0) -> PointCloud:
    """Expected termination points of the pixels of ``views`` (``train``, ``test`` or ``all``)."""
    if views not in VIEW_SETS:
        raise ExportError(f"--views: expected one of {', '.join(VIEW_SETS)}, got {views!r}")
    if max_points < 1:
        raise ExportError(f"--max-points: expected an integer >= 1, got {max_points}")
    splits = ["train", "test"] if views == "all" else [views]
    generator = torch.Generator().manual_seed(seed)
    kept_points: Tensor = torch.empty(0, 3)
    kept_colors: Tensor = torch.empty(0, 3)
    kept_keys: Tensor = torch.empty(0)
    candidates = 0
    for split in splits:
        for index in range(len(datamodule.splits[split])):  # load_trained set up train and test
            batch = datamodule.image_batch(split, index, model.device, centres=True)  # a point per pixel
            image = model.render_image(batch)
            opaque = image.opacity.reshape(-1) > opacity_threshold
            rays = batch.rays
            points = rays.origins + rays.directions * image.depth.reshape(-1, 1)
            points, colors = points[opaque].float().cpu(), image.rgb.reshape(-1, 3)[opaque].float().cpu()
            candidates += len(points)
            keys = torch.rand(len(points), generator=generator)  # keep the smallest keys: a uniform subset
            kept_points = torch.cat([kept_points, points])
            kept_colors = torch.cat([kept_colors, colors])
            kept_keys = torch.cat([kept_keys, keys])
            if len(kept_keys) > max_points:
                order = torch.topk(kept_keys, max_points, largest=False).indices
                kept_points, kept_colors, kept_keys = kept_points[order], kept_colors[order], kept_keys[order]
    colors = (kept_colors.clamp(0, 1) * 255.0 + 0.5).to(torch.uint8)
    return PointCloud(points=kept_points.numpy(), colors=colors.numpy(), candidates=candidates)


def export_pointcloud(model: NerfModule, datamodule: NerfDataModule, out: Path, views: str = "train",
                      max_points: int = DEFAULT_MAX_POINTS, opacity_threshold: float = 0.5,
                      comments: list[str] | None = None) -> PointCloud:
    """Write :func:`surface_points` to ``out`` as a binary PLY point cloud (atomically)."""
    cloud = surface_points(model, datamodule, views, max_points, opacity_threshold)
    if len(cloud.points) == 0:
        raise ExportError(
            f"no surface points: no pixel of the {views} views has opacity above {opacity_threshold:g}; "
            "pass a lower --opacity-threshold"
        )
    write_ply(out, cloud.points, colors=cloud.colors,
              comments=[*(comments or []), f"views {views}", f"opacity_threshold {opacity_threshold:g}"])
    return cloud
