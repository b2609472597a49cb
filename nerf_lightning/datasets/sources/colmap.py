"""A COLMAP model as a source of ``nerf-lightning data convert``: finding the model and its images,
COLMAP cameras as intrinsics, COLMAP poses as OpenGL camera-to-world.

:func:`read_colmap` checks the model completely and returns a
:class:`~nerf_lightning.datasets.sources.frame.Source` before anything is written;
:mod:`nerf_lightning.datasets.convert` turns it into ``transforms.json`` and documents the conventions. The
model files themselves are read by :mod:`nerf_lightning.datasets.sources.colmap_model`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nerf_lightning.datasets.sources.colmap_model import (
    ColmapCamera,
    ColmapImage,
    read_cameras_binary,
    read_cameras_text,
    read_images_binary,
    read_images_text,
)
from nerf_lightning.datasets.sources.frame import Frame, Source
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.images import image_size

SUPPORTED_COLMAP_MODELS = (
    "SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV", "FULL_OPENCV", "OPENCV_FISHEYE"
)
"""COLMAP camera models ``data convert`` writes; each is one of the loader's ``camera_model`` values
(:mod:`nerf_lightning.scenes.formats.nerfstudio_cameras`), with the same coefficient names."""
_COEFFICIENT_KEYS = {
    "OPENCV": ("k1", "k2", "p1", "p2"),
    "FULL_OPENCV": ("k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6"),  # COLMAP's order, OpenCV's
    "OPENCV_FISHEYE": ("k1", "k2", "k3", "k4"),
}
COLMAP_MODEL_FOLDERS = (".", "sparse/0", "sparse", "colmap/sparse/0")
"""Where a COLMAP model is looked for, relative to ``SRC``, in this order."""
IMAGE_SEARCH_LEVELS = 3
"""``images/`` is looked for next to the model folder and up to this many folders above it."""

OPENCV_TO_OPENGL_AXES = np.diag([1.0, -1.0, -1.0, 1.0])
"""``P`` with OpenGL camera-to-world ``= OpenCV camera-to-world @ P`` (flip ``y`` and ``z``)."""


def find_colmap_model(src: Path) -> tuple[Path, str] | None:
    """The model folder and ``"colmap-binary"`` / ``"colmap-text"`` for ``SRC`` (``None``: no model).

    A folder is a model folder when it holds ``cameras.bin``, ``cameras.txt``, ``images.bin`` or
    ``images.txt``; binary wins when ``cameras.bin`` exists.
    """
    for relative in COLMAP_MODEL_FOLDERS:
        folder = src / relative if relative != "." else src
        names = {"cameras.bin", "cameras.txt", "images.bin", "images.txt"}
        present = {name for name in names if (folder / name).is_file()}
        if not present:
            continue
        binary = "cameras.bin" in present or ("images.bin" in present and "cameras.txt" not in present)
        return folder, "colmap-binary" if binary else "colmap-text"
    return None


def find_colmap_images(model: Path) -> Path | None:
    """``images/`` next to the model folder or up to :data:`IMAGE_SEARCH_LEVELS` folders above it."""
    folder = model.resolve()
    for _ in range(IMAGE_SEARCH_LEVELS + 1):
        if (folder / "images").is_dir():
            return folder / "images"
        folder = folder.parent
    return None


def colmap_intrinsics(camera: ColmapCamera, source: Path) -> dict[str, float | int | str]:
    """``fl_x, fl_y, cx, cy, w, h`` and, for distorted models, the coefficients (``k1, k2, p1, p2``;
    FULL_OPENCV ``k1..k6, p1, p2``; OPENCV_FISHEYE ``k1..k4``) and ``camera_model`` of a COLMAP camera.

    Raises:
        DatasetError: the model is not one of :data:`SUPPORTED_COLMAP_MODELS` (names ``source``, the
            camera id and the model), or its parameters or size are unusable.
    """
    model, p = camera.model, camera.params
    if model not in SUPPORTED_COLMAP_MODELS:
        raise DatasetError(
            source,
            f"camera {camera.camera_id} has model {model}; expected one of "
            f"{', '.join(SUPPORTED_COLMAP_MODELS)} (undistort the images, e.g. with "
            "'colmap image_undistorter', for other models)",
            field="MODEL",
        )
    size = {"w": camera.width, "h": camera.height}
    values: dict[str, float | int | str]
    if model in ("SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL"):
        values = {"fl_x": p[0], "fl_y": p[0], "cx": p[1], "cy": p[2], **size}
        if model == "SIMPLE_RADIAL":
            values.update(k1=p[3], k2=0.0, p1=0.0, p2=0.0, camera_model="OPENCV")
        elif model == "RADIAL":
            values.update(k1=p[3], k2=p[4], p1=0.0, p2=0.0, camera_model="OPENCV")
    else:
        values = {"fl_x": p[0], "fl_y": p[1], "cx": p[2], "cy": p[3], **size}
        if model in _COEFFICIENT_KEYS:
            values.update(zip(_COEFFICIENT_KEYS[model], p[4:], strict=True))
            values["camera_model"] = model
    if not all(np.isfinite(p)) or values["fl_x"] <= 0 or values["fl_y"] <= 0:
        raise DatasetError(
            source,
            f"camera {camera.camera_id} ({model}) has parameters {list(p)}; expected finite numbers "
            "and positive focal lengths",
            field="PARAMS",
        )
    if camera.width < 1 or camera.height < 1:
        raise DatasetError(
            source,
            f"camera {camera.camera_id} is {camera.width}x{camera.height}; expected a positive image size",
            field="WIDTH" if camera.width < 1 else "HEIGHT",
        )
    return values


def colmap_camera_to_world(image: ColmapImage) -> np.ndarray:
    """``[4, 4]`` OpenGL camera-to-world of a COLMAP image (inverse of its OpenCV world-to-camera)."""
    world_to_camera = np.eye(4)
    world_to_camera[:3, :4] = image.world_to_camera()
    return np.linalg.inv(world_to_camera) @ OPENCV_TO_OPENGL_AXES


def read_colmap(model: Path, source_format: str, images: Path | None = None) -> Source:
    """Read and check a COLMAP model folder (see :mod:`nerf_lightning.datasets.convert`).

    Args:
        model: the folder with the ``cameras`` and ``images`` files.
        source_format: ``"colmap-binary"`` or ``"colmap-text"``.
        images: the image folder (default: :func:`find_colmap_images`).

    Raises:
        DatasetError: a missing or malformed model file, an unsupported camera model, an image missing
            on disk or of the wrong size (one line, naming the file).
    """
    suffix = ".bin" if source_format == "colmap-binary" else ".txt"
    cameras_file, images_file = model / f"cameras{suffix}", model / f"images{suffix}"
    for path, other in ((cameras_file, images_file), (images_file, cameras_file)):
        if not path.is_file():
            raise DatasetError(
                path, f"file not found; expected the COLMAP {path.stem} file next to {other.name}"
            )
    if source_format == "colmap-binary":
        cameras, registered = read_cameras_binary(cameras_file), read_images_binary(images_file)
    else:
        cameras, registered = read_cameras_text(cameras_file), read_images_text(images_file)
    if not registered:
        raise DatasetError(images_file, "lists no images; expected at least one registered image")
    folder = images if images is not None else find_colmap_images(model)
    if folder is None or not folder.is_dir():
        where = f"{folder} is not a folder" if folder is not None else (
            f"no images/ folder next to {model} or up to {IMAGE_SEARCH_LEVELS} folders above it"
        )
        raise DatasetError(
            images_file, f"{where}; expected the folder of the images COLMAP registered (--images DIR)"
        )

    intrinsics: dict[int, dict[str, float | int]] = {}
    frames: list[Frame] = []
    for image in sorted(registered.values(), key=lambda i: i.name):
        label = f"image {image.image_id} '{image.name}'"
        if image.camera_id not in cameras:
            raise DatasetError(
                images_file,
                f"{label} names camera {image.camera_id}, which {cameras_file.name} does not define; "
                "expected a camera id of that file",
                field="CAMERA_ID",
            )
        camera = cameras[image.camera_id]
        if camera.camera_id not in intrinsics:
            intrinsics[camera.camera_id] = colmap_intrinsics(camera, cameras_file)
        path = folder / image.name
        if not path.is_file():
            raise DatasetError(
                images_file,
                f"{label} does not exist in {folder}; expected every registered image on disk",
                field="NAME",
            )
        try:
            width, height = image_size(path, file_for_errors=str(images_file), frame=image.image_id)
        except DatasetError as error:
            raise DatasetError(images_file, f"{label}: {error.detail}", field="NAME") from None
        if (width, height) != (camera.width, camera.height):
            raise DatasetError(
                images_file,
                f"{label} is {width}x{height} pixels but camera {camera.camera_id} of {cameras_file.name} "
                f"is {camera.width}x{camera.height}; expected the images at the size COLMAP registered",
                field="NAME",
            )
        try:
            pose = colmap_camera_to_world(image)
        except ValueError as error:
            raise DatasetError(images_file, f"{label}: {error}", field="QVEC") from None
        if not np.isfinite(pose).all():
            raise DatasetError(
                images_file, f"{label} has qvec {image.qvec}, tvec {image.tvec}; expected finite numbers",
                field="TVEC",
            )
        frames.append(Frame(path, pose, dict(intrinsics[camera.camera_id]), {"colmap_im_id": image.image_id}))

    used = set(intrinsics)
    details = {
        "cameras": {
            str(i): {"model": c.model, "width": c.width, "height": c.height, "params": list(c.params)}
            for i, c in sorted(cameras.items())
            if i in used
        }
    }
    notes = [
        "COLMAP's world frame, origin and scale are kept (applied_transform is the identity).",
        "transform_matrix is the inverse of COLMAP's world-to-camera [R | t] with the camera's y and z "
        "axes negated (OpenCV -> OpenGL).",
        "COLMAP's pixel coordinates (image corner at 0, pixel centres at +0.5) are nerf-lightning's: "
        "cx, cy are copied unchanged.",
    ]
    if len(used) < len(cameras):
        notes.append(f"{len(cameras) - len(used)} camera(s) no registered image uses were left out.")
    return Source(
        source_format=source_format,
        source=model,
        images=folder,
        frames=frames,
        camera_convention="COLMAP / OpenCV world-to-camera (x right, y down, z forward)",
        axes_change=OPENCV_TO_OPENGL_AXES,
        details=details,
        notes=notes,
    )
