"""Colour maps for every image the project writes: depth (videos, predictions) and samples-per-ray
heatmaps (validation previews), all from kornia's colour maps.

- :func:`colorize_depth`: turbo, near red, far blue, faded to black where the ray hit nothing;
  :func:`depth_range` picks a robust ``[near, far]`` for it.
- :func:`heatmap`: viridis on a log scale, for counts (dark blue for zero, yellow at the top).

kornia picks the input range of :func:`kornia.color.apply_colormap` from the data (``[0, 1]``
unless a value is above 1, then ``[0, 255]``, and a NaN counts as above), so values are cleaned and
clamped to ``[0, 1]`` here first: the range is always the caller's.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from kornia.color import ColorMap
from kornia.color import apply_colormap as kornia_apply_colormap
from torch import Tensor

NUM_COLORS = 256
"""Palette entries: one per 8-bit level, as fine as the PNGs and video frames they end up in."""


@lru_cache(maxsize=16)
def _colormap(name: str, num_colors: int, device: torch.device) -> ColorMap:
    return ColorMap(base=name, num_colors=num_colors, device=device, dtype=torch.float32)


def apply_colormap(values: Tensor, name: str = "turbo", num_colors: int = NUM_COLORS) -> Tensor:
    """``[...]`` values in ``[0, 1]`` → ``[..., 3]`` float32 RGB in ``[0, 1]`` from kornia's ``name`` map.

    Values outside ``[0, 1]`` are clamped, NaN counts as 0; any shape works, empty ones too.
    """
    clean = torch.nan_to_num(values.float(), nan=0.0).clamp(0.0, 1.0)
    colormap = _colormap(name.lower(), num_colors, clean.device)
    colours = kornia_apply_colormap(clean.reshape(1, 1, 1, -1), colormap)  # [1, 3, 1, N]
    return colours[0, :, 0].T.reshape(*values.shape, 3)


def colorize_depth(depth: Tensor, opacity: Tensor, near: float, far: float) -> Tensor:
    """``[H, W, 3]`` colours of ``depth`` ``[H, W, 1]`` over ``[near, far]`` (near red, far blue).

    Depths beyond the range get its end colours. Each pixel is scaled by its ``opacity``
    ``[H, W, 1]`` (clamped to ``[0, 1]``), so empty space is black; a pixel whose depth or opacity
    is not finite is black too.
    """
    scaled = (depth[..., 0].float() - near) / max(far - near, 1e-6)
    alpha = opacity[..., 0].float().clamp(0.0, 1.0)
    alpha = torch.where(torch.isfinite(depth[..., 0]) & torch.isfinite(alpha), alpha, 0.0)
    return apply_colormap(1.0 - scaled, "turbo") * alpha[..., None]


def depth_range(depth: Tensor, opacity: Tensor, low: float = 0.02, high: float = 0.98) -> tuple[float, float]:
    """``(near, far)``: the ``low`` and ``high`` quantiles of the finite ``depth`` ``[H, W, 1]`` where
    ``opacity > 0.5``.

    ``(0, 1)`` when no such pixel exists; ``far > near`` always.
    """
    solid = depth[(opacity > 0.5) & torch.isfinite(depth)].float()
    if solid.numel() == 0:
        return 0.0, 1.0
    if solid.numel() > 1 << 20:  # torch.quantile's size limit; a strided subset is plenty
        solid = solid[:: solid.numel() // (1 << 20) + 1]
    near, far = torch.quantile(solid, torch.tensor([low, high], device=solid.device)).tolist()
    return near, max(far, near + 1e-6)


def heatmap(values: Tensor, high: float) -> Tensor:
    """``[H, W, 1]`` non-negative values → ``[H, W, 3]`` viridis colours on a log scale up to ``high``.

    Zero (and negative or NaN values) is the darkest colour; ``high`` and above the brightest.
    """
    scale = max(float(torch.log1p(torch.tensor(float(high)))), 1e-6)
    scaled = torch.log1p(torch.nan_to_num(values[..., 0].float(), nan=0.0).clamp(min=0)) / scale
    return apply_colormap(scaled, "viridis")
