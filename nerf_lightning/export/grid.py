"""``--format grid``: density and colour on a regular grid over the scene box (``.npz``).

Arrays (``numpy.load(path)``, no pickle needed):

- ``density``: ``[N, N, N]`` float32, 1/world unit, at ``(x[i], y[j], z[k])``;
- ``rgb``: ``[N, N, N, 3]`` float32 in ``[0, 1]``, the field's colour averaged over ``directions``;
- ``x``, ``y``, ``z``: ``[N]`` float32 coordinates of the grid points (the box faces included);
- ``bounds``: ``[2, 3]`` float32 scene box (lower, upper corners);
- ``directions``: ``[D, 3]`` float32 unit view directions the colour was averaged over;
- ``metadata``: a JSON string (format, version, resolution, the layout above, the suggested
  surface threshold, the checkpoint and run it comes from, the dataset's world normalisation).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nerf_lightning.export.common import (
    DEFAULT_CHUNK_POINTS,
    default_density_threshold,
    grid_axes,
    grid_points,
)
from nerf_lightning.fields import RadianceField
from nerf_lightning.files import atomic_write

FORMAT_VERSION = 1
# The six axis directions: colour seen from every side, equally.
AXIS_DIRECTIONS = ((1.0, 0.0, 0.0), (-1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, -1.0, 0.0),
                   (0.0, 0.0, 1.0), (0.0, 0.0, -1.0))


@torch.no_grad()
def field_grid(field: RadianceField, resolution: int, chunk_points: int = DEFAULT_CHUNK_POINTS,
               device: torch.device | str = "cpu") -> dict[str, np.ndarray]:
    """Density ``[N, N, N]`` and mean colour over :data:`AXIS_DIRECTIONS` ``[N, N, N, 3]`` of
    ``field`` on a ``resolution^3`` grid over its scene box, plus ``x``, ``y``, ``z``, ``bounds``,
    ``directions``; queried ``chunk_points`` points (times six directions) at a time."""
    axes = grid_axes(field.scene_bounds, resolution)
    total = resolution**3
    directions = torch.tensor(AXIS_DIRECTIONS, dtype=torch.float32)
    density = np.empty(total, dtype=np.float32)
    rgb = np.empty((total, 3), dtype=np.float32)
    per_query = max(1, chunk_points // len(directions))
    for start in range(0, total, per_query):
        count = min(per_query, total - start)
        points = grid_points(axes, start, count).to(device)
        repeated = points.repeat(len(directions), 1)  # [D * P, 3], direction-major
        views = directions.to(device).repeat_interleave(count, dim=0)
        sigma, color = field(repeated, views)
        density[start : start + count] = sigma[:count].float().cpu().numpy()
        rgb[start : start + count] = color.float().view(len(directions), count, 3).mean(0).cpu().numpy()
    n = resolution
    return {
        "density": density.reshape(n, n, n),
        "rgb": rgb.reshape(n, n, n, 3),
        "x": axes[0].numpy(), "y": axes[1].numpy(), "z": axes[2].numpy(),
        "bounds": field.scene_bounds.detach().float().cpu().numpy(),
        "directions": directions.numpy(),
    }


def export_grid(field: RadianceField, out: Path, resolution: int, chunk_points: int = DEFAULT_CHUNK_POINTS,
                device: torch.device | str = "cpu",
                metadata: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Write :func:`field_grid` and its metadata to ``out`` (``.npz``, uncompressed, atomically)."""
    arrays = field_grid(field, resolution, chunk_points, device)
    info = {
        "format": "nerf-lightning field grid",
        "format_version": FORMAT_VERSION,
        "resolution": resolution,
        "layout": "density[i, j, k] and rgb[i, j, k] at (x[i], y[j], z[k]); "
                  "the grid points include the box faces",
        "density_units": "1 / world unit",
        "rgb": "mean of the field's colour over the six axis view directions",
        "suggested_density_threshold": default_density_threshold(field.scene_bounds.detach().cpu()),
        "field": type(field).__name__,
        **(metadata or {}),
    }
    with atomic_write(out) as handle:
        np.savez(handle, **arrays, metadata=np.array(json.dumps(info)))
    return arrays
