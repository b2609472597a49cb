"""Where each cell of the occupancy grid lies: ``L`` levels of ``N^3`` cells (nerfacc's cascade; one level
is the single grid over the scene box).

Level ``k`` is a grid of ``N^3`` cells over the scene box scaled by ``2^k`` about its centre, so every
level has the same resolution and the outer ones have coarser cells: the scene box keeps full detail,
and the space an unbounded scene's background fills, which a contracting field squeezes into a thin
shell anyway, costs only ``N^3`` cells per doubling of the distance. A position belongs to the finest
level whose box holds it (beyond the outermost box: to that box's nearest cell).

Positions are handled in *grid units*, ``g = (p - lower) N / (upper - lower)``, in which level 0's
cells are the unit cubes between 0 and ``N`` (:func:`grid_units`). Level ``k``'s box is the cube of
half-width ``2^k N / 2`` about ``N / 2``, and a position's cell coordinate in it is
``g 2^-k + (N / 2)(1 - 2^-k)``: exact for ``k = 0`` (so one level computes exactly what a single grid
does) and rounded once otherwise. The coarse grids of the marching's first pass use the same map in
units of ``coarse_factor`` cells. Cell ``(i, j, l)`` of level ``k`` has the flat index
``((k N + i) N + j) N + l``. Level ``k``'s central half is level ``k - 1``'s box; with ``N``
divisible by 4 its cells there hold exactly ``2^3`` cells of level ``k - 1`` each.

Shapes: ``K`` positions of any shape ``[...]``, ``C`` cells, ``M`` coarse cells along each side.
Pure torch: the exported marcher calls these very functions.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def grid_units(origins: Tensor, directions: Tensor, bounds: Tensor, resolution: int) -> tuple[Tensor, Tensor]:
    """Rays ``origins, directions [R, 3]`` (world units) in grid units, for the scene box ``bounds [2, 3]``
    and ``N = resolution``: a point at distance ``t`` lies at ``origins' + t directions'``."""
    cells_per_unit = (bounds[1] - bounds[0]).reciprocal() * resolution  # [3]
    return (origins - bounds[0]) * cells_per_unit, directions * cells_per_unit


def points_along(origins: Tensor, directions: Tensor, distances: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``x, y, z [R, K]`` of the points at ``distances [R, K]`` along rays ``origins, directions [R, 3]``.

    One fused multiply-add per axis over ``[R, K]``: no ``[R, K, 3]`` points are built (on a CPU,
    building them would be the marching loop's largest cost).
    """
    return (torch.addcmul(origins[:, 0:1], directions[:, 0:1], distances),
            torch.addcmul(origins[:, 1:2], directions[:, 1:2], distances),
            torch.addcmul(origins[:, 2:3], directions[:, 2:3], distances))


def finest_level(x: Tensor, y: Tensor, z: Tensor, across: float, levels: int) -> Tensor:
    """``[...]`` float level of the finest box holding each position ``x, y, z [...]``, given in units in
    which level 0 spans ``[0, across]`` (``levels - 1`` beyond the outermost box)."""
    half = 0.5 * across
    extent = torch.maximum(torch.maximum((x - half).abs(), (y - half).abs()), (z - half).abs())
    level = torch.zeros_like(extent)
    for k in range(1, levels):  # a handful of levels: comparisons beat a log2 and a ceil
        level += (extent > half * 2.0 ** (k - 1)).to(extent.dtype)
    return level


