"""Lens models: rays of OPENCV, FULL_OPENCV, OPENCV_FISHEYE, SIMPLE_RADIAL and RADIAL cameras go through
3D points projected with the textbook OpenCV formulas (numpy, written out here), and the nerfstudio
loader maps each ``camera_model``'s keys onto the cameras' eight coefficient slots."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from nerf_lightning.cameras.geometry import Cameras, generate_rays
from nerf_lightning.cameras.lens import LensModel, fisheye_theta
from nerf_lightning.core.types import SceneBox
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.nerfstudio import load_nerfstudio

BIG_BOX = SceneBox.cube(100.0)
FX, FY = 100.0, 90.0
COL, ROW = 150, 120
"""Every test ray goes through this pixel; the principal point is placed so that its centre is the
projection of the test point (the trick of ``test_rays.py``)."""

# name -> (lens model, the eight slots k1, k2, p1, p2, k3, k4, k5, k6)
MODELS: dict[str, tuple[LensModel, list[float]]] = {
    "SIMPLE_RADIAL": (LensModel.PERSPECTIVE, [-0.08, 0, 0, 0, 0, 0, 0, 0]),
    "RADIAL": (LensModel.PERSPECTIVE, [-0.08, 0.02, 0, 0, 0, 0, 0, 0]),
    "OPENCV": (LensModel.PERSPECTIVE, [-0.12, 0.03, 0.002, -0.001, 0, 0, 0, 0]),
    "OPENCV_K3": (LensModel.PERSPECTIVE, [-0.12, 0.03, 0.002, -0.001, -0.004, 0, 0, 0]),
    "FULL_OPENCV": (LensModel.PERSPECTIVE, [0.1, -0.05, 0.002, -0.001, 0.01, 0.3, -0.04, 0.012]),
    "OPENCV_FISHEYE": (LensModel.FISHEYE, [0.05, -0.01, 0, 0, 0.004, -0.001, 0, 0]),
    "FISHEYE_ZERO": (LensModel.FISHEYE, [0, 0, 0, 0, 0, 0, 0, 0]),
}
PERSPECTIVE_POINTS = [(0.3, -0.2, 1.0), (-0.9, 0.7, 2.0), (0.1, 1.1, 1.5)]
FISHEYE_POINTS = [(0.3, -0.2, 1.0), (-2.0, 1.5, 1.0), (4.0, 3.0, 1.0)]  # up to 79 degrees off axis


def project_perspective(point: tuple[float, float, float], c: list[float]) -> tuple[float, float]:
    """OpenCV's projection (rational radial + tangential) to normalised distorted coordinates."""
    k1, k2, p1, p2, k3, k4, k5, k6 = c
    x, y = point[0] / point[2], point[1] / point[2]
    r2 = x * x + y * y
    radial = (1 + k1 * r2 + k2 * r2**2 + k3 * r2**3) / (1 + k4 * r2 + k5 * r2**2 + k6 * r2**3)
    return (x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x),
            y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y)


def project_fisheye(point: tuple[float, float, float], c: list[float]) -> tuple[float, float]:
    """OpenCV's equidistant fisheye projection (``cv::fisheye::projectPoints``), ``k1..k4``."""
    k1, k2, k3, k4 = c[0], c[1], c[4], c[5]
    a, b = point[0] / point[2], point[1] / point[2]
    r = math.hypot(a, b)
    theta = math.atan(r)
    theta_d = theta * (1 + k1 * theta**2 + k2 * theta**4 + k3 * theta**6 + k4 * theta**8)
    return theta_d / r * a, theta_d / r * b


def rotation(ax: float, ay: float, az: float) -> np.ndarray:
    rx = np.array([[1, 0, 0], [0, math.cos(ax), -math.sin(ax)], [0, math.sin(ax), math.cos(ax)]])
    ry = np.array([[math.cos(ay), 0, math.sin(ay)], [0, 1, 0], [-math.sin(ay), 0, math.cos(ay)]])
    rz = np.array([[math.cos(az), -math.sin(az), 0], [math.sin(az), math.cos(az), 0], [0, 0, 1]])
    return rz @ ry @ rx


