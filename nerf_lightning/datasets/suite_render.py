"""The scene suite's reference ray tracer: exact first hits, materials with view dependence.

A :class:`World` is a list of :class:`Part` (a surface of :mod:`.suite_shapes` or :mod:`.demo_shapes`
and a :class:`Material`), one directional light (the demo's) and a :class:`~.suite_shapes.Sky` that
mirror-like materials reflect. :func:`render_views` renders pinhole cameras (:class:`Pinhole`, OpenGL
camera-to-world matrices, the pixel conventions of :mod:`nerf_lightning.cameras.geometry`) with
``supersample x supersample`` stratified rays per pixel, as the demo scene does.

Shading of a hit with unit normal ``n``, albedo ``a``, light direction ``l`` and ray direction ``d``:
``a * (ambient + diffuse * max(0, n.l))``, plus ``specular * max(0, n.h)^shininess`` (Blinn-Phong,
``h = normalise(l - d)``, white light, only where ``n.l > 0``), then a ``mirror`` share replaced by the
sky in the reflected direction ``d - 2 (d.n) n``; emissive parts (an environment dome) show their
albedo as is. Only the specular and mirror terms depend on the view direction; everything is clipped
to ``[0, 1]``. No shadows, no secondary rays.

Cost: a bounded surface is only tested against the rays of the pixel rectangle it can project to
(:func:`hull_balls`: the exact screen bounding box of the balls whose hull holds it, a pixel of margin),
so a thin part costs what it covers, not what the image covers; and each part is tested once for a
batch of views, so numpy's cost per call is shared by the views. Neither changes a pixel: the tests
compare them with testing every ray against every part.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from nerf_lightning.datasets.demo_shapes import AMBIENT, DIFFUSE, LIGHT_DIRECTION, Array, Capsule, _dot
from nerf_lightning.datasets.suite_shapes import Painted, Sky, Surface


@dataclass(frozen=True)
class Material:
    """How a part is lit (see the module docstring); the default is the demo's Lambertian one."""

    ambient: float = AMBIENT
    diffuse: float = DIFFUSE
    specular: float = 0.0
    shininess: float = 32.0
    mirror: float = 0.0
    emissive: bool = False

    @property
    def view_dependent(self) -> bool:
        return not self.emissive and (self.specular > 0.0 or self.mirror > 0.0)


LAMBERT = Material()
EMISSIVE = Material(emissive=True)


@dataclass(frozen=True)
class Part:
    """A surface and how it is lit."""

    surface: Surface
    material: Material = LAMBERT


@dataclass(frozen=True)
class World:
    """What is rendered: ``parts``, the light and the reflected sky."""

    parts: tuple[Part, ...]
    sky: Sky
    light: Array = field(default_factory=lambda: LIGHT_DIRECTION.copy())

    def shade(self, part: Part, points: Array, directions: Array) -> Array:
        """``[3, N]`` colour of ``part`` at its hit ``points [3, N]`` seen along unit ``directions``."""
        surface, material = part.surface, part.material
        albedo = surface.albedo(points)
        if material.emissive:
            return np.clip(albedo, 0.0, 1.0)
        normals = surface.normal(points)
        n_dot_l = _dot(normals, self.light[:, None])
        colour = albedo * (material.ambient + material.diffuse * np.maximum(n_dot_l, 0.0))
        if material.specular > 0.0:
            half = self.light[:, None] - directions
            half = half / np.maximum(np.linalg.norm(half, axis=0), 1e-12)  # 0 only looking along the light
            highlight = np.maximum(_dot(normals, half), 0.0) ** material.shininess
            colour = colour + material.specular * np.where(n_dot_l > 0.0, highlight, 0.0)
        if material.mirror > 0.0:
            reflected = directions - 2.0 * _dot(directions, normals) * normals
            colour = (1.0 - material.mirror) * colour + material.mirror * self.sky(reflected)
        return np.clip(colour, 0.0, 1.0)


