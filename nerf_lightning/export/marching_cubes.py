"""Marching cubes: the triangle mesh where a scalar field sampled on a grid crosses a level.

The case table (for each of the 256 ways a cube's eight corners can lie inside, above the level, or
outside: which of its edges the surface crosses and how the crossings join into triangles) is derived
by :func:`case_table`, not transcribed. On every face of the cube the crossings are joined into
segments; a face whose inside corners sit on a diagonal is cut so that each inside corner is
separated from the other. The segments are directed so that the inside lies on their left seen from
outside the cube, chained into closed loops (the boundary of the inside part of the cube's surface)
and each loop is fanned into triangles. A face's cut depends only on its own four corners, so two
cubes sharing a face cut it alike: the mesh has no cracks, every edge inside the grid is shared by
exactly two triangles, and all triangles wind alike.

Vertices lie on grid edges, placed by linear interpolation of the values; a vertex on an edge is
shared by every triangle that uses that edge. A crossing at a grid point (a value equal to the level)
is kept :data:`EDGE_MARGIN` of a step along its edge, so that the triangles around that point keep an
area and the surface stays closed. Normals come from the values' central differences, interpolated
along the edge, and point towards lower values (outward when inside means above the level).
"""

from __future__ import annotations

from functools import cache

import numpy as np

CORNERS = np.array([[c & 1, (c >> 1) & 1, (c >> 2) & 1] for c in range(8)])
"""``[8, 3]`` corner offsets in a cube: corner ``c`` at ``(c & 1, c >> 1 & 1, c >> 2 & 1)``."""

EDGES = [(c, c | 1 << axis) for axis in range(3) for c in range(8) if not c & 1 << axis]
"""The 12 edges of a cube as ``(corner, corner)``, the second one step along one axis from the first."""

EDGE_MARGIN = 1e-3
"""The least share of a grid step between a vertex and the grid points at the ends of its edge."""

EDGE_AXIS = np.array([int(np.argmax(CORNERS[b] - CORNERS[a])) for a, b in EDGES])
"""``[12]`` the axis each edge runs along."""


def _faces() -> list[tuple[list[int], np.ndarray]]:
    """The 6 faces of a cube: their corners in cyclic order and their outward normals."""
    faces = []
    for axis in range(3):
        u, v = (a for a in range(3) if a != axis)
        for side in (0, 1):
            cycle = [side << axis | du << u | dv << v for du, dv in ((0, 0), (1, 0), (1, 1), (0, 1))]
            normal = np.zeros(3)
            normal[axis] = 2 * side - 1
            faces.append((cycle, normal))
    return faces


def _edge_faces() -> list[list[int]]:
    """For each edge, the two faces (indices into :func:`_faces`) it lies on."""
    faces = [set(cycle) for cycle, _ in _faces()]
    return [[f for f, corners in enumerate(faces) if {a, b} <= corners] for a, b in EDGES]


_EDGE_FACES = _edge_faces()


def _edge(a: int, b: int) -> int:
    return EDGES.index((min(a, b), max(a, b)))


def _segments(case: int) -> list[tuple[int, int]]:
    """The directed segments ``(edge, edge)`` in which the surface of ``case`` cuts the cube's faces."""
    midpoint = {e: (CORNERS[a] + CORNERS[b]) / 2 for e, (a, b) in enumerate(EDGES)}
    segments = []
    for cycle, normal in _faces():
        inside = [bool(case >> c & 1) for c in cycle]
        crossed = [i for i in range(4) if inside[i] != inside[(i + 1) % 4]]
        if len(crossed) == 2:
            pairs = [(crossed[0], crossed[1], cycle[inside.index(True)])]
        elif len(crossed) == 4:  # inside corners on a diagonal: cut each one off
            pairs = [((i - 1) % 4, i, cycle[i]) for i in range(4) if inside[i]]
        else:
            continue
        for first, second, inner in pairs:
            start = _edge(cycle[first], cycle[(first + 1) % 4])
            end = _edge(cycle[second], cycle[(second + 1) % 4])
            direction = midpoint[end] - midpoint[start]
            if np.dot(CORNERS[inner] - midpoint[start], np.cross(normal, direction)) < 0:
                start, end = end, start  # the inside on the left, seen from outside the cube
            segments.append((start, end))
    return segments


def _triangles(case: int) -> list[tuple[int, int, int]]:
    """Triangles ``(edge, edge, edge)`` of ``case``, wound so that their right-hand normal points to
    the outside (the segments' loops run the other way round the inside)."""
    following = dict(_segments(case))
    triangles = []
    while following:
        start = next(iter(following))
        loop = [start]
        while following[loop[-1]] != start:
            loop.append(following.pop(loop[-1]))
        following.pop(loop[-1])
        loop.reverse()
        triangles += _triangulate(loop)
    return triangles


