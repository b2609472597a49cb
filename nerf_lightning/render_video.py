"""``nerf-lightning render``: a novel-view video from a trained checkpoint.

    nerf-lightning render --ckpt_path RUN/checkpoints/last.ckpt --camera-path orbit --out orbit.mp4

The camera path comes from the dataset's cameras (:mod:`nerf_lightning.rendering.camera_paths`),
every frame uses the intrinsics of the first training camera, frames are rendered in chunks
of ``model.eval_chunk_rays`` rays and handed to the encoder one at a time.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor
from tqdm import tqdm

from nerf_lightning.data.batch import RayBatch
from nerf_lightning.data.cameras import Cameras, generate_rays, pixel_grid
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.data.images import quantize_to_uint8
from nerf_lightning.module import NerfModule
from nerf_lightning.rendering.camera_paths import llff_focus_distance, orbit_path, spiral_path
from nerf_lightning.rendering.colormap import colorize_depth, depth_range
from nerf_lightning.rendering.video import check_video_path, open_video
from nerf_lightning.runs.trained import add_trained_run_arguments, load_trained, run_config_path

CAMERA_PATHS = ("orbit", "spiral", "test")
DEFAULT_FRAMES = 120


class RenderError(ValueError):
    """The render command's arguments cannot be used."""


def path_poses(name: str, datamodule: NerfDataModule, num_frames: int | None = None) -> Tensor:
    """``[F, 3, 4]`` camera-to-world matrices of camera path ``name`` for a set-up data module.

    ``orbit`` and ``spiral`` are made from the training cameras (``num_frames`` frames, default
    120); ``test`` is the test split's poses in order (the first ``num_frames`` when given).
    """
    if name not in CAMERA_PATHS:
        raise RenderError(f"unknown camera path {name!r}; expected one of {', '.join(CAMERA_PATHS)}")
    if name == "test":
        poses = datamodule.splits["test"].cameras.camera_to_world
        return poses if num_frames is None else poses[:num_frames]
    train = datamodule.splits["train"]
    frames = DEFAULT_FRAMES if num_frames is None else num_frames
    if name == "orbit":
        return orbit_path(train.cameras.camera_to_world, frames)
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nerf-lightning render",
        description="Render a novel-view video (mp4 or gif) from a trained checkpoint.",
        epilog="Any --model.* or --data.* option overrides the run's config, e.g. --data.root DIR.",
        allow_abbrev=False,
    )
    add_trained_run_arguments(parser)
    parser.add_argument("--camera-path", "--camera_path", dest="camera_path", default="orbit",
                        help=f"{', '.join(CAMERA_PATHS)}: circle around the scene centre (360° captures), "
                        "LLFF spiral around the mean pose (forward-facing), or the test views "
                        "(default: orbit)")
    parser.add_argument("--out", type=Path, required=True, help="output file, .mp4 or .gif")
    parser.add_argument("--depth", action="store_true", help="colourised depth beside the RGB")
    parser.add_argument("--frames", type=int, default=None,
                        help=f"frames of orbit/spiral (default {DEFAULT_FRAMES}); test: the first N views")
    parser.add_argument("--fps", type=float, default=30.0, help="frames per second (default 30)")
    parser.add_argument("--device", default="auto", help="auto (a GPU if any), cpu, cuda, cuda:1...")
    return parser


def _check(options: argparse.Namespace, overrides: list[str]) -> None:
    if options.camera_path not in CAMERA_PATHS:
        raise RenderError(
            f"unknown camera path {options.camera_path!r}; expected one of {', '.join(CAMERA_PATHS)}"
        )
    check_video_path(options.out)
    if options.frames is not None and options.frames < 1:
        raise RenderError(f"--frames: expected an integer >= 1, got {options.frames}")
    if not (math.isfinite(options.fps) and options.fps > 0):
        raise RenderError(f"--fps: expected a positive number, got {options.fps}")
    allowed = ("--model.", "--data.")
    unknown = [arg for arg in overrides if arg.startswith("-") and not arg.startswith(allowed)]
    if unknown:
        raise RenderError(f"unrecognized arguments: {' '.join(unknown)}")
    if not options.ckpt_path.is_file():
        raise FileNotFoundError(f"{options.ckpt_path}: no such checkpoint")


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def run_render_cli(args: list[str]) -> int:
    """``nerf-lightning render ...``: returns 0 once the video is written."""
    options, overrides = _parser().parse_known_args(args)
    _check(options, overrides)
    config = run_config_path(options.ckpt_path, options.config)
    model, datamodule = load_trained(options.ckpt_path, config, overrides, device=_device(options.device),
                                     weights_only=options.weights_only)
    cameras = path_cameras(path_poses(options.camera_path, datamodule, options.frames),
                           datamodule.splits["train"].cameras)
    writer = open_video(options.out, options.fps)
    frames = tqdm(render_frames(model, datamodule, cameras, depth=options.depth), total=len(cameras),
                  unit="frame", desc=f"render {options.camera_path}", file=sys.stderr)
    try:
        for frame in frames:
            writer.write(frame)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    height, width = int(cameras.height[0]), int(cameras.width[0]) * (2 if options.depth else 1)
    print(f"wrote {options.out} ({len(cameras)} frames, {width}x{height}, {options.fps:g} fps)")
    return 0