@dataclass(frozen=True)
class Pinhole:
    """Intrinsics in pixels (OpenCV's continuous coordinates; pixel ``(c, r)`` covers
    ``[c, c + 1) x [r, r + 1)``)."""

    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int

    def directions(self, supersample: int) -> Array:
        """``[3, H, W, K]`` unit OpenGL camera-frame directions of ``K = supersample^2`` stratified
        sub-pixel positions ``(i + 0.5) / supersample`` per pixel."""
        steps = (np.arange(supersample) + 0.5) / supersample
        offsets = np.stack(np.meshgrid(steps, steps, indexing="xy"), axis=-1).reshape(-1, 2)
        u = np.arange(self.width, dtype=np.float64)[None, :, None] + offsets[None, None, :, 0]
        v = np.arange(self.height, dtype=np.float64)[:, None, None] + offsets[None, None, :, 1]
        shape = (self.height, self.width, offsets.shape[0])
        d = np.stack([np.broadcast_to((u - self.cx) / self.fx, shape),
                      np.broadcast_to(-(v - self.cy) / self.fy, shape), -np.ones(shape)])
        return d / np.linalg.norm(d, axis=0)


@dataclass(frozen=True)
class Rendered:
    """Images and the depth range they show.

    Attributes:
        rgba: ``[N, H, W, 4]`` float64 straight RGB and coverage alpha in ``[0, 1]`` (RGB 0 where
            alpha is 0).
        depth_range: ``[N, 2]`` smallest and largest depth (along the optical axis) of any hit of
            each view, ``nan`` for a view that hits nothing.
    """

    rgba: Array
    depth_range: Array


def _screen_rects(centers: Array, radii: Array, c2w: Array, camera: Pinhole) -> tuple[Array, Array]:
    """``[S, 4]`` int ``row0, row1, col0, col1`` (half-open) of the pixels whose rays can reach each
    ball ``centers [S, 3]``, ``radii [S]`` (the whole image for a ball not wholly in front of the
    camera), and ``[S]`` whether the ball lies wholly behind the camera."""
    p = (centers - c2w[:3, 3]) @ c2w[:3, :3]  # [S, 3] camera coordinates (R^T (c - o))
    depth = -p[:, 2]
    rects = np.tile(np.array([0, camera.height, 0, camera.width]), (len(radii), 1))
    ahead = depth > radii * (1.0 + 1e-9)
    if ahead.any():
        x, y, z, r = p[ahead, 0], p[ahead, 1], depth[ahead], radii[ahead]
        spread_x = np.arcsin(r / np.hypot(x, z))
        spread_y = np.arcsin(r / np.hypot(y, z))
        angle_x, angle_y = np.arctan2(x, z), np.arctan2(y, z)
        u = camera.cx + camera.fx * np.tan(np.stack([angle_x - spread_x, angle_x + spread_x]))
        v = camera.cy - camera.fy * np.tan(np.stack([angle_y + spread_y, angle_y - spread_y]))
        u = np.clip(u, -2.0, camera.width + 2.0)
        v = np.clip(v, -2.0, camera.height + 2.0)
        rects[ahead, 0] = np.clip(np.floor(v[0]) - 1, 0, camera.height)
        rects[ahead, 1] = np.clip(np.ceil(v[1]) + 1, 0, camera.height)
        rects[ahead, 2] = np.clip(np.floor(u[0]) - 1, 0, camera.width)
        rects[ahead, 3] = np.clip(np.ceil(u[1]) + 1, 0, camera.width)
    return rects, depth < -radii


def hull_balls(surface: Surface) -> list[tuple[Array, float]] | None:
    """Balls whose convex hull holds ``surface`` (``None``: unbounded): a capsule's two end balls, else
    its bounding ball. A perspective camera maps the hull to the convex hull of the balls' images, so
    the surface's screen rectangle is the union of theirs (when none lies partly behind the camera)."""
    while isinstance(surface, Painted):
        surface = surface.shape
    if isinstance(surface, Capsule):
        return [(surface.a, surface.radius), (surface.b, surface.radius)]
    ball = surface.bounding_sphere
    return None if ball is None else [ball]


