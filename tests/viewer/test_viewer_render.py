"""The viewer's rendering core without a browser: camera conventions, frames, outputs, pacing."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from nerf_lightning.cameras.geometry import generate_rays
from nerf_lightning.core.types import SceneBox
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.fields import HashGridField
from nerf_lightning.samplers import OccupancyGrid, Uniform
from nerf_lightning.system.module import NerfModule
from nerf_lightning.viewer.cameras import ViewCamera, up_direction, vertical_fov, viser_pose
from nerf_lightning.viewer.pacing import PixelBudget, TimeShare
from nerf_lightning.viewer.render import OUTPUTS, ViewScene, frame_pixels, render_view


@pytest.fixture(scope="module")
def datamodule(tiny_scene: Path) -> NerfDataModule:
    module = NerfDataModule(root=str(tiny_scene), cache=False)
    module.setup("fit")
    return module


def _small_model(datamodule: NerfDataModule, eval_chunk_rays: int = 8192) -> NerfModule:
    torch.manual_seed(0)
    field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16)
    model = NerfModule(field=field, sampler=Uniform(), eval_chunk_rays=eval_chunk_rays)
    assert datamodule.scene_box is not None
    model.set_scene_box(datamodule.scene_box)
    return model


def _training_view(datamodule: NerfDataModule, index: int) -> ViewCamera:
    """The view a browser reports when it looks through training camera ``index``."""
    cameras = datamodule.splits["train"].cameras
    wxyz, position = viser_pose(cameras.camera_to_world[index])
    aspect = float(cameras.width[index]) / float(cameras.height[index])
    return ViewCamera.from_viser(wxyz, position, vertical_fov(cameras, index), aspect)


def test_viser_pose_round_trip() -> None:
    generator = torch.Generator().manual_seed(3)
    for _ in range(5):
        q, _ = torch.linalg.qr(torch.randn(3, 3, generator=generator))
        rotation = q * torch.sign(torch.det(q))  # a proper rotation
        pose = torch.cat([rotation, torch.randn(3, 1, generator=generator)], dim=1)
        wxyz, position = viser_pose(pose)
        assert np.isclose(np.linalg.norm(wxyz), 1.0)
        back = ViewCamera.from_viser(wxyz, position, 1.0, 1.5).camera_to_world
        torch.testing.assert_close(back, pose, atol=1e-5, rtol=0)


def test_viser_camera_looks_along_plus_z_of_opencv() -> None:
    # viser's identity rotation looks along world +z with +y down: OpenGL's -z axis is world +z.
    view = ViewCamera.from_viser(np.array([1.0, 0, 0, 0]), np.zeros(3), 1.0, 1.0)
    forward, up = -view.camera_to_world[:, 2], view.camera_to_world[:, 1]
    torch.testing.assert_close(forward, torch.tensor([0.0, 0.0, 1.0]))
    torch.testing.assert_close(up, torch.tensor([0.0, -1.0, 0.0]))


def test_browser_view_through_a_training_camera_casts_its_rays(datamodule: NerfDataModule) -> None:
    cameras = datamodule.splits["train"].cameras
    index = 3
    width, height = int(cameras.width[index]), int(cameras.height[index])
    view = _training_view(datamodule, index)
    assert view.size(width * height, 4096) == (width, height)
    expected = datamodule.image_batch("train", index, torch.device("cpu")).rays
    cols = torch.arange(width).repeat(height)
    rows = torch.arange(height).repeat_interleave(width)
    assert datamodule.scene_box is not None
    rays = generate_rays(view.cameras(width, height), torch.zeros_like(cols), cols, rows,
                         datamodule.scene_box, datamodule.min_near, undistort=False)
    for name in ("origins", "directions", "near", "far"):
        torch.testing.assert_close(getattr(rays, name), getattr(expected, name), atol=1e-5, rtol=1e-5)


def test_render_view_is_the_evaluation_render_of_that_view(datamodule: NerfDataModule) -> None:
    model = _small_model(datamodule, eval_chunk_rays=100)  # 24 x 24 in bands of 4 rows
    model.train()
    index = 1
    view = _training_view(datamodule, index)
    image = render_view(model, ViewScene.from_datamodule(datamodule), view, 24, 24)
    assert model.training, "the frame must leave the model in the mode it found it in"
    assert image is not None
    model.eval()
    reference = model.render_image(datamodule.image_batch("train", index, torch.device("cpu")))
    for name in ("rgb", "depth", "opacity", "samples_per_ray"):
        torch.testing.assert_close(getattr(image, name), getattr(reference, name), atol=1e-5, rtol=1e-4)


def test_a_cancelled_frame_stops_between_bands(datamodule: NerfDataModule) -> None:
    model = _small_model(datamodule, eval_chunk_rays=48)  # 2 rows a band at 24 pixels wide
    asked = []

    def cancelled() -> bool:
        asked.append(1)
        return len(asked) >= 2

    view = _training_view(datamodule, 0)
    assert render_view(model, ViewScene.from_datamodule(datamodule), view, 24, 24, cancelled) is None
    assert len(asked) == 2


def test_every_output_is_an_image_and_samples_differ_from_rgb(datamodule: NerfDataModule) -> None:
    model = _small_model(datamodule)
    image = render_view(model, ViewScene.from_datamodule(datamodule), _training_view(datamodule, 0), 32, 24)
    assert image is not None
    frames = {output: frame_pixels(image, output) for output in OUTPUTS}
    for output, frame in frames.items():
        assert frame.shape == (24, 32, 3) and frame.dtype == np.uint8, output
    assert not np.array_equal(frames["rgb"], frames["samples per ray"])
    with pytest.raises(ValueError, match="unknown viewer output 'normals'; expected one of rgb, depth"):
        frame_pixels(image, "normals")


def test_view_size_keeps_the_aspect_within_the_cap() -> None:
    view = ViewCamera(torch.eye(4)[:3], math.radians(60), 16 / 9)
    width, height = view.size(160 * 90, 4096)
    assert (width, height) == (160, 90)
    assert view.size(10**9, 320) == (320, 180)
    assert view.size(0, 320) == (1, 1)


def test_up_direction_follows_the_cameras(datamodule: NerfDataModule) -> None:
    # The demo scene is +z up (Blender's convention).
    assert up_direction(datamodule.splits["train"].cameras)[2] > 0.5


def test_pixel_budget_learns_the_frame_cost() -> None:
    budget = PixelBudget(min_pixels=16, initial_seconds_per_pixel=1e-3, smoothing=1.0)
    assert budget.pixels(0.1) == 100
    budget.observe(pixels=10_000, seconds=0.1)  # 1e-5 s per pixel
    assert budget.pixels(0.1) == 10_000
    assert budget.pixels(0.0) == 16


def test_time_share_spaces_work() -> None:
    now = [0.0]
    share = TimeShare(0.1, clock=lambda: now[0])
    assert share.allowed()
    share.spent(0.5)  # then 4.5 s of other work
    now[0] = 4.4
    assert not share.allowed()
    now[0] = 4.6
    assert share.allowed()
    with pytest.raises(ValueError, match=r"rendering share must be in \(0, 1\]"):
        TimeShare(0.0)


def test_occupancy_grid_shows_its_occupied_cells() -> None:
    grid = OccupancyGrid(resolution=8)
    grid.set_scene_box(SceneBox.cube(1.0))
    grid.occupied.zero_()
    grid.occupied[[0, 100, 511]] = True
    points = grid.occupied_points(max_points=10)
    assert points is not None and points.shape == (3, 3)
    assert torch.equal(grid._cell_of(points).sort().values, torch.tensor([0, 100, 511]))
    grid.occupied.fill_(True)
    assert grid.occupied_points(max_points=50).shape == (50, 3)
    assert Uniform().occupied_points(10) is None  # samplers without a notion of occupied space draw nothing
