"""Camera paths for videos: orbit around the scene centre, LLFF spiral, the test poses."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from nerf_lightning.cameras.geometry import average_pose
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.export.render_video import RenderError, path_poses
from nerf_lightning.rendering.camera_paths import (
    look_at,
    mean_up,
    orbit_path,
    scene_center,
    spiral_path,
)

CENTER = torch.tensor([0.3, -0.2, 0.5])
UP = torch.tensor([0.0, 0.0, 1.0])


def _assert_rotations(poses: torch.Tensor) -> None:
    rotations = poses[:, :, :3]
    identity = torch.eye(3).expand_as(rotations)
    assert torch.allclose(rotations.transpose(1, 2) @ rotations, identity, atol=1e-5)
    assert torch.allclose(torch.linalg.det(rotations), torch.ones(len(poses)), atol=1e-5)


def _inward_cameras() -> torch.Tensor:
    """12 cameras on a dome around CENTER (radius 4, elevations 20-50°), all looking at it."""
    angles = torch.linspace(0, 2 * math.pi, 13)[:-1] + 0.4
    elevations = torch.deg2rad(torch.tensor([20.0, 35.0, 50.0])).repeat(4)
    eyes = CENTER + 4.0 * torch.stack(
        [torch.cos(elevations) * torch.cos(angles), torch.cos(elevations) * torch.sin(angles),
         torch.sin(elevations)], dim=-1)
    return look_at(eyes, CENTER, UP)


def _forward_cameras() -> torch.Tensor:
    """A 4x3 grid of cameras near z = 0, spread 0.2 wide, looking down -z at a point 3 away."""
    xs, ys = torch.meshgrid(torch.linspace(-0.1, 0.1, 4), torch.linspace(-0.05, 0.05, 3), indexing="ij")
    eyes = torch.stack([xs.reshape(-1), ys.reshape(-1), torch.zeros(12)], dim=-1)
    return look_at(eyes, torch.tensor([0.0, 0.0, -3.0]), torch.tensor([0.0, 1.0, 0.0]))


def test_look_at_points_minus_z_at_the_target() -> None:
    pose = look_at(torch.tensor([[0.0, -2.0, 0.0]]), torch.zeros(3), UP)
    _assert_rotations(pose)
    assert torch.allclose(-pose[0, :, 2], torch.tensor([0.0, 1.0, 0.0]))
    assert torch.allclose(pose[0, :, 1], UP, atol=1e-6)


def test_scene_center_is_where_the_cameras_look() -> None:
    assert torch.allclose(scene_center(_inward_cameras()), CENTER, atol=1e-4)
    assert torch.allclose(mean_up(_inward_cameras()) @ UP, torch.tensor(1.0), atol=0.1)


def test_orbit_poses_look_at_the_centre_and_are_orthonormal() -> None:
    cameras = _inward_cameras()
    poses = orbit_path(cameras, 30)
    assert poses.shape == (30, 3, 4)
    _assert_rotations(poses)
    eyes = poses[:, :, 3]
    to_center = (CENTER - eyes) / (CENTER - eyes).norm(dim=-1, keepdim=True)
    assert torch.allclose((-poses[:, :, 2] * to_center).sum(-1), torch.ones(30), atol=1e-5)
    up = mean_up(cameras)
    offsets = eyes - CENTER
    heights = offsets @ up
    expected_heights = (cameras[:, :, 3] - CENTER) @ up
    assert torch.allclose(heights, expected_heights.mean().expand(30), atol=1e-4)  # one height: a circle
    horizontal = (offsets - heights[:, None] * up).norm(dim=-1)
    expected_radius = (cameras[:, :, 3] - CENTER - expected_heights[:, None] * up).norm(dim=-1).mean()
    assert torch.allclose(horizontal, expected_radius.expand(30), atol=1e-4)
    assert len({tuple(eye.round(decimals=4).tolist()) for eye in eyes}) == 30  # no repeated frame


def test_spiral_stays_near_the_mean_pose_and_looks_forward() -> None:
    cameras = _forward_cameras()
    poses = spiral_path(cameras, 40)
    assert poses.shape == (40, 3, 4)
    _assert_rotations(poses)
    mean = average_pose(cameras)
    spread = (cameras[:, :, 3] - mean[:, 3]).norm(dim=-1).max()
    distances = (poses[:, :, 3] - mean[:, 3]).norm(dim=-1)
    assert float(distances.max()) <= float(spread) + 1e-6 and float(distances.max()) > 0.01
    forward = -mean[:, 2]
    assert torch.all((-poses[:, :, 2]) @ forward > math.cos(math.radians(5)))
    focus = mean[:, 3] + 3.0 * forward  # every frame looks at the focus point in front
    to_focus = (focus - poses[:, :, 3]) / (focus - poses[:, :, 3]).norm(dim=-1, keepdim=True)
    assert torch.allclose((-poses[:, :, 2] * to_focus).sum(-1), torch.ones(40), atol=1e-4)


def test_test_path_is_the_test_poses_in_order(tiny_scene: Path) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False)
    datamodule.setup("test")
    test_poses = datamodule.splits["test"].cameras.camera_to_world
    assert torch.equal(path_poses("test", datamodule), test_poses)
    assert torch.equal(path_poses("test", datamodule, 1), test_poses[:1])
    assert path_poses("orbit", datamodule, 5).shape == (5, 3, 4)
    with pytest.raises(RenderError, match="unknown camera path 'zoom'"):
        path_poses("zoom", datamodule)
