"""Several rays per pixel (``NerfDataModule.supersample``): each through its own cell of the pixel."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.data.batch import RayBatch
from nerf_lightning.data.datamodule import NerfDataModule

CPU = torch.device("cpu")


def image_points(cameras: Cameras, camera: Tensor, directions: Tensor) -> Tensor:
    """``[R, 2]`` where rays of (pinhole) ``cameras`` with world ``directions`` cross the image plane."""
    rotation = cameras.camera_to_world[camera][:, :, :3].double()  # [R, 3, 3]
    local = torch.einsum("rji,rj->ri", rotation, directions.double())  # world to camera (OpenGL axes)
    depth = -local[:, 2]
    fx, fy, cx, cy = (getattr(cameras, name)[camera].double() for name in ("fx", "fy", "cx", "cy"))
    u = fx * local[:, 0] / depth + cx
    v = -fy * local[:, 1] / depth + cy
    return torch.stack([u, v], dim=-1)


def test_training_rays_pass_through_their_pixels_cell_by_cell(tiny_scene: Path) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), rays_per_batch=512, cache=False, supersample=2)
    datamodule.setup("fit")
    batch = datamodule.train_batch(5, CPU)
    assert batch.rays_per_pixel == 4 and len(batch) == 512
    assert batch.rgb.shape == (128, 3)
    assert batch.pixel_indices is not None and batch.pixel_indices.shape == (128,)
    split = datamodule.splits["train"]
    assert batch.camera_indices is not None
    camera = batch.camera_indices
    assert torch.equal(camera.unflatten(0, (128, 4)), camera[::4, None].expand(128, 4))
    # The pixel each ray's target is, and the point of that pixel the ray crosses the image plane at.
    local = batch.pixel_indices - split.images.offsets[camera[::4]]
    width = split.cameras.width[camera[::4]]
    pixel = torch.stack([local % width, local // width], dim=-1).double()  # [P, 2] (col, row)
    within = image_points(split.cameras, camera, batch.rays.directions).unflatten(0, (128, 4))
    within = within - pixel[:, None]  # [P, 4, 2] in the pixel's square
    cell = torch.tensor([[0, 0], [1, 0], [0, 1], [1, 1]], dtype=torch.float64)
    assert torch.equal(torch.floor(within * 2 + 1e-9).clamp(0, 1), cell.expand(128, 4, 2))
    assert float((within - (cell + 0.5) / 2).abs().max()) > 0.1  # drawn within the cell, not its centre
    assert torch.equal(datamodule.train_batch(5, CPU).rays.directions, batch.rays.directions)
    assert not torch.equal(datamodule.train_batch(6, CPU).rays.directions, batch.rays.directions)


def test_training_batches_before_the_first_supersampled_step_take_pixel_centres(tiny_scene: Path) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), rays_per_batch=512, cache=False, supersample=2,
                                supersample_from_step=3)
    datamodule.setup("fit")
    early, late = datamodule.train_batch(2, CPU), datamodule.train_batch(3, CPU)
    assert (early.rays_per_pixel, len(early), early.rgb.shape[0]) == (1, 512, 512)
    assert (late.rays_per_pixel, len(late), late.rgb.shape[0]) == (4, 512, 128)
    plain = NerfDataModule(root=str(tiny_scene), rays_per_batch=512, cache=False)
    plain.setup("fit")
    assert torch.equal(early.rays.directions, plain.train_batch(2, CPU).rays.directions)
    # Scored renders follow the training steps: with none trained yet, one ray through each pixel's
    # centre (after supersampled steps, and from a checkpoint: tests/system/test_supersampling.py).
    assert datamodule.image_batch("val", 0, CPU).rays_per_pixel == 1


def test_image_batches_cross_each_pixel_at_its_cell_centres(tiny_scene: Path) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False, supersample=3)
    datamodule.setup("fit")
    batch = datamodule.image_batch("val", 1, CPU)
    height, width = batch.image_size or (0, 0)
    assert batch.rays_per_pixel == 9 and len(batch) == 9 * height * width
    assert batch.rgb.shape == (height * width, 3)
    cameras = datamodule.splits["val"].cameras
    points = image_points(cameras, torch.ones(len(batch), dtype=torch.int64), batch.rays.directions)
    rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    cells = torch.arange(9)
    centres = (torch.stack([cells % 3, cells // 3], dim=-1) + 0.5) / 3  # [9, 2]
    expected = torch.stack([cols.reshape(-1), rows.reshape(-1)], dim=-1)[:, None] + centres  # [P, 9, 2]
    torch.testing.assert_close(points.unflatten(0, (-1, 9)), expected.double(), atol=1e-4, rtol=0)
    # One ray through each centre on request: the batch a single-ray data module makes.
    single = datamodule.image_batch("val", 1, CPU, centres=True)
    plain = NerfDataModule(root=str(tiny_scene), cache=False)
    plain.setup("fit")
    assert single.rays_per_pixel == 1
    assert torch.equal(single.rays.directions, plain.image_batch("val", 1, CPU).rays.directions)


def test_a_pixel_is_the_mean_of_its_rays(tiny_scene: Path) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False, supersample=2)
    datamodule.setup("fit")
    batch = datamodule.image_batch("val", 0, CPU)
    values = torch.arange(len(batch), dtype=torch.float32)[:, None]
    torch.testing.assert_close(batch.pixel_means(values)[:3, 0], torch.tensor([1.5, 5.5, 9.5]))
    assert batch.pixel_means(values[:10]).shape == (2, 1)  # a cut batch keeps its whole pixels


def test_supersample_settings_are_checked(tiny_scene: Path) -> None:
    with pytest.raises(ValueError, match="supersample"):
        NerfDataModule(root=str(tiny_scene), supersample=0)
    with pytest.raises(ValueError, match="supersample_from_step"):
        NerfDataModule(root=str(tiny_scene), supersample=2, supersample_from_step=-1)
    batch = NerfDataModule(root=str(tiny_scene), cache=False)
    batch.setup("fit")
    one = batch.image_batch("val", 0, CPU)
    with pytest.raises(ValueError, match="pixels at 4 rays per pixel"):
        RayBatch(rays=one.rays, rgb=one.rgb, background=one.background, sampler_seed=0, rays_per_pixel=4)
