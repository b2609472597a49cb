"""Marching cubes (``export/marching_cubes.py``): closed, consistently wound surfaces of the right shape
and topology, for every one of the 256 corner cases and where the values touch the level."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from nerf_lightning.export.marching_cubes import marching_cubes


def _directed_edges(faces: np.ndarray) -> Counter[tuple[int, int]]:
    return Counter((int(a), int(b)) for face in faces for a, b in ((face[0], face[1]), (face[1], face[2]),
                                                                    (face[2], face[0])))


def assert_closed_and_oriented(faces: np.ndarray) -> None:
    """Every edge is shared by exactly two triangles that run along it in opposite directions."""
    edges = _directed_edges(faces)
    assert max(edges.values()) == 1, "an edge runs the same way in two triangles"
    assert all((b, a) in edges for a, b in edges), "an edge belongs to one triangle only"


def euler_characteristic(vertices: np.ndarray, faces: np.ndarray) -> int:
    undirected = {tuple(sorted(edge)) for edge in _directed_edges(faces)}
    return len(vertices) - len(undirected) + len(faces)


def _grid(size: int) -> np.ndarray:
    axis = np.arange(size, dtype=np.float64)
    return np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1)


def test_a_sphere_is_closed_round_and_faces_outward() -> None:
    centre, radius = np.array([19.3, 18.6, 20.1]), 12.0
    spacing = (0.5, 0.5, 0.5)
    values = radius - np.linalg.norm(_grid(40) - centre, axis=-1)  # inside: above 0
    vertices, faces, normals = marching_cubes(values, 0.0, spacing)
    assert vertices.dtype == np.float32 and faces.dtype == np.int64 and normals.dtype == np.float32
    assert_closed_and_oriented(faces)
    assert euler_characteristic(vertices, faces) == 2
    world_centre, world_radius = centre * 0.5, radius * 0.5
    distance = np.linalg.norm(vertices - world_centre, axis=-1)
    assert np.abs(distance - world_radius).max() < 0.01 * world_radius
    area_vectors = np.cross(vertices[faces[:, 1]] - vertices[faces[:, 0]],
                            vertices[faces[:, 2]] - vertices[faces[:, 0]])
    outward = vertices[faces].mean(axis=1) - world_centre
    assert (np.einsum("fi,fi->f", area_vectors, outward) > 0).all()  # counter-clockwise from outside
    area = 0.5 * np.linalg.norm(area_vectors, axis=-1).sum()
    assert area == pytest.approx(4 * np.pi * world_radius**2, rel=0.01)
    assert np.linalg.norm(normals, axis=-1) == pytest.approx(1.0, abs=1e-5)
    radial = (vertices - world_centre) / distance[:, None]
    assert np.einsum("vi,vi->v", normals, radial).min() > 0.99


def test_a_torus_has_one_hole() -> None:
    points = _grid(40) - 19.5
    ring = np.hypot(points[..., 0], points[..., 1])
    values = 5.0 - np.hypot(ring - 11.0, points[..., 2])
    vertices, faces, _ = marching_cubes(values, 0.0)
    assert_closed_and_oriented(faces)
    assert euler_characteristic(vertices, faces) == 0


def test_every_corner_case_closes_within_its_cube() -> None:
    """One cube with corner ``c`` inside when bit ``c`` of the case is set, inside a grid whose other
    points are all outside: whatever the case, its triangles and those of its neighbours close, into one
    sphere per group of inside corners joined along cube edges (corners on a face's or the cube's
    diagonal are kept apart)."""
    for case in range(1, 256):
        values = np.full((4, 4, 4), -1.0)
        for corner in range(8):
            if case >> corner & 1:
                values[1 + (corner & 1), 1 + (corner >> 1 & 1), 1 + (corner >> 2 & 1)] = 1.0
        vertices, faces, _ = marching_cubes(values, 0.0)
        assert_closed_and_oriented(faces)
        groups = _edge_connected_groups([c for c in range(8) if case >> c & 1])
        assert euler_characteristic(vertices, faces) == 2 * groups, f"case {case}"
    assert len(marching_cubes(np.full((4, 4, 4), -1.0), 0.0)[1]) == 0


def _edge_connected_groups(corners: list[int]) -> int:
    parent = {c: c for c in corners}

    def root(c: int) -> int:
        while parent[c] != c:
            c = parent[c]
        return c

    for a in corners:
        for b in corners:
            if bin(a ^ b).count("1") == 1:
                parent[root(a)] = root(b)
    return len({root(c) for c in corners})


def test_random_fields_give_closed_surfaces_and_touching_values_no_empty_triangles() -> None:
    rng = np.random.default_rng(0)
    for _ in range(4):
        values = rng.normal(size=(10, 10, 10))
        values[[0, -1]] = values[:, [0, -1]] = values[:, :, [0, -1]] = -1.0
        values[rng.random(values.shape) < 0.1] = 0.0  # exactly at the level: crossings at grid points
        vertices, faces, _ = marching_cubes(values, 0.0)
        assert_closed_and_oriented(faces)
        area = np.linalg.norm(np.cross(vertices[faces[:, 1]] - vertices[faces[:, 0]],
                                       vertices[faces[:, 2]] - vertices[faces[:, 0]]), axis=-1)
        assert (area > 0).all()
        assert np.array_equal(np.unique(faces), np.arange(len(vertices)))  # no unused vertex


def test_a_surface_leaving_the_grid_stays_open_at_its_border() -> None:
    values = 9.5 - _grid(12)[..., 2]  # inside below the plane z = 9.5, which crosses the whole grid
    vertices, faces, normals = marching_cubes(values, 0.0)
    assert np.allclose(vertices[:, 2], 9.5) and np.allclose(normals, [0.0, 0.0, 1.0])
    assert len(faces) == 2 * 11 * 11


def test_a_grid_that_is_not_three_dimensional_is_refused() -> None:
    with pytest.raises(ValueError, match=r"at least 2x2x2 points, got shape \(4, 4\)"):
        marching_cubes(np.zeros((4, 4)), 0.0)
