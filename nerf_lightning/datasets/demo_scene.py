"""A procedural demo scene in the Blender NeRF-synthetic layout, rendered exactly.

``make_demo_scene`` writes ``transforms_{train,val,test}.json`` and RGBA PNGs
``{train,val,test}/r_<i>.png`` like the real Blender scenes, so every loader and pipeline in the
project can run end to end without downloading anything. The images come from a small reference
ray tracer (the shapes are :mod:`nerf_lightning.datasets.demo_shapes`): each shape has a closed-form ray
intersection (no sphere tracing, no marching), so the rendered images are the exact projection of
the scene up to the fixed 3x3 supersampling used for anti-aliasing.

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
from pathlib import Path

import numpy as np
from PIL import Image

from nerf_lightning.datasets.demo_shapes import (
    CONTENT_RADIUS,
    Array,
    Capsule,
    OrientedBox,
    Shape,
    Sphere,
    _first_hits,
    demo_shapes,
    shade,
)
from nerf_lightning.files import atomic_folder

__all__ = [  # the geometry lives in demo_shapes; these names stay importable from here
    "CONTENT_RADIUS", "Capsule", "OrientedBox", "Shape", "Sphere", "_first_hits", "demo_shapes",
    "is_demo_scene_complete", "make_demo_scene",
]

CAMERA_ANGLE_X = 0.6911112070083618
"""Horizontal field of view in radians (Blender's default camera)."""

CAMERA_DISTANCE = 4.0
"""Distance of every camera from the origin, which it looks at."""

ELEVATION_RANGE_DEG = (-15.0, 85.0)
"""Band of camera elevations (degrees above the ``z = 0`` plane)."""

SUPERSAMPLE = 3
"""Sub-pixel samples per axis (``SUPERSAMPLE ** 2`` stratified rays per pixel)."""

SPLITS = ("train", "val", "test")

_RAYS_PER_CHUNK = 1 << 18


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
        rgb, hit = shade(shapes, origins, directions)
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
