"""Small datasets written to disk by the tests of several layers: Blender and nerfstudio scenes of a
few RGBA/RGB frames, COLMAP models (text and binary) and LLFF captures of known cameras, and checks
on what the converter makes of them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from nerf_lightning.datasets.sources.colmap_model import (
    ColmapCamera,
    ColmapImage,
    rotation_to_quaternion,
    write_cameras_binary,
    write_cameras_text,
    write_images_binary,
    write_images_text,
)
from nerf_lightning.scenes.scene import SceneSplit

# ------------------------------------------------------------------------ Blender and nerfstudio scenes

ANGLE = 0.7
"""``camera_angle_x`` of the Blender scenes."""


def pose(angle: float = 0.0, t: tuple[float, float, float] = (0.0, 0.0, 4.0)) -> list[list[float]]:
    """4x4 camera-to-world: a rotation about y by ``angle`` then translation ``t``."""
    c, s = math.cos(angle), math.sin(angle)
    return [[c, 0.0, s, t[0]], [0.0, 1.0, 0.0, t[1]], [-s, 0.0, c, t[2]], [0.0, 0.0, 0.0, 1.0]]


def rgba_pixels(width: int, height: int, seed: int) -> np.ndarray:
    """``[H, W, 4]`` uint8 with alpha cycling through 255, 0, 255, 128."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 4), dtype=np.uint8)
    pixels[..., 3] = np.array([255, 0, 255, 128], dtype=np.uint8)[np.arange(height * width) % 4].reshape(
        height, width
    )
    return pixels


def write_image(path: Path, pixels: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)


def write_json(path: Path, meta: Any) -> Path:
    path.write_text(json.dumps(meta))
    return path


def write_blender(root: Path, width: int = 8, height: int = 6, split: str = "train") -> list[np.ndarray]:
    """Three RGBA frames; file_path spelled three ways (no extension, plain, './')."""
    pixels = [rgba_pixels(width, height, seed) for seed in range(3)]
    paths = [f"./{split}/r_0", f"{split}/r_1.png", f"./{split}/r_2.png"]
    for i, p in enumerate(pixels):
        write_image(root / split / f"r_{i}.png", p)
    frames = [
        {"file_path": fp, "transform_matrix": pose(0.3 * i, (i, 0.5, 4.0))} for i, fp in enumerate(paths)
    ]
    write_json(root / f"transforms_{split}.json", {"camera_angle_x": ANGLE, "frames": frames})
    return pixels


def write_nerfstudio(
    root: Path,
    names: list[str],
    meta: dict[str, Any] | None = None,
    size: tuple[int, int] = (10, 8),
    frame_extra: dict[int, dict[str, Any]] | None = None,
    skip: tuple[str, ...] = (),
) -> dict[str, Any]:
    """RGB frames named ``names`` (JSON order); images in ``skip`` are not written."""
    frame_extra = frame_extra or {}
    frames = []
    for i, name in enumerate(names):
        extra = frame_extra.get(i, {})
        w, h = extra.get("w", size[0]), extra.get("h", size[1])
        if name not in skip:
            write_image(root / name, np.full((h, w, 3), 10 * i % 256, dtype=np.uint8))
        frames.append({"file_path": name, "transform_matrix": pose(0.1 * i), **extra})
    full = {"fl_x": 20.0, "w": size[0], "h": size[1], **(meta or {}), "frames": frames}
    write_json(root / "transforms.json", full)
    return full


def names_of(n: int) -> list[str]:
    return [f"images/frame_{i:03d}.png" for i in range(n)]


# ------------------------------------------------------------------- COLMAP models and LLFF captures

SPLITS = ("train", "val", "test")
WIDTH, HEIGHT = 8, 6
NUM_IMAGES = 9  # the split rule gives test 0, 8; val 4; train the rest
OPENCV_TO_OPENGL = np.diag([1.0, -1.0, -1.0, 1.0])
CAMERA_PARAMS = {
    "SIMPLE_PINHOLE": (7.5, 4.25, 2.75),
    "PINHOLE": (7.5, 8.25, 4.25, 2.75),
    "SIMPLE_RADIAL": (7.5, 4.25, 2.75, 0.03),
    "RADIAL": (7.5, 4.25, 2.75, 0.03, -0.01),
    "OPENCV": (7.5, 8.25, 4.25, 2.75, 0.03, -0.01, 0.002, -0.001),
    "FULL_OPENCV": (7.5, 8.25, 4.25, 2.75, 0.03, -0.01, 0.002, -0.001, 0.004, 0.01, -0.002, 0.001),
    "OPENCV_FISHEYE": (7.5, 8.25, 4.25, 2.75, 0.03, -0.01, 0.002, -0.001),
}
"""COLMAP parameters of the test cameras, per model."""


def rotation(axis: list[float], angle: float) -> np.ndarray:
    """``[3, 3]`` rotation by ``angle`` radians about ``axis`` (Rodrigues)."""
    k = np.asarray(axis, dtype=np.float64) / np.linalg.norm(axis)
    cross = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(angle) * cross + (1.0 - math.cos(angle)) * cross @ cross


