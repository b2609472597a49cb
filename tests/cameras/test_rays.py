"""Ray generation (``generate_rays``) against rays computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from nerf_lightning.cameras.geometry import Cameras, generate_rays, pixel_grid, subpixel_offsets
from nerf_lightning.core.types import SceneBox

BIG_BOX = SceneBox.cube(100.0)


def make_camera(
    c2w: torch.Tensor | None = None,
    fx: float = 10.0,
    fy: float = 10.0,
    cx: float = 5.0,
    cy: float = 5.0,
    size: tuple[int, int] = (10, 10),
    distortion: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0),
) -> Cameras:
    """One camera; ``c2w`` is ``[3, 4]`` (identity pose by default)."""
    if c2w is None:
        c2w = torch.eye(4)[:3]
    return Cameras(
        camera_to_world=c2w[None].float(),
        fx=torch.tensor([fx]),
        fy=torch.tensor([fy]),
        cx=torch.tensor([cx]),
        cy=torch.tensor([cy]),
        width=torch.tensor([size[0]]),
        height=torch.tensor([size[1]]),
        distortion=torch.tensor([distortion]),
    )


def rays_at(
    cameras: Cameras, cols: list[int], rows: list[int], box: SceneBox = BIG_BOX, min_near: float = 0.0
):
    n = len(cols)
    return generate_rays(
        cameras, torch.zeros(n, dtype=torch.long), torch.tensor(cols), torch.tensor(rows), box, min_near
    )


def normalized(v: list[float]) -> torch.Tensor:
    t = torch.tensor(v, dtype=torch.float64)
    return (t / t.norm()).float()


def rotation_xyz(ax: float, ay: float, az: float) -> torch.Tensor:
    cx, sx, cy, sy, cz, sz = (
        math.cos(ax),
        math.sin(ax),
        math.cos(ay),
        math.sin(ay),
        math.cos(az),
        math.sin(az),
    )
    rx = torch.tensor([[1, 0, 0], [0, cx, -sx], [0, sx, cx]], dtype=torch.float64)
    ry = torch.tensor([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]], dtype=torch.float64)
    rz = torch.tensor([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]], dtype=torch.float64)
    return rz @ ry @ rx


def test_identity_camera_pixel_ray() -> None:
    rays = rays_at(make_camera(), [2], [7])
    # pixel centre (2.5, 7.5); x right, y up (image rows go down), looking along -z
    expected = normalized([(2.5 - 5.0) / 10.0, -(7.5 - 5.0) / 10.0, -1.0])
    torch.testing.assert_close(rays.directions[0], expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(rays.origins[0], torch.zeros(3))


def test_rotated_translated_camera() -> None:
    rotation = rotation_xyz(0.3, -0.7, 1.1)
    translation = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    c2w = torch.cat([rotation, translation[:, None]], dim=1)
    rays = rays_at(make_camera(c2w), [2, 9, 0], [7, 0, 4])
    for i, (col, row) in enumerate([(2, 7), (9, 0), (0, 4)]):
        d_cam = torch.tensor([(col + 0.5 - 5.0) / 10.0, -(row + 0.5 - 5.0) / 10.0, -1.0], dtype=torch.float64)
        d_world = rotation @ d_cam
        torch.testing.assert_close(rays.directions[i], (d_world / d_world.norm()).float(), atol=1e-6, rtol=0)
        torch.testing.assert_close(rays.origins[i], translation.float())


def distort(x: float, y: float, k1: float, k2: float, p1: float, p2: float) -> tuple[float, float]:
    """OpenCV's forward distortion of a normalized image point."""
    r2 = x * x + y * y
    radial = 1.0 + k1 * r2 + k2 * r2 * r2
    return (
        x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x),
        y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y,
    )


def test_distorted_camera_undistorts_pixel_centres() -> None:
    """Pick undistorted points, distort them by hand and place the principal point so that a pixel
    centre lands exactly on the distorted point; its ray must go through the undistorted point."""
    dist = (-0.12, 0.03, 0.002, -0.001)
    fx, fy = 100.0, 90.0
    col, row = 70, 20
    for x, y in [(0.3, -0.2), (-0.45, 0.35), (0.05, 0.6)]:
        xd, yd = distort(x, y, *dist)
        cx, cy = col + 0.5 - fx * xd, row + 0.5 - fy * yd
        camera = make_camera(fx=fx, fy=fy, cx=cx, cy=cy, size=(200, 200), distortion=dist)
        rays = rays_at(camera, [col], [row])
        expected = normalized([x, -y, -1.0])
        torch.testing.assert_close(rays.directions[0], expected, atol=1e-4, rtol=0)


