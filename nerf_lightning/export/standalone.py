"""A self-contained radiance-field renderer for TorchScript: torch is all it needs.

The classes here use nothing of the rest of the project but pure torch functions that
scripting compiles in: the spherical-harmonic basis of :mod:`nerf_lightning.encodings`, the
occupancy marching of :mod:`nerf_lightning.samplers.marching` and the per-ray running sum of
:mod:`nerf_lightning.rendering.packed`.
:mod:`nerf_lightning.export.torchscript` copies a trained model's weights into them and scripts
the result, so the saved module holds its weights as buffers and its forward (the SH basis
included) as TorchScript code, and renders rays wherever torch loads it (``torch.jit.load``),
without ``nerf_lightning``.

Each piece reproduces, in evaluation mode, the computation of its training-side counterpart
operation for operation (same dtypes, same order), so renders match the checkpoint's own:

- :class:`HashGridRadiance` ≙ ``HashGridField`` (``HashGridEncoding`` + MLPs + spherical harmonics);
- :class:`FrequencyRadiance` ≙ ``PositionalEncodingField``;
- :class:`OccupancyMarcher` ≙ ``OccupancyGrid.forward`` in evaluation (fixed-step marching through
  the occupancy bitfield, a coarse dilated grid to skip empty stretches);
- :class:`UniformMarcher` ≙ ``Uniform.forward`` in evaluation (equal intervals over ``[near, far]``);
- :class:`StandaloneRenderer` ≙ ``NerfModule.render_rays`` + ``VolumeRenderer`` (the occupancy
  grid's early ray termination included), rendering in chunks.

Shapes: ``R`` rays, ``S`` samples, ``L`` hash levels, ``F`` features per level.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from nerf_lightning.encodings import spherical_harmonics_deg4  # compiled into the saved module
from nerf_lightning.rendering.packed import exclusive_sum_per_ray  # compiled in too
from nerf_lightning.samplers.marching import march_occupied_steps  # compiled in too

__all__ = [
    "FrequencyRadiance",
    "HashGridEncoder",
    "HashGridRadiance",
    "OccupancyMarcher",
    "StandaloneRenderer",
    "UniformMarcher",
]


def normalize_to_box(positions: Tensor, bounds: Tensor) -> Tensor:
    """``[S, 3]`` world positions mapped to ``[0, 1]^3`` over the box ``bounds [2, 3]`` (clamped)."""
    lower = bounds[0]
    upper = bounds[1]
    return ((positions - lower) / (upper - lower)).clamp(0.0, 1.0)


class HashGridEncoder(nn.Module):
    """Multiresolution hash encoding of ``[S, 3]`` points in ``[0, 1]^3`` → ``[S, L * F]``.

    Args:
        table: ``[F, rows]`` feature table (levels one after the other).
        resolutions: ``[L]`` float32 cells per side of each level.
        axis_strides: ``[L, 3]`` int32 index step per unit along each axis (dense levels), or the
            hash primes wrapped to int32 (hashed levels).
        level_offsets: ``[L]`` int32 first row of each level.
        num_dense_levels: the first levels are indexed densely, the others hashed.
        hash_mask: table size per level minus one.
    """

    def __init__(self, table: Tensor, resolutions: Tensor, axis_strides: Tensor, level_offsets: Tensor,
                 num_dense_levels: int, hash_mask: int) -> None:
        super().__init__()
        self.register_buffer("table", table.detach().clone())
        self.register_buffer("resolutions", resolutions.detach().clone().float())
        self.register_buffer("max_corner", resolutions.detach().to(torch.int32) - 1)
        self.register_buffer("axis_strides", axis_strides.detach().clone().to(torch.int32))
        self.register_buffer("level_offsets", level_offsets.detach().clone().to(torch.int32))
        self.num_levels = int(resolutions.shape[0])
        self.features_per_level = int(table.shape[0])
        self.num_dense_levels = int(num_dense_levels)
        self.hash_mask = int(hash_mask)

    def forward(self, x: Tensor) -> Tensor:
        """``[S, 3]`` in ``[0, 1]^3`` → ``[S, L * F]`` (trilinear interpolation of the 8 corners)."""
        num_points = x.shape[0]
        scaled = x.float()[:, None, :] * self.resolutions[:, None]  # [S, L, 3]
        base = torch.minimum(scaled.floor().int(), self.max_corner[:, None])
        frac = scaled - base
        terms = torch.stack([base, base + 1], dim=-1) * self.axis_strides[:, :, None]  # [S, L, 3, 2]
        tx = terms[:, :, 0, :, None, None]
        ty = terms[:, :, 1, None, :, None]
        tz = terms[:, :, 2, None, None, :]
        k = self.num_dense_levels
        dense = tx[:, :k] + ty[:, :k] + tz[:, :k]  # [S, k, 2, 2, 2]
        hashed = torch.bitwise_and(
            torch.bitwise_xor(torch.bitwise_xor(tx[:, k:], ty[:, k:]), tz[:, k:]), self.hash_mask
        )
        index = torch.cat([dense, hashed], dim=1) + self.level_offsets[:, None, None, None]
        w = torch.stack([1.0 - frac, frac], dim=-1)  # [S, L, 3, 2]
        weights = w[:, :, 0, :, None, None] * w[:, :, 1, None, :, None] * w[:, :, 2, None, None, :]
        weights = weights.reshape(num_points, self.num_levels, 8).to(self.table.dtype)
        flat = index.reshape(-1)
        features = [
            (self.table[f].index_select(0, flat).view_as(weights) * weights).sum(-1)
            for f in range(self.features_per_level)
        ]
        return torch.stack(features, dim=-1).reshape(num_points, self.num_levels * self.features_per_level)


class HashGridRadiance(nn.Module):
    """Hash grid → density MLP (density ``exp(g_0 - 1)``) → colour MLP on SH of the view direction.

    Args:
        encoder: the hash encoding.
        density_mlp: ``[S, L F] → [S, 1 + G]`` (raw density, geometry features).
        color_mlp: ``[S, G + 16] → [S, 3]`` (before the sigmoid).
        bounds: ``[2, 3]`` scene box (lower, upper corners).
    """

    def __init__(self, encoder: HashGridEncoder, density_mlp: nn.Module, color_mlp: nn.Module,
                 bounds: Tensor) -> None:
        super().__init__()
        self.encoder = encoder
        self.density_mlp = density_mlp
        self.color_mlp = color_mlp
        self.register_buffer("bounds", bounds.detach().clone().float())

    def _geometry(self, positions: Tensor) -> Tensor:
        return self.density_mlp(self.encoder(normalize_to_box(positions, self.bounds)))

    def density(self, positions: Tensor) -> Tensor:
        """``[S]`` density at world positions ``[S, 3]``."""
        return torch.exp(self._geometry(positions)[:, 0] - 1.0)

    def forward(self, positions: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        """Density ``[S]`` and colour ``[S, 3]`` at ``positions [S, 3]`` seen along ``directions [S, 3]``."""
        geometry = self._geometry(positions)
        density = torch.exp(geometry[:, 0] - 1.0)
        sh = spherical_harmonics_deg4(directions).to(geometry)
        rgb = torch.sigmoid(self.color_mlp(torch.cat([geometry[:, 1:], sh], dim=-1)))
        return density, rgb


class FrequencyRadiance(nn.Module):
    """NeRF's positional-encoding MLP with a skip connection (density ``softplus``, colour ``sigmoid``).

    Args:
        position_scales, direction_scales: ``[K]`` frequencies ``2^k pi`` of the two encodings
            (inputs included before the sines and cosines).
        trunk: the trunk's linear layers (ReLU after each).
        skip_layer: trunk layer whose input is concatenated with the position encoding.
        density_head, feature_head, color_head: the heads.
        bounds: ``[2, 3]`` scene box.
    """

    def __init__(self, position_scales: Tensor, direction_scales: Tensor, trunk: nn.ModuleList,
                 skip_layer: int, density_head: nn.Module, feature_head: nn.Module, color_head: nn.Module,
                 bounds: Tensor) -> None:
        super().__init__()
        self.register_buffer("position_scales", position_scales.detach().clone())
        self.register_buffer("direction_scales", direction_scales.detach().clone())
        self.trunk = trunk
        self.skip_layer = int(skip_layer)
        self.density_head = density_head
        self.feature_head = feature_head
        self.color_head = color_head
        self.register_buffer("bounds", bounds.detach().clone().float())

    @staticmethod
    def _encode(x: Tensor, scales: Tensor) -> Tensor:
        angles = (x[..., None] * scales).flatten(-2)
        return torch.cat([x, torch.sin(angles), torch.cos(angles)], dim=-1)

    def _trunk(self, positions: Tensor) -> Tensor:
        encoded = self._encode(normalize_to_box(positions, self.bounds) * 2.0 - 1.0, self.position_scales)
        h = encoded
        for layer, linear in enumerate(self.trunk):
            if layer == self.skip_layer and layer > 0:
                h = torch.cat([h, encoded], dim=-1)
            h = torch.relu(linear(h))
        return h

    def density(self, positions: Tensor) -> Tensor:
        """``[S]`` density at world positions ``[S, 3]``."""
        return nn.functional.softplus(self.density_head(self._trunk(positions))[:, 0])

    def forward(self, positions: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        """Density ``[S]`` and colour ``[S, 3]``."""
        h = self._trunk(positions)
        density = nn.functional.softplus(self.density_head(h)[:, 0])
        color_in = torch.cat([self.feature_head(h), self._encode(directions, self.direction_scales)], dim=-1)
        return density, torch.sigmoid(self.color_head(color_in))


class UniformMarcher(nn.Module):
    """``num_samples`` equal intervals per ray over ``[near, max(far, near)]``.

    ``forward`` returns ``(t_starts [S], t_ends [S], ray_indices [S])`` packed ray after ray.
    """

    def __init__(self, num_samples: int) -> None:
        super().__init__()
        self.num_samples = int(num_samples)

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor,
                far: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        num_rays = origins.shape[0]
        num_edges = self.num_samples + 1
        fractions = torch.arange(num_edges, device=origins.device, dtype=torch.float32).expand(num_rays, -1)
        fractions = fractions / max(num_edges - 1, 1)
        lo = near[:, None]
        hi = torch.maximum(far, near)[:, None]
        edges = lo + (hi - lo) * fractions.to(lo.dtype)
        ray_indices = torch.arange(num_rays, device=origins.device).repeat_interleave(self.num_samples)
        return edges[:, :-1].reshape(-1), edges[:, 1:].reshape(-1), ray_indices


class OccupancyMarcher(nn.Module):
    """Fixed-step marching through an occupancy bitfield (steps at the middle of each lattice cell).

    Step ``k`` of a ray covers ``[near + (k - 1/2) step, near + (k + 1/2) step]`` clipped to
    ``[near, far]``; a step is kept when the grid cell of its midpoint is occupied. A coarse,
    dilated copy of the grid (cells of ``steps_per_segment`` steps) first drops whole empty
    segments. The marching itself is :func:`~nerf_lightning.samplers.marching.march_occupied_steps`,
    the function the training-side sampler calls, compiled into the saved module.

    Args:
        occupied: ``[res^3]`` bool, cell ``(i, j, k)`` at ``(i res + j) res + k``.
        coarse: ``[c, c, c]`` bool, the coarse dilated grid.
        bounds: ``[2, 3]`` grid box.
        steps_per_diagonal: steps across the box diagonal.
        step_size: the step in world units.
        steps_per_segment: steps per coarse segment.
        coarse_factor: cells per coarse cell along each side.
    """

    def __init__(self, occupied: Tensor, coarse: Tensor, bounds: Tensor, steps_per_diagonal: int,
                 step_size: float, steps_per_segment: int, coarse_factor: int) -> None:
        super().__init__()
        resolution = round(occupied.numel() ** (1.0 / 3.0))
        if resolution**3 != occupied.numel():
            raise ValueError(f"occupied: expected res^3 cells, got {occupied.numel()}")
        self.register_buffer("occupied", occupied.detach().clone().bool().reshape(-1))
        self.register_buffer("coarse", coarse.detach().clone().bool())
        self.register_buffer("bounds", bounds.detach().clone().float())
        self.resolution = int(resolution)
        self.steps_per_diagonal = int(steps_per_diagonal)
        self.step_size = float(step_size)
        self.steps_per_segment = int(steps_per_segment)
        self.coarse_factor = int(coarse_factor)

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor,
                far: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(t_starts [S], t_ends [S], ray_indices [S])`` of the occupied steps, ray after ray."""
        offsets = torch.full((origins.shape[0],), 0.5, device=origins.device, dtype=near.dtype)
        ray_indices, starts, ends, _ = march_occupied_steps(
            origins, directions, near, far, offsets, self.occupied, self.coarse, self.resolution,
            self.bounds[0], self.bounds[1], self.step_size, self.steps_per_diagonal + 1,
            self.steps_per_segment, self.coarse_factor,
        )
        return starts, ends, ray_indices