def level_cells(x: Tensor, y: Tensor, z: Tensor, level: Tensor | None, size: int, levels: int,
                across: float) -> Tensor:
    """``[...]`` flat index of the cell of ``level [...]`` (float; ``None`` with one level) holding each
    position ``x, y, z [...]``, given in units in which level 0 spans ``[0, across]``, in ``levels`` grids
    of ``size^3`` cells, ``across`` of them spanning a level's box (``N`` for the grids themselves,
    ``N / coarse_factor`` for their coarse versions); positions outside the level's box get its nearest
    cell. ``x, y, z`` may be overwritten.

    One multiply-add (none in level 0), clamp and floor per axis: no ``[..., 3]`` positions are built.
    Clamped in floating point before the integer conversion: clamping int64 tensors is several times
    slower on a CPU.
    """
    if level is not None:  # g 2^-k + (across / 2)(1 - 2^-k): the scale is a power of two
        scale = torch.exp2(-level)
        offset = (1.0 - scale) * (0.5 * across)
        x = torch.addcmul(offset, x, scale)
        y = torch.addcmul(offset, y, scale)
        z = torch.addcmul(offset, z, scale)
    top = float(size - 1)
    x, y, z = x.clamp_(0.0, top).floor_(), y.clamp_(0.0, top).floor_(), z.clamp_(0.0, top).floor_()
    if levels * size**3 <= 2**24:  # combined in float32, exact below 2^24 (fewer passes than in int64)
        flat = torch.add(z, torch.add(y, x, alpha=size), alpha=size)
        if level is not None:
            flat = torch.add(flat, level, alpha=size**3)
        return flat.long()
    flat = (x.long() * size + y.long()) * size + z.long()
    if level is not None:
        flat = flat + level.long() * size**3
    return flat


def level_boxes(bounds: Tensor, levels: int) -> tuple[Tensor, Tensor]:
    """``lower, upper [L, 3]``: level ``k``'s box, the scene box ``bounds [2, 3]`` scaled by ``2^k`` about
    its centre. Level 0's is ``bounds`` exactly (``x + 0 (x - c) = x``)."""
    grow = (torch.exp2(torch.arange(levels, device=bounds.device, dtype=bounds.dtype)) - 1.0)[:, None]
    centre = 0.5 * (bounds[0] + bounds[1])
    return bounds[0] + (bounds[0] - centre) * grow, bounds[1] + (bounds[1] - centre) * grow


def cell_positions(cells: Tensor, jitter: Tensor, resolution: int, levels: int, bounds: Tensor) -> Tensor:
    """World positions ``[C, 3]`` inside the grid's ``cells [C]`` (flat indices into ``levels`` levels) at
    offsets ``jitter [C, 3]`` in ``[0, 1)`` of each cell, for the scene box ``bounds [2, 3]``."""
    res = resolution
    within = cells % res**3 if levels > 1 else cells
    ijk = torch.stack([within // (res * res), (within // res) % res, within % res], dim=-1)
    unit = (ijk.to(jitter) + jitter) / res  # [C, 3] in [0, 1) of the level's box
    lower, upper = level_boxes(bounds, levels)  # [L, 3]
    if levels > 1:
        level = cells // res**3
        lower, upper = lower[level], upper[level]
    return lower + unit * (upper - lower)


def positions_to_cells(positions: Tensor, bounds: Tensor, resolution: int, levels: int) -> Tensor:
    """``[K]`` flat cell of world ``positions [K, 3]`` (the finest level holding each)."""
    cells_per_unit = (bounds[1] - bounds[0]).reciprocal() * resolution
    x, y, z = ((positions - bounds[0]) * cells_per_unit).unbind(-1)
    level = finest_level(x, y, z, float(resolution), levels) if levels > 1 else None
    return level_cells(x, y, z, level, resolution, levels, float(resolution))


def cascade_coarse(occupied: Tensor, resolution: int, levels: int, coarse_factor: int) -> Tensor:
    """``[L M^3]`` bool, ``M = ceil(N / coarse_factor)``: per level, whether a coarse cell or any of
    its 26 neighbours holds an occupied cell of that level *or of a finer level inside it*.

    Folding the finer levels in (each level's central half takes the pooled level below it) lets a
    segment that crosses from one level into the next be tested once, in the coarser level: every
    position in level ``k``'s box is represented in level ``k``'s coarse grid, whichever level it is
    looked up in when marched.
    """
    res, quarter = resolution, resolution // 4
    grids = occupied.view(levels, 1, 1, res, res, res).float()
    folded: list[Tensor] = []
    for k in range(levels):
        grid = grids[k]
        if folded:
            grid = grid.clone()
            inner = grid[..., quarter:-quarter, quarter:-quarter, quarter:-quarter]
            inner.copy_(torch.maximum(inner, nn.functional.max_pool3d(folded[-1], 2, 2)))
        folded.append(grid)
    stacked = torch.cat(folded)  # [L, 1, N, N, N]
    coarse = nn.functional.max_pool3d(stacked, coarse_factor, coarse_factor, ceil_mode=True)
    return (nn.functional.max_pool3d(coarse, 3, 1, padding=1) > 0).reshape(-1)
