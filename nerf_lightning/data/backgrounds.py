"""Training targets recomposited over random background colours (RGBA scenes)."""

from __future__ import annotations

import torch
from torch import Tensor


def over_random_backgrounds(rgb: Tensor, alpha: Tensor, background: Tensor,
                            generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Targets over one random colour per ray instead of the fixed ``background``.

    A target composited over ``background`` is ``c a + background (1 - a)``; over a colour ``b`` it is
    that plus ``(1 - a) (b - background)``, so the stored composited pixels and their alpha suffice.
    The renderer composites each ray over the same ``b``: density the field puts in front of a
    transparent pixel then shows in the loss whatever colour it has, which no fixed background
    colour achieves (instant-ngp's remedy against floaters in object scenes).

    Args:
        rgb: ``[R, 3]`` float targets in ``[0, 1]`` composited over ``background``.
        alpha: ``[R]`` uint8 opacity of each target pixel (255: opaque).
        background: ``[3]`` the colour ``rgb`` was composited over.
        generator: draws the colours (uniform in ``[0, 1]^3``), on ``rgb``'s device.

    Returns:
        ``[R, 3]`` targets and ``[R, 3]`` the colours they are composited over.
    """
    colours = torch.rand(rgb.shape, generator=generator, device=rgb.device)
    transparency = 1.0 - alpha.to(rgb.dtype) / 255.0
    targets = rgb + transparency[:, None] * (colours - background.to(rgb))
    return targets.clamp_(0.0, 1.0), colours
