"""Loader for Blender (NeRF-synthetic) scenes, plus the checks shared by ``transforms*.json`` formats.

A Blender scene is a folder with ``transforms_{split}.json`` files::

    {"camera_angle_x": 0.69,
     "frames": [{"file_path": "./train/r_0", "transform_matrix": [[...], [...], [...], [0, 0, 0, 1]]}, ...]}

``transform_matrix`` is an OpenGL camera-to-world matrix (used as is); ``file_path`` is relative to the
folder and may omit the ``.png`` extension. Focal lengths follow from ``camera_angle_x`` and each
image's own width: ``fx = fy = 0.5 * W / tan(camera_angle_x / 2)``, ``cx = W / 2``, ``cy = H / 2``.
Every image of a split must have the split's aspect ratio (another size of the same aspect ratio is
a warning; see :mod:`nerf_lightning.data.split_sizes`).

The helpers below (JSON reading, pose and path checks, image preparation) are also used by the
nerfstudio loader, whose format descends from this one. Every problem is a one-line
:class:`DatasetError` naming the JSON file, the frame (its position in ``frames``) and the field;
the checks report it through a :class:`~nerf_lightning.data.problems.Problems`, which raises it when
loading and collects it in ``nerf-lightning data validate`` (:mod:`nerf_lightning.data.validate`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nerf_lightning.data.cameras import Cameras
from nerf_lightning.data.errors import DatasetError
from nerf_lightning.data.images import composite, load_image
from nerf_lightning.data.images import downscale as downscale_image
from nerf_lightning.data.problems import Problems
from nerf_lightning.data.scene import SceneSplit
from nerf_lightning.data.split_sizes import check_split_sizes

ROTATION_TOLERANCE = 1e-2
"""Largest accepted ``max |R^T R - I|`` of a pose's rotation part (scaled rotations are rejected)."""
LAST_ROW_TOLERANCE = 1e-4
"""Largest accepted deviation of a pose's last row from ``[0, 0, 0, 1]``."""


# ----------------------------------------------------------------------------------------- shared checks


def read_transforms(path: Path, expected: str) -> dict[str, Any]:
    """Parse a JSON file whose top level must be an object; ``expected`` describes the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(path, f"file not found; expected {expected}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(path, f"cannot be read ({exc}); expected {expected}") from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            path, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}; expected {expected}"
        ) from None
    if not isinstance(meta, dict):
        raise DatasetError(path, f"top level is a JSON {type(meta).__name__}; expected a JSON object")
    return meta


def frame_list(meta: dict[str, Any], source: Path) -> list[Any]:
    """The ``frames`` value of a transforms file, checked to be a non-empty list."""
    if "frames" not in meta:
        raise DatasetError(source, "missing; expected a non-empty list of frames", field="frames")
    frames = meta["frames"]
    if not isinstance(frames, list):
        raise DatasetError(
            source, f"is a JSON {type(frames).__name__}; expected a non-empty list of frames", field="frames"
        )
    if not frames:
        raise DatasetError(source, "is empty; expected a non-empty list of frames", field="frames")
    return frames


def frame_object(frame: Any, source: Path, index: int) -> dict[str, Any]:
    """Frame ``index`` of ``frames``, checked to be a JSON object."""
    if not isinstance(frame, dict):
        raise DatasetError(source, f"is a JSON {type(frame).__name__}; expected an object", frame=index)
    return frame


def frame_objects(
    meta: dict[str, Any], source: Path, problems: Problems | None = None
) -> dict[int, dict[str, Any]]:
    """Position in ``frames`` -> frame of a transforms file, checked to be a non-empty list of objects.

    Strict (``problems`` ``None``): the first problem raises. Collect: frames that are not objects are
    reported and left out; an empty dict means ``frames`` itself is unusable (reported).
    """
    problems = problems or Problems()
    frames = problems.check(frame_list, meta, source)
    if frames is None:
        return {}
    checked = {i: problems.check(frame_object, frame, source, i) for i, frame in enumerate(frames)}
    return {i: frame for i, frame in checked.items() if frame is not None}


def is_number(value: Any) -> bool:
    """A JSON number (``true``/``false`` are not numbers)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_number(
    value: Any, source: Path, frame: int | None, field: str, *, positive: bool = False
) -> float:
    """``value`` as a float, checked to be a finite (and, if asked, positive) number."""
    kind = "positive" if positive else "finite"
    if not is_number(value) or not math.isfinite(value) or (positive and value <= 0):
        raise DatasetError(source, f"expected a {kind} number, got {value!r}", frame=frame, field=field)
    return float(value)


