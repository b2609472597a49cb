"""Ray marching through the occupancy grid (one level or a cascade, fixed or growing steps), as one pure
function, its density pass, and the exported sampler.

:class:`~nerf_lightning.samplers.OccupancyGrid` samples with :func:`march_occupied_steps`, and its
``standalone()`` module, :class:`OccupancyMarcher`, calls the same function (``torch.export`` traces
it, ``torch.jit.script`` compiles it), so the two march exactly alike. The grids are
:mod:`~nerf_lightning.samplers.occupancy.cascade`'s, the steps
:mod:`~nerf_lightning.samplers.occupancy.stepping`'s.

Shapes: ``R`` rays, ``G`` coarse segments per ray, ``C`` candidate segments, ``P`` steps per
segment, ``S`` kept steps, ``L`` levels of ``N^3`` cells (``M^3`` coarse cells).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.core.types import DensityFn, Rays

# compiled into the exported samplers
from nerf_lightning.rendering.packed import exclusive_sum_per_ray, first_sample_indices
from nerf_lightning.samplers.occupancy.cascade import finest_level, grid_units, level_cells, points_along
from nerf_lightning.samplers.occupancy.stepping import (
    lattice_edges,
    lattice_end,
    lattice_origin,
    lattice_steps,
)


def clip_to_grid(grid_origins: Tensor, grid_directions: Tensor, near: Tensor, far: Tensor, resolution: int,
                 levels: int) -> tuple[Tensor, Tensor]:
    """``near, far [R]`` clipped to the outermost level's box (slab test on rays in grid units,
    ``grid_origins, grid_directions [R, 3]``); a ray that misses it gets ``far == near``."""
    half = 0.5 * resolution
    extent = half * 2.0 ** (levels - 1)
    tiny = grid_directions.abs() < 1e-12
    safe = torch.where(tiny, torch.full_like(grid_directions, 1e-12), grid_directions)
    t0 = (half - extent - grid_origins) / safe
    t1 = (half + extent - grid_origins) / safe
    near = torch.maximum(near, torch.minimum(t0, t1).amax(dim=-1))
    far = torch.minimum(far, torch.maximum(t0, t1).amin(dim=-1))
    return near, torch.maximum(far, near)


def march_occupied_steps(
    origins: Tensor,
    directions: Tensor,
    near: Tensor,
    far: Tensor,
    offsets: Tensor,
    occupied: Tensor,
    coarse: Tensor,
    resolution: int,
    levels: int,
    bounds: Tensor,
    step_size: float,
    cone_angle: float,
    num_steps: int,
    steps_per_segment: int,
    coarse_factor: int,
    clip: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The marching steps of rays that lie in occupied cells of the grid's levels.

    With ``clip`` the rays' ``[near, far]`` is first clipped to the outermost box; without, positions
    beyond it take its boundary cells. Step ``k`` (``0 <= k < num_steps``) of a ray is step ``k`` of its
    lattice (:mod:`~nerf_lightning.samplers.occupancy.stepping`), starting ``1 - offset`` steps before
    ``near``, clipped to ``[near, far]``; it is kept when its midpoint's cell, in the finest level holding
    the midpoint, is occupied.

    A coarse pass first tests segments of ``P = steps_per_segment`` steps. A straight segment whose two
    ends lie in level ``k``'s box lies in it whole (a box is convex), so the coarser of its ends' levels
    holds all of it; ``coarse`` has, per level, that level's and every finer level's occupancy within it,
    pooled into coarse cells and dilated by one. When the segment is no longer than a coarse cell of
    that level, all of it lies in the 27 coarse cells around its start: testing the start never misses
    an occupied step. Longer segments (steps that outgrew the cells: growing steps far from the camera,
    or steps longer than a coarse cell) are always candidates. The coarse pass only chooses candidates:
    the steps kept are those of the fine pass alone.

    Args:
        origins, directions: ``[R, 3]`` rays in world units (unit directions).
        near, far: ``[R]`` marching interval (rays with ``far <= near`` get no step).
        offsets: ``[R]`` lattice offset of each ray, in steps, in ``[0, 1)``.
        occupied: ``[L N^3]`` bool (:mod:`~nerf_lightning.samplers.occupancy.cascade`'s flat cells).
        coarse: ``[L M^3]`` bool (:func:`~nerf_lightning.samplers.occupancy.cascade.cascade_coarse`).
        resolution, levels: ``N`` and ``L``.
        bounds: ``[2, 3]`` the scene box, level 0.
        step_size, cone_angle: the smallest step (world units) and how steps grow with distance.
        num_steps: steps per ray at most
            (:func:`~nerf_lightning.samplers.occupancy.stepping.lattice_steps_across`).
        steps_per_segment: ``P``.
        coarse_factor: cells per coarse cell along each side.
        clip: march only inside the outermost box.

    Returns:
        ``ray_index [S]`` (grouped by ray, ordered along it), ``starts [S]``, ``ends [S]``, the lattice
        origins ``[R]`` (:func:`~nerf_lightning.samplers.occupancy.stepping.lattice_origin`: distances for
        fixed steps, step numbers for growing ones), and the ``near, far [R]`` marched.
    """
    device, dtype = origins.device, origins.dtype
    grid_origins, grid_directions = grid_units(origins, directions, bounds, resolution)  # [R, 3]
    if clip:
        near, far = clip_to_grid(grid_origins, grid_directions, near, far, resolution, levels)
    else:
        far = torch.maximum(far, near)
    lattice = lattice_origin(near, offsets, step_size, cone_angle)  # [R]
    # No step beyond the last one: clipping far there lets `ends > starts` drop them.
    last = torch.minimum(far, lattice_end(lattice, num_steps, step_size, cone_angle))

    # 1. Coarse pass over [R, G]: segments of P steps that can touch an occupied cell. Segment g spans
    # edges g and g + 1 of the lattice, each computed once; segments that begin at or beyond `last` are
    # dropped. The fine pass clips the steps to [near, last]: a segment's clipped part lies inside it.
    per_segment = steps_per_segment
    num_segments = (num_steps + per_segment - 1) // per_segment
    first_step = torch.arange(num_segments + 1, device=device, dtype=dtype) * per_segment  # [G + 1]
    edges = lattice_edges(lattice[:, None], first_step, step_size, cone_angle)  # [R, G + 1]
    seg_starts, seg_ends = edges[:, :-1], edges[:, 1:]
    coarse_size = (resolution + coarse_factor - 1) // coarse_factor
    coarse_across = resolution / coarse_factor
    scale = 1.0 / coarse_factor  # grid units to coarse cells
    # Tested at its start, in the level of its coarser end (one level: the start alone is needed).
    x, y, z = points_along(grid_origins * scale, grid_directions * scale, edges if levels > 1 else seg_starts)
    level: Tensor | None = None
    if levels > 1:
        edge_level = finest_level(x, y, z, coarse_across, levels)
        level = torch.maximum(edge_level[:, :-1], edge_level[:, 1:])  # [R, G] the coarser end's
        x, y, z = x[:, :-1], y[:, :-1], z[:, :-1]
    seg_cells = level_cells(x, y, z, level, coarse_size, levels, coarse_across)
    coarse_side = (bounds[1] - bounds[0]).min() * (coarse_factor / resolution)  # level 0's, world units
    if cone_angle > 0.0:
        longest = coarse_side if level is None else coarse_side * torch.exp2(level)
        hit = coarse[seg_cells] | ((seg_ends - seg_starts) > longest)
    else:  # fixed steps: every segment P steps long, no longer than a coarse cell of any level, or longer
        hit = (coarse | (coarse_side < per_segment * step_size))[seg_cells]
    seg_keep = (seg_starts < last[:, None]) & hit
    candidates = seg_keep.nonzero()  # ray-major, segments in order
    cand_ray = candidates[:, 0]

    # 2. Fine pass over [C, P]: every step of those segments, kept when its cell is occupied.
    step_in_segment = torch.arange(per_segment, device=device, dtype=dtype)
    steps = candidates[:, 1:].to(dtype) * per_segment + step_in_segment  # [C, P] whole numbers
    begins, finishes = lattice_steps(lattice[cand_ray][:, None], steps, step_size, cone_angle)
    starts = begins.maximum(near[cand_ray][:, None])
    ends = finishes.minimum(last[cand_ray][:, None])
    mids = (starts + ends).mul_(0.5)
    x, y, z = points_along(grid_origins[cand_ray], grid_directions[cand_ray], mids)
    level = finest_level(x, y, z, float(resolution), levels) if levels > 1 else None
    cells = level_cells(x, y, z, level, resolution, levels, float(resolution))
    keep = (ends > starts) & occupied[cells]
    kept = keep.reshape(-1).nonzero()[:, 0]
    ray_index = cand_ray[torch.div(kept, per_segment, rounding_mode="floor")]
    return ray_index, starts.reshape(-1)[kept], ends.reshape(-1)[kept], lattice, near, far


