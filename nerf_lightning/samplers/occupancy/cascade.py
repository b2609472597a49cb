"""Cascaded occupancy grids (nerfacc's ``OccGridEstimator`` with ``levels > 1``): where each cell lies.

Level ``k`` of ``L`` is a grid of ``N^3`` cells over the scene box scaled by ``2^k`` about its centre,
so every level has the same resolution and the outer ones have coarser cells: the scene box keeps
full detail, and the space an unbounded scene's background fills, which a contracting field squeezes
into a thin shell anyway, costs only ``N^3`` cells per doubling of the distance. A position belongs to
the finest level whose box holds it (beyond the outermost box: to that box's nearest cell).

Positions are handled in *box coordinates*, ``x = (p - centre) / half``, in which the scene box is
``[-1, 1]^3`` and level ``k``'s box ``[-2^k, 2^k]^3``. Cell ``(i, j, l)`` of level ``k`` has the flat
index ``((k N + i) N + j) N + l``. Level ``k``'s central half is level ``k - 1``'s box; with ``N``
divisible by 4 its cells there hold exactly ``2^3`` cells of level ``k - 1`` each.

Shapes: ``K`` positions of any shape ``[...]``, ``C`` cells, ``M`` coarse cells along each side.
Pure torch: the exported marcher calls these very functions.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def finest_level(x: Tensor, y: Tensor, z: Tensor, levels: int) -> Tensor:
    """``[...]`` float level of the finest box holding each position given in box coordinates
    ``x, y, z [...]`` (``levels - 1`` beyond the outermost box)."""
    extent = torch.maximum(torch.maximum(x.abs(), y.abs()), z.abs())
    level = torch.zeros_like(extent)
    for k in range(1, levels):  # a handful of levels: comparisons beat a log2 and a ceil
        level += (extent > 2.0 ** (k - 1)).to(extent.dtype)
    return level


def cascade_cells(x: Tensor, y: Tensor, z: Tensor, level: Tensor, size: int, levels: int,
                  cells_across: float) -> Tensor:
    """``[...]`` flat index of the cell of ``level [...]`` (float) holding each position given in box
    coordinates ``x, y, z [...]``, in ``levels`` grids of ``size^3`` cells, ``cells_across`` of them
    spanning a level's box (``size`` for the grids themselves, ``N / coarse_factor`` for their coarse
    versions); positions outside the level's box get its nearest cell.

    Level ``k``'s box spans ``[-2^k, 2^k]`` on each axis, so the cell coordinate is
    ``(x 2^-k + 1) cells_across / 2``; the scale is a power of two, exact in floating point. One
    multiply, add, clamp and floor per axis: no ``[..., 3]`` positions are built.
    """
    half_across = 0.5 * cells_across
    scale = torch.exp2(-level) * half_across
    top = float(size - 1)
    i = (x * scale).add_(half_across).clamp_(0.0, top).floor_()
    j = (y * scale).add_(half_across).clamp_(0.0, top).floor_()
    k = (z * scale).add_(half_across).clamp_(0.0, top).floor_()
    if levels * size**3 <= 2**24:  # combined in float32, exact below 2^24 (fewer passes than in int64)
        return (((level * size + i) * size + j) * size + k).long()
    return ((level.long() * size + i.long()) * size + j.long()) * size + k.long()


def cell_positions(cells: Tensor, jitter: Tensor, resolution: int, bounds: Tensor) -> Tensor:
    """World positions ``[C, 3]`` inside the cascade's ``cells [C]`` (flat indices) at offsets
    ``jitter [C, 3]`` in ``[0, 1)`` of each cell, for the scene box ``bounds [2, 3]``."""
    res = resolution
    level, within = cells // res**3, cells % res**3
    ijk = torch.stack([within // (res * res), (within // res) % res, within % res], dim=-1)
    unit = (ijk.to(jitter) + jitter) / res  # [C, 3] in [0, 1) of the level's box
    box = (2.0 * unit - 1.0) * torch.exp2(level.to(jitter))[:, None]
    centre, half = 0.5 * (bounds[0] + bounds[1]), 0.5 * (bounds[1] - bounds[0])
    return centre + half * box


def positions_to_cells(positions: Tensor, bounds: Tensor, resolution: int, levels: int) -> Tensor:
    """``[K]`` flat cascade cell of world ``positions [K, 3]`` (the finest level holding each)."""
    box = (positions - 0.5 * (bounds[0] + bounds[1])) / (0.5 * (bounds[1] - bounds[0]))
    x, y, z = box.unbind(-1)
    return cascade_cells(x, y, z, finest_level(x, y, z, levels), resolution, levels, float(resolution))


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
