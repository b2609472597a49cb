"""What the export formats share: errors and field queries over a regular grid (files are written with
:mod:`nerf_lightning.files`, atomically)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from nerf_lightning.fields import RadianceField

DEFAULT_RESOLUTION = 256
DEFAULT_CHUNK_POINTS = 1 << 18
# The default surface density makes a layer 1/128 of the scene box diagonal thick absorb half the
# light. On a trained demo scene this level set lay closest to the points where rendered rays
# terminate, closer than 1/512 (thin and soft parts vanish) or 1/32 (the surface swells); the
# measurement is in benchmarks/RESULTS.md.
REFERENCE_STEPS_PER_DIAGONAL = 128


class ExportError(ValueError):
    """An export cannot be made with these arguments or this model."""


def grid_axes(bounds: Tensor, resolution: int) -> list[Tensor]:
    """Per axis, ``[N]`` coordinates of ``N = resolution`` grid points from the box's lower to its upper
    face (both included), from ``bounds [2, 3]``."""
    if resolution < 2:
        raise ExportError(f"--resolution: expected an integer >= 2, got {resolution}")
    lower, upper = bounds[0].double().cpu(), bounds[1].double().cpu()
    return [torch.linspace(float(lower[a]), float(upper[a]), resolution, dtype=torch.float64).float()
            for a in range(3)]


def grid_points(axes: list[Tensor], first: int, count: int) -> Tensor:
    """``[count, 3]`` points ``first .. first + count`` of the grid, in C order over ``(i, j, k)``."""
    ny, nz = len(axes[1]), len(axes[2])
    flat = torch.arange(first, first + count)
    i, j, k = flat // (ny * nz), (flat // nz) % ny, flat % nz
    return torch.stack([axes[0][i], axes[1][j], axes[2][k]], dim=-1)


@torch.no_grad()
def density_grid(field: RadianceField, resolution: int, chunk_points: int = DEFAULT_CHUNK_POINTS,
                 device: torch.device | str = "cpu") -> tuple[np.ndarray, list[Tensor]]:
    """The field's density at the points of a ``resolution^3`` grid over its scene box.

    Returns ``(density [N, N, N] float32, axes)`` with ``density[i, j, k]`` at
    ``(axes[0][i], axes[1][j], axes[2][k])``. Evaluated ``chunk_points`` at a time, so the memory
    beyond the grid itself is bounded.
    """
    axes = grid_axes(field.scene_bounds, resolution)
    total = resolution**3
    out = np.empty(total, dtype=np.float32)
    for start in range(0, total, chunk_points):
        count = min(chunk_points, total - start)
        points = grid_points(axes, start, count).to(device)
        out[start : start + count] = field.density(points).float().cpu().numpy()
    return out.reshape(resolution, resolution, resolution), axes


def default_density_threshold(bounds: Tensor, opacity: float = 0.5) -> float:
    """Density at which a layer 1/128 of the box diagonal thick absorbs ``opacity`` of the light.

    ``sigma = -ln(1 - opacity) / (diagonal / 128)`` (1/world unit): it scales with the scene,
    not with ``--resolution``.
    """
    diagonal = float((bounds[1] - bounds[0]).double().norm())
    step = diagonal / REFERENCE_STEPS_PER_DIAGONAL
    return -math.log(1.0 - opacity) / step


def check_output(out: Path, suffix: str, force: bool) -> None:
    """Raise unless ``out`` ends with ``suffix`` and may be written (``force`` replaces a file)."""
    if out.suffix.lower() != suffix:
        found = out.suffix or "no extension"
        raise ExportError(f"{out}: expected a {suffix} file for this format, got {found}")
    if out.is_dir():
        raise ExportError(f"{out}: is a directory")
    if out.exists() and not force:
        raise FileExistsError(f"{out}: already exists; pass --force to replace it")
