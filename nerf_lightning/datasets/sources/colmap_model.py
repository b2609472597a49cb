"""Readers (and, for tests and tools, writers) of COLMAP sparse models: cameras and registered images.

A COLMAP model folder (e.g. ``sparse/0``) holds ``cameras`` and ``images`` either as text
(``cameras.txt``, ``images.txt``) or binary (``cameras.bin``, ``images.bin``) files; ``points3D`` is
not read. The formats are COLMAP's own (``colmap/src/colmap/scene/reconstruction_io.cc``):

* ``cameras.txt``: one line per camera, ``CAMERA_ID MODEL WIDTH HEIGHT PARAMS...``; ``#`` comments.
* ``images.txt``: two lines per image, ``IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME`` then the
  image's 2D points (``X Y POINT3D_ID`` triples, possibly an empty line); ``#`` comments.
* ``cameras.bin``: ``uint64`` count, then per camera ``int32 id, int32 model_id, uint64 width,
  uint64 height, float64 params[n]`` (``n`` fixed by the model).
* ``images.bin``: ``uint64`` count, then per image ``int32 id, float64 qvec[4], float64 tvec[3],
  int32 camera_id``, the name as NUL-terminated bytes, ``uint64`` number of 2D points and
  ``(float64 x, float64 y, int64 point3D_id)`` per point. All little-endian.

Pose convention: ``qvec`` (``w, x, y, z``) and ``tvec`` give the *world-to-camera* transform
``x_cam = R(qvec) @ x_world + tvec`` in OpenCV's camera frame (``+x`` right, ``+y`` down, the camera
looking along ``+z``). Converting to this project's OpenGL camera-to-world is the converter's job
(:mod:`nerf_lightning.datasets.sources.colmap`); this module only reads and writes the files.

Every problem raises a one-line :class:`DatasetError` naming the file (and the line, for text files).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nerf_lightning.files import atomic_write_bytes, atomic_write_text
from nerf_lightning.scenes.errors import DatasetError

CAMERA_MODELS: dict[str, tuple[int, int]] = {
    "SIMPLE_PINHOLE": (0, 3),  # f, cx, cy
    "PINHOLE": (1, 4),  # fx, fy, cx, cy
    "SIMPLE_RADIAL": (2, 4),  # f, cx, cy, k
    "RADIAL": (3, 5),  # f, cx, cy, k1, k2
    "OPENCV": (4, 8),  # fx, fy, cx, cy, k1, k2, p1, p2
    "OPENCV_FISHEYE": (5, 8),
    "FULL_OPENCV": (6, 12),
    "FOV": (7, 5),
    "SIMPLE_RADIAL_FISHEYE": (8, 4),
    "RADIAL_FISHEYE": (9, 5),
    "THIN_PRISM_FISHEYE": (10, 12),
    "RAD_TAN_THIN_PRISM_FISHEYE": (11, 16),
}
"""COLMAP camera model name -> ``(model_id, number of parameters)``."""
_MODEL_BY_ID = {model_id: name for name, (model_id, _) in CAMERA_MODELS.items()}

_CAMERA_HEADER = struct.Struct("<iiQQ")
_IMAGE_HEADER = struct.Struct("<i7di")
_COUNT = struct.Struct("<Q")
_POINT2D = struct.Struct("<ddq")


@dataclass(frozen=True)
class ColmapCamera:
    """One COLMAP camera (intrinsics shared by the images that name it).

    Attributes:
        camera_id: COLMAP's id.
        model: model name, e.g. ``"OPENCV"`` (a key of :data:`CAMERA_MODELS` for binary files; text
            files may name any model).
        width, height: image size in pixels.
        params: the model's parameters in COLMAP's order (see :data:`CAMERA_MODELS`), pixels for
            focal lengths and principal point.
    """

    camera_id: int
    model: str
    width: int
    height: int
    params: tuple[float, ...]


@dataclass(frozen=True)
class ColmapImage:
    """One registered image.

    Attributes:
        image_id: COLMAP's id.
        qvec: ``(w, x, y, z)`` quaternion of the world-to-camera rotation.
        tvec: ``(x, y, z)`` world-to-camera translation.
        camera_id: the :class:`ColmapCamera` it was taken with.
        name: path of the image file relative to the image folder COLMAP was given (``/`` separated).
    """

    image_id: int
    qvec: tuple[float, float, float, float]
    tvec: tuple[float, float, float]
    camera_id: int
    name: str

    def world_to_camera(self) -> np.ndarray:
        """``[3, 4]`` float64 OpenCV world-to-camera ``[R | t]`` (the quaternion normalised)."""
        return np.concatenate([quaternion_to_rotation(self.qvec), np.array(self.tvec)[:, None]], axis=1)


def quaternion_to_rotation(qvec: Iterable[float]) -> np.ndarray:
    """``[3, 3]`` rotation of a ``(w, x, y, z)`` quaternion (normalised first; it must not be zero)."""
    q = np.asarray(list(qvec), dtype=np.float64)
    norm = float(np.linalg.norm(q))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError(f"expected a non-zero finite quaternion, got {q.tolist()}")
    w, x, y, z = q / norm
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def rotation_to_quaternion(rotation: np.ndarray) -> tuple[float, float, float, float]:
    """``(w, x, y, z)`` unit quaternion, ``w >= 0``, of a ``[3, 3]`` rotation matrix."""
    r = np.asarray(rotation, dtype=np.float64)
    # The eigenvector of K with the largest eigenvalue (Bar-Itzhack), stable for every rotation.
    k = np.array(
        [
            [r[0, 0] - r[1, 1] - r[2, 2], 0.0, 0.0, 0.0],
            [r[0, 1] + r[1, 0], r[1, 1] - r[0, 0] - r[2, 2], 0.0, 0.0],
            [r[0, 2] + r[2, 0], r[1, 2] + r[2, 1], r[2, 2] - r[0, 0] - r[1, 1], 0.0],
            [r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1], r[0, 0] + r[1, 1] + r[2, 2]],
        ]
    ) / 3.0
    values, vectors = np.linalg.eigh(k)
    x, y, z, w = vectors[:, int(np.argmax(values))]
    if w < 0:
        w, x, y, z = -w, -x, -y, -z
    return float(w), float(x), float(y), float(z)


# ------------------------------------------------------------------------------------------- text files


def _data_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, stripped line)`` of a text file, comments included (callers skip them)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(path, "file not found; expected a COLMAP model file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(path, f"cannot be read ({exc}); expected a COLMAP text model file") from None
    for number, line in enumerate(text.splitlines(), start=1):
        yield number, line.strip()


def _parse(path: Path, number: int, field: str, text: str, kind: type[int] | type[float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise DatasetError(
            path, f"line {number}: expected {'an integer' if kind is int else 'a number'}, got {text!r}",
            field=field,
        ) from None
    if kind is float and not np.isfinite(value):
        raise DatasetError(path, f"line {number}: expected a finite number, got {text!r}", field=field)
    return value


def read_cameras_text(path: Path) -> dict[int, ColmapCamera]:
    """Camera id -> :class:`ColmapCamera` of a ``cameras.txt``."""
    cameras: dict[int, ColmapCamera] = {}
    for number, line in _data_lines(path):
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 4:
            raise DatasetError(
                path, f"line {number}: expected 'CAMERA_ID MODEL WIDTH HEIGHT PARAMS...', got {line!r:.80}"
            )
        camera_id = int(_parse(path, number, "CAMERA_ID", parts[0], int))
        model = parts[1]
        width = int(_parse(path, number, "WIDTH", parts[2], int))
        height = int(_parse(path, number, "HEIGHT", parts[3], int))
        params = tuple(float(_parse(path, number, "PARAMS", p, float)) for p in parts[4:])
        if model in CAMERA_MODELS and len(params) != CAMERA_MODELS[model][1]:
            raise DatasetError(
                path,
                f"line {number}: camera {camera_id} model {model} has {len(params)} parameters; "
                f"expected {CAMERA_MODELS[model][1]}",
                field="PARAMS",
            )
        if camera_id in cameras:
            raise DatasetError(
                path, f"line {number}: camera {camera_id} is defined twice; expected unique ids"
            )
        cameras[camera_id] = ColmapCamera(camera_id, model, width, height, params)
    return cameras


def read_images_text(path: Path) -> dict[int, ColmapImage]:
    """Image id -> :class:`ColmapImage` of an ``images.txt`` (the 2D-point lines are skipped)."""
    images: dict[int, ColmapImage] = {}
    lines = _data_lines(path)
    for number, line in lines:
        if not line or line.startswith("#"):
            continue
        parts = line.split(maxsplit=9)
        if len(parts) < 10:
            raise DatasetError(
                path,
                f"line {number}: expected 'IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME', got {line!r:.80}",
            )
        image_id = int(_parse(path, number, "IMAGE_ID", parts[0], int))
        values = [float(_parse(path, number, "QVEC/TVEC", p, float)) for p in parts[1:8]]
        camera_id = int(_parse(path, number, "CAMERA_ID", parts[8], int))
        if image_id in images:
            raise DatasetError(path, f"line {number}: image {image_id} is defined twice; expected unique ids")
        images[image_id] = ColmapImage(
            image_id=image_id,
            qvec=(values[0], values[1], values[2], values[3]),
            tvec=(values[4], values[5], values[6]),
            camera_id=camera_id,
            name=parts[9].strip(),
        )
        next(lines, None)  # the image's 2D points (may be an empty line)
    return images


# ----------------------------------------------------------------------------------------- binary files


class _Reader:
    """Little-endian structs from a binary file, with the file and offset in errors."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.data = path.read_bytes()
        except FileNotFoundError:
            raise DatasetError(path, "file not found; expected a COLMAP model file") from None
        except OSError as exc:
            raise DatasetError(path, f"cannot be read ({exc}); expected a COLMAP binary model file") from None
        self.offset = 0

    def _need(self, size: int, what: str) -> None:
        if self.offset + size > len(self.data):
            raise DatasetError(
                self.path,
                f"ends at byte {len(self.data)}, in {what}; expected a complete COLMAP binary file",
            )

    def take(self, layout: struct.Struct, what: str) -> tuple:
        self._need(layout.size, what)
        values = layout.unpack_from(self.data, self.offset)
        self.offset += layout.size
        return values

    def name(self, what: str) -> str:
        end = self.data.find(b"\0", self.offset)
        if end < 0:
            raise DatasetError(self.path, f"ends in {what}; expected a NUL-terminated image name")
        raw = self.data[self.offset : end]
        self.offset = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DatasetError(self.path, f"{what}: the name is not UTF-8 ({raw!r:.80})") from None

    def skip(self, size: int, what: str) -> None:
        self._need(size, what)
        self.offset += size

    def finish(self) -> None:
        if self.offset != len(self.data):
            raise DatasetError(
                self.path,
                f"has {len(self.data) - self.offset} bytes after the last record; "
                "expected the records the header counts and nothing else",
            )


