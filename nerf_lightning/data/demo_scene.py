"""A procedural demo scene in the Blender NeRF-synthetic layout, rendered exactly.

``make_demo_scene`` writes ``transforms_{train,val,test}.json`` and RGBA PNGs
``{train,val,test}/r_<i>.png`` like the real Blender scenes, so every loader and pipeline in the
project can run end to end without downloading anything. The images come from a small reference
ray tracer of this module: each shape has a closed-form ray intersection (no sphere tracing, no
marching), so the rendered images are the exact projection of the scene up to the fixed 3x3
supersampling used for anti-aliasing.

Layout (world units, world ``+z`` up, everything inside ``[-1.5, 1.5]^3`` and within
``CONTENT_RADIUS`` of the origin):

* a big sphere, radius 0.45 at ``(0.1, -0.15, 0.05)``, with sinusoidal 3D stripes (period 0.15
  along a tilted axis, i.e. 6 periods across the sphere) computed from the world-space hit point;
* an oriented box, half extents ``(0.28, 0.18, 0.22)`` at ``(-0.7, 0.6, -0.3)``, rotated
  35 deg about ``z`` then 20 deg about ``x``, with a checker of cell size 0.1 in its own frame;
* a hexagonal ring of six thin capsules (radius 0.035, ring radius 0.38) centred at
  ``(0.7, 0.5, 0.4)`` in a tilted plane;
* a tripod of three capsules (radius 0.03) from an apex at ``(-0.55, -0.6, 0.35)`` down to
  ``z = -0.55``, with a small blue sphere (radius 0.15) resting on the apex;
* a thin vertical pole (capsule, radius 0.03) from ``(0.1, 0.9, -0.7)`` to ``(0.1, 0.9, 0.7)``;
* a small red sphere, radius 0.2 at ``(0.75, -0.7, -0.45)``.

Why this scene: the objects fill about 2% of the scene box, so almost all of the box is empty
space that a good sampler should skip; the content is spread over the box rather than sitting
in one blob at the centre; the rods are 2-3 pixels wide at 100x100, so a sampler that spaces
samples coarsely steps right over them; and the stripes and checkers give high-frequency
surface detail that is only reproduced when samples land on the surfaces. Where samples go
therefore shows up directly in the metrics.

Appearance is view independent (albedo times ``0.35 + 0.65 * max(0, n . l)`` for one fixed
directional light), so a NeRF can fit it exactly. The background is fully transparent; edges
get fractional alpha from the supersampling, and the PNGs store straight (un-premultiplied)
RGB.

Cameras follow the Blender scenes: OpenGL camera-to-world matrices, ``camera_angle_x`` of
Blender's default, at distance 4 from the origin looking at it with world ``+z`` up. Training
cameras lie on a jittered golden spiral over the elevation band ``[-15, 85]`` degrees (uniform
in area); validation and test cameras are seeded random positions on the same band. The seed
controls only the cameras (the layout is fixed), and the same seed gives byte-identical files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from nerf_lightning.files import atomic_folder

CAMERA_ANGLE_X = 0.6911112070083618
"""Horizontal field of view in radians (Blender's default camera)."""

CAMERA_DISTANCE = 4.0
"""Distance of every camera from the origin, which it looks at."""

ELEVATION_RANGE_DEG = (-15.0, 85.0)
"""Band of camera elevations (degrees above the ``z = 0`` plane)."""

SUPERSAMPLE = 3
"""Sub-pixel samples per axis (``SUPERSAMPLE ** 2`` stratified rays per pixel)."""

SPLITS = ("train", "val", "test")

LIGHT_DIRECTION = np.array([0.35, -0.45, 0.82]) / np.linalg.norm([0.35, -0.45, 0.82])
"""``[3]`` unit direction towards the light."""

AMBIENT = 0.35
DIFFUSE = 0.65

CONTENT_RADIUS = 1.45
"""Every shape lies inside the ball of this radius around the origin."""

_RAYS_PER_CHUNK = 1 << 18

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


def _shade(shapes: list[Shape], origins: Array, directions: Array) -> tuple[Array, Array]:
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


def camera_directions(width: int, height: int, camera_angle_x: float, offsets: Array) -> Array:
    """Unit camera-space ray directions of sub-pixel positions (OpenGL camera frame).

    Args:
        width, height: image size in pixels.
        camera_angle_x: horizontal field of view (radians).
        offsets: ``[K, 2]`` sub-pixel ``(du, dv)`` in ``[0, 1)``; ``(0.5, 0.5)`` is the centre.

    Returns:
        ``[3, height, width, K]`` directions ``((u - cx) / f, -(v - cy) / f, -1)`` normalised,
        with ``u = col + du``, ``v = row + dv``, ``f = 0.5 * width / tan(0.5 * camera_angle_x)``.
    """
    focal = 0.5 * width / math.tan(0.5 * camera_angle_x)
    u = np.arange(width, dtype=np.float64)[None, :, None] + offsets[None, None, :, 0]
    v = np.arange(height, dtype=np.float64)[:, None, None] + offsets[None, None, :, 1]
    shape = (height, width, offsets.shape[0])
    d = np.stack([
        np.broadcast_to((u - 0.5 * width) / focal, shape),
        np.broadcast_to(-(v - 0.5 * height) / focal, shape),
        -np.ones(shape),
    ])
    return d / np.linalg.norm(d, axis=0)


def render_views(camera_to_world: Array, width: int, height: int,
                 camera_angle_x: float = CAMERA_ANGLE_X, supersample: int = SUPERSAMPLE) -> Array:
    """Render the demo scene exactly, with stratified supersampling.

    Args:
        camera_to_world: ``[N, 4, 4]`` (or ``[N, 3, 4]``) OpenGL camera-to-world matrices.
        width, height: image size; camera_angle_x: horizontal field of view (radians).
        supersample: ``s`` sub-pixel positions per axis at offsets ``(i + 0.5) / s``.

    Returns:
        ``[N, height, width, 4]`` float64: straight (un-premultiplied) RGB and coverage alpha,
        all in ``[0, 1]``; RGB is 0 where alpha is 0.
    """
    shapes = demo_shapes()
    steps = (np.arange(supersample) + 0.5) / supersample
    offsets = np.stack(np.meshgrid(steps, steps, indexing="xy"), axis=-1).reshape(-1, 2)
    dirs_cam = camera_directions(width, height, camera_angle_x, offsets).reshape(3, -1)  # [3, M]
    per_view = dirs_cam.shape[1]
    c2w = np.asarray(camera_to_world, dtype=np.float64)
    out = np.zeros((c2w.shape[0], height, width, 4))
    views_per_chunk = max(1, _RAYS_PER_CHUNK // per_view)
    for start in range(0, c2w.shape[0], views_per_chunk):
        chunk = c2w[start:start + views_per_chunk]
        directions = np.concatenate([m[:3, :3] @ dirs_cam for m in chunk], axis=1)  # [3, C*M]
        directions /= np.linalg.norm(directions, axis=0)
        origins = np.repeat(chunk[:, :3, 3].T, per_view, axis=1)  # [3, C*M]
        rgb, hit = _shade(shapes, origins, directions)
        samples = offsets.shape[0]
        rgb = rgb.reshape(3, len(chunk), height, width, samples).sum(axis=-1)
        coverage = hit.reshape(len(chunk), height, width, samples).sum(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            straight = np.where(coverage > 0, rgb / np.maximum(coverage, 1), 0.0)
        out[start:start + len(chunk), ..., :3] = np.moveaxis(straight, 0, -1)
        out[start:start + len(chunk), ..., 3] = coverage / samples
    return out


def look_at_origin(position: Array) -> Array:
    """``[4, 4]`` OpenGL camera-to-world matrix of a camera at ``position [3]`` looking at the
    origin with world ``+z`` up (position must not be on the ``z`` axis)."""
    z = position / np.linalg.norm(position)
    x = np.cross(np.array([0.0, 0.0, 1.0]), z)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = x, y, z, position
    return m


def _positions(sin_elevation: Array, azimuth: Array) -> Array:
    """``[N, 3]`` points at ``CAMERA_DISTANCE`` from the origin."""
    cos_e = np.sqrt(1.0 - sin_elevation**2)
    return CAMERA_DISTANCE * np.stack(
        [cos_e * np.cos(azimuth), cos_e * np.sin(azimuth), sin_elevation], axis=-1)


def camera_poses(split: str, count: int, seed: int) -> Array:
    """``[count, 4, 4]`` camera-to-world matrices of one split.

    ``train``: golden spiral uniform in area over the elevation band, with a seeded rotation and
    a jitter of up to a quarter of the spacing in elevation and 0.1 rad in azimuth. ``val`` and
    ``test``: independent seeded uniform positions on the band.
    """
    rng = np.random.default_rng([seed, SPLITS.index(split)])
    lo, hi = (math.sin(math.radians(e)) for e in ELEVATION_RANGE_DEG)
    if split == "train":
        spacing = (hi - lo) / max(count, 1)
        sin_e = lo + spacing * (np.arange(count) + 0.5 + rng.uniform(-0.25, 0.25, count))
        golden = math.pi * (3.0 - math.sqrt(5.0))
        azimuth = rng.uniform(0.0, 2 * math.pi) + golden * np.arange(count) + rng.uniform(-0.1, 0.1, count)
    else:
        sin_e = rng.uniform(lo, hi, count)
        azimuth = rng.uniform(0.0, 2 * math.pi, count)
    positions = _positions(sin_e, azimuth)
    return np.stack([look_at_origin(p) for p in positions]) if count else np.zeros((0, 4, 4))


def _to_rgba8(image: Array) -> Array:
    """``[H, W, 4]`` uint8 of a float image in ``[0, 1]``."""
    return np.round(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)


def _write_scene(root: Path, seed: int, counts: dict[str, int], resolution: int) -> None:
    for split in SPLITS:
        poses = camera_poses(split, counts[split], seed)
        images = render_views(poses, resolution, resolution, CAMERA_ANGLE_X)
        (root / split).mkdir()
        frames = []
        for i, (pose, image) in enumerate(zip(poses, images, strict=True)):
            Image.fromarray(_to_rgba8(image)).save(root / split / f"r_{i}.png", format="PNG")
            frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": pose.tolist()})
        meta = {"camera_angle_x": CAMERA_ANGLE_X, "frames": frames}
        (root / f"transforms_{split}.json").write_text(json.dumps(meta, indent=2) + "\n")


_SCENE_ENTRIES = {f"transforms_{s}.json" for s in SPLITS} | set(SPLITS)


def make_demo_scene(out_dir: str | Path, seed: int = 0, num_train: int = 100, num_val: int = 10,
                    num_test: int = 20, resolution: int = 100) -> Path:
    """Write the demo scene to out_dir and return out_dir.

    Everything is written into a temporary directory next to ``out_dir`` and renamed into place
    at the end (:func:`~nerf_lightning.files.atomic_folder`), so an interrupted run never leaves a
    half-written scene at ``out_dir``. An
    existing ``out_dir`` is replaced when it is empty or holds only scene files
    (``transforms_*.json`` and ``train/``, ``val/``, ``test/``); anything else raises
    ``FileExistsError`` rather than deleting files that are not ours.

    Args:
        out_dir: the scene root to create.
        seed: controls the cameras; the same seed gives byte-identical files.
        num_train, num_val, num_test: number of views of each split.
        resolution: width and height of the square images in pixels.

    Returns:
        ``out_dir`` as a ``Path``.
    """
    out_dir = Path(out_dir)
    if resolution < 1 or min(num_train, num_val, num_test) < 0:
        raise ValueError("resolution must be positive and view counts non-negative")
    if out_dir.exists():
        extra = sorted(p.name for p in out_dir.iterdir() if p.name not in _SCENE_ENTRIES)
        if not out_dir.is_dir() or extra:
            raise FileExistsError(f"{out_dir} exists and is not a demo scene (holds {extra[:3]})")
    # No fsync of the ~130 files: the scene is made again from its seed (a file torn by a power loss
    # fails decoding, naming itself), and tests make many scenes.
    with atomic_folder(out_dir, replace=True, fsync=False) as folder:
        _write_scene(folder, seed, {"train": num_train, "val": num_val, "test": num_test}, resolution)
    return out_dir


def is_demo_scene_complete(root: str | Path) -> bool:
    """True when ``root`` holds all three ``transforms_*.json`` files, each readable with a
    ``frames`` list, and every image they reference (``file_path + '.png'``) exists."""
    root = Path(root)
    for split in SPLITS:
        try:
            meta = json.loads((root / f"transforms_{split}.json").read_text())
            paths = [frame["file_path"] for frame in meta["frames"]]
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if not all(isinstance(p, str) and (root / f"{p}.png").is_file() for p in paths):
            return False
    return True
