"""PSNR and SSIM of a rendered image whose target has ignored pixels (``SceneSplit.masks``).

* PSNR is computed over the kept pixels only: they are passed as a ``[1, 3, K, 1]`` image, so the
  metric's per-image mean squared error averages exactly the ``K`` kept pixels (filling the ignored
  ones with the target would instead count them as perfect and raise the score). An image with no
  kept pixel adds no PSNR value.
* SSIM needs the image grid (an 11x11 window), so the ignored pixels of the prediction are filled with
  the target's before it: they then agree perfectly there, and windows that overlap them are judged on
  their kept pixels plus perfect agreement. A documented approximation; it can only raise SSIM near
  ignored regions, never make a kept pixel's error count less.

The module's ``val/`` and ``test/`` metrics and the eval report's per-view scores both come from
:func:`update_image_metrics`, so they agree.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import MetricCollection


def update_image_metrics(
    metrics: MetricCollection, rgb: Tensor, target: Tensor, mask: Tensor | None
) -> Tensor:
    """Update ``metrics`` (``psnr`` and ``ssim`` of
    :func:`~nerf_lightning.system.module.image_metrics`) with one image.

    Args:
        metrics: the collection to update.
        rgb, target: ``[H, W, 3]`` prediction and target in ``[0, 1]``.
        mask: ``[H, W]`` bool, ``True`` for pixels that count; ``None``: all count.

    Returns:
        ``[1, 3, H, W]`` the prediction as scored by SSIM (ignored pixels filled with the target), for
        further image metrics such as LPIPS.
    """
    # Scored in float32 also under mixed precision (--trainer.precision bf16-mixed): autocast would
    # run SSIM's Gaussian filters in bf16, whose 8-bit mantissa rounds the local means and variances
    # (SSIM above 1 has come out of it).
    with torch.autocast(rgb.device.type, enabled=False):
        return _update(metrics, rgb.float(), target.float(), mask)


def _update(metrics: MetricCollection, rgb: Tensor, target: Tensor, mask: Tensor | None) -> Tensor:
    target_chw = target.permute(2, 0, 1)[None]
    if mask is None:
        pred = rgb.permute(2, 0, 1)[None]
        metrics.update(pred, target_chw)
        return pred
    filled = torch.where(mask[..., None], rgb, target).permute(2, 0, 1)[None]
    kept = mask.reshape(-1)
    if bool(kept.any()):  # evaluation, not a training step: a host read is fine here
        metrics["psnr"].update(rgb.reshape(-1, 3)[kept].T[None, :, :, None],
                               target.reshape(-1, 3)[kept].T[None, :, :, None])
    metrics["ssim"].update(filled, target_chw)
    return filled