def _transmittance_and_alpha(densities: Tensor, starts: Tensor, ends: Tensor, ray_indices: Tensor,
                             num_rays: int) -> tuple[Tensor, Tensor]:
    """``[S]`` transmittance before each step and ``[S]`` opacity of each step."""
    optical_depth = densities.float() * (ends - starts)
    transmittance = torch.exp(-exclusive_sum_per_ray(optical_depth, ray_indices, num_rays))
    return transmittance, 1.0 - torch.exp(-optical_depth)


def useful_steps(densities: Tensor, starts: Tensor, ends: Tensor, ray_indices: Tensor, num_rays: int,
                 early_stop_eps: float, alpha_threshold: float) -> Tensor:
    """``[S]`` whether each marching step still matters, given the field's ``densities [S]`` at its
    midpoint: transmittance before it above ``early_stop_eps`` and opacity at least
    ``alpha_threshold`` (``starts, ends, ray_indices [S]`` as marched, grouped by ray)."""
    transmittance, alpha = _transmittance_and_alpha(densities, starts, ends, ray_indices, num_rays)
    return (transmittance > early_stop_eps) & (alpha >= alpha_threshold)


def step_midpoints(origins: Tensor, directions: Tensor, ray_indices: Tensor, starts: Tensor,
                   ends: Tensor) -> Tensor:
    """``[S, 3]`` midpoints of marching steps (``ray_indices, starts, ends [S]``) on ``[R, 3]`` rays."""
    return origins[ray_indices] + directions[ray_indices] * (0.5 * (starts + ends))[:, None]


