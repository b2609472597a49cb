"""What the two ``transforms*.json`` formats (Blender, nerfstudio) share: reading the JSON file, its
``frames``, each frame's ``transform_matrix`` (a 4x4 OpenGL camera-to-world) and ``file_path`` (an
image inside the dataset folder).

Every problem is a one-line :class:`~nerf_lightning.scenes.errors.DatasetError` naming the JSON file, the
frame (its position in ``frames``) and the field.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.common import ROTATION_TOLERANCE
from nerf_lightning.scenes.problems import Problems

LAST_ROW_TOLERANCE = 1e-4
"""Largest accepted deviation of a pose's last row from ``[0, 0, 0, 1]``."""


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


def resolve_image(
    root: Path, frame: dict[str, Any], source: Path, index: int, *, try_png: bool, field: str = "file_path"
) -> ImageRef:
    """Resolve a frame's ``file_path`` (or another ``field`` naming an image, e.g. ``mask_path``) inside
    ``root`` (``..`` and symlinks resolved).

    With ``try_png`` the path is tried as given, then with ``.png`` appended. A path that resolves
    outside ``root`` is an error, whether or not the file exists.
    """
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


def downscaled_copy(root: Path, image: Path, factor: int) -> Path:
    """Where a nerfstudio dataset keeps ``image`` downscaled by ``factor``: ``root/images_<factor>/<name>``.

    nerfstudio's convention (its ``ns-process-data`` writes ``images_2``, ``images_4``, ``images_8``
    and its loader reads ``images_<f>/<file name>`` for ``downscale_factor f``); ``data process`` writes
    them. The loader uses a copy only at exactly ``w // f x h // f`` pixels.
    """
    return root / f"images_{factor}" / image.name