def known_poses() -> list[np.ndarray]:
    """``NUM_IMAGES`` OpenGL camera-to-world ``[4, 4]``, all different (one rotated by 180 degrees)."""
    poses = []
    for i in range(NUM_IMAGES):
        pose = np.eye(4)
        angle = math.pi if i == 3 else 0.4 * i - 1.3
        pose[:3, :3] = rotation([0.3 * i - 1.0, 1.0, 0.2 * i], angle)
        pose[:3, 3] = [math.cos(i) * 3.0, 0.5 * i - 2.0, math.sin(i) * 3.0 + 1.0]
        poses.append(pose)
    return poses


def write_png(path: Path, width: int = WIDTH, height: int = HEIGHT, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)).save(path)


def colmap_image(image_id: int, camera_id: int, name: str, camera_to_world: np.ndarray) -> ColmapImage:
    """The COLMAP image (OpenCV world-to-camera) of an OpenGL camera-to-world ``[4, 4]``."""
    world_to_camera = np.linalg.inv(camera_to_world @ OPENCV_TO_OPENGL)
    qvec = rotation_to_quaternion(world_to_camera[:3, :3])
    tx, ty, tz = (float(v) for v in world_to_camera[:3, 3])
    return ColmapImage(image_id, qvec, (tx, ty, tz), camera_id, name)


def write_model(folder: Path, cameras: list[ColmapCamera], images: list[ColmapImage], binary: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if binary:
        write_cameras_binary(folder / "cameras.bin", cameras)
        write_images_binary(folder / "images.bin", images)
    else:
        write_cameras_text(folder / "cameras.txt", cameras)
        write_images_text(folder / "images.txt", images)


def colmap_capture(root: Path, models: list[str], *, binary: bool) -> Path:
    """``root/images/*.png`` (8x6) and ``root/sparse/0``: image ``i`` uses camera ``i % len(models) + 1``
    whose model is ``models[...]``; image ids are not in name order."""
    cameras = [ColmapCamera(i + 1, m, WIDTH, HEIGHT, CAMERA_PARAMS[m]) for i, m in enumerate(models)]
    images = []
    for i, pose in enumerate(known_poses()):
        name = f"frame_{i:02d}.png"
        write_png(root / "images" / name, seed=i)
        images.append(colmap_image(100 - i, i % len(models) + 1, name, pose))
    write_model(root / "sparse" / "0", cameras, images, binary)
    return root


def llff_capture(root: Path) -> Path:
    """9 known poses as LLFF rows (hwf 16x12, focal 20), images 16x12 in images/ and 8x6 in images_2/."""
    rows = []
    for i, pose in enumerate(known_poses()):
        llff = np.stack([-pose[:3, 1], pose[:3, 0], pose[:3, 2], pose[:3, 3]], axis=1)  # down, right, back, t
        matrix = np.concatenate([llff, [[12.0], [16.0], [20.0]]], axis=1)
        rows.append(np.concatenate([matrix.reshape(-1), [2.0 + 0.1 * i, 40.0 - i]]))
    root.mkdir(parents=True)
    np.save(root / "poses_bounds.npy", np.stack(rows))
    for i in range(NUM_IMAGES):
        write_png(root / "images" / f"IMG_{i:02d}.png", 16, 12, seed=i)
        write_png(root / "images_2" / f"IMG_{i:02d}.png", 8, 6, seed=50 + i)
    return root


def assert_matches_llff_loader(converted: SceneSplit, llff: SceneSplit, applied: np.ndarray) -> None:
    """Same images, intrinsics, and cameras up to the conversion's ``applied`` transform followed by the
    LLFF loader's own normalisation (scale ``s``, then rigid ``T``)."""
    assert converted.names == llff.names
    for key in ("fx", "fy", "cx", "cy", "width", "height", "distortion"):
        torch.testing.assert_close(getattr(converted.cameras, key), getattr(llff.cameras, key))
    source = np.linalg.inv(applied)  # output world -> LLFF capture world
    c2w = converted.cameras.camera_to_world.double().numpy()
    centers = np.einsum("ij,nj->ni", source[:3, :3], c2w[:, :, 3]) + source[:3, 3]
    axes = np.einsum("ij,njk->nik", source[:3, :3], c2w[:, :, :3])
    transform = llff.world_transform.double().numpy()
    scale = llff.world_scale
    np.testing.assert_allclose(
        np.einsum("ij,nj->ni", transform[:, :3], scale * centers) + transform[:, 3],
        llff.cameras.centers.double().numpy(), atol=1e-5,
    )
    np.testing.assert_allclose(
        np.einsum("ij,njk->nik", transform[:, :3], axes), llff.cameras.camera_to_world[:, :, :3].double(),
        atol=1e-5,
    )


def assert_one_line(error: BaseException, *parts: str) -> None:
    message = str(error)
    assert "\n" not in message
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"


def read_transforms(folder: Path) -> dict:
    return json.loads((folder / "transforms.json").read_text())
