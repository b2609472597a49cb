"""Training ray batches say which training image each ray comes from."""

from __future__ import annotations

from pathlib import Path

import torch

from nerf_lightning.data.datamodule import NerfDataModule


def test_train_rays_carry_their_image_index(tiny_scene: Path) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), rays_per_batch=512, cache=False)
    datamodule.setup("fit")
    batch = datamodule.train_batch(3, torch.device("cpu"))
    cameras = datamodule.splits["train"].cameras
    assert batch.camera_indices is not None and batch.camera_indices.dtype == torch.int64
    assert datamodule.num_train_images == len(cameras) > 1
    assert len(set(batch.camera_indices.tolist())) > 1  # rays from several images
    # Each ray starts at the centre of the camera it names, and its target is that image's pixel.
    centres = cameras.camera_to_world[:, :, 3]
    assert torch.allclose(batch.rays.origins, centres[batch.camera_indices])
    images = datamodule.splits["train"].images
    first, end = images.offsets[batch.camera_indices], images.offsets[batch.camera_indices + 1]
    assert bool(((batch.pixel_indices >= first) & (batch.pixel_indices < end)).all())
    assert datamodule.image_batch("val", 0, torch.device("cpu")).camera_indices is None
