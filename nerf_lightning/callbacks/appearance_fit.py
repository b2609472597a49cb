"""NeRF-W's appearance evaluation in `test`: a code fitted to each view's left half, scored on the right."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, cast

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from nerf_lightning.core.types import Rays
from nerf_lightning.data.batch import RayBatch
from nerf_lightning.data.seeding import derive_seed
from nerf_lightning.evaluation.appearance_fit import HalfFitOptions, fit_left_render_right, right_half
from nerf_lightning.evaluation.masked import update_image_metrics
from nerf_lightning.fields.appearance import AppearanceEmbedding
from nerf_lightning.system.contract import RayRenderingModule, require
from nerf_lightning.system.image_render import ImageRender
from nerf_lightning.system.module import image_metrics


class AppearanceHalfFit(pl.Callback):
    """Scores each test view NeRF-W's way too, beside the headline ``test/psnr`` and ``test/ssim``.

    For every test view it fits one fresh appearance code (from the mean code, the field's weights
    frozen and unchanged) to random pixels of the view's left half (columns ``c`` with ``2 c < W``),
    renders the right half with that code and logs, as means over the views:

    * ``test/psnr_right_half_fit``, ``test/ssim_right_half_fit``: the right half with the fitted code;
    * ``test/psnr_right_half_mean``, ``test/ssim_right_half_mean``: the same right half of the
      headline render (mean code), the fair comparison.

    Training photos (``--data.test_split train``) are rendered with their own codes, as fitted: there is
    nothing to fit to them, and one warning says so.

    Masked pixels count as in ``test/psnr`` (PSNR over kept pixels; they are never fitted to). The
    headline metrics are unchanged. A field without appearance codes gets one warning and none of
    these metrics. Each view's fit is seeded from ``seed`` and the view's index, so it does not
    depend on the order or the rank views are tested on. The module must render rays with its field
    (:class:`~nerf_lightning.system.contract.RayRenderingModule`, checked when ``test`` starts).

    ``nerf-lightning test --config real ... --trainer.callbacks+=AppearanceHalfFit``

    Args:
        steps: Adam steps per view.
        rays_per_step: left-half pixels drawn per step.
        learning_rate: Adam's learning rate on the code.
        seed: seed of the pixel draws.
    """

    def __init__(self, steps: int = 64, rays_per_step: int = 1024, learning_rate: float = 0.05,
                 seed: int = 0) -> None:
        self.options = HalfFitOptions(steps=steps, rays_per_step=rays_per_step, learning_rate=learning_rate)
        self.seed = seed
        self._fit = image_metrics("test/")
        self._mean = image_metrics("test/")
        self._embedding: AppearanceEmbedding | None = None
        self._scored = 0
        self._warned_fitted = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "test":
            require(self, pl_module, RayRenderingModule)

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        field = cast(RayRenderingModule, pl_module).field
        self._embedding = field.appearance_codes
        if self._embedding is None:
            rank_zero_warn(f"AppearanceHalfFit: the field ({type(field).__name__}) has no appearance codes "
                           "(HashGridField.appearance_dim > 0 or color_correction gives them), so "
                           "test/*_right_half_* are not logged")
            return
        self._fit, self._mean = self._fit.to(pl_module.device), self._mean.to(pl_module.device)
        self._fit.reset()
        self._mean.reset()
        self._scored = 0

    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                          batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        embedding, module = self._embedding, cast(RayRenderingModule, pl_module)
        if embedding is None or not isinstance(outputs, ImageRender) or not isinstance(batch, RayBatch):
            return
        if batch.camera_indices is not None:  # a training photo rendered with its own code: nothing to fit
            if not self._warned_fitted:
                rank_zero_warn("AppearanceHalfFit: the tested views are training photos, rendered with their "
                               "own appearance (data.test_split=train), so no code is fitted to them")
                self._warned_fitted = True
            return
        index = batch.image_index if batch.image_index >= 0 else batch_idx
        generator = torch.Generator(device=pl_module.device)
        generator.manual_seed(derive_seed(self.seed, index))
        # Lightning tests under inference mode; the fit needs autograd, and tensors made in inference
        # mode cannot be saved for backward, hence the copies.
        with torch.inference_mode(False), _frozen(pl_module):
            rays = Rays(*(t.clone() for t in (batch.rays.origins, batch.rays.directions,
                                               batch.rays.near, batch.rays.far)))
            background = batch.background.clone()

            def render(chosen: Rays, code: Tensor) -> Tensor:
                with embedding.evaluation_code(code):
                    return module.render_rays(chosen, background)[0].rgb

            options = replace(self.options, chunk_rays=module.eval_chunk_rays)
            fit = fit_left_render_right(render, rays, outputs.target.clone(),
                                        None if outputs.mask is None else outputs.mask.clone(),
                                        embedding.mean_code().detach().clone(), options, generator,
                                        batch.rays_per_pixel)
        if fit is None:  # no kept left-half pixel, or no right half: nothing to report for this view
            return
        width = outputs.target.shape[1]
        mask = None if outputs.mask is None else right_half(outputs.mask, width)
        target = right_half(outputs.target, width)
        update_image_metrics(self._fit, fit.rgb, target, mask)
        update_image_metrics(self._mean, right_half(outputs.rgb, width), target, mask)
        self._scored += 1

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._embedding is None or self._scored == 0:
            return
        for suffix, metrics in (("right_half_fit", self._fit), ("right_half_mean", self._mean)):
            for name, value in metrics.compute().items():  # synchronised over ranks by torchmetrics
                pl_module.log(f"{name}_{suffix}", value)
            metrics.reset()
        self._scored = 0


@contextmanager
def _frozen(module: nn.Module) -> Iterator[None]:
    """Every parameter of ``module`` without ``requires_grad`` within the block (the flags come back
    after): the fit's backward then runs through the field to the code only."""
    flags = [(parameter, parameter.requires_grad) for parameter in module.parameters()]
    for parameter, _ in flags:
        parameter.requires_grad_(False)
    try:
        yield
    finally:
        for parameter, flag in flags:
            parameter.requires_grad_(flag)