HEAD_STEPS = 8
"""Marched steps per ray that :func:`useful_marched_steps` queries first (any value gives the same result)."""


@torch.no_grad()
def useful_marched_steps(density_fn: DensityFn, rays: Rays, ray_indices: Tensor, starts: Tensor, ends: Tensor,
                         early_stop_eps: float, alpha_threshold: float) -> Tensor:
    """``[S]`` :func:`useful_steps` of marched steps, the field queried (no gradient) at their midpoints.

    In two passes: the first ``HEAD_STEPS`` steps of every ray, then the later steps of the rays
    whose transmittance after those is still above ``early_stop_eps``. A ray opaque by then keeps
    none of its later steps whatever their density (transmittance only falls along a ray), so
    they are not queried: at 200 pixels most marched steps lie behind the surface a ray has hit.
    """
    num_rays, count = len(rays), ray_indices.shape[0]
    midpoints = step_midpoints(rays.origins, rays.directions, ray_indices, starts, ends)  # [S, 3]
    first = first_sample_indices(ray_indices, num_rays)
    rank = torch.arange(count, device=ray_indices.device) - first[ray_indices]  # [S] step's place in its ray
    densities = torch.zeros(count, device=starts.device)
    head = (rank < HEAD_STEPS).nonzero()[:, 0]
    densities[head] = density_fn(midpoints[head]).float()
    # Later steps carry density 0 here, so each sees the transmittance after its ray's head.
    transmittance, _ = _transmittance_and_alpha(densities, starts, ends, ray_indices, num_rays)
    tail = ((rank >= HEAD_STEPS) & (transmittance > early_stop_eps)).nonzero()[:, 0]
    if tail.numel() > 0:
        densities[tail] = density_fn(midpoints[tail]).float()
    return useful_steps(densities, starts, ends, ray_indices, num_rays, early_stop_eps, alpha_threshold)