def camera(c2w: np.ndarray, cx: float, cy: float, lens: LensModel, coefficients: list[float]) -> Cameras:
    return Cameras(
        camera_to_world=torch.tensor(c2w[None], dtype=torch.float32),
        fx=torch.tensor([FX]), fy=torch.tensor([FY]), cx=torch.tensor([cx]), cy=torch.tensor([cy]),
        width=torch.tensor([400]), height=torch.tensor([400]),
        distortion=torch.tensor([coefficients], dtype=torch.float32),
        lens=torch.tensor([int(lens)]),
    )


def distance_to_ray(point: np.ndarray, origin: np.ndarray, direction: np.ndarray) -> float:
    offset = point - origin
    return float(np.linalg.norm(offset - offset.dot(direction) * direction) / np.linalg.norm(offset))


@pytest.mark.parametrize("name", list(MODELS))
def test_rays_pass_through_projected_points(name: str) -> None:
    lens, coefficients = MODELS[name]
    project = project_fisheye if lens == LensModel.FISHEYE else project_perspective
    points = FISHEYE_POINTS if lens == LensModel.FISHEYE else PERSPECTIVE_POINTS
    c2w = np.concatenate([rotation(0.3, -0.7, 1.1), [[1.0], [-2.0], [3.0]]], axis=1)
    for point_cv in points:
        xd, yd = project(point_cv, coefficients)
        cameras = camera(c2w, COL + 0.5 - FX * xd, ROW + 0.5 - FY * yd, lens, coefficients)
        for undistort in (None, True, cameras.lens_models()):
            rays = generate_rays(cameras, torch.zeros(1, dtype=torch.long), torch.tensor([COL]),
                                 torch.tensor([ROW]), BIG_BOX, undistort=undistort)
            # the point in the world: OpenCV camera frame -> OpenGL (flip y, z) -> world
            point_world = c2w[:, :3] @ (np.array(point_cv) * [1, -1, -1]) + c2w[:, 3]
            error = distance_to_ray(point_world, rays.origins[0].double().numpy(),
                                    rays.directions[0].double().numpy())
            assert error < 1e-4, (name, point_cv, undistort, error)


def test_mixed_lenses_in_one_call_keep_each_cameras_model() -> None:
    """One call with a fisheye and a perspective camera: each ray follows its own camera's model."""
    fisheye, perspective = MODELS["OPENCV_FISHEYE"], MODELS["OPENCV"]
    point = (0.5, -0.4, 1.0)
    xf, yf = project_fisheye(point, fisheye[1])
    xp, yp = project_perspective(point, perspective[1])
    eye = np.eye(4)[:3]
    a = camera(eye, COL + 0.5 - FX * xf, ROW + 0.5 - FY * yf, *fisheye)
    b = camera(eye, COL + 0.5 - FX * xp, ROW + 0.5 - FY * yp, *perspective)
    both = Cameras(*(torch.cat([getattr(a, f), getattr(b, f)]) for f in
                     ("camera_to_world", "fx", "fy", "cx", "cy", "width", "height", "distortion", "lens")))
    assert both.lens_models() == {LensModel.FISHEYE, LensModel.PERSPECTIVE}
    rays = generate_rays(both, torch.tensor([0, 1]), torch.tensor([COL, COL]), torch.tensor([ROW, ROW]),
                         BIG_BOX, undistort=both.lens_models())
    expected = torch.tensor([point[0], -point[1], -point[2]])
    for i in range(2):
        torch.testing.assert_close(rays.directions[i], expected / expected.norm(), atol=1e-5, rtol=0)


def test_lens_models_and_legacy_four_coefficients() -> None:
    legacy = Cameras(torch.eye(4)[:3][None], *(torch.tensor([v]) for v in (10.0, 10.0, 5.0, 5.0)),
                     torch.tensor([10]), torch.tensor([10]), torch.tensor([[0.1, 0.0, 0.0, 0.0]]))
    assert legacy.distortion.shape == (1, 8) and legacy.lens.tolist() == [int(LensModel.PERSPECTIVE)]
    assert legacy.lens_models() == {LensModel.PERSPECTIVE}
    pinhole = camera(np.eye(4)[:3], 5.0, 5.0, LensModel.PERSPECTIVE, [0.0] * 8)
    assert pinhole.lens_models() == frozenset()
    # an equidistant lens is no pinhole even without coefficients
    assert camera(np.eye(4)[:3], 5.0, 5.0, LensModel.FISHEYE, [0.0] * 8).lens_models() == {LensModel.FISHEYE}
    assert legacy[torch.tensor([0, 0])].lens.shape == (2,) and legacy.scaled(2).lens.tolist() == [0]