def read_cameras_binary(path: Path) -> dict[int, ColmapCamera]:
    """Camera id -> :class:`ColmapCamera` of a ``cameras.bin``."""
    reader = _Reader(path)
    (count,) = reader.take(_COUNT, "the camera count")
    cameras: dict[int, ColmapCamera] = {}
    for index in range(count):
        camera_id, model_id, width, height = reader.take(_CAMERA_HEADER, f"camera record {index}")
        if model_id not in _MODEL_BY_ID:
            raise DatasetError(
                path,
                f"camera {camera_id} has unknown model id {model_id}; expected one of "
                f"{', '.join(f'{i} ({n})' for i, n in sorted(_MODEL_BY_ID.items()))}",
                field="model_id",
            )
        model = _MODEL_BY_ID[model_id]
        layout = struct.Struct(f"<{CAMERA_MODELS[model][1]}d")
        params = tuple(float(p) for p in reader.take(layout, f"the parameters of camera {camera_id}"))
        if camera_id in cameras:
            raise DatasetError(path, f"camera {camera_id} is defined twice; expected unique ids")
        cameras[camera_id] = ColmapCamera(camera_id, model, int(width), int(height), params)
    reader.finish()
    return cameras


def read_images_binary(path: Path) -> dict[int, ColmapImage]:
    """Image id -> :class:`ColmapImage` of an ``images.bin`` (the 2D points are skipped)."""
    reader = _Reader(path)
    (count,) = reader.take(_COUNT, "the image count")
    images: dict[int, ColmapImage] = {}
    for index in range(count):
        image_id, qw, qx, qy, qz, tx, ty, tz, camera_id = reader.take(_IMAGE_HEADER, f"image record {index}")
        name = reader.name(f"image {image_id}")
        (num_points,) = reader.take(_COUNT, f"the 2D point count of image {image_id}")
        reader.skip(num_points * _POINT2D.size, f"the 2D points of image {image_id}")
        if image_id in images:
            raise DatasetError(path, f"image {image_id} is defined twice; expected unique ids")
        images[image_id] = ColmapImage(image_id, (qw, qx, qy, qz), (tx, ty, tz), camera_id, name)
    reader.finish()
    return images