def test_near_far_from_scene_box() -> None:
    c2w = torch.eye(4)[:3].clone()
    c2w[2, 3] = 4.0  # at (0, 0, 4) looking along -z, at the origin
    camera = make_camera(c2w, fx=1.0, fy=1.0, cx=4.5, cy=4.5)
    box = SceneBox.cube(1.0)
    rays = rays_at(camera, [4, 0], [4, 0], box=box)  # pixel (4, 4): centre = principal point
    torch.testing.assert_close(rays.directions[0], torch.tensor([0.0, 0.0, -1.0]))
    torch.testing.assert_close(rays.near[0], torch.tensor(3.0))
    torch.testing.assert_close(rays.far[0], torch.tensor(5.0))
    assert rays.far[1] <= rays.near[1]  # direction (-4, 4, -1): misses the box
    clipped = rays_at(camera, [4], [4], box=box, min_near=3.5)
    torch.testing.assert_close(clipped.near[0], torch.tensor(3.5))


def test_directions_are_unit_length() -> None:
    c2w = torch.cat([rotation_xyz(0.2, 0.4, -0.9), torch.tensor([[0.5], [1.0], [-2.0]])], dim=1)
    camera = make_camera(
        c2w, fx=12.0, fy=11.0, cx=6.0, cy=4.0, size=(12, 9), distortion=(0.05, -0.01, 0.001, 0.002)
    )
    cols, rows = pixel_grid(12, 9)
    rays = generate_rays(camera, torch.zeros_like(cols), cols, rows, BIG_BOX)
    torch.testing.assert_close(rays.directions.norm(dim=-1), torch.ones(len(cols)), atol=1e-6, rtol=0)


def test_subpixel_offsets_cover_each_pixel_cell_by_cell() -> None:
    centres = subpixel_offsets(2, 3)
    cell = torch.tensor([[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]])
    torch.testing.assert_close(centres, cell.repeat(3, 1), atol=0, rtol=0)  # pixel after pixel
    assert torch.equal(subpixel_offsets(1, 2), torch.full((2, 2), 0.5))
    drawn = subpixel_offsets(3, 500, generator=torch.Generator().manual_seed(0))
    # Each drawn point lies in its own cell of the 3 x 3 grid, and the points spread over the cell.
    within = (drawn * 3).unflatten(0, (500, 9))  # [pixel, cell, 2] in cell units
    corner = torch.floor(within)
    expected = torch.stack([torch.arange(9) % 3, torch.arange(9) // 3], dim=-1).float()
    assert torch.equal(corner, expected.expand_as(corner))
    spread = within - corner
    assert float(spread.min()) < 0.01 and float(spread.max()) > 0.99
    again = subpixel_offsets(3, 500, generator=torch.Generator().manual_seed(0))
    assert torch.equal(drawn, again)
    with pytest.raises(ValueError, match="per_axis"):
        subpixel_offsets(0, 1)


def test_rays_through_points_of_the_pixel() -> None:
    camera = make_camera()
    index, cols, rows = torch.zeros(2, dtype=torch.long), torch.tensor([2, 2]), torch.tensor([7, 7])
    centre = generate_rays(camera, index, cols, rows, BIG_BOX)
    halves = generate_rays(camera, index, cols, rows, BIG_BOX, offsets=torch.full((2, 2), 0.5))
    assert torch.equal(halves.directions, centre.directions)
    points = torch.tensor([[0.0, 0.0], [0.9, 0.2]])
    corners = generate_rays(camera, index, cols, rows, BIG_BOX, offsets=points)
    for ray, (u, v) in zip(corners.directions, [(2.0, 7.0), (2.9, 7.2)], strict=True):
        expected = normalized([(u - 5.0) / 10.0, -(v - 5.0) / 10.0, -1.0])
        torch.testing.assert_close(ray, expected, atol=1e-6, rtol=0)