def _part_rects(parts: Sequence[Part], c2w: Array, camera: Pinhole) -> Array:
    """``[P, V, 4]`` pixel rectangles of every part in every view ``c2w [V, 4, 4]``: the union of its
    hull balls' rectangles; the whole image for an unbounded part or one with a ball reaching the
    camera plane; empty when all its balls lie behind the camera."""
    rects = np.tile(np.array([0, camera.height, 0, camera.width]), (len(parts), len(c2w), 1))
    owners, centers, radii = [], [], []
    for k, part in enumerate(parts):
        for center, radius in hull_balls(part.surface) or []:
            owners.append(k)
            centers.append(center)
            radii.append(radius * (1.0 + 1e-6) + 1e-9)
    if not owners:
        return rects
    bounded, starts = np.unique(owners, return_index=True)
    centers_array, radii_array = np.stack(centers), np.array(radii)
    for view, pose in enumerate(c2w):
        balls, behind = _screen_rects(centers_array, radii_array, pose, camera)
        lowest = [np.minimum.reduceat(balls[:, i], starts) for i in (0, 2)]
        highest = [np.maximum.reduceat(balls[:, i], starts) for i in (1, 3)]
        union = np.stack([lowest[0], highest[0], lowest[1], highest[1]], axis=1)
        union[np.logical_and.reduceat(behind, starts)] = 0
        rects[bounded, view] = union
    return rects


def _render_chunk(world: World, c2w: Array, camera: Pinhole, dirs_cam: Array) -> tuple[Array, Array, Array]:
    """rgb ``[V, 3, H, W, K]``, hit ``[V, H, W, K]`` and depth ``[V, H, W, K]`` (``inf`` on a miss) of
    views ``c2w [V, 4, 4]``; ``dirs_cam [3, H, W, K]`` are the ray directions in the camera's frame.

    Each part is intersected once for all views, with the rays of its rectangle in each view
    gathered into one array (numpy's cost per call, not per ray, dominates thin parts)."""
    camera_shape = dirs_cam.shape[1:]
    views = len(c2w)
    x, y, z = (axis[None, None] for axis in dirs_cam)  # elementwise, not BLAS: the same bits everywhere
    rotation = c2w[:, :3, :3, None, None, None]
    directions = rotation[:, :, 0] * x + rotation[:, :, 1] * y + rotation[:, :, 2] * z  # [V, 3, H, W, K]
    origins = c2w[:, :3, 3]
    rects = _part_rects(world.parts, c2w, camera)
    t_best = np.full((views, *camera_shape), np.inf)
    index = np.full((views, *camera_shape), -1, dtype=np.int64)
    samples = camera_shape[-1]
    for k, part in enumerate(world.parts):
        pieces = [(v, slice(r0, r1), slice(c0, c1)) for v, (r0, r1, c0, c1) in enumerate(rects[k])
                  if r0 < r1 and c0 < c1]
        if not pieces:
            continue
        counts = [(rows.stop - rows.start) * (cols.stop - cols.start) * samples for _, rows, cols in pieces]
        d = np.concatenate([directions[v, :, rows, cols].reshape(3, -1) for v, rows, cols in pieces], axis=1)
        o = np.repeat(origins[[v for v, _, _ in pieces]].T, counts, axis=1)
        t = part.surface.intersect(o, d)
        for (v, rows, cols), piece_t in zip(pieces, np.split(t, np.cumsum(counts)[:-1]), strict=True):
            best, owner = t_best[v, rows, cols], index[v, rows, cols]  # views: written in place
            piece_t = piece_t.reshape(best.shape)
            closer = piece_t < best
            np.copyto(best, piece_t, where=closer)
            np.copyto(owner, k, where=closer)
    rgb = np.zeros((views, 3, *camera_shape))
    for k, part in enumerate(world.parts):
        owned = []  # (view, rows, cols, the part's rays there, how many)
        for v, (r0, r1, c0, c1) in enumerate(rects[k]):
            mine = index[v, r0:r1, c0:c1] == k
            if mine.any():
                owned.append((v, slice(r0, r1), slice(c0, c1), mine, int(mine.sum())))
        if not owned:
            continue
        d = np.concatenate([directions[v, :, rows, cols][:, mine] for v, rows, cols, mine, _ in owned], 1)
        t = np.concatenate([t_best[v, rows, cols][mine] for v, rows, cols, mine, _ in owned])
        o = np.repeat(origins[[piece[0] for piece in owned]].T, [piece[-1] for piece in owned], axis=1)
        colour = world.shade(part, o + t * d, d)
        start = 0
        for v, rows, cols, mine, count in owned:
            rgb[v, :, rows, cols][:, mine] = colour[:, start:start + count]
            start += count
    hit = index >= 0
    return rgb, hit, np.where(hit, t_best * -dirs_cam[2], np.inf)


