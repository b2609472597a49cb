"""Fixed-step ray marching through an occupancy bitfield, as one pure function, and the exported sampler.

:class:`~nerf_lightning.samplers.OccupancyGrid` samples with :func:`march_occupied_steps`, and its
``standalone()`` module, :class:`OccupancyMarcher`, calls the same function (``torch.export`` traces
it, ``torch.jit.script`` compiles it), so the two march exactly alike.

Shapes: ``R`` rays, ``G`` coarse segments per ray, ``C`` candidate segments, ``P`` steps per
segment, ``S`` kept steps, ``N`` cells along each side of the grid.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.core.types import DensityFn, Rays

# compiled into the exported samplers
from nerf_lightning.rendering.packed import exclusive_sum_per_ray, first_sample_indices


def cells_along_rays(origins: Tensor, directions: Tensor, distances: Tensor, size: int) -> Tensor:
    """``[R, K]`` flat index ``(i size + j) size + k`` of the cells of a ``size^3`` grid holding
    the points at ``distances [R, K]`` along rays given in grid units (``origins [R, 3]``,
    ``directions [R, 3]``: a cell is one unit wide, the grid starts at 0). Points outside the
    grid get the nearest boundary cell.

    One fused multiply-add, clamp and floor per axis over ``[R, K]``: no ``[R, K, 3]`` points
    are built (the marching loop's largest cost on a CPU when they were).
    """
    top = float(size - 1)
    x = torch.addcmul(origins[:, 0:1], directions[:, 0:1], distances).clamp_(0.0, top).floor_()
    y = torch.addcmul(origins[:, 1:2], directions[:, 1:2], distances).clamp_(0.0, top).floor_()
    z = torch.addcmul(origins[:, 2:3], directions[:, 2:3], distances).clamp_(0.0, top).floor_()
    if size <= 256:  # flat indices combined in float32 are exact below 2^24 = 256^3
        return torch.add(z, torch.add(y, x, alpha=size), alpha=size).long()
    return (x.long() * size + y.long()) * size + z.long()


def march_occupied_steps(
    origins: Tensor,
    directions: Tensor,
    near: Tensor,
    far: Tensor,
    offsets: Tensor,
    occupied: Tensor,
    coarse: Tensor,
    resolution: int,
    lower: Tensor,
    upper: Tensor,
    step_size: float,
    num_steps: int,
    steps_per_segment: int,
    coarse_factor: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The marching steps of rays that lie in occupied cells of a grid.

    Step ``k`` (``0 <= k < num_steps``) of a ray covers ``[o + (k - 1) step, o + k step]``
    clipped to ``[near, far]``, with the per-ray lattice origin ``o = near + (offset - 1) step``;
    it is kept when the cell of its midpoint is occupied. A coarse pass first tests segments of
    ``P = steps_per_segment`` steps against ``coarse``, a dilated grid whose cell covers
    ``coarse_factor^3`` cells: when ``P`` steps span at most one coarse cell, every point of a
    segment lies in the 27 coarse cells around any other of its points, so testing one point
    never misses an occupied step (with ``P = 1`` the tested point is the step's midpoint itself).

    Args:
        origins, directions: ``[R, 3]`` rays in world units.
        near, far: ``[R]`` marching interval (rays with ``far <= near`` get no step).
        offsets: ``[R]`` lattice offset of each ray, in steps, in ``[0, 1)``.
        occupied: ``[N^3]`` bool, cell ``(i, j, k)`` at ``(i N + j) N + k``.
        coarse: ``[M, M, M]`` bool, ``M = ceil(N / coarse_factor)``.
        resolution: ``N``.
        lower, upper: ``[3]`` the grid's box.
        step_size: the step in world units.
        num_steps: steps per ray at most.
        steps_per_segment: ``P``.
        coarse_factor: cells per coarse cell along each side.

    Returns:
        ``ray_index [S]`` (grouped by ray, ordered along it), ``starts [S]``, ``ends [S]`` and
        ``lattice_origin [R]``.
    """
    device = origins.device
    coarse_size = coarse.shape[0]
    cells_per_unit = (upper - lower).reciprocal() * resolution  # [3]
    grid_origins = (origins - lower) * cells_per_unit  # [R, 3] in cells
    grid_directions = directions * cells_per_unit
    lattice_origin = near + (offsets - 1.0) * step_size  # [R]
    # No step beyond the last one: clipping far there lets `ends > starts` drop them.
    far = torch.minimum(torch.maximum(far, near), lattice_origin + num_steps * step_size)

    # 1. Coarse pass over [R, G]: segments of P steps that can touch an occupied cell.
    per_segment = steps_per_segment
    num_segments = (num_steps + per_segment - 1) // per_segment
    first_step = torch.arange(num_segments, device=device, dtype=origins.dtype) * per_segment  # [G]
    seg_begins = lattice_origin[:, None] + first_step * step_size  # [R, G]
    if per_segment > 1:  # any point of the segment will do: its middle
        seg_points = seg_begins + 0.5 * per_segment * step_size
    else:  # a single step: exactly the point the fine pass tests
        clipped_ends = (seg_begins + step_size).minimum(far[:, None])
        seg_points = 0.5 * (seg_begins.maximum(near[:, None]) + clipped_ends)
    scale = 1.0 / coarse_factor
    seg_cells = cells_along_rays(grid_origins * scale, grid_directions * scale, seg_points, coarse_size)
    seg_keep = (seg_begins < far[:, None]) & coarse.reshape(-1)[seg_cells]
    candidates = seg_keep.nonzero()  # ray-major, segments in order
    cand_ray = candidates[:, 0]

    # 2. Fine pass over [C, P]: every step of those segments, kept when its cell is occupied.
    step_in_segment = torch.arange(per_segment, device=device, dtype=origins.dtype)
    steps = candidates[:, 1:].to(origins.dtype) * per_segment + step_in_segment  # [C, P]
    begins = torch.add(lattice_origin[cand_ray][:, None], steps, alpha=step_size)
    starts = begins.maximum(near[cand_ray][:, None])
    ends = (begins + step_size).minimum(far[cand_ray][:, None])
    mids = (starts + ends).mul_(0.5)
    cells = cells_along_rays(grid_origins[cand_ray], grid_directions[cand_ray], mids, resolution)
    keep = (ends > starts) & occupied[cells]
    kept = keep.reshape(-1).nonzero()[:, 0]
    ray_index = cand_ray[torch.div(kept, per_segment, rounding_mode="floor")]
    return ray_index, starts.reshape(-1)[kept], ends.reshape(-1)[kept], lattice_origin


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
        occupied: ``[res^3]`` bool, cell ``(i, j, k)`` at ``(i res + j) res + k``.
        coarse: ``[c, c, c]`` bool, the coarse dilated grid.
        bounds: ``[2, 3]`` grid box.
        steps_per_diagonal: steps across the box diagonal.
        step_size: the step in world units.
        steps_per_segment: steps per coarse segment.
        coarse_factor: cells per coarse cell along each side.
        field: the exported field (``density(positions [S, 3]) -> [S]``), shared with the renderer.
        early_stop: run the density pass.
        early_stop_eps, alpha_threshold: its thresholds.
    """

    def __init__(self, occupied: Tensor, coarse: Tensor, bounds: Tensor, steps_per_diagonal: int,
                 step_size: float, steps_per_segment: int, coarse_factor: int, field: nn.Module,
                 early_stop: bool, early_stop_eps: float, alpha_threshold: float) -> None:
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
        self.field = field
        self.early_stop = bool(early_stop)
        self.early_stop_eps = float(early_stop_eps)
        self.alpha_threshold = float(alpha_threshold)

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor,
                far: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(t_starts [S], t_ends [S], ray_indices [S])`` of the occupied (and useful) steps, ray
        after ray."""
        num_rays = origins.shape[0]
        offsets = torch.full((num_rays,), 0.5, device=origins.device, dtype=near.dtype)
        ray_indices, starts, ends, _ = march_occupied_steps(
            origins, directions, near, far, offsets, self.occupied, self.coarse, self.resolution,
            self.bounds[0], self.bounds[1], self.step_size, self.steps_per_diagonal + 1,
            self.steps_per_segment, self.coarse_factor,
        )
        if self.early_stop:  # as OccupancyGrid's density pass
            densities = self.field.density(step_midpoints(origins, directions, ray_indices, starts, ends))
            ray_indices, starts, ends = drop_useless_steps(densities, starts, ends, ray_indices, num_rays,
                                                           self.early_stop_eps, self.alpha_threshold)
        return starts, ends, ray_indices
