"""Novel-view frames from a trained model: the camera paths and the frame renderer of ``render``.

The command itself (options, checks, the video file) is :mod:`nerf_lightning.commands.render`.
The camera path comes from the dataset's cameras (:mod:`nerf_lightning.rendering.camera_paths`;
``auto`` picks the spiral or the orbit from how the training cameras look, :func:`choose_camera_path`),
every frame uses the intrinsics of the first training camera, frames are rendered in chunks
of ``model.eval_chunk_rays`` rays and handed to the encoder one at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras, generate_rays, pixel_grid
from nerf_lightning.data.batch import RayBatch
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.rendering.camera_paths import (
    FORWARD_FACING_DEGREES,
    interpolate_path,
    llff_focus_distance,
    orbit_path,
    spiral_path,
    viewing_spread,
)
from nerf_lightning.rendering.colormap import colorize_depth, depth_range
from nerf_lightning.scenes.images import quantize_to_uint8
from nerf_lightning.system.module import NerfModule

CAMERA_PATHS = ("auto", "orbit", "spiral", "interpolate", "test")
DEFAULT_FRAMES = 120


class RenderError(ValueError):
    """The render command's arguments cannot be used."""


def choose_camera_path(camera_to_world: Tensor) -> tuple[str, str]:
    """The path ``auto`` takes for training cameras ``[N, 3, 4]``, and why, in words.

    ``spiral`` for a forward-facing capture, ``orbit`` otherwise: the rule of
    :func:`~nerf_lightning.rendering.camera_paths.is_forward_facing` (90% of the cameras look within
    30° of their mean viewing direction), decided from the cameras, not from the dataset's format.
    """
    spread = viewing_spread(camera_to_world)
    if len(camera_to_world) > 0 and spread <= FORWARD_FACING_DEGREES:
        return "spiral", (f"a forward-facing capture: 90% of the training cameras look within "
                          f"{spread:.0f} deg of their mean direction")
    return "orbit", (f"a 360 capture: the training cameras look up to {spread:.0f} deg away from their mean "
                     f"direction (forward-facing: within {FORWARD_FACING_DEGREES:.0f})")


def path_poses(name: str, datamodule: NerfDataModule, num_frames: int | None = None) -> Tensor:
    """``[F, 3, 4]`` camera-to-world matrices of camera path ``name`` for a set-up data module.

    ``orbit``, ``spiral`` and ``interpolate`` are made from the training cameras (``num_frames``
    frames, default 120); ``auto`` is whichever of ``spiral`` and ``orbit`` :func:`choose_camera_path`
    picks; ``test`` is the test split's poses in order (the first ``num_frames`` when given).
    """
    if name not in CAMERA_PATHS:
        raise RenderError(f"unknown camera path {name!r}; expected one of {', '.join(CAMERA_PATHS)}")
    if name == "test":
        poses = datamodule.splits["test"].cameras.camera_to_world
        return poses if num_frames is None else poses[:num_frames]
    train = datamodule.splits["train"]
    frames = DEFAULT_FRAMES if num_frames is None else num_frames
    if name == "auto":
        name, _ = choose_camera_path(train.cameras.camera_to_world)
    if name == "orbit":
        return orbit_path(train.cameras.camera_to_world, frames)
    if name == "interpolate":
        return interpolate_path(train.cameras.camera_to_world, frames)
    focus = llff_focus_distance(*train.depth_range) if train.depth_range is not None else None
    return spiral_path(train.cameras.camera_to_world, frames, focus_distance=focus)


def path_cameras(poses: Tensor, intrinsics: Cameras) -> Cameras:
    """Pinhole cameras at ``poses`` ``[F, 3, 4]`` with the intrinsics and size of ``intrinsics[0]``."""
    count = poses.shape[0]

    def repeat(values: Tensor) -> Tensor:
        return values[:1].expand(count, *values.shape[1:]).clone()

    return Cameras(
        camera_to_world=poses.to(intrinsics.fx.dtype), fx=repeat(intrinsics.fx), fy=repeat(intrinsics.fy),
        cx=repeat(intrinsics.cx), cy=repeat(intrinsics.cy), width=repeat(intrinsics.width),
        height=repeat(intrinsics.height), distortion=torch.zeros_like(repeat(intrinsics.distortion)),
    )


@torch.no_grad()
def render_frames(
    model: NerfModule, datamodule: NerfDataModule, cameras: Cameras, depth: bool = False
) -> Iterator[Tensor]:
    """Render each camera: ``[H, W, 3]`` uint8 RGB frames on the CPU (``[H, 2 W, 3]``: RGB | depth).

    Depth is coloured over the range of the first frame's opaque pixels, kept for every frame
    so colours mean the same distance throughout.
    """
    assert datamodule.scene_box is not None, "the data module must be set up"
    device = model.device
    cameras = cameras.to(device)
    background = torch.tensor(datamodule.background, dtype=torch.float32, device=device)
    height, width = int(cameras.height[0]), int(cameras.width[0])
    cols, rows = pixel_grid(width, height, device)
    locked_range: tuple[float, float] | None = None
    for index in range(len(cameras)):
        rays = generate_rays(cameras, torch.full_like(cols, index), cols, rows, datamodule.scene_box,
                             datamodule.min_near, undistort=False)
        batch = RayBatch(rays=rays, rgb=torch.zeros(len(rays), 3, device=device), background=background,
                         sampler_seed=index, image_index=index, image_size=(height, width))
        image = model.render_image(batch)
        frame = image.rgb
        if depth:
            locked_range = locked_range or depth_range(image.depth, image.opacity)
            frame = torch.cat([frame, colorize_depth(image.depth, image.opacity, *locked_range)], dim=1)
        yield quantize_to_uint8(frame.float().cpu())


def describe_seconds(seconds: float) -> str:
    """A duration for people: ``0.31 s``, ``12 s``, ``4 min 10 s``, ``1 h 12 min``."""
    if seconds < 9.5:
        return f"{seconds:.2g} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s" if whole % 60 else f"{whole // 60} min"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes % 60 else f"{minutes // 60} h"


LONG_RENDER_SECONDS = 60.0
"""An estimate at least this long also names the options that make the video quicker."""


def estimate_line(frames: int, width: int, height: int, seconds_per_frame: float, shorter: str) -> str:
    """The line ``render`` prints once the first frame is rendered: the frame count, the frame size and
    the time all frames take at the first frame's pace (which includes any warm-up, so it errs long).

    ``shorter`` names the options that make it quicker, added when the estimate reaches a minute.
    """
    total = frames * seconds_per_frame
    line = (f"render: {frames} frames at {width}x{height}, about {describe_seconds(total)} "
            f"at {describe_seconds(seconds_per_frame)} per frame (first frame)")
    return f"{line}; {shorter} make it shorter" if total >= LONG_RENDER_SECONDS else line
