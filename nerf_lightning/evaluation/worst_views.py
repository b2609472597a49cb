"""``worst_views.png``: one row per view, rendered | ground truth | absolute error, under a caption."""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image, ImageDraw
from torch import Tensor

from nerf_lightning.files import atomic_path
from nerf_lightning.scenes.images import quantize_to_uint8

WORST_VIEWS_PNG = "worst_views.png"
PANELS_DIR = "panels"
_CAPTION_HEIGHT = 14
_GAP = 2


def error_panel(rgb: Tensor, target: Tensor) -> Tensor:
    """``[H, 3 W, 3]`` uint8 on the CPU: ``rgb`` | ``target`` | ``|rgb - target|``.

    ``rgb`` and ``target`` are ``[H, W, 3]`` in ``[0, 1]``.
    """
    error = (rgb - target).abs()
    return quantize_to_uint8(torch.cat([rgb, target, error], dim=1).clamp(0, 1).float().cpu())


def worst_views_image(rows: list[tuple[str, Tensor]]) -> Image.Image:
    """Stack ``(caption, panel [H, W, 3] uint8)`` rows top to bottom on a black background."""
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    width = max([1] + [max(panel.shape[1], int(measure.textlength(text)) + 4) for text, panel in rows])
    height = sum(_CAPTION_HEIGHT + panel.shape[0] + _GAP for _, panel in rows) or 1
    canvas = Image.new("RGB", (width, height))
    draw = ImageDraw.Draw(canvas)
    top = 0
    for caption, panel in rows:
        draw.text((2, top + 1), caption, fill=(255, 255, 255))
        top += _CAPTION_HEIGHT
        canvas.paste(Image.fromarray(panel.numpy()), (0, top))
        top += panel.shape[0] + _GAP
    return canvas


def write_worst_views(rows: list[tuple[str, Tensor]], path: Path) -> Path:
    """Write :func:`worst_views_image` of ``rows`` as a PNG (atomically)."""
    image = worst_views_image(rows)
    with atomic_path(path) as temporary:
        image.save(temporary, format="PNG")
    return path


def write_panel(panel: Tensor, path: Path) -> Path:
    """Write one ``[H, W, 3]`` uint8 panel as a PNG (atomically), creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as temporary:
        Image.fromarray(panel.numpy()).save(temporary, format="PNG")
    return path
