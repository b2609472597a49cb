"""Marching through cascaded occupancy grids with steps that grow with distance, as one pure function,
and the exported sampler.

:class:`~nerf_lightning.samplers.OccupancyGrid` with ``levels > 1`` or ``cone_angle > 0`` samples with
:func:`march_cascade_steps`, and its ``standalone()`` module, :class:`CascadeMarcher`, calls the same
function, so the two march exactly alike. The grids are
:mod:`nerf_lightning.samplers.occupancy.cascade`'s, the steps
:mod:`nerf_lightning.samplers.occupancy.stepping`'s.

Shapes: ``R`` rays, ``G`` coarse segments per ray, ``C`` candidate segments, ``P`` steps per segment,
``S`` kept steps, ``L`` levels of ``N^3`` cells (``M^3`` coarse cells).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.samplers.occupancy.cascade import cascade_cells, finest_level
from nerf_lightning.samplers.occupancy.marching import drop_useless_steps, step_midpoints
from nerf_lightning.samplers.occupancy.stepping import step_distance, step_number


def clip_to_cascade(box_origins: Tensor, box_directions: Tensor, near: Tensor, far: Tensor,
                    levels: int) -> tuple[Tensor, Tensor]:
    """``near, far [R]`` clipped to the outermost level's box ``[-2^(L-1), 2^(L-1)]^3`` (slab test in
    box coordinates ``box_origins, box_directions [R, 3]``); a ray that misses it gets
    ``far == near``. Nothing lies beyond the cascade for the grids to mark."""
    extent = 2.0 ** (levels - 1)
    safe = torch.where(box_directions.abs() < 1e-12, torch.full_like(box_directions, 1e-12), box_directions)
    t0 = (-extent - box_origins) / safe
    t1 = (extent - box_origins) / safe
    near = torch.maximum(near, torch.minimum(t0, t1).amax(dim=-1))
    far = torch.minimum(far, torch.maximum(t0, t1).amin(dim=-1))
    return near, torch.maximum(far, near)


def march_cascade_steps(
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
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The marching steps of rays that lie in occupied cells of a cascade.

    The rays' ``[near, far]`` is first clipped to the outermost box. Step ``k`` (``0 <= k <
    num_steps``) of a ray covers ``[t(a + k), t(a + k + 1)]`` clipped to ``[near, far]``, with ``t`` the
    distance at a step number (:func:`~nerf_lightning.samplers.occupancy.stepping.step_distance`) and the
    per-ray lattice origin ``a = u(near) + offset - 1`` in steps; it is kept when its midpoint's cell,
    in the finest level holding the midpoint, is occupied.

    A coarse pass first tests segments of ``P = steps_per_segment`` steps. A straight segment
    whose two ends lie in level ``k``'s box lies in it whole (a box is convex), so the coarser of
    its ends' levels holds all of it; ``coarse`` has, per level, that level's and every finer
    level's occupancy within it, pooled into coarse cells and dilated by one. When the segment is no
    longer than a coarse cell of that level, all of it lies in the 27 coarse cells around its start:
    testing the start never misses an occupied step. Longer segments (steps that outgrew the cells:
    cameras far from the cascade) are always candidates.

    Args:
        origins, directions: ``[R, 3]`` rays in world units.
        near, far: ``[R]`` marching interval (rays with ``far <= near`` get no step).
        offsets: ``[R]`` lattice offset of each ray, in steps, in ``[0, 1)``.
        occupied: ``[L N^3]`` bool (:mod:`~nerf_lightning.samplers.occupancy.cascade`'s flat cells).
        coarse: ``[L M^3]`` bool (:func:`~nerf_lightning.samplers.occupancy.cascade.cascade_coarse`).
        resolution, levels: ``N`` and ``L``.
        bounds: ``[2, 3]`` the scene box, level 0.
        step_size, cone_angle: the smallest step (world units) and how steps grow with distance.
        num_steps: steps per ray at most (:func:`~nerf_lightning.samplers.occupancy.stepping.steps_within`).
        steps_per_segment: ``P``.
        coarse_factor: cells per coarse cell along each side.

    Returns:
        ``ray_index [S]`` (grouped by ray, ordered along it), ``starts [S]``, ``ends [S]``, the lattice
        origin ``a [R]`` in steps, and the clipped ``near, far [R]``.
    """
    device, dtype = origins.device, origins.dtype
    centre, half = 0.5 * (bounds[0] + bounds[1]), 0.5 * (bounds[1] - bounds[0])
    box_origins = (origins - centre) / half  # [R, 3]: the scene box is [-1, 1]^3
    box_directions = directions / half
    near, far = clip_to_cascade(box_origins, box_directions, near, far, levels)
    lattice = step_number(near, step_size, cone_angle) + offsets - 1.0  # [R]
    # No step beyond the last one: clipping far there lets `ends > starts` drop them.
    far = torch.minimum(far, step_distance(lattice + float(num_steps), step_size, cone_angle))
    coarse_size = (resolution + coarse_factor - 1) // coarse_factor
    coarse_across = resolution / coarse_factor
    coarse_length = (bounds[1] - bounds[0]).min() * (coarse_factor / resolution)  # level 0, world units

    # 1. Coarse pass over [R, G]: segments of P steps that can touch an occupied cell.
    per_segment = steps_per_segment
    num_segments = (num_steps + per_segment - 1) // per_segment
    # Segment g spans edges g and g + 1; each edge is computed once, clipped to [near, far] (a
    # segment wholly outside the interval gets equal ends and is dropped).
    first_step = torch.arange(num_segments + 1, device=device, dtype=dtype) * per_segment  # [G + 1]
    edges = step_distance(lattice[:, None] + first_step, step_size, cone_angle)
    edges = torch.minimum(torch.maximum(edges, near[:, None]), far[:, None])  # [R, G + 1]
    x = torch.addcmul(box_origins[:, 0:1], box_directions[:, 0:1], edges)
    y = torch.addcmul(box_origins[:, 1:2], box_directions[:, 1:2], edges)
    z = torch.addcmul(box_origins[:, 2:3], box_directions[:, 2:3], edges)
    edge_level = finest_level(x, y, z, levels)
    level = torch.maximum(edge_level[:, :-1], edge_level[:, 1:])  # [R, G] the coarser end's
    seg_starts, seg_ends = edges[:, :-1], edges[:, 1:]
    short = (seg_ends - seg_starts) <= coarse_length * torch.exp2(level)
    seg_cells = cascade_cells(x[:, :-1], y[:, :-1], z[:, :-1], level, coarse_size, levels, coarse_across)
    seg_keep = (seg_ends > seg_starts) & (coarse[seg_cells] | ~short)
    candidates = seg_keep.nonzero()  # ray-major, segments in order
    cand_ray = candidates[:, 0]

    # 2. Fine pass over [C, P]: every step of those segments, kept when its cell is occupied.
    step_in_segment = torch.arange(per_segment, device=device, dtype=dtype)
    steps = candidates[:, 1:].to(dtype) * per_segment + step_in_segment  # [C, P] whole numbers
    origin = lattice[cand_ray][:, None]
    # A step's end and the next step's start come from the same number (whole numbers add exactly):
    # consecutive intervals meet without overlap.
    starts = step_distance(origin + steps, step_size, cone_angle).maximum(near[cand_ray][:, None])
    ends = step_distance(origin + (steps + 1.0), step_size, cone_angle).minimum(far[cand_ray][:, None])
    mids = (starts + ends).mul_(0.5)
    x = torch.addcmul(box_origins[cand_ray, 0:1], box_directions[cand_ray, 0:1], mids)
    y = torch.addcmul(box_origins[cand_ray, 1:2], box_directions[cand_ray, 1:2], mids)
    z = torch.addcmul(box_origins[cand_ray, 2:3], box_directions[cand_ray, 2:3], mids)
    cells = cascade_cells(x, y, z, finest_level(x, y, z, levels), resolution, levels, float(resolution))
    keep = (ends > starts) & occupied[cells]
    kept = keep.reshape(-1).nonzero()[:, 0]
    ray_index = cand_ray[torch.div(kept, per_segment, rounding_mode="floor")]
    return ray_index, starts.reshape(-1)[kept], ends.reshape(-1)[kept], lattice, near, far


