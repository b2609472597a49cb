"""Geometry and textures of the scene suite, beside the demo's shapes (:mod:`.demo_shapes`).

Every surface has a closed-form first hit, like the demo's spheres, boxes and capsules, so the suite's
images are exact projections up to supersampling. Added here:

* :class:`Disc`: a flat disc (a ground or a floor); its face is one-sided (the normal given), seen
  from the side the normal points to;
* :class:`Wall`: an infinite plane, for the back wall of a forward-facing scene, which every ray of
  a camera facing it hits;
* :class:`Dome`: a sphere seen from *inside* (the far root of the ray-sphere equation), a distant
  environment around a 360-degree scene so that no ray leaves the scene;
* :class:`Painted`: any surface with a texture evaluated in a frame of its own (texture coordinates
  are the hit point's coordinates in that frame);
* textures (callables ``points [3, N] -> rgb [3, N]`` on local coordinates): :class:`Checker`,
  :class:`Stripes`, :class:`ZonePlate` (a chirp whose frequency grows with the radius, so every
  frequency up to beyond a 400 px image's Nyquist limit appears somewhere), :class:`HashCells` (a
  random colour per cell from an integer hash: no random generator, so it is the same on every
  machine), :class:`PolarCells` (the same, on tiles growing with the distance from the centre) and
  :class:`Sky` (a direction-dependent gradient with two checkers of latitude-longitude cells);
* wire builders (:func:`polyline`, :func:`box_edges`, :func:`helix`): chains of the demo's capsules.

A surface's ``bounding_sphere`` is ``None`` when it is unbounded (a wall, a dome): the renderer then
tests every ray against it instead of only the rays that can reach its ball.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from nerf_lightning.datasets.demo_shapes import Array, Capsule, _dot

Texture = Callable[[Array], Array]
"""Albedo of local points: ``[3, N]`` coordinates in the surface's texture frame -> ``[3, N]`` RGB."""


class Surface(Protocol):
    """What the suite's renderer needs of a shape (the demo's shapes have it too)."""

    @property
    def bounding_sphere(self) -> tuple[Array, float] | None:
        """``(center [3], radius)`` of a ball holding the surface; ``None`` when it is unbounded."""
        ...

    def intersect(self, origins: Array, directions: Array) -> Array:
        """``[N]`` first-hit distances of unit rays (origins ``[3, N]`` or ``[3, 1]``), ``inf`` on a miss."""
        ...

    def normal(self, points: Array) -> Array:
        """``[3, N]`` unit normals at surface points ``[3, N]``, facing the side rays come from."""
        ...

    def albedo(self, points: Array) -> Array:
        """``[3, N]`` colour at surface points ``[3, N]``."""
        ...


def _white(points: Array) -> Array:
    return np.ones_like(points)


def _plane_hits(origins: Array, directions: Array, point: Array, normal: Array) -> Array:
    """``[N]`` distance to the plane through ``point`` with unit ``normal``, for rays reaching its front
    (``d . n < 0``) at a positive distance; ``inf`` otherwise."""
    denom = _dot(directions, normal[:, None])
    height = _dot(origins - point[:, None], normal[:, None])
    with np.errstate(divide="ignore", invalid="ignore"):
        t = -height / denom
    return np.where((denom < 0.0) & (t > 0.0), t, np.inf)


@dataclass(frozen=True)
class Disc:
    """The disc of ``radius`` around ``center`` in the plane with unit normal ``normal_vector``
    (one-sided)."""

    center: Array
    normal_vector: Array
    radius: float

    @property
    def bounding_sphere(self) -> tuple[Array, float]:
        return self.center, self.radius

    def intersect(self, origins: Array, directions: Array) -> Array:
        t = _plane_hits(origins, directions, self.center, self.normal_vector)
        with np.errstate(invalid="ignore"):
            offset = origins - self.center[:, None] + np.where(np.isfinite(t), t, 0.0) * directions
        return np.where(_dot(offset, offset) <= self.radius**2, t, np.inf)

    def normal(self, points: Array) -> Array:
        return np.broadcast_to(self.normal_vector[:, None], points.shape)

    def albedo(self, points: Array) -> Array:
        return _white(points)


@dataclass(frozen=True)
class Wall:
    """The infinite plane through ``point`` with unit normal ``normal_vector`` (one-sided; unbounded)."""

    point: Array
    normal_vector: Array
    bounding_sphere: None = None

    def intersect(self, origins: Array, directions: Array) -> Array:
        return _plane_hits(origins, directions, self.point, self.normal_vector)

    def normal(self, points: Array) -> Array:
        return np.broadcast_to(self.normal_vector[:, None], points.shape)

    def albedo(self, points: Array) -> Array:
        return _white(points)


