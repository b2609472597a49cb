"""Fixed-step ray marching through an occupancy bitfield, as one pure (TorchScript-ready) function.

:class:`~nerf_lightning.samplers.OccupancyGrid` samples with it, and the standalone export
(:mod:`nerf_lightning.export.standalone`) scripts the same function into its saved module, so the
two march exactly alike.

Shapes: ``R`` rays, ``G`` coarse segments per ray, ``C`` candidate segments, ``P`` steps per
segment, ``S`` kept steps, ``N`` cells along each side of the grid.
"""

from __future__ import annotations

import torch
from torch import Tensor


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
