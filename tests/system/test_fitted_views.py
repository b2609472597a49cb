"""A training photo rendered as fitted (``image_batch(..., as_fitted=True)``): with its own appearance code
and camera correction, as its training steps saw it, where any other view is rendered as a new one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from nerf_lightning.cameras import CameraRefinement
from nerf_lightning.core.errors import CheckpointError
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.fields import HashGridField
from nerf_lightning.samplers import Uniform
from nerf_lightning.system.module import NerfModule

CPU = torch.device("cpu")


def _model(tiny_scene: Path) -> tuple[NerfModule, NerfDataModule]:
    """A field with 4-number appearance codes and a camera correction per training photo, every photo's
    different (random weights: what is compared is two renders, not a fit)."""
    torch.manual_seed(0)
    field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16,
                          appearance_dim=4)
    refinement = CameraRefinement()
    module = NerfModule(field=field, sampler=Uniform(num_samples=16), camera_refinement=refinement).eval()
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False)
    datamodule.setup("fit")
    assert datamodule.scene_box is not None
    module.set_scene_box(datamodule.scene_box)
    field.set_num_images(datamodule.num_train_images)
    refinement.set_num_cameras(datamodule.num_train_images)
    with torch.no_grad():
        field.encoding.table.uniform_(-1.0, 1.0)
        field.density_mlp[-1].bias.fill_(3.0)  # dense enough that colour shows
        field.appearance.codes.normal_(0.0, 10.0)
        refinement.corrections.normal_(0.0, 0.05)
    return module, datamodule


def test_a_training_photo_as_fitted_has_its_code_and_its_camera_correction(tiny_scene: Path) -> None:
    module, datamodule = _model(tiny_scene)
    index = 2
    fitted = datamodule.image_batch("train", index, CPU, as_fitted=True)
    plain = datamodule.image_batch("train", index, CPU)
    assert plain.camera_indices is None and fitted.camera_indices is not None
    assert torch.equal(fitted.camera_indices, torch.full((len(fitted),), index))
    assert torch.equal(fitted.rays.directions, plain.rays.directions) and torch.equal(fitted.rgb, plain.rgb)

    module.eval_chunk_rays = 100  # several chunks, each with its slice of the indices
    as_fitted = module.render_image(fitted)
    # The same photo as a new view, its rays moved by its camera's correction and its code the evaluation
    # code: what the as-fitted render must equal.
    moved = module.camera_refinement.correct_rays(plain.rays, fitted.camera_indices, learn=False)
    embedding = module.field.appearance_codes
    with embedding.evaluation_code(embedding.codes[index].detach()):
        expected = module.render_image(replace(plain, rays=moved))
    torch.testing.assert_close(as_fitted.rgb, expected.rgb, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(as_fitted.depth, expected.depth, rtol=1e-5, atol=1e-5)
    # As a new view (mean code, no correction) it looks different, far beyond the tolerance above; so
    # do its rays under another photo's code and correction.
    assert float((module.render_image(plain).rgb - as_fitted.rgb).abs().max()) > 0.01
    other = replace(fitted, camera_indices=torch.full_like(fitted.camera_indices, index + 1))
    assert float((module.render_image(other).rgb - as_fitted.rgb).abs().max()) > 0.01


def test_a_photo_past_the_models_tables_is_one_line(tiny_scene: Path) -> None:
    """A training photo the model holds no code or correction for (a checkpoint of another capture)."""
    module, datamodule = _model(tiny_scene)
    module.field.set_num_images(2)
    module.camera_refinement.set_num_cameras(2)
    expected = r"^the model: training photo 2 has no row in its appearance codes \(2 rows\): expected the "
    with pytest.raises(CheckpointError, match=expected):
        module.render_image(datamodule.image_batch("train", 2, CPU, as_fitted=True))
    module.render_image(datamodule.image_batch("train", 1, CPU, as_fitted=True))  # within the tables


@pytest.mark.parametrize("split", ["val", "test"])
def test_only_training_photos_render_as_fitted(tiny_scene: Path, split: str) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False)
    datamodule.setup("fit" if split == "val" else "test")
    with pytest.raises(ValueError, match=f"^as_fitted .*split must be 'train', got '{split}'$"):
        datamodule.image_batch(split, 0, CPU, as_fitted=True)