@dataclass(frozen=True)
class Dome:
    """The inside of a sphere around ``center``: every ray starting inside hits it (unbounded here:
    the renderer tests it against every ray). Normals face inwards."""

    center: Array
    radius: float
    bounding_sphere: None = None

    def intersect(self, origins: Array, directions: Array) -> Array:
        oc = origins - self.center[:, None]
        b = _dot(oc, directions)
        disc = b * b - (_dot(oc, oc) - self.radius**2)
        with np.errstate(invalid="ignore"):
            t = -b + np.sqrt(disc)
        return np.where((disc >= 0.0) & (t > 0.0), t, np.inf)

    def normal(self, points: Array) -> Array:
        return (self.center[:, None] - points) / self.radius

    def albedo(self, points: Array) -> Array:
        return _white(points)


@dataclass(frozen=True)
class Painted:
    """``shape`` with ``texture`` evaluated at ``rotation.T @ (point - origin)`` (its own frame).

    Attributes:
        shape: the geometry (anything with intersect, normal, bounding_sphere).
        texture: local ``[3, N]`` -> ``[3, N]`` albedo.
        origin: ``[3]`` the texture frame's origin in world coordinates.
        rotation: ``[3, 3]`` local-to-world rotation of the texture frame (columns: its axes).
    """

    shape: Surface
    texture: Texture
    origin: Array = field(default_factory=lambda: np.zeros(3))
    rotation: Array = field(default_factory=lambda: np.eye(3))

    @property
    def bounding_sphere(self) -> tuple[Array, float] | None:
        return self.shape.bounding_sphere

    def intersect(self, origins: Array, directions: Array) -> Array:
        return self.shape.intersect(origins, directions)

    def normal(self, points: Array) -> Array:
        return self.shape.normal(points)

    def albedo(self, points: Array) -> Array:
        return self.texture(self.rotation.T @ (points - self.origin[:, None]))


# ------------------------------------------------------------------------------------------- textures


def _mix(weight: Array, a: Array, b: Array) -> Array:
    """``[3, N]``: ``weight [N]`` of colour ``a [3]`` and the rest of ``b [3]``."""
    return weight * a[:, None] + (1.0 - weight) * b[:, None]


@dataclass(frozen=True)
class Checker:
    """A 3D checker of cubes of side ``cell`` between colours ``light`` and ``dark``.

    Cell borders sit a quarter cell off the frame's planes, so a surface lying in one of them (a
    disc, a box face a whole number of half cells from the origin) never flickers between cells.
    """

    cell: float
    light: Array
    dark: Array

    def __call__(self, local: Array) -> Array:
        cells = np.floor(local / self.cell + 0.25).astype(np.int64)
        return _mix((cells.sum(axis=0) % 2).astype(np.float64), self.light, self.dark)


@dataclass(frozen=True)
class Stripes:
    """Sinusoidal stripes of ``period`` along the unit ``axis``, between colours ``a`` and ``b``."""

    axis: Array
    period: float
    a: Array
    b: Array

    def __call__(self, local: Array) -> Array:
        phase = _dot(local, self.axis[:, None]) / self.period
        return _mix(0.5 + 0.5 * np.sin(2.0 * math.pi * phase), self.a, self.b)


@dataclass(frozen=True)
class ZonePlate:
    """``0.5 + 0.5 cos(k r^2)`` in the local ``xy`` plane between colours ``a`` and ``b``: the local
    frequency ``k r / pi`` cycles per unit grows linearly with the radius ``r``."""

    k: float
    a: Array
    b: Array

    def __call__(self, local: Array) -> Array:
        r2 = local[0] ** 2 + local[1] ** 2
        return _mix(0.5 + 0.5 * np.cos(self.k * r2), self.a, self.b)


def _hash(*indices: Array) -> Array:
    """``[N]`` uint64 mix of integer cell indices (splitmix64's finaliser over a weighted sum)."""
    h = np.zeros(indices[0].shape, dtype=np.uint64)
    for k, index in enumerate(indices):
        h ^= index.astype(np.int64).view(np.uint64) * np.uint64(0x9E3779B97F4A7C15 + 2 * k)
        h ^= h >> np.uint64(31)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
    return h


