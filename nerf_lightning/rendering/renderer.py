"""Volume renderer over packed samples."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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


class _ScaledGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, values: Tensor, scale: Tensor) -> Tensor:
        ctx.save_for_backward(scale)
        return values.view_as(values)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (scale,) = ctx.saved_tensors
        return grad * scale, None


def scale_gradient(values: Tensor, scale: Tensor) -> Tensor:
    """``values`` unchanged (a view) with the gradient that flows back through them multiplied by
    ``scale`` (broadcast against ``values``; no gradient reaches ``scale``)."""
    return _ScaledGradient.apply(values, scale.detach())


class VolumeRenderer(RecordsConstructorArguments, nn.Module):
    """Emission-absorption volume rendering of packed samples (NeRF's quadrature).

    Args:
        background_override: when set, composite predictions over this RGB colour instead
            of the dataset's background (e.g. ``[0, 0, 0]`` to inspect opacity).
        near_gradient_distance: while training, the gradients reaching each sample's density and
            colour are scaled by ``min(1, (t / near_gradient_distance) ** 2)``, ``t`` its distance
            from the camera (gradient scaling of Philip and Deschaintre, "Floaters No More", as
            nerfacto uses it). A point near a camera is seen by that camera through a wide cone of
            its pixels and by the others hardly at all, so it gets gradients out of proportion to
            what constrains it, and a field settles each photo's residual in clouds just in front
            of it: the floaters new views look through. Rendered values are unchanged (only the
            backward pass is scaled), so evaluation is not affected. In the scene's units
            (``data.normalise auto`` puts the median training camera 4 from the content's
            centre); ``0`` (the default) scales nothing.
    """

    def __init__(self, background_override: tuple[float, float, float] | None = None,
                 near_gradient_distance: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= near_gradient_distance < math.inf:
            raise ValueError(f"near_gradient_distance must be a finite distance >= 0, "
                             f"got {near_gradient_distance}")
        self.background_override = background_override
        self.near_gradient_distance = near_gradient_distance

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
        if self.near_gradient_distance > 0.0 and self.training and torch.is_grad_enabled():
            scale = (samples.t_mids.detach().float() / self.near_gradient_distance).square().clamp_(max=1.0)
            density = scale_gradient(density, scale)
            rgb = scale_gradient(rgb, scale[:, None])
        weights, _ = render_weights(density, samples.deltas, ray_indices, num_rays)
        opacity = accumulate_along_rays(weights, ray_indices, num_rays)
        color = accumulate_along_rays(weights, ray_indices, num_rays, rgb.float())
        depth_sum = accumulate_along_rays(weights * samples.t_mids.float(), ray_indices, num_rays)
        depth = depth_sum / opacity.clamp_min(1e-6)
        if self.background_override is not None:
            background = torch.tensor(self.background_override, dtype=color.dtype, device=color.device)
        color = color + (1.0 - opacity[:, None]) * background.to(color)
        return RenderOutput(rgb=color, depth=depth, opacity=opacity, weights=weights)