def _triangulate(loop: list[int]) -> list[tuple[int, int, int]]:
    """Triangles covering the polygon of edge crossings ``loop``, with no diagonal between two
    crossings on one face of the cube: the cube sharing that face could draw the same diagonal,
    and the edge would then belong to four triangles. The first such triangulation in a fixed order."""
    def shares_face(a: int, b: int) -> bool:
        return len({*_EDGE_FACES[a]} & {*_EDGE_FACES[b]}) > 0

    def cover(polygon: list[int]) -> list[tuple[int, int, int]] | None:
        if len(polygon) == 3:
            return [(polygon[0], polygon[1], polygon[2])]
        first, last = polygon[0], polygon[-1]
        for k in range(1, len(polygon) - 1):  # the triangle on the side (last, first)
            apex = polygon[k]
            if (k > 1 and shares_face(first, apex)) or (k < len(polygon) - 2 and shares_face(apex, last)):
                continue
            left = cover(polygon[: k + 1]) if k > 1 else []
            right = cover(polygon[k:]) if k < len(polygon) - 2 else []
            if left is not None and right is not None:
                return [*left, (last, first, apex), *right]
        return None

    found = cover(loop)
    if found is None:
        raise AssertionError(f"no triangulation of loop {loop} without a diagonal across a face")
    return found


@cache
def case_table() -> tuple[np.ndarray, np.ndarray]:
    """``(triangles [256, T, 3] int8, counts [256] int8)``: case ``k`` (corner ``c`` inside when bit
    ``c`` of ``k`` is set) has ``counts[k]`` triangles ``triangles[k, :counts[k]]`` of edge indices
    into :data:`EDGES`; the rest is ``-1``."""
    per_case = [_triangles(case) for case in range(256)]
    width = max(len(t) for t in per_case)
    table = np.full((256, width, 3), -1, dtype=np.int8)
    for case, triangles in enumerate(per_case):
        if triangles:
            table[case, : len(triangles)] = triangles
    return table, np.array([len(t) for t in per_case], dtype=np.int8)


def marching_cubes(values: np.ndarray, level: float, spacing: tuple[float, float, float] = (1.0, 1.0, 1.0)
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The surface where ``values [X, Y, Z]`` crosses ``level``, inside being above it.

    Args:
        values: the field at grid points; ``values[i, j, k]`` at ``(i, j, k) * spacing``.
        level: the surface's value.
        spacing: the grid step along each axis.

    Returns:
        ``(vertices [V, 3] float32, faces [F, 3] int64, normals [V, 3] float32)``: positions in the
        grid's units from grid point ``(0, 0, 0)``; triangles counter-clockwise seen from outside;
        unit normals towards lower values (zero where the values are flat).
    """
    values = np.asarray(values, dtype=np.float32)
    if values.ndim != 3 or min(values.shape) < 2:
        raise ValueError(f"values must be a grid of at least 2x2x2 points, got shape {values.shape}")
    table, counts = case_table()
    shape = values.shape
    cells = tuple(n - 1 for n in shape)
    inside = values > level
    case = np.zeros(cells, dtype=np.uint8)
    for c, (dx, dy, dz) in enumerate(CORNERS):
        case |= inside[dx : dx + cells[0], dy : dy + cells[1], dz : dz + cells[2]].astype(np.uint8) << c
    cube = np.stack(np.nonzero(counts[case]), axis=-1)  # [C, 3] cells the surface passes through
    triangles = table[case[tuple(cube.T)]]  # [C, T, 3] edge indices, -1 past the case's count
    used = triangles[..., 0] >= 0
    edges = triangles[used].astype(np.int64)  # [F, 3]
    cube = np.repeat(cube, used.sum(axis=1), axis=0)  # [F, 3]
    # A global id per grid edge: its axis and its first grid point.
    first = np.array([CORNERS[a] for a, _ in EDGES])  # [12, 3]
    points = cube[:, None, :] + first[edges]  # [F, 3, 3]
    point_id = np.ravel_multi_index(tuple(np.moveaxis(points, -1, 0)), shape)
    edge_id = EDGE_AXIS[edges] * values.size + point_id
    ids, faces = np.unique(edge_id, return_inverse=True)
    faces = faces.reshape(-1, 3)
    axis, start = np.divmod(ids, values.size)
    start = np.stack(np.unravel_index(start, shape), axis=-1)  # [V, 3]
    step = np.eye(3, dtype=np.int64)[axis]
    end = start + step
    low, high = values[tuple(start.T)], values[tuple(end.T)]
    t = (level - low) / np.where(high != low, high - low, 1.0)
    t = np.clip(t, EDGE_MARGIN, 1.0 - EDGE_MARGIN)[:, None]
    scale = np.asarray(spacing, dtype=np.float64)
    vertices = ((start + t * step) * scale).astype(np.float32)
    gradient = (1.0 - t) * _gradient(values, start, scale) + t * _gradient(values, end, scale)
    length = np.linalg.norm(gradient, axis=-1, keepdims=True)
    normals = (-gradient / np.where(length > 0, length, 1.0)).astype(np.float32)
    return vertices, faces.astype(np.int64), normals


def _gradient(values: np.ndarray, points: np.ndarray, spacing: np.ndarray) -> np.ndarray:
    """``[P, 3]`` central differences of ``values`` at grid ``points [P, 3]`` (one-sided at the border)."""
    gradient = np.empty(points.shape, dtype=np.float64)
    for axis in range(3):
        ahead, behind = points.copy(), points.copy()
        ahead[:, axis] = np.minimum(points[:, axis] + 1, values.shape[axis] - 1)
        behind[:, axis] = np.maximum(points[:, axis] - 1, 0)
        gradient[:, axis] = ((values[tuple(ahead.T)] - values[tuple(behind.T)])
                             / ((ahead[:, axis] - behind[:, axis]) * spacing[axis]))
    return gradient