def test_fisheye_newton_inverts_the_forward_model() -> None:
    coefficients = torch.tensor([[0.05, -0.01, 0.004, -0.001]]).expand(50, 4)
    theta = torch.linspace(0.0, 1.4, 50, dtype=torch.float64)
    k1, k2, k3, k4 = (c.double() for c in coefficients.unbind(-1))
    theta_d = theta * (1 + k1 * theta**2 + k2 * theta**4 + k3 * theta**6 + k4 * theta**8)
    torch.testing.assert_close(fisheye_theta(theta_d, coefficients.double()), theta, atol=1e-10, rtol=0)


# ------------------------------------------------------------------------------- the nerfstudio loader


def write_scene(root: Path, top: dict, frames: int = 2) -> None:
    (root / "images").mkdir(parents=True, exist_ok=True)
    entries = []
    for i in range(frames):
        Image.fromarray(np.full((8, 10, 3), 40 * i, dtype=np.uint8)).save(root / "images" / f"f{i}.png")
        pose = np.eye(4)
        pose[0, 3] = 0.1 * i
        entries.append({"file_path": f"images/f{i}.png", "transform_matrix": pose.tolist()})
    meta = {"fl_x": 20.0, "w": 10, "h": 8, "train_filenames": [e["file_path"] for e in entries],
            "val_filenames": [], "test_filenames": [], **top, "frames": entries}
    (root / "transforms.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("top", "lens", "slots"),
    [
        ({"camera_model": "OPENCV", "k1": 0.1, "k2": 0.2, "p1": 0.3, "p2": 0.4, "k3": 0.5},
         LensModel.PERSPECTIVE, [0.1, 0.2, 0.3, 0.4, 0.5, 0, 0, 0]),
        ({"camera_model": "FULL_OPENCV", "k1": 0.1, "k2": 0.2, "p1": 0.3, "p2": 0.4, "k3": 0.5, "k4": 0.6,
          "k5": 0.7, "k6": 0.8}, LensModel.PERSPECTIVE, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]),
        ({"camera_model": "OPENCV_FISHEYE", "k1": 0.1, "k2": 0.2, "k3": 0.3, "k4": 0.4},
         LensModel.FISHEYE, [0.1, 0.2, 0, 0, 0.3, 0.4, 0, 0]),
        ({"is_fisheye": True, "k1": 0.1, "k4": 0.4}, LensModel.FISHEYE, [0.1, 0, 0, 0, 0, 0.4, 0, 0]),
        ({"camera_model": "SIMPLE_RADIAL", "k1": 0.1}, LensModel.PERSPECTIVE, [0.1, 0, 0, 0, 0, 0, 0, 0]),
        ({"camera_model": "RADIAL", "k1": 0.1, "k2": 0.2}, LensModel.PERSPECTIVE,
         [0.1, 0.2, 0, 0, 0, 0, 0, 0]),
    ],
    ids=["opencv", "full_opencv", "fisheye", "ngp_is_fisheye", "simple_radial", "radial"],
)
def test_loader_maps_camera_model_keys_to_slots(tmp_path: Path, top: dict, lens: LensModel,
                                                 slots: list[float]) -> None:
    write_scene(tmp_path, top)
    cameras = load_nerfstudio(tmp_path, "train").cameras
    assert cameras.lens.tolist() == [int(lens)] * 2
    torch.testing.assert_close(cameras.distortion, torch.tensor([slots] * 2, dtype=torch.float32))


def test_loader_per_frame_camera_model_and_refusals(tmp_path: Path) -> None:
    write_scene(tmp_path, {"camera_model": "OPENCV", "k1": 0.1})
    meta = json.loads((tmp_path / "transforms.json").read_text())
    meta["frames"][1].update(camera_model="OPENCV_FISHEYE", k4=0.02)
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    cameras = load_nerfstudio(tmp_path, "train").cameras
    assert cameras.lens.tolist() == [0, 1] and float(cameras.distortion[1, 5]) == pytest.approx(0.02)
    meta["is_fisheye"] = "yes"
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match=r"transforms.json: field 'is_fisheye': expected true or false"):
        load_nerfstudio(tmp_path, "train")