class CascadeMarcher(nn.Module):
    """``OccupancyGrid`` with cascades or growing steps in evaluation, torch only:
    :func:`march_cascade_steps` with every ray's lattice offset at half a step, then (``early_stop``)
    the density pass (:func:`~nerf_lightning.samplers.occupancy.marching.useful_steps`).

    Args:
        occupied: ``[L N^3]`` bool; coarse: ``[L M^3]`` bool; bounds: ``[2, 3]`` the scene box.
        resolution, levels, step_size, cone_angle, num_steps, steps_per_segment, coarse_factor:
            as :func:`march_cascade_steps` takes them.
        field: the exported field (``density(positions [S, 3]) -> [S]``), shared with the renderer.
        early_stop: run the density pass; early_stop_eps, alpha_threshold: its thresholds.
    """

    def __init__(self, occupied: Tensor, coarse: Tensor, bounds: Tensor, resolution: int, levels: int,
                 step_size: float, cone_angle: float, num_steps: int, steps_per_segment: int,
                 coarse_factor: int, field: nn.Module, early_stop: bool, early_stop_eps: float,
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
        self.coarse_factor = int(coarse_factor)
        self.field = field
        self.early_stop = bool(early_stop)
        self.early_stop_eps, self.alpha_threshold = float(early_stop_eps), float(alpha_threshold)

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor,
                far: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(t_starts [S], t_ends [S], ray_indices [S])`` of the occupied (and useful) steps, ray
        after ray."""
        num_rays = origins.shape[0]
        offsets = torch.full((num_rays,), 0.5, device=origins.device, dtype=near.dtype)
        ray_indices, starts, ends, _, _, _ = march_cascade_steps(
            origins, directions, near, far, offsets, self.occupied, self.coarse, self.resolution,
            self.levels, self.bounds, self.step_size, self.cone_angle, self.num_steps,
            self.steps_per_segment, self.coarse_factor,
        )
        if self.early_stop:  # as OccupancyGrid's density pass
            densities = self.field.density(step_midpoints(origins, directions, ray_indices, starts, ends))
            ray_indices, starts, ends = drop_useless_steps(densities, starts, ends, ray_indices, num_rays,
                                                           self.early_stop_eps, self.alpha_threshold)
        return starts, ends, ray_indices