@dataclass(frozen=True)
class HashCells:
    """A colour per cube of side ``cell``, picked from ``palette [P, 3]`` by a hash of the cell."""

    cell: float
    palette: Array

    def __call__(self, local: Array) -> Array:
        cells = np.floor(local / self.cell + 0.25).astype(np.int64)
        pick = _hash(cells[0], cells[1], cells[2]) % np.uint64(len(self.palette))
        return self.palette[pick.astype(np.int64)].T


@dataclass(frozen=True)
class PolarCells:
    """Tiles of the local ``xy`` plane about ``growth`` times their distance from the centre in size
    (``sectors`` around, rings growing by ``1 + growth``), inside ``inner`` radius squares of side
    ``growth * inner``; a colour per tile from ``palette [P, 3]``.

    A ground that reaches far away keeps tiles of about the same size in the image at every distance
    from the middle, instead of far tiles shrinking below a pixel (where they would only alias).
    """

    inner: float
    growth: float
    palette: Array

    @property
    def sectors(self) -> int:
        return round(2.0 * math.pi / self.growth)

    def __call__(self, local: Array) -> Array:
        radius = np.hypot(local[0], local[1])
        ring = np.floor(np.log(np.maximum(radius, self.inner) / self.inner) / math.log1p(self.growth))
        sector = np.floor((np.arctan2(local[1], local[0]) + math.pi) / (2 * math.pi) * self.sectors)
        square = np.floor(local[:2] / (self.growth * self.inner))
        inside = radius < self.inner
        a = np.where(inside, square[0], ring + 1.0).astype(np.int64)
        b = np.where(inside, square[1], sector).astype(np.int64)
        pick = _hash(a, b, inside.astype(np.int64)) % np.uint64(len(self.palette))
        return self.palette[pick.astype(np.int64)].T


@dataclass(frozen=True)
class Sky:
    """A colour per direction (local points are normalised): a gradient from ``ground`` (below the
    horizon) through ``horizon`` to ``zenith``, times two checkers of latitude-longitude cells
    (``coarse`` and ``fine`` cells around the horizon; contrast ``1 - dark`` each), so that every
    part of it has structure to fit."""

    zenith: Array
    horizon: Array
    ground: Array
    coarse: int = 16
    fine: int = 72
    dark: float = 0.7

    def __call__(self, local: Array) -> Array:
        d = local / np.linalg.norm(local, axis=0)
        elevation = np.arcsin(np.clip(d[2], -1.0, 1.0))
        azimuth = np.arctan2(d[1], d[0])
        up = np.clip(elevation / (0.5 * math.pi), 0.0, 1.0) ** 0.6
        colour = np.where(elevation >= 0.0, _mix(up, self.zenith, self.horizon), self.ground[:, None])
        for cells, dark in ((self.coarse, self.dark), (self.fine, 0.5 * (1.0 + self.dark))):
            step = 2.0 * math.pi / cells
            parity = (np.floor(azimuth / step) + np.floor(elevation / step)) % 2
            colour = colour * np.where(parity == 0, 1.0, dark)
        return colour


# ------------------------------------------------------------------------------------------- wires


def polyline(points: Sequence[Array], radius: float, color: Array) -> list[Capsule]:
    """Capsules along consecutive ``points [3]`` (they join smoothly: consecutive ends share a ball)."""
    return [Capsule(a=a, b=b, radius=radius, color=color) for a, b in itertools.pairwise(points)]


def box_edges(center: Array, half: float, rotation: Array, radius: float, color: Array) -> list[Capsule]:
    """The 12 edges of the cube of half-size ``half`` about ``center``, rotated by ``rotation [3, 3]``."""
    corners = {(i, j, k): center + rotation @ (half * np.array([i, j, k], dtype=np.float64))
               for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)}
    edges = [(c, (-c[0], c[1], c[2])) for c in corners if c[0] < 0]
    edges += [(c, (c[0], -c[1], c[2])) for c in corners if c[1] < 0]
    edges += [(c, (c[0], c[1], -c[2])) for c in corners if c[2] < 0]
    return [Capsule(a=corners[a], b=corners[b], radius=radius, color=color) for a, b in edges]


def helix(base: Array, coil_radius: float, height: float, turns: float, segments: int, radius: float,
          color: Array) -> list[Capsule]:
    """A vertical coil of ``turns`` around the ``z`` axis through ``base`` (its lowest centre point),
    as ``segments`` straight capsules of ``radius``."""
    s = np.linspace(0.0, 1.0, segments + 1)
    angle = 2.0 * math.pi * turns * s
    points = base[:, None] + np.stack([coil_radius * np.cos(angle), coil_radius * np.sin(angle), height * s])
    return polyline(list(points.T), radius, color)