def drop_useless_steps(densities: Tensor, starts: Tensor, ends: Tensor, ray_indices: Tensor, num_rays: int,
                       early_stop_eps: float, alpha_threshold: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(ray_indices, starts, ends)`` of the steps :func:`useful_steps` keeps, in their order."""
    selected = useful_steps(densities, starts, ends, ray_indices, num_rays, early_stop_eps,
                            alpha_threshold).nonzero()[:, 0]
    return ray_indices[selected], starts[selected], ends[selected]


class OccupancyMarcher(nn.Module):
    """``OccupancyGrid`` in evaluation, torch only: :func:`march_occupied_steps` with every ray's lattice
    offset at half a step, then (``early_stop``) the density pass that drops the steps whose
    transmittance is at most ``early_stop_eps`` or whose opacity is below ``alpha_threshold``.

    The number of samples depends on the grid and on the density; ``torch.export`` represents it
    as a data-dependent (unbacked) size.

    Args:
        occupied: ``[L N^3]`` bool; coarse: ``[L M^3]`` bool; bounds: ``[2, 3]`` the scene box.
        resolution, levels, step_size, cone_angle, num_steps, steps_per_segment, coarse_factor, clip:
            as :func:`march_occupied_steps` takes them.
        field: the exported field (``density(positions [S, 3]) -> [S]``), shared with the renderer.
        early_stop: run the density pass; early_stop_eps, alpha_threshold: its thresholds.
    """

    def __init__(self, occupied: Tensor, coarse: Tensor, bounds: Tensor, resolution: int, levels: int,
                 step_size: float, cone_angle: float, num_steps: int, steps_per_segment: int,
                 coarse_factor: int, clip: bool, field: nn.Module, early_stop: bool, early_stop_eps: float,
                 alpha_threshold: float) -> None:
        super().__init__()
        if occupied.numel() != levels * resolution**3:
            raise ValueError(f"occupied: expected levels * resolution^3 = {levels * resolution**3} cells, "
                             f"got {occupied.numel()}")
        self.register_buffer("occupied", occupied.detach().clone().bool().reshape(-1))
        self.register_buffer("coarse", coarse.detach().clone().bool().reshape(-1))
        self.register_buffer("bounds", bounds.detach().clone().float())
        self.resolution, self.levels = int(resolution), int(levels)
        self.step_size, self.cone_angle = float(step_size), float(cone_angle)
        self.num_steps, self.steps_per_segment = int(num_steps), int(steps_per_segment)
        self.coarse_factor, self.clip = int(coarse_factor), bool(clip)
        self.field = field
        self.early_stop = bool(early_stop)
        self.early_stop_eps, self.alpha_threshold = float(early_stop_eps), float(alpha_threshold)

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor,
                far: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(t_starts [S], t_ends [S], ray_indices [S])`` of the occupied (and useful) steps, ray
        after ray."""
        num_rays = origins.shape[0]
        offsets = torch.full((num_rays,), 0.5, device=origins.device, dtype=near.dtype)
        ray_indices, starts, ends, _, _, _ = march_occupied_steps(
            origins, directions, near, far, offsets, self.occupied, self.coarse, self.resolution,
            self.levels, self.bounds, self.step_size, self.cone_angle, self.num_steps,
            self.steps_per_segment, self.coarse_factor, self.clip,
        )
        if self.early_stop:  # as OccupancyGrid's density pass
            densities = self.field.density(step_midpoints(origins, directions, ray_indices, starts, ends))
            ray_indices, starts, ends = drop_useless_steps(densities, starts, ends, ray_indices, num_rays,
                                                           self.early_stop_eps, self.alpha_threshold)
        return starts, ends, ray_indices
