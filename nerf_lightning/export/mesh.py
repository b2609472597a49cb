"""``--format mesh``: a coloured triangle mesh of the field's density level set (PLY).

The density is sampled on a ``resolution^3`` grid spanning the scene box (chunked queries), marching
cubes (:mod:`~nerf_lightning.export.marching_cubes`) extracts the surface where it crosses the
threshold, and each vertex is coloured by the field's colour at the vertex seen along its inward normal
(a camera looking straight at the surface). Vertices and normals are in the model's world frame.
A surface too small to be the scene's is still written, with a warning (:func:`surface_warning`).
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
from nerf_lightning.export.marching_cubes import marching_cubes
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
        resolution: grid points per side of the box it was extracted from.
        bounds: ``[2, 3]`` the box's corners (min, max).
        dense_fraction: share of the grid's points denser than ``threshold``.
        density_range: the grid's lowest and highest density.
    """

    vertices: np.ndarray
    faces: np.ndarray
    normals: np.ndarray
    colors: np.ndarray
    threshold: float
    resolution: int
    bounds: np.ndarray
    dense_fraction: float
    density_range: tuple[float, float]


SMALL_SPAN = 0.25
"""A mesh whose vertices span less than this share of the box along every axis is implausibly small."""


def few_triangles(resolution: int) -> int:
    """Triangles below which a mesh from a ``resolution^3`` grid is implausibly small: ``(R - 1)^2 / 4``,
    what a flat surface across an eighth of a face of the box gives (2 triangles per grid cell it cuts)."""
    return (resolution - 1) ** 2 // 4


def surface_warning(mesh: Mesh) -> str | None:
    """One line saying why ``mesh`` is implausibly small for a scene, naming the options to change, or
    ``None``.

    The rule: fewer triangles than :func:`few_triangles` (``(R - 1)^2 / 4`` at ``--resolution R``), or
    vertices spanning less than a quarter of the box along every axis. A trained scene's surface
    (ground, walls, the subject) crosses much of the box, so either means the level set caught a few
    blobs rather than the surface: the threshold is off (too high if little of the grid is denser
    than it, too low if most is, when the level set hugs the box's faces where marching cubes leaves
    it open), or the grid is too coarse to resolve thin structure. The box itself is the run's scene
    box, fixed by training.
    """
    triangles = len(mesh.faces)
    size = mesh.bounds[1] - mesh.bounds[0]
    span = float(np.max((mesh.vertices.max(axis=0) - mesh.vertices.min(axis=0)) / np.maximum(size, 1e-12))
                 if len(mesh.vertices) else 0.0)
    few = few_triangles(mesh.resolution)
    found = []
    if triangles < few:
        found.append(f"{triangles} triangles, under the {few} of a surface across an eighth of the box "
                     f"at --resolution {mesh.resolution}")
    if span < SMALL_SPAN:
        found.append(f"its {len(mesh.vertices)} vertices span at most {span:.1%} of the scene box along "
                     "any axis")
    if not found:
        return None
    direction = "higher" if mesh.dense_fraction > 0.5 else "lower"
    low, high = mesh.density_range
    points = mesh.resolution**3
    dense = round(mesh.dense_fraction * points)
    return (f"the mesh is implausibly small for a scene ({'; '.join(found)}): the threshold probably missed "
            f"the surface; {dense} of the grid's {points} points are denser than {mesh.threshold:.4g} "
            f"(densities {low:.4g} to {high:.4g}): try a {direction} --density_threshold or a higher "
            "--resolution")


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
            f"the threshold {level:.4g}; pass --density_threshold inside that range"
        )
    spacing = tuple(float(axis[1] - axis[0]) for axis in axes)
    vertices, faces, normals = marching_cubes(density, level, spacing)
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
                threshold=level, resolution=resolution, bounds=bounds.numpy(),
                dense_fraction=float(np.mean(density > level)), density_range=(low, high))


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
