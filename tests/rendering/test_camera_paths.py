"""Camera paths for videos: orbit around the scene centre, LLFF spiral, a spline through the training
cameras, the test poses; and which one ``auto`` takes for a capture."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from nerf_lightning.cameras.geometry import average_pose
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.export.render_video import RenderError, choose_camera_path, path_poses
from nerf_lightning.rendering.camera_paths import (
    interpolate_path,
    is_forward_facing,
    look_at,
    mean_up,
    orbit_path,
    scene_center,
    spiral_path,
    viewing_spread,
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


def _rotated(poses: torch.Tensor, axis: list[float], degrees: float) -> torch.Tensor:
    """``poses`` turned about the world origin by ``degrees`` around ``axis`` (Rodrigues)."""
    k = torch.tensor(axis) / torch.tensor(axis).norm()
    cross = torch.tensor([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    angle = math.radians(degrees)
    turn = torch.eye(3) + math.sin(angle) * cross + (1 - math.cos(angle)) * cross @ cross
    return turn @ poses


def _llff_like_cameras() -> torch.Tensor:
    """20 handheld cameras 0.4 apart, each looking at its own point 3-5 ahead, turned 30° off the world axes:
    viewing directions up to about 8° apart, as in an LLFF capture."""
    generator = torch.Generator().manual_seed(0)
    eyes = (torch.rand(20, 3, generator=generator) - 0.5) * torch.tensor([0.4, 0.3, 0.1])
    targets = torch.cat([(torch.rand(20, 2, generator=generator) - 0.5) * 0.6,
                         -3.0 - 2.0 * torch.rand(20, 1, generator=generator)], dim=-1)
    return _rotated(look_at(eyes, targets, torch.tensor([0.0, 1.0, 0.0])), [1.0, 2.0, 0.5], 30.0)


def _ring_cameras(count: int = 16) -> torch.Tensor:
    """``count`` cameras on a level circle of radius 4 looking at its centre."""
    angles = torch.arange(count) * (2 * math.pi / count)
    eyes = 4.0 * torch.stack([torch.cos(angles), torch.sin(angles), torch.zeros(count)], dim=-1)
    return look_at(eyes, torch.zeros(3), UP)


def test_forward_facing_is_decided_from_the_viewing_directions() -> None:
    llff, grid, ring, dome = _llff_like_cameras(), _forward_cameras(), _ring_cameras(), _inward_cameras()
    assert 2.0 < viewing_spread(llff) < 15.0 and viewing_spread(grid) < 5.0
    assert viewing_spread(ring) == 180.0 and viewing_spread(dome) > 60.0  # a ring's directions cancel out
    assert is_forward_facing(llff) and is_forward_facing(grid)
    assert not is_forward_facing(ring) and not is_forward_facing(dome)
    assert viewing_spread(_ring_cameras(8)[:3]) == pytest.approx(45.0, abs=1e-3)  # a quarter of a ring
    assert not is_forward_facing(_ring_cameras(8)[:3])
    assert choose_camera_path(llff)[0] == "spiral" and choose_camera_path(ring)[0] == "orbit"
    assert "forward-facing" in choose_camera_path(llff)[1] and "360" in choose_camera_path(dome)[1]


def _arc_cameras() -> torch.Tensor:
    """6 cameras 30° apart on an arc of radius 4 at varying heights, looking at the origin."""
    angles = torch.deg2rad(torch.arange(6) * 30.0)
    heights = torch.tensor([0.5, 1.0, 0.8, 1.5, 0.6, 1.2])
    eyes = torch.stack([4.0 * torch.cos(angles), 4.0 * torch.sin(angles), heights], dim=-1)
    return look_at(eyes, torch.zeros(3), UP)


def _angle_degrees(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Angles between the vectors ``a`` and ``b`` ``[F, 3]`` in degrees."""
    return torch.rad2deg(torch.arccos(torch.nn.functional.cosine_similarity(a, b).clamp(-1.0, 1.0)))


def _turn_degrees(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rotation angle between the rotations of poses ``a`` and ``b`` ``[F, 3, 4]`` in degrees."""
    relative = a[:, :, :3].transpose(1, 2) @ b[:, :, :3]
    trace = relative.diagonal(dim1=1, dim2=2).sum(-1)
    return torch.rad2deg(torch.arccos(((trace - 1) / 2).clamp(-1.0, 1.0)))


def test_interpolated_path_passes_through_the_cameras_in_order_and_turns_smoothly() -> None:
    cameras = _arc_cameras()
    poses = interpolate_path(cameras, 101)  # camera i is frame 20 i
    assert poses.shape == (101, 3, 4)
    _assert_rotations(poses)
    assert torch.allclose(poses[::20], cameras, atol=1e-5)
    steps = poses[1:, :, 3] - poses[:-1, :, 3]
    bends = _angle_degrees(steps[1:], steps[:-1])
    straight = cameras[1:, :, 3] - cameras[:-1, :, 3]  # straight segments would bend 35° or more at a camera
    corners = _angle_degrees(straight[1:], straight[:-1])
    assert float(corners.min()) > 35.0 and float(bends.max()) < 8.0
    speeds = steps.norm(dim=-1)  # nor does the speed jump at a camera
    assert float((speeds[1:] / speeds[:-1] - 1).abs().max()) < 0.1
    turns = _turn_degrees(poses[:-1], poses[1:])  # the view turns under 2° a frame, evenly
    assert float(turns.max()) < 2.0 and float((turns[1:] - turns[:-1]).abs().max()) < 0.1
    assert torch.allclose(interpolate_path(cameras, 1), cameras[:1])
    assert torch.allclose(interpolate_path(cameras[:1], 4), cameras[:1].expand(4, 3, 4))


def test_interpolated_path_takes_the_shorter_way_round() -> None:
    cameras = _ring_cameras(8)[2:5]  # 45° apart, past the quaternion sign change: 45° per segment, not 315°
    poses = interpolate_path(cameras, 9)
    assert float(_turn_degrees(poses[:-1], poses[1:]).sum()) == pytest.approx(90.0, abs=1.0)


def test_test_path_is_the_test_poses_in_order(tiny_scene: Path) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False)
    datamodule.setup("test")
    test_poses = datamodule.splits["test"].cameras.camera_to_world
    assert torch.equal(path_poses("test", datamodule), test_poses)
    assert torch.equal(path_poses("test", datamodule, 1), test_poses[:1])
    assert path_poses("orbit", datamodule, 5).shape == (5, 3, 4)
    assert torch.equal(path_poses("auto", datamodule, 5), path_poses("orbit", datamodule, 5))  # a 360 scene
    train_poses = datamodule.splits["train"].cameras.camera_to_world
    through = path_poses("interpolate", datamodule, 2 * len(train_poses) - 1)
    assert torch.allclose(through[::2], train_poses, atol=1e-5)
    with pytest.raises(RenderError, match="unknown camera path 'zoom'"):
        path_poses("zoom", datamodule)
