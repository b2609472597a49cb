"""``data.normalise auto``'s pure parts: a split moved into the training frame (and back out by the export's
inverse), the rules chosen per capture, the unbounded inner cube, the far plane a declared box allows, and
what a declared ``aabb_scale`` is checked against."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.core.types import SceneBox
from nerf_lightning.export.transforms import dataset_world_poses
from nerf_lightning.scenes.bounds import box_corners, cube_about, far_through_box, inner_cube
from nerf_lightning.scenes.normalise import Similarity
from nerf_lightning.scenes.scene import NgpPlacement, SceneSplit
from nerf_lightning.scenes.training_frame import (
    content_cube_about,
    declared_extent,
    estimate_training_frame,
    moved_split,
)


def turn(axis: str, degrees: float) -> Tensor:
    """``[3, 3]`` float64 rotation about ``x``, ``y`` or ``z``."""
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    i, j = {"x": (1, 2), "y": (2, 0), "z": (0, 1)}[axis]
    out = torch.eye(3, dtype=torch.float64)
    out[i, i], out[i, j], out[j, i], out[j, j] = c, -s, s, c
    return out


PLACEMENT = Similarity(turn("z", 25.0) @ turn("x", 12.0), torch.tensor([3.0, -7.0, 1.5], dtype=torch.float64),
                       0.4)
"""Canonical -> file coordinates of the rigs below: tilted, scaled, far from the origin."""


def look_at(position: np.ndarray, target: np.ndarray, up: np.ndarray | None = None) -> np.ndarray:
    """``[3, 4]`` OpenGL camera-to-world at ``position`` looking at ``target`` (``+z`` up by default)."""
    up = np.array([0.0, 0.0, 1.0]) if up is None else up
    back = (position - target) / np.linalg.norm(position - target)
    right = np.cross(up, back)
    right /= np.linalg.norm(right)
    return np.stack([right, np.cross(back, right), back, position], axis=1)


def ring(count: int = 24, radius: float = 4.0, height: float = 1.5) -> Tensor:
    """``[count, 3, 4]`` float64 cameras on a circle about the origin, looking at it."""
    angles = np.linspace(0.0, 2 * math.pi, count, endpoint=False)
    return torch.from_numpy(np.stack([look_at(np.array([radius * math.cos(a), radius * math.sin(a), height]),
                                              np.zeros(3)) for a in angles]))


def split_of(poses: Tensor, **fields: object) -> SceneSplit:
    """A split of ``poses [N, 3, 4]`` (32x24 pixel pinholes, no images: only cameras matter here)."""
    n = poses.shape[0]
    ones = torch.ones(n)
    cameras = Cameras(poses.float(), 30 * ones, 30 * ones, 16 * ones, 12 * ones, torch.full((n,), 32),
                      torch.full((n,), 24), torch.zeros(n, 4))
    return SceneSplit(cameras=cameras, images=[], names=[], source="test", **fields)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- the rules


def test_an_inward_rig_gets_the_inward_rules_and_comes_out_centred_at_distance_four() -> None:
    split = split_of(PLACEMENT.apply_poses(ring()))
    frame = estimate_training_frame(split)
    assert not frame.forward_facing and not frame.by_loader
    assert (frame.orientation, frame.centre, frame.scale) == ("vertical", "focus", "camera_distance")
    moved = moved_split(split, frame.transform).cameras.camera_to_world.double()
    assert float(moved[:, :, 3].norm(dim=-1).median()) == pytest.approx(4.0, rel=1e-5)
    assert float(moved[:, 2, 0].abs().max()) < 1e-5  # right axes horizontal: upright again
    centre = frame.content_centre()
    assert centre is not None and float(centre.norm()) < 1e-9
    record = frame.record()
    assert record["rules"] == {"orientation": "vertical", "centre": "focus", "scale": "camera_distance"}
    assert torch.allclose(torch.tensor(record["matrix"], dtype=torch.float64), frame.transform.matrix())


def test_a_capture_its_loader_normalised_is_left_as_loaded_and_forward_rigs_keep_their_scale() -> None:
    rng = np.random.default_rng(0)
    grid = np.stack([look_at(np.array([x, -5.0, z]), np.array([0.0, 10.0, 0.0]) + rng.uniform(-0.1, 0.1, 3))
                     for x in np.linspace(-0.5, 0.5, 4) for z in np.linspace(-0.3, 0.3, 3)])
    forward = PLACEMENT.apply_poses(torch.from_numpy(grid))
    by_llff = split_of(forward, depth_range=(1.3, 6.0), world_scale=0.5,
                       world_transform=torch.eye(3, 4))
    frame = estimate_training_frame(by_llff)
    assert frame.forward_facing and frame.by_loader and frame.transform.is_identity
    assert frame.content_centre() is None  # the caller takes the middle of the frustum box
    assert moved_split(by_llff, frame.transform) is by_llff
    plain = estimate_training_frame(split_of(forward))  # forward-facing, no depth bounds: scale kept
    assert (plain.orientation, plain.centre, plain.scale) == ("average", "poses", "none")
    assert plain.transform.scale == 1.0 and not plain.transform.is_identity


# ----------------------------------------------------------------------------------------- moving splits


def test_a_moved_split_maps_back_to_the_files_poses_through_its_composed_world_transform() -> None:
    """A loader's own normalisation (LLFF-like: a turn, a shift, a scale) followed by the data module's:
    the composed ``world_scale`` / ``world_transform`` are what the transforms export inverts."""
    file_poses = PLACEMENT.apply_poses(ring())
    loader = Similarity(turn("y", 8.0), torch.tensor([0.2, -0.1, 0.4], dtype=torch.float64), 0.7)
    loaded = split_of(loader.apply_poses(file_poses), depth_range=(1.0, 5.0), world_scale=loader.scale,
                      world_transform=torch.cat([loader.rotation, loader.translation[:, None]], 1).float())
    normalise = Similarity(turn("x", -20.0), torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64), 2.5)
    moved = moved_split(loaded, normalise)
    assert moved.depth_range == pytest.approx((2.5, 12.5))
    assert moved.world_scale == pytest.approx(0.7 * 2.5)
    assert torch.allclose(moved.cameras.camera_to_world.double(),
                          normalise.apply_poses(loaded.cameras.camera_to_world.double()), atol=1e-5)
    back = torch.from_numpy(dataset_world_poses(moved.cameras.camera_to_world, moved.world_scale,
                                                moved.world_transform))
    assert torch.allclose(back[:, :3], file_poses, atol=1e-5)
    assert moved.images is loaded.images and moved.names is loaded.names  # pixels are not touched
    assert moved_split(loaded, Similarity.identity()) is loaded


def test_a_similarity_moves_a_box_and_reads_back_from_its_record() -> None:
    box = SceneBox(torch.tensor([-1.0, -2.0, 0.0]), torch.tensor([1.0, 2.0, 3.0]))
    shift = Similarity(torch.eye(3, dtype=torch.float64), torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64),
                       2.0)
    moved = shift.apply_box(box)
    assert torch.equal(moved.lower, torch.tensor([-1.0, -4.0, -1.0]))
    assert torch.equal(moved.upper, torch.tensor([3.0, 4.0, 5.0]))
    assert Similarity.identity().apply_box(box) is box
    turned = Similarity(turn("z", 45.0), torch.zeros(3, dtype=torch.float64), 1.0).apply_box(box)
    assert bool((turned.upper - turned.lower > box.upper - box.lower - 1e-6).all())  # holds the turned box
    assert box_corners(box).shape == (8, 3)
    again = Similarity.from_dict(PLACEMENT.as_dict())
    assert torch.equal(again.matrix(), PLACEMENT.matrix())


# ------------------------------------------------------------------------------- inner region, far plane


def test_the_inner_cube_is_centred_on_the_content_and_reaches_the_share_of_the_farthest_camera() -> None:
    poses = ring(radius=4.0, height=1.0)
    poses[:, 0, 3] += 1.5  # cameras off to one side of the content (a partial arc's asymmetry)
    cameras = split_of(poses).cameras
    content = SceneBox(torch.full((3,), -1.2), torch.tensor([1.0, 1.2, 1.2]))
    centre = torch.zeros(3, dtype=torch.float64)
    assert torch.equal(cube_about(centre, content).upper, torch.full((3,), 1.2))
    reach = float(cameras.centers.double().abs().amax())  # 5.5
    for share, half in [(0.0, 1.2), (0.5, 0.5 * reach), (1.0, reach)]:
        cube = inner_cube(content, centre, cameras, share)
        assert torch.allclose(cube.upper, torch.full((3,), half)) and torch.allclose(cube.lower, -cube.upper)
    holding = inner_cube(content, centre, cameras, 1.0)
    assert bool(((cameras.centers >= holding.lower - 1e-6) & (cameras.centers <= holding.upper + 1e-6)).all())
    with pytest.raises(ValueError, match="camera_share"):
        inner_cube(content, centre, cameras, -1.0)
    middle, cube = content_cube_about(None, content)
    assert torch.allclose(middle, torch.tensor([-0.1, 0.0, 0.0], dtype=torch.float64))
    assert torch.allclose(cube.upper - cube.lower, torch.full((3,), 2.4))


def test_no_ray_is_still_in_the_box_beyond_the_far_distance() -> None:
    cameras = split_of(ring()).cameras
    box = SceneBox(torch.tensor([-6.0, -5.0, -2.0]), torch.tensor([7.0, 5.0, 9.0]))
    far = far_through_box(cameras, box)
    generator = torch.Generator().manual_seed(0)
    directions = torch.randn(len(cameras), 500, 3, generator=generator)
    directions = directions / directions.norm(dim=-1, keepdim=True)
    origins = cameras.centers[:, None].expand_as(directions)
    _, exit_ = box.intersect(origins.reshape(-1, 3), directions.reshape(-1, 3))
    assert float(exit_.max()) <= far / 1.1 + 1e-4
    assert float(exit_.max()) > 0.8 * far / 1.1  # and not far beyond it


def test_a_declared_aabb_scale_is_read_in_the_training_frame_and_checked_against_the_cameras() -> None:
    poses = ring()  # cameras within 4.3 of the origin
    content = SceneBox(torch.full((3,), -1.4), torch.full((3,), 1.4))
    # instant-ngp's unit cube [0, 1]^3 is the file's [-1.5, 1.5]^3 (scale 1/3, offset 0.5).
    wide = split_of(poses, ngp=NgpPlacement(1.0 / 3.0, (0.5, 0.5, 0.5), 4.0))
    read = declared_extent(wide, Similarity.identity(), content)
    assert read is not None and read.consistent and read.aabb_scale == 4.0
    assert torch.allclose(read.box.upper, torch.full((3,), 6.0))
    assert read.content_ratio == pytest.approx(1.5 / 1.4, rel=1e-6)
    narrow = declared_extent(split_of(poses, ngp=NgpPlacement(1.0 / 3.0, (0.5, 0.5, 0.5), 2.0)),
                             Similarity.identity(), content)
    assert narrow is not None and not narrow.holds_cameras and narrow.holds_content and not narrow.consistent
    assert declared_extent(split_of(poses), Similarity.identity(), content) is None
    assert declared_extent(split_of(poses, ngp=NgpPlacement(0.33, (0.5, 0.5, 0.5), None)),
                           Similarity.identity(), content) is None
    # The box is moved with the scene: a file twice as large, normalised by 1/2, reads the same.
    halving = Similarity(torch.eye(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64), 0.5)
    doubled = split_of(poses, ngp=NgpPlacement(1.0 / 6.0, (0.5, 0.5, 0.5), 4.0))
    same = declared_extent(doubled, halving, content)
    assert same is not None and torch.allclose(same.box.upper, read.box.upper)