class StandaloneRenderer(nn.Module):
    """Renders rays with a radiance field and a marcher: TorchScript-ready, torch-only.

    ``forward(origins [R, 3], directions [R, 3] (unit), near [R], far [R], background [3] or
    [R, 3] or None)`` returns ``(rgb [R, 3] in [0, 1], depth [R], opacity [R])``: emission-absorption
    compositing over the background (``None``: the training background), depth the weight-normalised
    distance (0 where nothing is hit), in chunks of ``chunk_rays`` rays. Rays with ``far <= near``
    render the background.

    Args:
        field: a module with ``density(positions [S, 3]) -> [S]`` and
            ``forward(positions, directions) -> (density [S], rgb [S, 3])``.
        marcher: a module with ``forward(origins, directions, near, far) -> (t_starts, t_ends,
            ray_indices)``.
        background: ``[3]`` default background colour.
        background_fixed: always composite over ``background`` (the model's renderer overrides it).
        early_stop_eps: with ``early_stop``, drop samples whose transmittance is at most this...
        alpha_threshold: ...or whose opacity is below this (the occupancy grid's density pass).
        early_stop: run that density pass.
        chunk_rays: rays rendered at once.
        scene_bounds: ``[2, 3]`` the scene box (for users of the module; rendering does not need it).
        info: JSON text describing where the module comes from.
    """

    def __init__(self, field: nn.Module, marcher: nn.Module, background: Tensor, background_fixed: bool,
                 early_stop: bool, early_stop_eps: float, alpha_threshold: float, chunk_rays: int,
                 scene_bounds: Tensor, info: str) -> None:
        super().__init__()
        self.field = field
        self.marcher = marcher
        self.register_buffer("background", background.detach().clone().float().reshape(3))
        self.register_buffer("scene_bounds", scene_bounds.detach().clone().float())
        self.background_fixed = bool(background_fixed)
        self.early_stop = bool(early_stop)
        self.early_stop_eps = float(early_stop_eps)
        self.alpha_threshold = float(alpha_threshold)
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

    def _render_chunk(self, origins: Tensor, directions: Tensor, near: Tensor, far: Tensor,
                      background: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        num_rays = origins.shape[0]
        starts, ends, ray_indices = self.marcher(origins, directions, near, far)
        if self.early_stop and self.early_stop_eps > 0.0:
            points = origins[ray_indices] + directions[ray_indices] * (0.5 * (starts + ends))[:, None]
            optical_depth = self.field.density(points).float() * (ends - starts)
            transmittance = torch.exp(-exclusive_sum_per_ray(optical_depth, ray_indices, num_rays))
            alpha = 1.0 - torch.exp(-optical_depth)
            useful = (transmittance > self.early_stop_eps) & (alpha >= self.alpha_threshold)
            selected = useful.nonzero()[:, 0]
            ray_indices = ray_indices[selected]
            starts = starts[selected]
            ends = ends[selected]
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
        """Render ``R`` rays: ``(rgb [R, 3], depth [R], opacity [R])``."""
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
                rgb, depth, opacity = self._render_chunk(
                    origins[start:stop], directions[start:stop], near[start:stop], far[start:stop], chunk_bg
                )
                rgb_parts.append(rgb)
                depth_parts.append(depth)
                opacity_parts.append(opacity)
        if num_rays == 0:
            empty = origins.new_zeros(0)
            return origins.new_zeros(0, 3), empty, empty
        return torch.cat(rgb_parts), torch.cat(depth_parts), torch.cat(opacity_parts)