def camera_to_world(frame: dict[str, Any], source: Path, index: int) -> np.ndarray:
    """``[3, 4]`` float64 pose from a frame's ``transform_matrix`` (4x4 OpenGL camera-to-world).

    The rotation part must be orthonormal with determinant +1 (``max |R^T R - I| <
    ROTATION_TOLERANCE``): a pose carrying a uniform scale is rejected, not silently accepted.
    """
    field = "transform_matrix"
    if field not in frame:
        raise DatasetError(source, "missing; expected a 4x4 camera-to-world matrix", frame=index, field=field)
    value = frame[field]
    if not (
        isinstance(value, list)
        and len(value) == 4
        and all(isinstance(row, list) and len(row) == 4 and all(map(is_number, row)) for row in value)
    ):
        raise DatasetError(
            source,
            f"expected a 4x4 matrix (4 rows of 4 numbers), got {value!r:.80}",
            frame=index,
            field=field,
        )
    matrix = np.array(value, dtype=np.float64)
    if not np.isfinite(matrix).all():
        raise DatasetError(source, "expected finite numbers, got NaN or infinity", frame=index, field=field)
    if np.abs(matrix[3] - np.array([0.0, 0.0, 0.0, 1.0])).max() > LAST_ROW_TOLERANCE:
        raise DatasetError(
            source, f"expected last row [0, 0, 0, 1], got {matrix[3].tolist()}", frame=index, field=field
        )
    rotation = matrix[:3, :3]
    deviation = float(np.abs(rotation.T @ rotation - np.eye(3)).max())
    det = float(np.linalg.det(rotation))
    if deviation >= ROTATION_TOLERANCE or det <= 0:
        expected = f"expected a rotation (orthonormal, det +1, max |R^T R - I| < {ROTATION_TOLERANCE})"
        scale = abs(det) ** (1.0 / 3.0)
        if det <= 0:
            got = f"det is {det:.4g} (a reflection or degenerate matrix)"
        elif np.abs(rotation.T @ rotation / scale**2 - np.eye(3)).max() < ROTATION_TOLERANCE:
            got = f"the rotation carries a uniform scale of {scale:.4g}; remove the scale from the poses"
        else:
            got = f"max |R^T R - I| is {deviation:.3g}"
        raise DatasetError(source, f"{expected} in the upper-left 3x3; {got}", frame=index, field=field)
    return matrix[:3, :4]


@dataclass(frozen=True)
class ImageRef:
    """An image named by a frame: ``path`` to open, ``name`` relative to the dataset root."""

    path: Path
    name: str
    exists: bool


def resolve_image(root: Path, frame: dict[str, Any], source: Path, index: int, *, try_png: bool) -> ImageRef:
    """Resolve a frame's ``file_path`` inside ``root`` (``..`` and symlinks resolved).

    With ``try_png`` the path is tried as given, then with ``.png`` appended. A path that resolves
    outside ``root`` is an error, whether or not the file exists.
    """
    field = "file_path"
    expected = "expected a path relative to the dataset folder"
    if field not in frame:
        raise DatasetError(source, f"missing; {expected}", frame=index, field=field)
    value = frame[field]
    if not isinstance(value, str) or not value:
        raise DatasetError(source, f"{expected}, got {value!r}", frame=index, field=field)
    candidates = [value, value + ".png"] if try_png else [value]
    chosen = next((c for c in candidates if (root / c).is_file()), value)
    try:
        real = (root / chosen).resolve()
        root_real = root.resolve()
    except (OSError, RuntimeError) as exc:
        raise DatasetError(
            source, f"'{value}' cannot be resolved ({exc}); {expected}", frame=index, field=field
        ) from None
    if not real.is_relative_to(root_real):
        raise DatasetError(
            source,
            f"'{value}' resolves to {real}, outside the dataset folder {root_real}; {expected} inside it",
            frame=index,
            field=field,
        )
    name = Path(os.path.relpath(os.path.normpath(root / chosen), os.path.normpath(root))).as_posix()
    return ImageRef(path=root / chosen, name=name, exists=real.is_file())


