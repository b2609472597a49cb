"""``--format mesh``: a coloured triangle mesh of the field's density level set (PLY).

The density is sampled on a ``resolution^3`` grid spanning the scene box (chunked queries),
scikit-image's Lewiner marching cubes extracts the surface where it crosses the threshold,
and each vertex is coloured by the field's colour at the vertex seen along its inward normal
(a camera looking straight at the surface). Vertices and normals are in the model's world frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nerf_lightning.export.common import (
    DEFAULT_CHUNK_POINTS,
    ExportError,
    default_density_threshold,
    density_grid,
)
from nerf_lightning.export.ply import write_ply
from nerf_lightning.fields import RadianceField


@dataclass(frozen=True)
class Mesh:
    """A triangle mesh with per-vertex normals and colours.

    Attributes:
        vertices: ``[V, 3]`` float32 world positions.
        faces: ``[F, 3]`` int64 vertex indices, counter-clockwise seen from outside.
        normals: ``[V, 3]`` float32 unit outward normals (towards lower density).
        colors: ``[V, 3]`` uint8 RGB.
        threshold: the density level of the surface.
    """

    vertices: np.ndarray
    faces: np.ndarray
    normals: np.ndarray
    colors: np.ndarray
    threshold: float


def _marching_cubes(density: np.ndarray, level: float, spacing: tuple[float, float, float]):
    try:
        from skimage.measure import marching_cubes
    except ImportError:
        raise ExportError(
            "mesh export needs scikit-image: pip install 'nerf-lightning[mesh]'"
        ) from None
    return marching_cubes(density, level=level, spacing=spacing, allow_degenerate=False)


@torch.no_grad()
def vertex_colors(field: RadianceField, vertices: np.ndarray, normals: np.ndarray,
                  chunk_points: int = DEFAULT_CHUNK_POINTS, device: torch.device | str = "cpu") -> np.ndarray:
    """``[V, 3]`` uint8 colours of the field at ``vertices [V, 3]`` seen along ``-normals [V, 3]``."""
    colors = np.empty((len(vertices), 3), dtype=np.uint8)
    for start in range(0, len(vertices), chunk_points):
        points = torch.from_numpy(vertices[start : start + chunk_points]).float().to(device)
        directions = -torch.from_numpy(normals[start : start + chunk_points]).float().to(device)
        _, rgb = field(points, directions)
        quantized = (rgb.float().clamp(0, 1) * 255.0 + 0.5).to(torch.uint8)
        colors[start : start + len(points)] = quantized.cpu().numpy()
    return colors


def extract_mesh(field: RadianceField, resolution: int, threshold: float | None = None,
                 chunk_points: int = DEFAULT_CHUNK_POINTS, device: torch.device | str = "cpu") -> Mesh:
    """The coloured surface where ``field``'s density crosses ``threshold``.

    Args:
        field: any radiance field (its ``scene_bounds`` is the extraction box).
        resolution: grid points per side (the mesh's detail; memory ``4 resolution^3`` bytes).
        threshold: density of the surface; ``None`` takes :func:`default_density_threshold`.
        chunk_points: points per field query.
        device: where the field runs.
    """
    bounds = field.scene_bounds.detach().cpu()
    level = default_density_threshold(bounds) if threshold is None else float(threshold)
    density, axes = density_grid(field, resolution, chunk_points, device)
    density = np.nan_to_num(density, nan=0.0, posinf=np.finfo(np.float32).max)
    low, high = float(density.min()), float(density.max())
    if not low < level < high:
        raise ExportError(
            f"no surface: the density ranges over [{low:.4g}, {high:.4g}] on the grid and never crosses "
            f"the threshold {level:.4g}; pass --density-threshold inside that range"
        )
    spacing = tuple(float(axis[1] - axis[0]) for axis in axes)
    vertices, faces, normals, _ = _marching_cubes(density, level, spacing)  # type: ignore[arg-type]
    vertices = (vertices + bounds[0].numpy()[None, :]).astype(np.float32)
    vertices = np.clip(vertices, bounds[0].numpy(), bounds[1].numpy())
    normals = normals.astype(np.float32)
    # Outward: towards lower density. Check it against the grid rather than trust a convention.
    length = np.linalg.norm(normals, axis=-1, keepdims=True)
    fallback = np.array([0.0, 0.0, 1.0], np.float32)
    normals = np.where(length > 1e-12, normals / np.maximum(length, 1e-12), fallback)
    probe = _sample_grid(density, axes, vertices + normals * max(spacing))
    if float(np.mean(probe < level)) < 0.5:
        normals = -normals
    faces = faces.astype(np.int64)
    edge_a = vertices[faces[:, 1]] - vertices[faces[:, 0]]
    edge_b = vertices[faces[:, 2]] - vertices[faces[:, 0]]
    facing = np.einsum("fi,fi->f", np.cross(edge_a, edge_b), normals[faces].sum(axis=1))
    if float(facing.sum()) < 0:  # counter-clockwise seen from outside
        faces = faces[:, [0, 2, 1]]
    colors = vertex_colors(field, vertices, normals, chunk_points, device)
    return Mesh(vertices=vertices, faces=faces, normals=normals.astype(np.float32), colors=colors,
                threshold=level)


def _sample_grid(grid: np.ndarray, axes: list[torch.Tensor], points: np.ndarray) -> np.ndarray:
    """Nearest-grid-point values of ``grid [N, N, N]`` at ``points [P, 3]`` (clamped into the box)."""
    index = []
    for a in range(3):
        axis = axes[a].numpy()
        step = axis[1] - axis[0]
        index.append(np.clip(np.rint((points[:, a] - axis[0]) / step), 0, len(axis) - 1).astype(np.int64))
    return grid[index[0], index[1], index[2]]


def export_mesh(field: RadianceField, out: Path, resolution: int, threshold: float | None = None,
                chunk_points: int = DEFAULT_CHUNK_POINTS, device: torch.device | str = "cpu",
                comments: list[str] | None = None) -> Mesh:
    """Extract the mesh (:func:`extract_mesh`) and write it to ``out`` as binary PLY (atomically)."""
    mesh = extract_mesh(field, resolution, threshold, chunk_points, device)
    write_ply(out, mesh.vertices, colors=mesh.colors, normals=mesh.normals, faces=mesh.faces,
              comments=[*(comments or []), f"density_threshold {mesh.threshold:.6g}",
                        f"resolution {resolution}"])
    return mesh
