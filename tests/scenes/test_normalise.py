"""Normalising a capture (``nerf_lightning.scenes.normalise``) on synthetic camera rigs: off-centre,
scaled, tilted, with outward-looking frames and sparse points; a Blender rig and an LLFF-normalised rig
left exactly as they are; and the downscale picked from a pixel budget."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.datasets.demo_scene import CAMERA_ANGLE_X, camera_poses
from nerf_lightning.scenes.bounds import focus_point, scene_box_from_cameras
from nerf_lightning.scenes.formats.llff import normalize_poses
from nerf_lightning.scenes.normalise import (
    TARGET_CAMERA_DISTANCE,
    Similarity,
    SnapTolerance,
    downscale_for_pixels,
    focus_of_attention,
    is_forward_facing,
    mean_up,
    normalising_similarity,
    rotation_angle_degrees,
    rotation_onto_z,
    vertical_direction,
)

EXACT = SnapTolerance(0.0, 0.0, 0.0)
"""Snaps only exact identities: the estimate itself is tested."""


# ------------------------------------------------------------------------------------------------ rigs


Z_UP = np.array([0.0, 0.0, 1.0])


def look_at(position: np.ndarray, target: np.ndarray, up: np.ndarray = Z_UP) -> np.ndarray:
    """``[3, 4]`` OpenGL camera-to-world looking from ``position`` at ``target``, no roll about ``up``."""
    back = position - target
    back = back / np.linalg.norm(back)
    right = np.cross(up, back)
    right = right / np.linalg.norm(right)
    return np.stack([right, np.cross(back, right), back, position], axis=1)


def arc_rig(count: int = 40, *, arc_degrees: float = 360.0, radius: float = 4.0, height: float = 1.5,
            target: tuple[float, float, float] = (0.0, 0.0, 0.0), seed: int = 0) -> np.ndarray:
    """``[count, 3, 4]`` cameras on an arc around ``target`` (canonical frame, ``+z`` up), pitched down at
    it from ``height`` above it, distances jittered by 10% and aims by 0.05 (seeded)."""
    rng = np.random.default_rng(seed)
    centre = np.array(target)
    angles = np.radians(np.linspace(0.0, arc_degrees, count, endpoint=arc_degrees < 360.0))
    poses = []
    for angle in angles:
        r = radius * (1.0 + rng.uniform(-0.1, 0.1))
        position = centre + np.array([r * math.cos(angle), r * math.sin(angle), height])
        poses.append(look_at(position, centre + rng.uniform(-0.05, 0.05, 3)))
    return np.stack(poses)


def rotation(axis: str, degrees: float) -> np.ndarray:
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    matrices = {"x": [[1, 0, 0], [0, c, -s], [0, s, c]], "y": [[c, 0, s], [0, 1, 0], [-s, 0, c]],
                "z": [[c, -s, 0], [s, c, 0], [0, 0, 1]]}
    return np.array(matrices[axis], dtype=np.float64)


PLACEMENT = Similarity(torch.from_numpy(rotation("x", 35.0) @ rotation("z", 50.0) @ rotation("y", -20.0)),
                       torch.tensor([12.0, -30.0, 7.5], dtype=torch.float64), 0.37)
"""An arbitrary placement of a canonical rig in a file: tilted 35 degrees and more, moved far off the
origin, scaled by 0.37 (as COLMAP's frame would put a capture)."""


def placed(canonical: np.ndarray, placement: Similarity = PLACEMENT) -> Tensor:
    return placement.apply_poses(torch.from_numpy(canonical))


def blender_cameras(poses: Tensor) -> Cameras:
    """float32 cameras at ``poses [N, 3, 4]`` with the Blender scenes' field of view, 100x100 pixels."""
    count = poses.shape[0]
    focal = torch.full((count,), 50.0 / math.tan(0.5 * CAMERA_ANGLE_X))
    centre, size = torch.full((count,), 50.0), torch.full((count,), 100, dtype=torch.int64)
    return Cameras(poses.float(), focal, focal.clone(), centre, centre.clone(), size, size.clone(),
                   torch.zeros(count, 4))


def camera_distances(poses: Tensor) -> Tensor:
    return poses[:, :, 3].norm(dim=-1)


def pairwise_distances(poses: Tensor) -> Tensor:
    """``[N, N]`` distances between the camera centres (exactly, not through cdist's matrix product)."""
    centres = poses[:, :, 3]
    return (centres[:, None] - centres[None]).norm(dim=-1)


def project(poses: Tensor, point: Tensor) -> Tensor:
    """``[N, 2]`` pinhole image coordinates (focal 1) of ``point [3]`` in each camera."""
    local = torch.einsum("nji,nj->ni", poses[:, :, :3], point - poses[:, :, 3])
    return local[:, :2] / -local[:, 2:3]


# ------------------------------------------------------------------------------------------- algebra


def test_a_similarity_is_the_matrix_it_says_and_inverts_and_composes() -> None:
    points = torch.randn(10, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    homogeneous = torch.cat([points, torch.ones(10, 1, dtype=torch.float64)], dim=1)
    moved = PLACEMENT.apply_points(points)
    assert torch.allclose(moved, (homogeneous @ PLACEMENT.matrix().T)[:, :3], atol=1e-12)
    assert torch.allclose(PLACEMENT.inverse().apply_points(moved), points, atol=1e-12)
    other = Similarity(torch.from_numpy(rotation("z", 10.0)), torch.tensor([1.0, 2.0, 3.0],
                                                                              dtype=torch.float64), 2.5)
    assert torch.allclose(PLACEMENT.then(other).matrix(), other.matrix() @ PLACEMENT.matrix(), atol=1e-12)
    assert not PLACEMENT.is_identity and Similarity.identity().is_identity


def test_moving_a_rig_keeps_its_poses_rigid_and_every_pixel_where_it_was() -> None:
    canonical = torch.from_numpy(arc_rig())
    moved = PLACEMENT.apply_poses(canonical)
    axes = moved[:, :, :3]
    assert torch.allclose(axes.transpose(1, 2) @ axes, torch.eye(3, dtype=torch.float64).expand(40, 3, 3),
                          atol=1e-12)
    assert torch.allclose(torch.linalg.det(axes), torch.ones(40, dtype=torch.float64), atol=1e-12)
    # Distances scale by exactly the scale; relative rotations do not change.
    expected = PLACEMENT.scale * pairwise_distances(canonical)
    assert torch.allclose(pairwise_distances(moved), expected, atol=1e-10)
    relative = canonical[0, :, :3].T @ canonical[:, :, :3]
    assert torch.allclose(axes[0].T @ axes, relative, atol=1e-12)
    # A point of the scene moved with the cameras projects to the same image coordinates.
    point = torch.tensor([0.3, -0.2, 0.4], dtype=torch.float64)
    assert torch.allclose(project(moved, PLACEMENT.apply_points(point)), project(canonical, point),
                          atol=1e-10)


def test_the_identity_returns_the_very_tensors_it_was_given() -> None:
    poses = torch.from_numpy(arc_rig()).float()
    points = torch.randn(5, 3)
    identity = Similarity.identity()
    assert identity.apply_poses(poses).data_ptr() == poses.data_ptr()
    assert identity.apply_points(points) is points


def test_rotation_onto_z_is_the_smallest_rotation_and_handles_both_poles() -> None:
    direction = torch.tensor([0.3, -0.4, 0.8], dtype=torch.float64)
    turn = rotation_onto_z(direction)
    z = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    assert torch.allclose(turn @ (direction / direction.norm()), z, atol=1e-12)
    angle = math.degrees(math.acos(0.8 / float(direction.norm())))
    assert rotation_angle_degrees(turn) == pytest.approx(angle, abs=1e-9)  # no extra yaw
    assert torch.equal(rotation_onto_z(torch.tensor([0.0, 0.0, 2.0])), torch.eye(3, dtype=torch.float64))
    flip = rotation_onto_z(torch.tensor([0.0, 0.0, -1.0]))
    assert torch.allclose(flip @ torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64),
                          torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
    assert torch.allclose(torch.linalg.det(flip), torch.tensor(1.0, dtype=torch.float64))


# ------------------------------------------------------------------------------ normalising captures


@pytest.mark.parametrize("arc_degrees", [360.0, 120.0])
def test_an_off_centre_scaled_tilted_rig_comes_out_centred_upright_and_at_unit_scale(
        arc_degrees: float) -> None:
    """The rig of a file placed anywhere, tilted and scaled comes out as the canonical rig up to a yaw:
    its focus at the origin, its cameras' right axes horizontal, the median camera distance 4."""
    canonical = arc_rig(arc_degrees=arc_degrees)
    poses = placed(canonical)
    result = normalising_similarity(poses, tolerance=EXACT)
    normalised = result.transform.apply_poses(poses)
    assert result.snapped == ()
    assert focus_of_attention(normalised).norm() < 1e-9
    assert normalised[:, 2, 0].abs().max() < 1e-9  # right axes horizontal: no roll, so upright
    assert float(mean_up(normalised)[2]) > 0.9
    assert float(camera_distances(normalised).median()) == pytest.approx(TARGET_CAMERA_DISTANCE, rel=1e-12)
    # Up to a yaw, the canonical rig: heights and horizontal radii about the focus agree.
    reference = torch.from_numpy(canonical)
    reference_centres = reference[:, :, 3] - focus_of_attention(reference)
    factor = TARGET_CAMERA_DISTANCE / float(reference_centres.norm(dim=-1).median())
    assert torch.allclose(normalised[:, 2, 3], factor * reference_centres[:, 2], atol=1e-9)
    assert torch.allclose(normalised[:, :2, 3].norm(dim=-1), factor * reference_centres[:, :2].norm(dim=-1),
                          atol=1e-9)


def test_where_a_file_puts_a_capture_does_not_change_where_normalising_puts_it() -> None:
    canonical = arc_rig(arc_degrees=150.0, seed=3)
    first = placed(canonical)
    second = placed(canonical, Similarity(torch.from_numpy(rotation("y", 80.0) @ rotation("x", -15.0)),
                                          torch.tensor([-400.0, 2.0, 0.1], dtype=torch.float64), 120.0))
    a = normalising_similarity(first, tolerance=EXACT).transform.apply_poses(first)
    b = normalising_similarity(second, tolerance=EXACT).transform.apply_poses(second)
    # The same rig up to a yaw: every height and every horizontal radius is the same.
    assert torch.allclose(a[:, 2, 3], b[:, 2, 3], atol=1e-9)
    assert torch.allclose(a[:, :2, 3].norm(dim=-1), b[:, :2, 3].norm(dim=-1), atol=1e-9)
    assert torch.allclose(a[:, 2, :3], b[:, 2, :3], atol=1e-9)  # the z row of every camera's axes


def test_the_mean_up_tilts_toward_the_content_on_a_partial_arc_and_the_vertical_does_not() -> None:
    """Cameras pitched down at the content from one side: their up axes lean toward it, so their
    mean is not the vertical; the direction perpendicular to all their right axes is."""
    poses = torch.from_numpy(arc_rig(arc_degrees=90.0, height=2.5))
    z = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    tilt = math.degrees(math.acos(float(mean_up(poses) @ z)))
    assert tilt > 10.0
    assert float(vertical_direction(poses) @ z) == pytest.approx(1.0, abs=1e-12)
    by_up = normalising_similarity(poses, orientation="up", tolerance=EXACT).transform.apply_poses(poses)
    assert by_up[:, 2, 0].abs().max() > 0.1  # right axes no longer horizontal: the frame is tilted


def test_the_vertical_of_a_forward_facing_rig_falls_back_to_the_mean_up() -> None:
    """Right axes all (nearly) parallel: the vertical is the mean up made perpendicular to them."""
    rng = np.random.default_rng(1)
    poses = np.stack([look_at(np.array([x, -5.0, z]), np.array([0.0, 10.0, 0.0]) + rng.uniform(-0.1, 0.1, 3))
                      for x in np.linspace(-0.5, 0.5, 5) for z in np.linspace(-0.3, 0.3, 4)])
    tilted = placed(poses)
    up = vertical_direction(tilted)
    expected = PLACEMENT.rotation @ torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    assert math.degrees(math.acos(min(1.0, float(up @ expected)))) < 1.0
    assert is_forward_facing(tilted) and not is_forward_facing(placed(arc_rig()))


def test_cameras_that_look_away_do_not_move_the_focus() -> None:
    """A phone capture's first frames of the room: axes that pass far from the content, which is
    behind them. The least-squares focus over all axes moves; the focus of attention does not."""
    inward = arc_rig(30, arc_degrees=360.0, seed=5)
    outward = np.stack([look_at(np.array([4.0, 0.0, 1.5]) * s, np.array([4.0, 0.0, 1.5]) * s
                                + np.array([2.0, 1.0 + s, 0.0])) for s in (1.0, 1.1, 0.9, 1.2)])
    poses = torch.from_numpy(np.concatenate([inward, outward]))
    target = focus_of_attention(torch.from_numpy(inward))
    assert (focus_of_attention(poses) - target).norm() < 1e-9
    plain = focus_point(blender_cameras(poses))
    assert (plain.double() - target).norm() > 0.3


def test_sparse_points_centre_the_capture_on_the_content_not_on_where_the_cameras_aim() -> None:
    """Cameras aimed at a point 0.8 beside the objects; the foreground points (the objects) set the
    centre, the walls far behind do not; too few points fall back to the focus."""
    rng = np.random.default_rng(2)
    aim = np.array([0.8, 0.0, 0.0])
    poses_canonical = arc_rig(arc_degrees=360.0, target=tuple(aim), seed=2)
    objects = rng.uniform(-0.5, 0.5, (400, 3)) * np.array([1.0, 1.0, 0.6])  # middle at the origin
    back_wall = rng.uniform(-1, 1, (300, 3)) * np.array([0.1, 10.0, 3.0]) + np.array([12.0, 0.0, 0.0])
    side_wall = rng.uniform(-1, 1, (300, 3)) * np.array([10.0, 0.1, 3.0]) + np.array([0.0, -12.0, 0.0])
    walls = np.concatenate([back_wall, side_wall])
    points = PLACEMENT.apply_points(torch.from_numpy(np.concatenate([objects, walls])))
    poses = placed(poses_canonical)
    result = normalising_similarity(poses, points=points, centre="points", tolerance=EXACT)
    assert result.centre_from == "points"
    assert (result.centre - PLACEMENT.apply_points(torch.zeros(3, dtype=torch.float64))).norm() \
        < 0.05 * PLACEMENT.scale
    few = normalising_similarity(poses, points=points[:5], centre="points", tolerance=EXACT)
    assert few.centre_from == "focus"
    assert (few.centre - PLACEMENT.apply_points(torch.from_numpy(aim))).norm() < 0.05 * PLACEMENT.scale


# ----------------------------------------------------------------------------- rigs left as they are


def test_a_blender_rig_at_the_origin_is_left_exactly_as_it_is() -> None:
    """The demo's (Blender-layout) training cameras: 4 units from the origin, looking at it, ``+z`` up.
    The estimate is within the snap tolerance of the identity in every component, so it *is* the
    identity: the poses, and so the scene box, are bit for bit today's."""
    poses = torch.from_numpy(camera_poses("train", 100, 0)[:, :3, :4]).float()
    result = normalising_similarity(poses)
    assert result.transform.is_identity
    assert set(result.snapped) == {"rotation", "translation", "scale"}
    assert torch.equal(result.transform.apply_poses(poses), poses)
    before = scene_box_from_cameras(blender_cameras(poses))
    after = scene_box_from_cameras(blender_cameras(result.transform.apply_poses(poses)))
    assert torch.equal(before.lower, after.lower) and torch.equal(before.upper, after.upper)
    # The NeRF-synthetic scenes' cameras are 4.03 units out: still the identity.
    lego_like = poses.clone()
    lego_like[:, :, 3] *= 4.0311 / 4.0
    assert normalising_similarity(lego_like).transform.is_identity


def test_an_llff_capture_as_the_loader_returns_it_is_a_fixed_point_of_the_forward_rules() -> None:
    rng = np.random.default_rng(4)
    raw = np.stack([look_at(np.array([x, y, 3.0]), np.array([0.0, 0.0, -20.0]) + rng.uniform(-0.5, 0.5, 3),
                            up=np.array([0.0, 1.0, 0.0]))
                    for x in np.linspace(-1, 1, 4) for y in np.linspace(-0.6, 0.6, 3)])
    raw = PLACEMENT.apply_poses(torch.from_numpy(raw)).numpy()
    bounds = rng.uniform(2.0, 3.0, (12, 1)) * np.array([[1.0, 6.0]]) * PLACEMENT.scale
    loaded, llff_scale, _ = normalize_poses(raw, float(bounds[:, 0].min()))
    rules = {"orientation": "average", "centre": "poses", "scale": "depth_bounds"}
    # From the file's own frame, the rules reproduce the loader's normalisation...
    fresh = normalising_similarity(torch.from_numpy(raw), depth_bounds=torch.from_numpy(bounds),
                                   tolerance=EXACT, **rules)
    assert fresh.transform.scale == pytest.approx(llff_scale, rel=1e-12)
    assert torch.allclose(fresh.transform.apply_poses(torch.from_numpy(raw)), torch.from_numpy(loaded),
                          atol=1e-9)
    # ...and on the loader's output they are the identity.
    scaled_bounds = torch.from_numpy(bounds * llff_scale)
    again = normalising_similarity(torch.from_numpy(loaded), depth_bounds=scaled_bounds, **rules)
    assert again.transform.is_identity


def test_bad_inputs_are_refused_naming_what_is_wrong() -> None:
    poses = torch.from_numpy(arc_rig())
    with pytest.raises(ValueError, match="camera_to_world"):
        normalising_similarity(poses[:, :2])
    with pytest.raises(ValueError, match="orientation"):
        normalising_similarity(poses, orientation="pca")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="depth_bounds"):
        normalising_similarity(poses, scale="depth_bounds")
    still = torch.eye(4, dtype=torch.float64)[None, :3].repeat(3, 1, 1)
    with pytest.raises(ValueError, match="all at the centre"):
        normalising_similarity(still, centre="poses")


# ------------------------------------------------------------------------------------------ downscale


@pytest.mark.parametrize(("width", "height", "target", "expected"), [
    (1080, 1920, 1 << 17, 4),   # fox: 270x480, today's factor
    (605, 806, 1 << 17, 2),     # a 605x806 phone capture: 302x403, not 151x201
    (100, 100, 1 << 17, 1),     # already below the budget: never upsampled
    (400, 400, 1 << 17, 1),     # 160k is nearer 131k than 40k is
    (4032, 3024, 1 << 17, 10),  # 403x302 (121.7k) is nearer than 448x336 (150.5k)
])
def test_the_downscale_gives_the_image_nearest_the_pixel_budget(width: int, height: int, target: int,
                                                               expected: int) -> None:
    assert downscale_for_pixels(width, height, target) == expected


def test_the_downscale_keeps_to_the_factors_given_and_ties_keep_more_pixels() -> None:
    assert downscale_for_pixels(4032, 3024, 1 << 17, factors=[8]) == 8    # fern: only images_8/
    assert downscale_for_pixels(4032, 3024, 1 << 17, factors=[2, 4, 8]) == 8
    assert downscale_for_pixels(400, 400, 200 * 200, factors=[1, 2, 4]) == 2
    # 64x64 = 4096 and 32x32 = 1024 are equally far (a factor 2) from 2048: the larger image wins.
    assert downscale_for_pixels(64, 64, 2048) == 1
    with pytest.raises(ValueError, match="no usable downscale"):
        downscale_for_pixels(10, 10, 50, factors=[20])
    with pytest.raises(ValueError, match="target_pixels"):
        downscale_for_pixels(10, 10, 0)