def check_downscalable(width: int, height: int, factor: int, source: Path, index: int) -> tuple[int, int]:
    """An image ``width x height`` can be downscaled by ``factor`` (both sides at least ``factor``)."""
    if height < factor or width < factor:
        raise DatasetError(
            source,
            f"image is {width}x{height}, smaller than the downscale factor {factor}",
            frame=index,
            field="file_path",
        )
    return width, height


def prepare_image(
    image: Tensor, background: tuple[float, float, float], factor: int, source: Path, index: int
) -> Tensor:
    """Composite ``[H, W, C]`` over ``background`` then area-downscale by ``factor`` -> ``[H//f, W//f, 3]``.

    Compositing comes first: averaging straight-alpha colours would bleed hidden colours into edges.
    """
    height, width = image.shape[:2]
    check_downscalable(width, height, factor, source, index)
    return downscale_image(composite(image, background), factor)


def check_downscale(factor: int) -> None:
    """Downscale factors are integers >= 1 (a configuration error otherwise)."""
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ValueError(f"downscale must be an integer >= 1, got {factor!r}")


def make_cameras(
    poses: list[np.ndarray],
    intrinsics: list[tuple[float, float, float, float, int, int]],
    distortion: list[tuple[float, float, float, float]],
    factor: int,
) -> Cameras:
    """float32 :class:`Cameras` from per-frame poses ``[3, 4]``, ``(fx, fy, cx, cy, w, h)`` and
    ``(k1, k2, p1, p2)`` of the full-size images, scaled to images downscaled by ``factor``."""
    columns = list(zip(*intrinsics, strict=True))
    cameras = Cameras(
        camera_to_world=torch.tensor(np.stack(poses), dtype=torch.float32),
        fx=torch.tensor(columns[0], dtype=torch.float32),
        fy=torch.tensor(columns[1], dtype=torch.float32),
        cx=torch.tensor(columns[2], dtype=torch.float32),
        cy=torch.tensor(columns[3], dtype=torch.float32),
        width=torch.tensor(columns[4], dtype=torch.int64),
        height=torch.tensor(columns[5], dtype=torch.int64),
        distortion=torch.tensor(distortion, dtype=torch.float32).reshape(len(poses), 4),
    )
    return cameras if factor == 1 else cameras.scaled(factor)


# ------------------------------------------------------------------------------------------ the loader


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
    check_downscale(downscale)
    scan = scan_blender(Path(root), split, Problems())
    assert scan is not None and scan.angle is not None  # strict: problems raise
    source, angle = scan.source, scan.angle
    images: list[Tensor] = []
    intrinsics: list[tuple[float, float, float, float, int, int]] = []
    sizes: dict[int, tuple[int, int]] = {}
    for frame in scan.frames:
        require_image(frame.ref, source, frame.index)
        image = load_image(frame.ref.path, file_for_errors=str(source), frame=frame.index)
        height, width = image.shape[:2]
        sizes[frame.index] = (width, height)
        focal = 0.5 * width / math.tan(0.5 * angle)
        intrinsics.append((focal, focal, 0.5 * width, 0.5 * height, width, height))
        images.append(prepare_image(image, background, downscale, source, frame.index))
    # One camera_angle_x for the split: an image of another aspect ratio cannot match it.
    names = {frame.index: frame.ref.name for frame in scan.frames}
    check_split_sizes(source, names, sizes, Problems(), stacklevel=2)
    poses = [frame.pose for frame in scan.frames]
    cameras = make_cameras(poses, intrinsics, [(0.0, 0.0, 0.0, 0.0)] * len(poses), downscale)
    return SceneSplit(
        cameras=cameras, images=images, names=[f.ref.name for f in scan.frames], source=str(source)
    )