# ---------------------------------------------------------------------------------------------- writers


def write_cameras_text(path: Path, cameras: Iterable[ColmapCamera]) -> None:
    """Write a ``cameras.txt`` (full float precision)."""
    cameras = list(cameras)
    lines = [
        "# Camera list with one line of data per camera:",
        "#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]",
        f"# Number of cameras: {len(cameras)}",
    ]
    for camera in cameras:
        params = " ".join(repr(float(p)) for p in camera.params)
        lines.append(f"{camera.camera_id} {camera.model} {camera.width} {camera.height} {params}")
    atomic_write_text("\n".join(lines) + "\n", path)


def write_images_text(path: Path, images: Iterable[ColmapImage]) -> None:
    """Write an ``images.txt`` with no 2D points (an empty second line per image)."""
    images = list(images)
    lines = [
        "# Image list with two lines of data per image:",
        "#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME",
        "#   POINTS2D[] as (X, Y, POINT3D_ID)",
        f"# Number of images: {len(images)}, mean observations per image: 0",
    ]
    for image in images:
        values = " ".join(repr(float(v)) for v in (*image.qvec, *image.tvec))
        lines.extend([f"{image.image_id} {values} {image.camera_id} {image.name}", ""])
    atomic_write_text("\n".join(lines) + "\n", path)


