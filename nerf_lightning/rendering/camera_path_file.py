"""Camera paths as JSON files in nerfstudio's format: written by ``nerf-lightning view``, rendered by
``nerf-lightning render --camera_path FILE.json`` (and by ``ns-render camera-path``).

The fields read and written, as nerfstudio's viewer saves them::

    {"camera_type": "perspective", "render_width": W, "render_height": H, "fps": 30, "seconds": 4,
     "camera_path": [{"camera_to_world": [16 numbers, a row-major 4x4], "fov": 50.0, "aspect": 1.5},
                     ...],
     "keyframes": [...]}

``camera_to_world`` is an OpenGL camera-to-world matrix (as everywhere in this project) in the
world of the run's data as its loader gives it: the file's coordinates (LLFF: the loader's normalised
ones), not the frame ``--data.normalise auto`` trains in, so one path serves runs with and without
it (the viewer maps its keyframes back, ``render`` maps the path in). ``fov`` is the *vertical* field
of view in degrees; every frame is rendered at ``render_width x render_height``. ``keyframes`` (the
places the path was made from) are kept for people and tools; rendering uses ``camera_path`` alone.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from kornia.geometry.conversions import quaternion_to_rotation_matrix, rotation_matrix_to_quaternion
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.files import atomic_write_json


class CameraPathError(ValueError):
    """A camera-path file cannot be read or written; the message is one line naming the file."""


@dataclass(frozen=True)
class Keyframe:
    """A place on a camera path.

    Attributes:
        camera_to_world: ``[3, 4]`` OpenGL camera-to-world matrix.
        vertical_fov: vertical field of view in degrees.
        aspect: width over height.
    """

    camera_to_world: Tensor
    vertical_fov: float
    aspect: float


def _slerp(a: Tensor, b: Tensor, weight: float) -> Tensor:
    """Spherical interpolation of unit quaternions ``[4]`` (the shorter way round)."""
    dot = float((a * b).sum())
    if dot < 0.0:
        b, dot = -b, -dot
    if dot > 0.9995:  # nearly equal: linear is exact enough and avoids dividing by sin(0)
        mixed = a + weight * (b - a)
        return mixed / mixed.norm()
    angle = math.acos(dot)
    return (math.sin((1 - weight) * angle) * a + math.sin(weight * angle) * b) / math.sin(angle)


def interpolate(keyframes: list[Keyframe], frames: int) -> list[Keyframe]:
    """``frames`` evenly spaced cameras through ``keyframes`` in order: positions and fields of view
    linearly, rotations by spherical interpolation, each keyframe reached at an even share of the time."""
    if not keyframes:
        raise CameraPathError("a camera path needs at least one keyframe")
    if len(keyframes) == 1 or frames == 1:
        return [keyframes[0]] * frames
    rotations = [rotation_matrix_to_quaternion(keyframe.camera_to_world[:, :3].float().contiguous())
                 for keyframe in keyframes]
    path = []
    for frame in range(frames):
        where = frame / (frames - 1) * (len(keyframes) - 1)
        index = min(int(where), len(keyframes) - 2)
        weight = where - index
        a, b = keyframes[index], keyframes[index + 1]
        rotation = quaternion_to_rotation_matrix(_slerp(rotations[index], rotations[index + 1], weight))
        position = (1 - weight) * a.camera_to_world[:, 3].float() + weight * b.camera_to_world[:, 3].float()
        path.append(Keyframe(torch.cat([rotation, position[:, None]], dim=1),
                             (1 - weight) * a.vertical_fov + weight * b.vertical_fov,
                             (1 - weight) * a.aspect + weight * b.aspect))
    return path


def _entry(keyframe: Keyframe) -> dict[str, Any]:
    matrix = torch.cat([keyframe.camera_to_world.float(), torch.tensor([[0.0, 0.0, 0.0, 1.0]])])
    return {"camera_to_world": [round(value, 7) for value in matrix.reshape(-1).tolist()],
            "fov": keyframe.vertical_fov, "aspect": keyframe.aspect}


def write_camera_path(path: Path, keyframes: list[Keyframe], height: int, fps: float, seconds: float) -> int:
    """Write ``keyframes`` as a path of ``round(fps * seconds)`` frames (at least 2) of ``height`` pixels
    (the width from the first keyframe's aspect); how many frames."""
    if not (fps > 0 and seconds > 0 and height > 0):
        raise CameraPathError(f"{path}: fps, seconds and height must be positive, "
                              f"got {fps}, {seconds}, {height}")
    frames = max(2, round(fps * seconds))
    document = {
        "camera_type": "perspective",
        "render_height": int(height),
        "render_width": max(1, round(height * keyframes[0].aspect)) if keyframes else int(height),
        "fps": fps,
        "seconds": seconds,
        "keyframes": [_entry(keyframe) for keyframe in keyframes],
        "camera_path": [_entry(frame) for frame in interpolate(keyframes, frames)],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(document, path)
    return frames


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CameraPathError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def read_camera_path(path: Path) -> tuple[Cameras, float | None]:
    """The cameras of a camera-path file and its ``fps`` (``None`` when it has none).

    Raises:
        CameraPathError: the file is missing, not JSON or lacks a field (one line naming it).
    """
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CameraPathError(f"{path}: no such camera-path file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CameraPathError(f"{path}: not a JSON camera path ({error})") from None
    frames = document.get("camera_path") if isinstance(document, dict) else None
    if not isinstance(frames, list) or not frames:
        raise CameraPathError(f"{path}: expected a 'camera_path' list of frames (nerfstudio's format)")
    kind = document.get("camera_type", "perspective")
    if str(kind).lower() != "perspective":
        raise CameraPathError(f"{path}: camera_type {kind!r} is not supported; expected 'perspective'")
    width = int(_number(document.get("render_width"), f"{path}: render_width"))
    height = int(_number(document.get("render_height"), f"{path}: render_height"))
    if width < 1 or height < 1:
        raise CameraPathError(f"{path}: render_width and render_height must be positive, "
                              f"got {width}x{height}")
    poses, focals = [], []
    for index, frame in enumerate(frames):
        where = f"{path}: camera_path[{index}]"
        matrix = frame.get("camera_to_world") if isinstance(frame, dict) else None
        if not isinstance(matrix, list) or len(matrix) != 16:
            raise CameraPathError(f"{where}.camera_to_world: expected 16 numbers (a row-major 4x4)")
        values = [_number(value, f"{where}.camera_to_world") for value in matrix]
        poses.append(torch.tensor(values).reshape(4, 4)[:3])
        fov = _number(frame.get("fov"), f"{where}.fov")
        if not 0 < fov < 180:
            raise CameraPathError(f"{where}.fov: expected a vertical field of view in (0, 180) degrees, "
                                  f"got {fov}")
        focals.append(0.5 * height / math.tan(math.radians(fov) / 2))
    count = len(poses)
    focal = torch.tensor(focals)
    cameras = Cameras(camera_to_world=torch.stack(poses), fx=focal, fy=focal.clone(),
                      cx=torch.full((count,), width / 2), cy=torch.full((count,), height / 2),
                      width=torch.full((count,), width, dtype=torch.int64),
                      height=torch.full((count,), height, dtype=torch.int64),
                      distortion=torch.zeros(count, 8))
    fps = document.get("fps")
    return cameras, (_number(fps, f"{path}: fps") if fps is not None else None)
