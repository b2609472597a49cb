"""A self-contained radiance-field renderer: torch is all it needs.

It composes two torch-only modules that the trained model's own hooks return
(:meth:`nerf_lightning.fields.RadianceField.standalone`,
:meth:`nerf_lightning.samplers.Sampler.standalone`) with the volume rendering of
``VolumeRenderer``, reproduced operation for operation:

- ``sampler(origins, directions, near, far) -> (t_starts [S], t_ends [S], ray_indices [S])``, the
  sampler in evaluation mode (it may query ``field.density``, shared with the renderer);
- ``field(positions [S, 3], directions [S, 3]) -> (density [S], rgb [S, 3])``.

:class:`StandaloneRenderer` is what ``--format torchscript`` scripts (chunked, optional background,
``density()`` and ``metadata()`` methods); :class:`RenderAll` is what ``--format pt2`` hands to
``torch.export`` (every ray at once, a required ``[3]`` background: a data-dependent loop over
chunks is outside what ``torch.export`` traces).

Shapes: ``R`` rays, ``S`` samples.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from nerf_lightning.rendering.packed import exclusive_sum_per_ray  # compiled in

__all__ = ["RenderAll", "StandaloneRenderer"]


class StandaloneRenderer(nn.Module):
    """Renders rays with a standalone field and sampler: TorchScript-ready, torch-only.

    ``forward(origins [R, 3], directions [R, 3] (unit), near [R], far [R], background [3] or
    [R, 3] or None)`` returns ``(rgb [R, 3] in [0, 1], depth [R], opacity [R])``: emission-absorption
    compositing over the background (``None``: the training background), depth the weight-normalised
    distance (0 where nothing is hit), in chunks of ``chunk_rays`` rays. Rays with ``far <= near``
    render the background.

    Args:
        field: ``density(positions [S, 3]) -> [S]`` and ``forward(positions, directions) ->
            (density [S], rgb [S, 3])``.
        sampler: ``forward(origins, directions, near, far) -> (t_starts, t_ends, ray_indices)``.
        background: ``[3]`` default background colour.
        background_fixed: always composite over ``background`` (the model's renderer overrides it).
        chunk_rays: rays rendered at once.
        scene_bounds: ``[2, 3]`` the scene box (for users of the module; rendering does not need it).
        info: JSON text describing where the module comes from.
    """

    def __init__(self, field: nn.Module, sampler: nn.Module, background: Tensor, background_fixed: bool,
                 chunk_rays: int, scene_bounds: Tensor, info: str) -> None:
        super().__init__()
        self.field = field
        self.sampler = sampler
        self.register_buffer("background", background.detach().clone().float().reshape(3))
        self.register_buffer("scene_bounds", scene_bounds.detach().clone().float())
        self.background_fixed = bool(background_fixed)
        self.chunk_rays = int(chunk_rays)
        self.info = str(info)

    @torch.jit.export
    def density(self, positions: Tensor) -> Tensor:
        """``[S]`` density of the field at world positions ``[S, 3]``."""
        return self.field.density(positions)

    @torch.jit.export
    def metadata(self) -> str:
        """JSON text: format version, source checkpoint, field, sampler, background, scene box."""
        return self.info

    def render(self, origins: Tensor, directions: Tensor, near: Tensor, far: Tensor,
               background: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """All ``R`` rays at once over ``background [3]`` or ``[R, 3]`` (ignored when
        ``background_fixed``)."""
        if self.background_fixed:
            background = self.background
        num_rays = origins.shape[0]
        starts, ends, ray_indices = self.sampler(origins, directions, near, far)
        mids = 0.5 * (starts + ends)
        positions = origins[ray_indices] + directions[ray_indices] * mids[:, None]
        density, rgb = self.field(positions, directions[ray_indices])
        optical_depth = (density * (ends - starts)).float()
        transmittance = torch.exp(-exclusive_sum_per_ray(optical_depth, ray_indices, num_rays))
        weights = transmittance * (1.0 - torch.exp(-optical_depth))
        opacity = torch.zeros(num_rays, dtype=weights.dtype, device=weights.device).index_add(
            0, ray_indices, weights
        )
        rgb = rgb.float()
        color = torch.zeros(num_rays, 3, dtype=rgb.dtype, device=rgb.device).index_add(
            0, ray_indices, weights[:, None] * rgb
        )
        depth_sum = torch.zeros(num_rays, dtype=weights.dtype, device=weights.device).index_add(
            0, ray_indices, weights * mids.float()
        )
        depth = depth_sum / opacity.clamp_min(1e-6)
        color = color + (1.0 - opacity[:, None]) * background.to(color)
        return color.clamp(0.0, 1.0), depth, opacity

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor, far: Tensor,
                background: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:  # noqa: UP045
        """Render ``R`` rays in chunks: ``(rgb [R, 3], depth [R], opacity [R])``."""
        bg = self.background
        if background is not None and not self.background_fixed:
            bg = background.to(origins.device).float()
        num_rays = origins.shape[0]
        rgb_parts: list[Tensor] = []
        depth_parts: list[Tensor] = []
        opacity_parts: list[Tensor] = []
        with torch.no_grad():
            for start in range(0, num_rays, self.chunk_rays):
                stop = min(start + self.chunk_rays, num_rays)
                chunk_bg = bg[start:stop] if bg.dim() == 2 else bg
                rgb, depth, opacity = self.render(
                    origins[start:stop], directions[start:stop], near[start:stop], far[start:stop], chunk_bg
                )
                rgb_parts.append(rgb)
                depth_parts.append(depth)
                opacity_parts.append(opacity)
        if num_rays == 0:
            empty = origins.new_zeros(0)
            return origins.new_zeros(0, 3), empty, empty
        return torch.cat(rgb_parts), torch.cat(depth_parts), torch.cat(opacity_parts)


class RenderAll(nn.Module):
    """``forward(origins [R, 3], directions [R, 3], near [R], far [R], background [3])`` →
    ``(rgb [R, 3], depth [R], opacity [R])``: :meth:`StandaloneRenderer.render` of every ray at once,
    the form ``torch.export`` traces (callers chunk large batches themselves)."""

    def __init__(self, renderer: StandaloneRenderer) -> None:
        super().__init__()
        self.renderer = renderer

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor, far: Tensor,
                background: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.renderer.render(origins, directions, near, far, background)