def write_cameras_binary(path: Path, cameras: Iterable[ColmapCamera]) -> None:
    """Write a ``cameras.bin``; every model must be a key of :data:`CAMERA_MODELS`."""
    cameras = list(cameras)

    def chunks() -> Iterator[bytes]:
        yield _COUNT.pack(len(cameras))
        for camera in cameras:
            model_id, count = CAMERA_MODELS[camera.model]
            if len(camera.params) != count:
                raise ValueError(f"camera {camera.camera_id}: {camera.model} takes {count} parameters")
            yield _CAMERA_HEADER.pack(camera.camera_id, model_id, camera.width, camera.height)
            yield struct.pack(f"<{count}d", *camera.params)

    atomic_write_bytes(b"".join(chunks()), path)


def write_images_binary(path: Path, images: Iterable[ColmapImage]) -> None:
    """Write an ``images.bin`` with no 2D points."""
    images = list(images)

    def chunks() -> Iterator[bytes]:
        yield _COUNT.pack(len(images))
        for image in images:
            yield _IMAGE_HEADER.pack(image.image_id, *image.qvec, *image.tvec, image.camera_id)
            yield image.name.encode("utf-8") + b"\0"
            yield _COUNT.pack(0)

    atomic_write_bytes(b"".join(chunks()), path)
