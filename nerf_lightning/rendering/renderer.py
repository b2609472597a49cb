"""Volume renderer over packed samples."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from nerf_lightning.core.constructor_spec import RecordsConstructorArguments
from nerf_lightning.core.types import PackedSamples
from nerf_lightning.rendering.packed import accumulate_along_rays, render_weights


@dataclass(frozen=True)
class RenderOutput:
    """What the renderer gives per ray.

    Attributes:
        rgb: ``[R, 3]`` colour composited over the background.
        depth: ``[R]`` expected distance of the visible surface (weight-normalised; 0 for empty rays).
        opacity: ``[R]`` accumulated weight ``sum_i w_i`` in ``[0, 1]``.
        weights: ``[S]`` per-sample weights.
    """

    rgb: Tensor
    depth: Tensor
    opacity: Tensor
    weights: Tensor


class VolumeRenderer(RecordsConstructorArguments, nn.Module):
    """Emission-absorption volume rendering of packed samples (NeRF's quadrature).

    Args:
        background_override: when set, composite predictions over this RGB colour instead
            of the dataset's background (e.g. ``[0, 0, 0]`` to inspect opacity).
    """

    def __init__(self, background_override: tuple[float, float, float] | None = None) -> None:
        super().__init__()
        self.background_override = background_override

    def forward(self, rgb: Tensor, density: Tensor, samples: PackedSamples,
                background: Tensor) -> RenderOutput:
        """Render packed samples.

        Args:
            rgb: ``[S, 3]`` per-sample colour in ``[0, 1]``.
            density: ``[S]`` per-sample density.
            samples: the packed intervals (``R = samples.num_rays``).
            background: ``[3]`` or ``[R, 3]`` background colour.

        Returns:
            A ``RenderOutput`` for the ``R`` rays.
        """
        num_rays, ray_indices = samples.num_rays, samples.ray_indices
        weights, _ = render_weights(density, samples.deltas, ray_indices, num_rays)
        opacity = accumulate_along_rays(weights, ray_indices, num_rays)
        color = accumulate_along_rays(weights, ray_indices, num_rays, rgb.float())
        depth_sum = accumulate_along_rays(weights * samples.t_mids.float(), ray_indices, num_rays)
        depth = depth_sum / opacity.clamp_min(1e-6)
        if self.background_override is not None:
            background = torch.tensor(self.background_override, dtype=color.dtype, device=color.device)
        color = color + (1.0 - opacity[:, None]) * background.to(color)
        return RenderOutput(rgb=color, depth=depth, opacity=opacity, weights=weights)
