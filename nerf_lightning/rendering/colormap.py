"""Colourised depth for videos: the turbo colour map (near red, far blue), faded to black where empty."""

from __future__ import annotations

import torch
from torch import Tensor

# Polynomial fit of Google's turbo colour map (Mikhailov, 2019), one row per channel, lowest power first.
_TURBO = torch.tensor(
    [
        [0.13572138, 4.61539260, -42.66032258, 132.13108234, -152.94239396, 59.28637943],
        [0.09140261, 2.19418839, 4.84296658, -14.18503333, 4.27729857, 2.82956604],
        [0.10667330, 12.64194608, -60.58204836, 110.36276771, -89.90310912, 27.34824973],
    ]
)


def turbo(values: Tensor) -> Tensor:
    """``[...]`` values in ``[0, 1]`` (clamped) → ``[..., 3]`` RGB in ``[0, 1]``."""
    x = values.clamp(0, 1)[..., None]
    powers = torch.stack([x[..., 0] ** k for k in range(6)], dim=-1)  # [..., 6]
    return (powers @ _TURBO.to(powers).T).clamp(0, 1)


def colorize_depth(depth: Tensor, opacity: Tensor, near: float, far: float) -> Tensor:
    """``[H, W, 3]`` colours of ``depth`` ``[H, W, 1]`` over ``[near, far]`` (near red, far blue).

    Each pixel is scaled by its ``opacity`` ``[H, W, 1]``, so empty space is black.
    """
    scaled = (depth[..., 0] - near) / max(far - near, 1e-6)
    return turbo(1.0 - scaled) * opacity.clamp(0, 1)


def depth_range(depth: Tensor, opacity: Tensor, low: float = 0.02, high: float = 0.98) -> tuple[float, float]:
    """``(near, far)``: the ``low`` and ``high`` quantiles of ``depth`` ``[H, W, 1]`` where ``opacity > 0.5``.

    ``(0, 1)`` when no pixel is opaque.
    """
    solid = depth[opacity > 0.5].float()
    if solid.numel() == 0:
        return 0.0, 1.0
    if solid.numel() > 1 << 20:  # torch.quantile's size limit; a strided subset is plenty
        solid = solid[:: solid.numel() // (1 << 20) + 1]
    near, far = torch.quantile(solid, torch.tensor([low, high], device=solid.device)).tolist()
    return near, max(far, near + 1e-6)
