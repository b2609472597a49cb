"""The shapes of the demo scene and their exact ray intersections and shading.

The layout, the surface patterns and the lighting are described in :mod:`nerf_lightning.datasets.demo_scene`,
which renders and writes the scene; this module is the geometry: each shape has a closed-form ray
intersection (no sphere tracing, no marching), a normal and an albedo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

LIGHT_DIRECTION = np.array([0.35, -0.45, 0.82]) / np.linalg.norm([0.35, -0.45, 0.82])
"""``[3]`` unit direction towards the light."""

AMBIENT = 0.35
DIFFUSE = 0.65

CONTENT_RADIUS = 1.45
"""Every shape lies inside the ball of this radius around the origin."""

Array = np.ndarray


def _dot(a: Array, b: Array) -> Array:
    """Dot products of ``[3, N]`` (or ``[3, 1]``) vectors: ``[N]``."""
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _rotation(axis: str, degrees: float) -> Array:
    """``[3, 3]`` rotation by ``degrees`` about the world axis ``'x'``, ``'y'`` or ``'z'``."""
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    i, j = {"x": (1, 2), "y": (2, 0), "z": (0, 1)}[axis]
    r = np.eye(3)
    r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
    return r


def _ray_sphere(origins: Array, directions: Array, center: Array, radius: float) -> Array:
    """Distance to the first hit of unit rays with a sphere, ``inf`` where they miss.

    Args:
        origins: ``[3, N]`` ray origins (outside the sphere).
        directions: ``[3, N]`` unit directions.
        center: ``[3]``; radius: the sphere.

    Returns:
        ``[N]`` the nearer positive root of ``|o + t d - c| = r``.
    """
    oc = origins - center[:, None]
    b = _dot(oc, directions)
    disc = b * b - (_dot(oc, oc) - radius * radius)
    with np.errstate(invalid="ignore"):
        t = -b - np.sqrt(disc)
    return np.where((disc >= 0.0) & (t > 0.0), t, np.inf)


@dataclass(frozen=True)
class Sphere:
    """A sphere with a uniform colour, or sinusoidal stripes between two colours.

    Attributes:
        center: ``[3]``; radius: the sphere.
        color: ``[3]`` albedo (the stripe colour where the value is 1).
        stripe_color: ``[3]`` second stripe colour, or ``None`` for a plain sphere.
        stripe_axis: ``[3]`` unit axis the stripes vary along; stripe_period: their period.
    """

    center: Array
    radius: float
    color: Array
    stripe_color: Array | None = None
    stripe_axis: Array = field(default_factory=lambda: np.array([0.0, 0.0, 1.0]))
    stripe_period: float = 0.15

    @property
    def bounding_sphere(self) -> tuple[Array, float]:
        return self.center, self.radius

    def intersect(self, origins: Array, directions: Array) -> Array:
        """``[N]`` first-hit distances of rays ``[3, N]``, ``inf`` where they miss."""
        return _ray_sphere(origins, directions, self.center, self.radius)

    def normal(self, points: Array) -> Array:
        """``[3, N]`` outward unit normals at surface points ``[3, N]``."""
        return (points - self.center[:, None]) / self.radius

    def albedo(self, points: Array) -> Array:
        """``[3, N]`` colour at surface points ``[3, N]``."""
        if self.stripe_color is None:
            return np.broadcast_to(self.color[:, None], points.shape)
        phase = _dot(points - self.center[:, None], self.stripe_axis[:, None]) / self.stripe_period
        w = 0.5 + 0.5 * np.sin(2.0 * math.pi * phase)
        return w * self.color[:, None] + (1.0 - w) * self.stripe_color[:, None]

    def sdf(self, points: Array) -> Array:
        """``[N]`` signed distance of points ``[3, N]`` (for tests)."""
        return np.linalg.norm(points - self.center[:, None], axis=0) - self.radius


@dataclass(frozen=True)
class OrientedBox:
    """A rotated box with a checker texture in its own frame.

    Attributes:
        center: ``[3]`` world position of the box centre.
        half_extents: ``[3]`` half sizes along the box's local axes.
        rotation: ``[3, 3]`` local-to-world rotation (columns are the local axes in world).
        color: ``[3]`` albedo of the light cells; dark cells are ``checker_dark`` times it.
        cell: checker cell size (world units).
    """

    center: Array
    half_extents: Array
    rotation: Array
    color: Array
    cell: float = 0.1
    checker_dark: float = 0.4

    @property
    def bounding_sphere(self) -> tuple[Array, float]:
        return self.center, float(np.linalg.norm(self.half_extents))

    def _to_local(self, points: Array) -> Array:
        return self.rotation.T @ (points - self.center[:, None])

    def intersect(self, origins: Array, directions: Array) -> Array:
        """``[N]`` first-hit distances of rays ``[3, N]`` (slab method), ``inf`` where they miss."""
        o = self._to_local(origins)
        d = self.rotation.T @ directions
        h = self.half_extents[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = 1.0 / d
            t1 = (-h - o) * inv
            t2 = (h - o) * inv
            t_near = np.minimum(t1, t2).max(axis=0)
            t_far = np.maximum(t1, t2).min(axis=0)
            hit = (t_near <= t_far) & (t_near > 0.0)
        return np.where(hit, t_near, np.inf)

    def normal(self, points: Array) -> Array:
        """``[3, N]`` outward unit normals at surface points ``[3, N]`` (face of the largest
        relative coordinate)."""
        q = self._to_local(points) / self.half_extents[:, None]
        axis = np.abs(q).argmax(axis=0)
        n_local = np.zeros_like(q)
        cols = np.arange(q.shape[1])
        n_local[axis, cols] = np.sign(q[axis, cols])
        return self.rotation @ n_local

    def albedo(self, points: Array) -> Array:
        """``[3, N]`` checker colour at surface points ``[3, N]``."""
        # Offsets of a quarter cell keep cell boundaries away from the faces (the extents are
        # whole multiples of half a cell), so a face never flickers between two cells.
        local = self._to_local(points) + self.half_extents[:, None]
        cells = np.floor(local / self.cell + 0.25).astype(np.int64)
        parity = (cells.sum(axis=0) % 2).astype(np.float64)
        shade = parity + (1.0 - parity) * self.checker_dark
        return shade * self.color[:, None]

    def sdf(self, points: Array) -> Array:
        """``[N]`` signed distance of points ``[3, N]`` (for tests)."""
        q = np.abs(self._to_local(points)) - self.half_extents[:, None]
        outside = np.linalg.norm(np.maximum(q, 0.0), axis=0)
        return outside + np.minimum(q.max(axis=0), 0.0)


@dataclass(frozen=True)
class Capsule:
    """A segment ``a``-``b`` swept by a ball of ``radius``, with a uniform colour."""

    a: Array
    b: Array
    radius: float
    color: Array

    @property
    def bounding_sphere(self) -> tuple[Array, float]:
        return 0.5 * (self.a + self.b), 0.5 * float(np.linalg.norm(self.b - self.a)) + self.radius

    def intersect(self, origins: Array, directions: Array) -> Array:
        """``[N]`` first-hit distances of rays ``[3, N]``, ``inf`` where they miss.

        The capsule is the union of the open cylinder around the segment and the two end balls;
        seen from outside, the first hit of a union of convex parts is the nearest first hit of
        the parts, where the cylinder only counts between the two end planes.
        """
        ba = (self.b - self.a)[:, None]
        oa = origins - self.a[:, None]
        baba = float((ba * ba).sum())
        bard = _dot(ba, directions)
        baoa = _dot(ba, oa)
        qa = baba - bard * bard
        qb = baba * _dot(oa, directions) - baoa * bard
        qc = baba * _dot(oa, oa) - baoa * baoa - self.radius * self.radius * baba
        disc = qb * qb - qa * qc
        with np.errstate(divide="ignore", invalid="ignore"):
            t_body = (-qb - np.sqrt(disc)) / qa
            y = baoa + t_body * bard
            body_ok = (disc >= 0.0) & (qa > 1e-12) & (y > 0.0) & (y < baba) & (t_body > 0.0)
        t = np.where(body_ok, t_body, np.inf)
        t = np.minimum(t, _ray_sphere(origins, directions, self.a, self.radius))
        return np.minimum(t, _ray_sphere(origins, directions, self.b, self.radius))

    def _axis_offset(self, points: Array) -> Array:
        """``[3, N]`` from the nearest point of the segment to each point ``[3, N]``."""
        ba = (self.b - self.a)[:, None]
        pa = points - self.a[:, None]
        h = np.clip(_dot(pa, ba) / float((ba * ba).sum()), 0.0, 1.0)
        return pa - h * ba

    def normal(self, points: Array) -> Array:
        """``[3, N]`` outward unit normals at surface points ``[3, N]``."""
        offset = self._axis_offset(points)
        return offset / np.linalg.norm(offset, axis=0)

    def albedo(self, points: Array) -> Array:
        """``[3, N]`` colour at surface points ``[3, N]``."""
        return np.broadcast_to(self.color[:, None], points.shape)

    def sdf(self, points: Array) -> Array:
        """``[N]`` signed distance of points ``[3, N]`` (for tests)."""
        return np.linalg.norm(self._axis_offset(points), axis=0) - self.radius


Shape = Sphere | OrientedBox | Capsule


def demo_shapes() -> list[Shape]:
    """The shapes of the demo scene (fixed layout; see the module docstring)."""
    v = np.array
    shapes: list[Shape] = [
        Sphere(
            center=v([0.1, -0.15, 0.05]), radius=0.45, color=v([0.95, 0.8, 0.25]),
            stripe_color=v([0.2, 0.3, 0.85]), stripe_axis=v([0.4, 0.3, 0.866]) / np.linalg.norm(
                [0.4, 0.3, 0.866]), stripe_period=0.15,
        ),
        OrientedBox(
            center=v([-0.7, 0.6, -0.3]), half_extents=v([0.28, 0.18, 0.22]),
            rotation=_rotation("z", 35.0) @ _rotation("x", 20.0), color=v([0.3, 0.85, 0.4]),
        ),
        Sphere(center=v([0.75, -0.7, -0.45]), radius=0.2, color=v([0.9, 0.15, 0.1])),
        Capsule(a=v([0.1, 0.9, -0.7]), b=v([0.1, 0.9, 0.7]), radius=0.03, color=v([0.8, 0.3, 0.75])),
    ]
    # Hexagonal ring of rods in a tilted plane.
    ring_center = v([0.7, 0.5, 0.4])
    ring_frame = _rotation("z", -30.0) @ _rotation("x", 60.0)
    corners = [
        ring_center + ring_frame @ (0.38 * v([math.cos(k * math.pi / 3), math.sin(k * math.pi / 3), 0.0]))
        for k in range(6)
    ]
    shapes += [Capsule(a=corners[k], b=corners[(k + 1) % 6], radius=0.035, color=v([1.0, 0.55, 0.15]))
               for k in range(6)]
    # Tripod with a small sphere resting on its apex.
    apex = v([-0.55, -0.6, 0.35])
    for angle in (90.0, 210.0, 330.0):
        rad = math.radians(angle)
        foot = v([apex[0] + 0.35 * math.cos(rad), apex[1] + 0.35 * math.sin(rad), -0.55])
        shapes.append(Capsule(a=foot, b=apex, radius=0.03, color=v([0.85, 0.85, 0.85])))
    shapes.append(Sphere(center=apex + v([0.0, 0.0, 0.12]), radius=0.15, color=v([0.2, 0.45, 1.0])))
    return shapes


def _first_hits(shapes: list[Shape], origins: Array, directions: Array) -> tuple[Array, Array]:
    """Nearest hit over all shapes.

    Args:
        origins, directions: ``[3, N]`` rays (unit directions).

    Returns:
        ``t [N]`` (``inf`` on a miss) and ``shape_index [N]`` int64 (``-1`` on a miss).
    """
    n = origins.shape[1]
    t_best = np.full(n, np.inf)
    index = np.full(n, -1, dtype=np.int64)
    for k, shape in enumerate(shapes):
        center, radius = shape.bounding_sphere
        # Exact work only for rays that hit the shape's bounding ball before the current best.
        candidates = np.flatnonzero(_ray_sphere(origins, directions, center, radius + 1e-6) < t_best)
        if candidates.size == 0:
            continue
        t = shape.intersect(origins[:, candidates], directions[:, candidates])
        better = t < t_best[candidates]
        t_best[candidates[better]] = t[better]
        index[candidates[better]] = k
    return t_best, index


def shade(shapes: list[Shape], origins: Array, directions: Array) -> tuple[Array, Array]:
    """Colour and coverage of rays ``[3, N]``: rgb ``[3, N]`` (0 on a miss) and hit ``[N]`` bool."""
    t, index = _first_hits(shapes, origins, directions)
    rgb = np.zeros_like(directions)
    for k, shape in enumerate(shapes):
        rows = np.flatnonzero(index == k)
        if rows.size == 0:
            continue
        points = origins[:, rows] + t[rows] * directions[:, rows]
        lambert = np.maximum(_dot(shape.normal(points), LIGHT_DIRECTION[:, None]), 0.0)
        rgb[:, rows] = np.clip(shape.albedo(points) * (AMBIENT + DIFFUSE * lambert), 0.0, 1.0)
    return rgb, index >= 0
