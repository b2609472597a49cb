"""Training and rendering with several rays per pixel (``data.supersample``): a pixel is their mean."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from nerf_lightning.callbacks import ErrorFeedback
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.samplers import OccupancyGrid
from nerf_lightning.system.module import NerfModule


class _Outputs(pl.Callback):
    """The rays and per-pixel errors of every training step."""

    def __init__(self) -> None:
        self.rays: list[int] = []
        self.errors: list[int] = []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self.rays.append(int(outputs["num_rays"]))
        self.errors.append(len(outputs["ray_error"]))


@pytest.mark.slow
def test_training_scores_pixels_and_renders_average_their_rays(tiny_scene: Path) -> None:
    torch.manual_seed(0)
    datamodule = NerfDataModule(root=str(tiny_scene), rays_per_batch=256, steps_per_epoch=100,
                                supersample=2, pixel_selection="error")
    module = NerfModule(sampler=OccupancyGrid(resolution=16, update_every=2, warmup_steps=4))
    outputs = _Outputs()
    trainer = pl.Trainer(max_steps=6, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         limit_val_batches=0, enable_model_summary=False,
                         callbacks=[outputs, ErrorFeedback()])
    trainer.fit(module, datamodule)
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    # Every step renders its 256 rays (the sample limit cuts none here) and scores 64 pixels, whose
    # errors went to the error map.
    assert outputs.rays == [256] * 6 and outputs.errors == [64] * 6
    assert datamodule.error_map is not None and float(datamodule.error_map.errors.std()) > 0
    # A whole-image render: each pixel the mean of its four rays' renders.
    module.eval()
    batch = datamodule.image_batch("val", 0, module.device)
    height, width = batch.image_size or (0, 0)
    with torch.no_grad():
        image = module.render_image(batch)
        cells = [module.render_rays(batch.rays[k::4], batch.background)[0] for k in range(4)]
    rgb = torch.stack([out.rgb for out in cells]).mean(dim=0).clamp(0, 1).reshape(height, width, 3)
    depth = torch.stack([out.depth for out in cells]).mean(dim=0).reshape(height, width, -1)
    torch.testing.assert_close(image.rgb, rgb, atol=1e-5, rtol=0)
    torch.testing.assert_close(image.depth, depth, atol=1e-4, rtol=1e-5)
    assert image.target.shape == (height, width, 3)
    assert not torch.allclose(cells[0].rgb, cells[3].rgb)  # the cells' rays see different things


class _ScoredRays(pl.Callback):
    """The rays per pixel of every validation and test batch."""

    def __init__(self) -> None:
        self.val: list[int] = []
        self.test: list[int] = []

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                                batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.val.append(batch.rays_per_pixel)

    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                          batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.test.append(batch.rays_per_pixel)


def _module() -> NerfModule:
    return NerfModule(sampler=OccupancyGrid(resolution=16, update_every=2, warmup_steps=4))


def _fit_then_test(scene: Path, steps: int, checkpoint: Path) -> tuple[_ScoredRays, _ScoredRays]:
    """Fit ``steps`` steps with 2 x 2 rays per pixel from step 3 and test in the same trainer; then test
    the saved checkpoint with a fresh trainer, module and data module, as the ``test`` command does."""
    torch.manual_seed(0)
    def datamodule() -> NerfDataModule:
        return NerfDataModule(root=str(scene), rays_per_batch=256, steps_per_epoch=steps, supersample=2,
                              supersample_from_step=3)
    def trainer(callback: _ScoredRays, **kwargs: Any) -> pl.Trainer:
        return pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=1,
                          limit_test_batches=1, callbacks=[callback], **kwargs)
    fitted, restored = _ScoredRays(), _ScoredRays()
    fit = trainer(fitted, max_steps=steps)
    module, data = _module(), datamodule()
    fit.fit(module, data)
    fit.test(module, data)
    fit.save_checkpoint(checkpoint)
    trainer(restored).test(_module(), datamodule(), ckpt_path=str(checkpoint))
    return fitted, restored


@pytest.mark.slow
def test_scored_renders_take_the_rays_per_pixel_of_the_last_training_step(tiny_scene: Path,
                                                                          tmp_path: Path) -> None:
    # Three steps, all before supersample_from_step: the field only ever fitted pixel centres, and
    # every score renders one ray through each pixel's centre, also from the checkpoint.
    fitted, restored = _fit_then_test(tiny_scene, 3, tmp_path / "early.ckpt")
    assert fitted.val == [1] and fitted.test == [1] and restored.test == [1]
    # Four steps, the last on 2 x 2 rays: the scores average the four cells' centres.
    fitted, restored = _fit_then_test(tiny_scene, 4, tmp_path / "late.ckpt")
    assert fitted.val == [4] and fitted.test == [4] and restored.test == [4]
    # A checkpoint written before they recorded it is scored as every render was then: 2 x 2.
    checkpoint = torch.load(tmp_path / "early.ckpt", weights_only=False)
    del checkpoint[NerfDataModule.__qualname__]["supersampled"]
    torch.save(checkpoint, tmp_path / "older.ckpt")
    older = _ScoredRays()
    pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, limit_test_batches=1,
               callbacks=[older]).test(_module(), NerfDataModule(root=str(tiny_scene), supersample=2,
                                                                 supersample_from_step=3),
                                       ckpt_path=str(tmp_path / "older.ckpt"))
    assert older.test == [4]
