"""Loader for Blender (NeRF-synthetic) scenes.

A Blender scene is a folder with ``transforms_{split}.json`` files::

    {"camera_angle_x": 0.69,
     "frames": [{"file_path": "./train/r_0", "transform_matrix": [[...], [...], [...], [0, 0, 0, 1]]}, ...]}

``transform_matrix`` is an OpenGL camera-to-world matrix (used as is); ``file_path`` is relative to the
folder and may omit the ``.png`` extension. Focal lengths follow from ``camera_angle_x`` and each
image's own width: ``fx = fy = 0.5 * W / tan(camera_angle_x / 2)``, ``cx = W / 2``, ``cy = H / 2``.
Every image of a split must have the split's aspect ratio (another size of the same aspect ratio is
a warning; see :mod:`nerf_lightning.scenes.split_sizes`).

The JSON, pose and image-path checks are shared with the nerfstudio format, which descends from this
one (:mod:`nerf_lightning.scenes.formats.transforms_json`). Every problem is a one-line
:class:`DatasetError` naming the JSON file, the frame (its position in ``frames``) and the field;
the checks report it through a :class:`~nerf_lightning.scenes.problems.Problems`, which raises it when
loading and collects it in ``nerf-lightning data validate`` (:mod:`nerf_lightning.scenes.validate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.common import (
    ImageStream,
    PreparedImage,
    SplitImages,
    check_downscale,
    collect,
    in_order,
    make_cameras,
    prepare_alpha,
    prepare_image,
)
from nerf_lightning.scenes.formats.transforms_json import (
    ImageRef,
    camera_to_world,
    frame_objects,
    is_number,
    read_transforms,
    resolve_image,
)
from nerf_lightning.scenes.images import image_size, load_image
from nerf_lightning.scenes.problems import Problems
from nerf_lightning.scenes.scene import SceneSplit
from nerf_lightning.scenes.split_sizes import check_split_sizes


def camera_angle(meta: dict[str, Any], source: Path) -> float:
    """The checked top-level ``camera_angle_x`` of a Blender transforms file (radians)."""
    if "camera_angle_x" not in meta:
        raise DatasetError(
            source,
            "missing; expected the horizontal field of view in radians, in (0, pi)",
            field="camera_angle_x",
        )
    angle = meta["camera_angle_x"]
    if not is_number(angle) or not 0.0 < angle < math.pi:
        raise DatasetError(
            source,
            f"expected the horizontal field of view in radians, in (0, pi), got {angle!r}",
            field="camera_angle_x",
        )
    return float(angle)


def require_image(ref: ImageRef, source: Path, index: int) -> ImageRef:
    """Every image of a Blender split must exist."""
    if not ref.exists:
        raise DatasetError(
            source,
            f"image '{ref.name}' does not exist (also tried with '.png' appended); "
            "expected every image of a Blender split to exist",
            frame=index,
            field="file_path",
        )
    return ref


@dataclass
class BlenderFrame:
    """A frame whose JSON fields passed the checks (its image is not opened yet)."""

    index: int
    pose: np.ndarray
    ref: ImageRef


@dataclass
class BlenderScan:
    """What ``transforms_{split}.json`` says, checked; ``angle`` is ``None`` only in collect mode."""

    source: Path
    angle: float | None
    frames: list[BlenderFrame]


def scan_blender(root: Path, split: str, problems: Problems) -> BlenderScan | None:
    """The JSON checks of a Blender split (everything but decoding images).

    ``None`` (collect mode only) when the file or its ``frames`` cannot be used at all; frames with a
    problem in any field are left out of :attr:`BlenderScan.frames`.
    """
    source = root / f"transforms_{split}.json"
    expected = f"a Blender transforms_{split}.json with 'camera_angle_x' and 'frames'"
    meta = problems.check(read_transforms, source, expected)
    if meta is None:
        return None
    angle = problems.check(camera_angle, meta, source)
    frames = frame_objects(meta, source, problems)
    if not frames:
        return None
    poses = {i: problems.check(camera_to_world, frame, source, i) for i, frame in frames.items()}
    refs = {
        i: problems.check(resolve_image, root, frame, source, i, try_png=True) for i, frame in frames.items()
    }
    checked = [
        BlenderFrame(i, poses[i], refs[i]) for i in frames if poses[i] is not None and refs[i] is not None
    ]
    return BlenderScan(source=source, angle=angle, frames=checked)


def load_blender(
    root: Path, split: str, *, background: tuple[float, float, float] = (1.0, 1.0, 1.0), downscale: int = 1
) -> SceneSplit:
    """Load ``root/transforms_{split}.json`` of a Blender scene.

    Args:
        root: the scene folder.
        split: ``train``, ``val``, ``test`` (any name with a ``transforms_{split}.json``).
        background: colour RGBA images are composited over.
        downscale: integer factor; images become ``[H // f, W // f, 3]``, intrinsics are divided by ``f``.

    Returns:
        The split, frames in file order; every image must exist and decode.

    Raises:
        DatasetError: anything wrong with the JSON file or an image (one-line message).
    """
    return collect(stream_blender(root, split, background=background, downscale=downscale))


def stream_blender(
    root: Path, split: str, *, background: tuple[float, float, float] = (1.0, 1.0, 1.0), downscale: int = 1,
    skip: int = 0, workers: int = 1,
) -> ImageStream:
    """:func:`load_blender` one image at a time (:class:`~nerf_lightning.scenes.formats.common.ImageStream`);
    the JSON file is checked before this returns, the images as they are prepared (by ``workers``
    threads, :func:`~nerf_lightning.scenes.formats.common.in_order`). The first ``skip`` images are not
    prepared (their sizes are read from their headers)."""
    check_downscale(downscale)
    scan = scan_blender(Path(root), split, Problems())
    assert scan is not None and scan.angle is not None  # strict: problems raise
    images = _blender_images(scan, scan.angle, background, downscale, skip, workers)
    return ImageStream(len(scan.frames), images)


def _blender_frame(frame: BlenderFrame, source: Path, background: tuple[float, float, float],
                   downscale: int) -> tuple[tuple[int, int], PreparedImage]:
    """A frame's decoded ``(width, height)`` and its prepared image."""
    require_image(frame.ref, source, frame.index)
    image = load_image(frame.ref.path, file_for_errors=str(source), frame=frame.index)
    prepared = PreparedImage(prepare_image(image, background, downscale, source, frame.index),
                             prepare_alpha(image, downscale))
    return (image.shape[1], image.shape[0]), prepared


def _blender_images(scan: BlenderScan, angle: float, background: tuple[float, float, float], downscale: int,
                    skip: int, workers: int) -> SplitImages:
    source = scan.source
    intrinsics: list[tuple[float, float, float, float, int, int]] = []
    sizes: dict[int, tuple[int, int]] = {}
    prepared = in_order((partial(_blender_frame, frame, source, background, downscale)
                         for frame in scan.frames[skip:]), workers)
    for position, frame in enumerate(scan.frames):
        image = None
        if position < skip:  # prepared before: its decoded size is its header's
            require_image(frame.ref, source, frame.index)
            width, height = image_size(frame.ref.path, file_for_errors=str(source), frame=frame.index)
        else:
            (width, height), image = next(prepared)
        sizes[frame.index] = (width, height)
        focal = 0.5 * width / math.tan(0.5 * angle)
        intrinsics.append((focal, focal, 0.5 * width, 0.5 * height, width, height))
        if image is not None:
            yield image
            del image
    # One camera_angle_x for the split: an image of another aspect ratio cannot match it.
    names = {frame.index: frame.ref.name for frame in scan.frames}
    check_split_sizes(source, names, sizes, Problems(), stacklevel=2)
    poses = [frame.pose for frame in scan.frames]
    cameras = make_cameras(poses, intrinsics, [(0.0, 0.0, 0.0, 0.0)] * len(poses), downscale)
    return SceneSplit(cameras=cameras, images=[], names=[f.ref.name for f in scan.frames], source=str(source))
