"""Render a browser view with the model's whole-image path, and colour it for display.

The same function serves the training callback and ``nerf-lightning view``: it builds the rays of
a :class:`~nerf_lightning.viewer.cameras.ViewCamera` at the requested size exactly as the data
module does for evaluation images (pixel centres, clipped to the scene box or run to ``far``) and
renders them with :meth:`NerfModule.render_image`, in evaluation mode, so a frame is what
validation would show from that viewpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import generate_rays, pixel_grid
from nerf_lightning.core.types import SceneBox
from nerf_lightning.data.batch import RayBatch
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.rendering.colormap import colorize_depth, depth_range, heatmap
from nerf_lightning.scenes.images import quantize_to_uint8
from nerf_lightning.system.image_render import ImageRender
from nerf_lightning.system.module import NerfModule
from nerf_lightning.viewer.cameras import ViewCamera


@dataclass(frozen=True)
class ViewScene:
    """Where rays start and stop and what lies behind them: the data module's settings, kept apart
    so rendering needs no data module.

    Attributes:
        scene_box: rays are clipped to it (unless ``far`` is set).
        min_near: rays never start closer than this to the camera.
        far: unbounded scenes: every ray runs to this distance; ``None`` clips to the box.
        background: RGB in ``[0, 1]`` composited behind the field.
    """

    scene_box: SceneBox
    min_near: float
    far: float | None
    background: tuple[float, float, float]

    @staticmethod
    def from_datamodule(datamodule: NerfDataModule) -> ViewScene:
        """The scene of a set-up data module."""
        if datamodule.scene_box is None:
            raise ValueError("the data module must be set up before its scene can be viewed")
        background = tuple(float(c) for c in datamodule.background)
        return ViewScene(datamodule.scene_box, float(datamodule.min_near), datamodule.far,
                         (background[0], background[1], background[2]))


@contextmanager
def evaluation_mode(model: NerfModule) -> Iterator[None]:
    """``model`` in evaluation mode for the block, back in the mode it was in afterwards.

    Samplers place samples differently in training (random offsets, exploration); a frame
    between training steps must look like validation and must leave training as it found it.
    """
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def render_view(model: NerfModule, scene: ViewScene, camera: ViewCamera, width: int, height: int,
                cancelled: Callable[[], bool] | None = None) -> ImageRender | None:
    """Render ``camera`` at ``width x height`` with ``model`` (on the model's device).

    The image is rendered in bands of rows of about ``model.eval_chunk_rays`` rays; ``cancelled`` is
    asked between bands, and ``None`` is returned as soon as it says so: a large frame on a CPU takes
    seconds, and a browser whose camera moved meanwhile wants the next frame, not this one.
    """
    device = model.device
    cameras = camera.cameras(width, height).to(device)
    cols, rows = pixel_grid(width, height, device)
    background = torch.tensor(scene.background, dtype=torch.float32, device=device)
    band_rows = max(1, model.eval_chunk_rays // width)
    bands: list[ImageRender] = []
    with evaluation_mode(model):
        for top in range(0, height, band_rows):
            if bands and cancelled is not None and cancelled():
                return None
            pixels = slice(top * width, min(top + band_rows, height) * width)
            band_cols, band_rows_ = cols[pixels], rows[pixels]
            rays = generate_rays(cameras, torch.zeros_like(band_cols), band_cols, band_rows_, scene.scene_box,
                                 scene.min_near, undistort=False, far=scene.far)
            batch = RayBatch(rays=rays, rgb=torch.zeros(len(rays), 3, device=device), background=background,
                             sampler_seed=0, image_size=(len(rays) // width, width))
            bands.append(model.render_image(batch))
    return _stack(bands)


def _stack(bands: list[ImageRender]) -> ImageRender:
    """One image of bands of rows, top to bottom."""
    if len(bands) == 1:
        return bands[0]
    tensors = {name: torch.cat([getattr(band, name) for band in bands])
               for name in ("target", "rgb", "depth", "opacity", "samples_per_ray")}
    return ImageRender(**tensors, near=min(band.near for band in bands), far=max(band.far for band in bands))


def _rgb(image: ImageRender) -> Tensor:
    return image.rgb


def _depth(image: ImageRender) -> Tensor:
    return colorize_depth(image.depth, image.opacity, *depth_range(image.depth, image.opacity))


def _opacity(image: ImageRender) -> Tensor:
    return image.opacity.clamp(0, 1).expand(*image.opacity.shape[:2], 3)


def _samples_per_ray(image: ImageRender) -> Tensor:
    counts = image.samples_per_ray.float()
    return heatmap(counts, max(float(counts.max()), 1.0))


OUTPUTS: dict[str, Callable[[ImageRender], Tensor]] = {
    "rgb": _rgb,
    "depth": _depth,
    "opacity": _opacity,
    "samples per ray": _samples_per_ray,
}
"""What a frame can show, by the name the browser lists: each maps a render to ``[H, W, 3]`` in ``[0, 1]``.
Depth is coloured near red to far blue over the frame's own opaque range, samples per ray as a
viridis heatmap (log scale) up to the frame's maximum."""


def frame_pixels(image: ImageRender, output: str) -> np.ndarray:
    """``[H, W, 3]`` uint8 of ``output`` (a key of :data:`OUTPUTS`) for display."""
    colour = OUTPUTS.get(output)
    if colour is None:
        raise ValueError(f"unknown viewer output {output!r}; expected one of {', '.join(OUTPUTS)}")
    return quantize_to_uint8(colour(image).float().cpu()).numpy()