_RAYS_PER_CHUNK = 1 << 20


def render_views(world: World, camera_to_world: Array, camera: Pinhole, supersample: int = 3) -> Rendered:
    """Render ``world`` from each camera exactly, with stratified supersampling.

    Args:
        world: what to render.
        camera_to_world: ``[N, 4, 4]`` (or ``[N, 3, 4]``) OpenGL camera-to-world matrices.
        camera: the intrinsics, shared by every view.
        supersample: ``s`` sub-pixel positions per axis (``s^2`` rays per pixel).

    Returns:
        The images (coverage alpha: the share of a pixel's rays that hit) and each view's depth range.
    """
    dirs_cam = camera.directions(supersample)
    c2w = np.asarray(camera_to_world, dtype=np.float64)
    rgba = np.zeros((len(c2w), camera.height, camera.width, 4))
    depth_range = np.full((len(c2w), 2), np.nan)
    per_chunk = max(1, _RAYS_PER_CHUNK // dirs_cam[0].size)
    for start in range(0, len(c2w), per_chunk):
        rgb, hit, depth = _render_chunk(world, c2w[start:start + per_chunk], camera, dirs_cam)
        coverage = hit.sum(axis=-1)  # [V, H, W]
        straight = np.where(coverage[:, None] > 0, rgb.sum(axis=-1) / np.maximum(coverage, 1)[:, None], 0.0)
        rgba[start:start + len(hit), ..., :3] = np.moveaxis(straight, 1, -1)
        rgba[start:start + len(hit), ..., 3] = coverage / hit.shape[-1]
        for v in range(len(hit)):
            if hit[v].any():
                depth_range[start + v] = depth[v][hit[v]].min(), depth[v][hit[v]].max()
    return Rendered(rgba=rgba, depth_range=depth_range)


def project(camera: Pinhole, c2w: Array, points: Array) -> tuple[Array, Array]:
    """Pixel coordinates ``[N, 2]`` (``u, v``, continuous) of world ``points [N, 3]`` seen by a camera
    ``c2w [4, 4]``, and their depths along its optical axis ``[N]``."""
    p = (points - c2w[:3, 3]) @ c2w[:3, :3]
    depth = -p[:, 2]
    pixels = np.stack([camera.cx + camera.fx * p[:, 0] / depth, camera.cy - camera.fy * p[:, 1] / depth], 1)
    return pixels, depth


def is_visible(world: World, c2w: Array, point: Array, tolerance: float = 1e-6) -> bool:
    """Whether the first hit of the ray from the camera centre towards ``point [3]`` is ``point``."""
    origin = c2w[:3, 3:4]
    offset = point[:, None] - origin
    distance = float(math.sqrt(float(_dot(offset, offset)[0])))
    direction = offset / distance
    nearest = min(float(part.surface.intersect(origin, direction)[0]) for part in world.parts)
    return abs(nearest - distance) <= tolerance * max(1.0, distance)
