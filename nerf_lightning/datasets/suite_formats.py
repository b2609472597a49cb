"""How a scene of the suite becomes files: one recipe per dataset format, as our loaders read them.

* :class:`BlenderRecipe` (``blender`` loader): ``transforms_{train,val,test}.json`` with
  ``camera_angle_x`` and RGBA PNGs ``{split}/r_<i>.png`` over a transparent background, square images;
  the demo's cameras (:func:`~nerf_lightning.datasets.demo_scene.camera_poses`: 100 train views on a
  golden spiral, 10 val and 20 test at seeded random places), so object scenes differ from the demo
  in content only.
* :class:`RingRecipe` (``nerfstudio`` loader, instant-ngp layout): one ``transforms.json`` with
  ``fl_x``, ``fl_y``, ``cx``, ``cy`` (the principal point a little off the image centre, as
  calibrated cameras have it), ``w``, ``h``, ``k1 k2 p1 p2`` (zero), ``aabb_scale``, ``scale`` and
  ``offset``; RGB PNGs ``images/frame_<iii>.png``; 3:2 images. No split lists: the loader holds out
  frame ``i`` (in ``file_path`` order) for test when ``i % 8 == 0`` and for val when ``i % 8 == 4``.
* :class:`HandheldRecipe`: the same layout for a phone's capture (:class:`~.suite_rigs.HandheldArc`),
  81 frames (60/10/11 by the same rule), portrait 3:4 images with a phone's field of view.
* :class:`ForwardRecipe` (``llff`` loader): ``poses_bounds.npy`` and RGB PNGs ``images/img_<iii>.png``
  (name order is row order), 4:3 images; the loader's own split (image ``i`` test when ``i % 8 == 0``,
  val when ``i % 8 == 4``).

instant-ngp's keys are honest: ``scale`` and ``offset`` map the capture's middle to ``(0.5, 0.5, 0.5)``
and the camera ring to about ``0.4`` from it (cameras inside ``[0, 1]^3``; a phone capture's unit cube
holds its objects instead, with the cameras outside, as colmap2nerf's files have them), and each
scene declares as ``aabb_scale`` the power of two whose enlarged cube is the smallest to hold its
environment dome or room (``tests/datasets/test_scene_suite.py`` checks both), as instant-ngp's
exporters choose it. LLFF's near and
far bounds of each view are the depths (along its optical axis) of the nearest and farthest surface it
sees, measured on a fixed 96-pixel-wide probe image (so they do not change with ``--resolution``)
and widened by 5%.

Images of opaque scenes (360-degree, forward-facing) must be hit everywhere: a ray that misses every
surface is a layout error and stops the writing (``RuntimeError``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
from PIL import Image

from nerf_lightning.datasets import demo_scene
from nerf_lightning.datasets.demo_shapes import Array
from nerf_lightning.datasets.suite_render import Pinhole, Rendered, World, render_views
from nerf_lightning.datasets.suite_rigs import (
    IDENTITY,
    Exposure,
    HandheldArc,
    Placement,
    PoseError,
    grid_poses,
    ring_poses,
)
from nerf_lightning.files import atomic_folder

SCENE_ENTRIES = frozenset({
    "transforms_train.json", "transforms_val.json", "transforms_test.json", "train", "val", "test",
    "transforms.json", "images", "poses_bounds.npy",
})
"""Everything a scene of any format writes at its root: a folder holding only these may be replaced."""

MIN_RESOLUTION = 8
"""Smallest ``--resolution`` (longer image side) of the suite's scenes."""


class Renderer(Protocol):
    def __call__(self, camera_to_world: Array, camera: Pinhole) -> Rendered:
        """Render canonical OpenGL cameras ``[N, 4, 4]`` sharing ``camera``."""
        ...


@dataclass(frozen=True)
class WorldRenderer:
    """Renders the world ``build()`` returns (built once per process: the builders are cached)."""

    build: Callable[[], World]
    supersample: int = demo_scene.SUPERSAMPLE

    def __call__(self, camera_to_world: Array, camera: Pinhole) -> Rendered:
        return render_views(self.build(), camera_to_world, camera, self.supersample)


def demo_renderer(camera_to_world: Array, camera: Pinhole) -> Rendered:
    """The demo scene's own renderer (Blender's field of view, square images): the demo's exact pixels."""
    rgba = demo_scene.render_views(camera_to_world, camera.width, camera.height, demo_scene.CAMERA_ANGLE_X)
    return Rendered(rgba=rgba, depth_range=np.full((len(rgba), 2), np.nan))


_PIXELS_PER_CALL = 1 << 20
"""Pixels rendered together: a renderer's cost per call is shared by many small views, and the images
of one call stay bounded in memory."""


def _views(render: Renderer, poses: Array, camera: Pinhole) -> Iterator[Rendered]:
    """Each view of ``poses`` rendered, one :class:`Rendered` of one view each."""
    per_call = max(1, _PIXELS_PER_CALL // (camera.width * camera.height))
    for start in range(0, len(poses), per_call):
        chunk = render(poses[start:start + per_call], camera)
        for i in range(len(chunk.rgba)):
            yield Rendered(rgba=chunk.rgba[i:i + 1], depth_range=chunk.depth_range[i:i + 1])


def to_uint8(image: Array) -> Array:
    """``[..., C]`` uint8 of a float image in ``[0, 1]``, rounded to nearest (as the demo scene writes)."""
    return np.round(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)


def _opaque(rgba: Array, name: str) -> Array:
    """``[H, W, 3]`` uint8 of an image every ray of which hit a surface."""
    if (rgba[..., 3] < 1.0).any():
        raise RuntimeError(f"{name}: {int((rgba[..., 3] < 1).sum())} pixel(s) see no surface; an opaque "
                           "scene's layout must enclose its cameras")
    return to_uint8(rgba)[..., :3]


def _write_json(path: Path, meta: dict[str, Any]) -> None:
    path.write_text(json.dumps(meta, indent=2) + "\n")


def _size(resolution: int, aspect: float) -> tuple[int, int]:
    """``(width, height)`` of images ``aspect`` (height / width) whose longer side is ``resolution``:
    landscape ones ``resolution`` wide and ``round(resolution * aspect)`` high, portrait ones
    ``round(resolution / aspect)`` wide and ``resolution`` high."""
    if aspect <= 1.0:
        return resolution, max(1, round(resolution * aspect))
    return max(1, round(resolution / aspect)), resolution


def _exposed(rgba: Array, gain: Array | None) -> Array:
    """``rgba [H, W, 4]`` as a photo with linear gain ``gain [3]`` records it (:class:`Exposure`); as it
    is for ``None`` or a gain of 1 (a held-out frame: as rendered, byte for byte)."""
    if gain is None or (gain == 1.0).all():
        return rgba
    return np.concatenate([Exposure.apply(rgba[..., :3], gain), rgba[..., 3:]], axis=-1)


class FolderRecipe:
    """A recipe that writes its files into a fresh folder published at ``out_dir`` when complete."""

    dataset_format: ClassVar[str]
    placement: Placement
    aabb_scale: int | None = None

    def write(self, folder: Path, resolution: int, seed: int) -> None:
        """Write every file of the scene into the empty ``folder``."""
        raise NotImplementedError

    def make(self, out_dir: Path, resolution: int, seed: int) -> Path:
        """Write the scene to ``out_dir`` (replacing an earlier scene there; a folder with anything else
        raises ``FileExistsError``) and return it."""
        if resolution < MIN_RESOLUTION:
            raise ValueError(f"resolution must be at least {MIN_RESOLUTION} pixels, got {resolution}")
        if out_dir.exists():
            entries = out_dir.iterdir() if out_dir.is_dir() else [out_dir]
            extra = sorted(p.name for p in entries if p.name not in SCENE_ENTRIES or p == out_dir)
            if extra:
                raise FileExistsError(f"{out_dir} exists and is not a generated scene (holds {extra[:3]})")
        # No fsync: a scene is made again from its seed (like the demo scene).
        with atomic_folder(out_dir, replace=True, fsync=False) as folder:
            self.write(folder, resolution, seed)
        return out_dir


@dataclass(frozen=True)
class BlenderRecipe(FolderRecipe):
    """An object scene in the Blender layout (module docstring)."""

    dataset_format: ClassVar[str] = "blender"
    render: Renderer
    placement: Placement = IDENTITY
    counts: tuple[int, int, int] = (100, 10, 20)

    @staticmethod
    def camera(resolution: int) -> Pinhole:
        """Square images, Blender's default field of view."""
        focal = 0.5 * resolution / math.tan(0.5 * demo_scene.CAMERA_ANGLE_X)
        return Pinhole(focal, focal, 0.5 * resolution, 0.5 * resolution, resolution, resolution)

    def poses(self, split: str, seed: int) -> Array:
        """``[count, 4, 4]`` canonical cameras of ``split``, in file order."""
        return demo_scene.camera_poses(split, self.counts[demo_scene.SPLITS.index(split)], seed)

    def write(self, folder: Path, resolution: int, seed: int) -> None:
        camera = self.camera(resolution)
        for split in demo_scene.SPLITS:
            poses = self.poses(split, seed)
            (folder / split).mkdir()
            for i, view in enumerate(_views(self.render, poses, camera)):
                image = Image.fromarray(to_uint8(view.rgba[0]))
                image.save(folder / split / f"r_{i}.png", format="PNG")
            frames = [{"file_path": f"./{split}/r_{i}", "transform_matrix": pose.tolist()}
                      for i, pose in enumerate(self.placement.poses(poses))]
            _write_json(folder / f"transforms_{split}.json",
                        {"camera_angle_x": demo_scene.CAMERA_ANGLE_X, "frames": frames})


class TransformsRecipe(FolderRecipe):
    """A capture written in the instant-ngp layout (module docstring); subclasses choose the cameras.

    Subclasses are dataclasses with these fields: ``world`` (the canonical world; it must enclose
    every camera), ``placement`` (canonical -> file coordinates), ``aabb_scale`` (instant-ngp's,
    written as is), ``ngp_center`` and ``ngp_scale`` (the canonical point instant-ngp's
    ``(0.5, 0.5, 0.5)`` is, and its units per canonical unit), ``aspect`` (height / width), ``focal``
    (in widths), ``principal`` (in widths and heights), ``pose_error`` (``None``: the file records
    the poses the images were rendered with; else the error it records on the training views' poses)
    and ``exposure`` (``None``: every photo shows the rendered colours; else how the training photos'
    exposure and white balance vary).
    """

    dataset_format: ClassVar[str] = "nerfstudio"
    world: Callable[[], World]
    aabb_scale: int
    ngp_center: Sequence[float]
    ngp_scale: float
    aspect: float
    focal: float
    principal: tuple[float, float]
    pose_error: PoseError | None
    exposure: Exposure | None

    def camera(self, resolution: int) -> Pinhole:
        width, height = _size(resolution, self.aspect)
        f = self.focal * width
        return Pinhole(f, f, self.principal[0] * width, self.principal[1] * height, width, height)

    def poses(self, seed: int) -> Array:
        """``[frames, 4, 4]`` canonical cameras, in file order."""
        raise NotImplementedError

    def write(self, folder: Path, resolution: int, seed: int) -> None:
        camera = self.camera(resolution)
        poses = self.poses(seed)
        (folder / "images").mkdir()
        names = [f"images/frame_{i:03d}.png" for i in range(len(poses))]
        gains = None if self.exposure is None else self.exposure.gains(len(poses), seed)
        for i, (name, view) in enumerate(zip(names, _views(WorldRenderer(self.world), poses, camera),
                                             strict=True)):
            rgba = _exposed(view.rgba[0], None if gains is None else gains[i])
            Image.fromarray(_opaque(rgba, name)).save(folder / name, format="PNG")
        recorded = poses if self.pose_error is None else self.pose_error.apply(poses, camera.fx, seed)
        scale = self.ngp_scale / self.placement.scale
        offset = 0.5 - scale * self.placement.points(np.array(self.ngp_center, dtype=np.float64))
        meta: dict[str, Any] = {
            "camera_angle_x": 2.0 * math.atan(0.5 * camera.width / camera.fx),
            "camera_angle_y": 2.0 * math.atan(0.5 * camera.height / camera.fy),
            "fl_x": camera.fx, "fl_y": camera.fy, "k1": 0.0, "k2": 0.0, "p1": 0.0, "p2": 0.0,
            "cx": camera.cx, "cy": camera.cy, "w": camera.width, "h": camera.height,
            "aabb_scale": self.aabb_scale, "scale": scale, "offset": offset.tolist(),
            "frames": [{"file_path": name, "transform_matrix": pose.tolist()}
                       for name, pose in zip(names, self.placement.poses(recorded), strict=True)],
        }
        _write_json(folder / "transforms.json", meta)


@dataclass(frozen=True)
class RingRecipe(TransformsRecipe):
    """A 360-degree capture on a ring (:func:`~.suite_rigs.ring_poses`) in the instant-ngp layout.

    Attributes:
        world: the canonical world (its dome must hold every camera).
        placement: canonical -> file coordinates.
        aabb_scale: instant-ngp's, written as is.
        frames: views on the ring.
        target, radius, elevation_deg: the ring, canonical.
        ngp_center, ngp_scale: the canonical point instant-ngp's ``(0.5, 0.5, 0.5)`` is, and its units
            per canonical unit (0.4: the ring about 0.4 from the middle, inside the unit cube).
        aspect, focal, principal: height / width; focal length and principal point in widths / heights.
        pose_error: the error the file records on the training views' poses (``None``: none).
        exposure: how the training photos' exposure and white balance vary (``None``: not at all).
    """

    world: Callable[[], World]
    placement: Placement
    aabb_scale: int
    frames: int = 120
    target: Sequence[float] = (0.0, 0.0, 0.15)
    radius: float = 1.0
    elevation_deg: tuple[float, float] = (8.0, 40.0)
    ngp_center: Sequence[float] = (0.0, 0.0, 0.25)
    ngp_scale: float = 0.4
    aspect: float = 2.0 / 3.0
    focal: float = 0.85
    principal: tuple[float, float] = (0.508, 0.494)
    pose_error: PoseError | None = None
    exposure: Exposure | None = None

    def poses(self, seed: int) -> Array:
        return ring_poses(self.frames, seed, target=np.array(self.target), radius=self.radius,
                          elevation_deg=self.elevation_deg)


@dataclass(frozen=True)
class HandheldRecipe(TransformsRecipe):
    """A phone capture (:class:`~.suite_rigs.HandheldArc`) in the instant-ngp layout, as colmap2nerf
    writes one: by default portrait 3:4 photos, a phone's field of view, the principal point a little off.

    Here instant-ngp's unit cube holds the filmed objects, not the cameras: ``ngp_center`` is their
    middle and ``ngp_scale`` makes them fill the cube, so the cameras stand outside it (tabletop: 1.25 to
    1.95 units from its middle; a colmap2nerf file puts them about 4 x 0.33 = 1.33 out) and the
    surroundings reach into the ``aabb_scale`` cube.

    Attributes:
        world: the canonical world, closed around every camera (a room, or a dome over the ground).
        placement: canonical -> file coordinates.
        rig: the cameras.
        ngp_center, ngp_scale: the canonical point instant-ngp's ``(0.5, 0.5, 0.5)`` is, and its units
            per canonical unit.
        aabb_scale: instant-ngp's, written as is (32 by default, as colmap2nerf writes it unless told).
        aspect, focal, principal: height / width (4 / 3: portrait); focal length in widths (1.0: about
            53 degrees across, 67 along, a phone's main camera held upright); principal point in
            widths / heights.
        pose_error: the error the file records on the training views' poses (``None``: none).
        exposure: how the training photos' exposure and white balance vary (``None``: not at all).
    """

    world: Callable[[], World]
    placement: Placement
    rig: HandheldArc
    ngp_center: Sequence[float]
    ngp_scale: float
    aabb_scale: int = 32
    aspect: float = 4.0 / 3.0
    focal: float = 1.0
    principal: tuple[float, float] = (0.493, 0.506)
    pose_error: PoseError | None = None
    exposure: Exposure | None = None

    def poses(self, seed: int) -> Array:
        return self.rig.poses(seed)


@dataclass(frozen=True)
class ForwardRecipe(FolderRecipe):
    """A forward-facing capture in the LLFF layout (module docstring).

    Attributes:
        world: the canonical world (seen along ``+y`` from near the origin).
        placement: canonical -> file coordinates.
        columns, rows, spacing, target: the camera grid (:func:`~.suite_rigs.grid_poses`).
        aspect, focal: height / width; focal length in widths (principal point at the centre: LLFF
            has no other).
        probe_width, bound_margin: width of the depth probe; bounds widened by this fraction.
        exposure: how the training photos' exposure and white balance vary (``None``: not at all; the
            held-out photos are the loader's, ``i % 8`` 0 or 4, as for the other layouts).
    """

    dataset_format: ClassVar[str] = "llff"
    world: Callable[[], World]
    placement: Placement
    columns: int = 6
    rows: int = 4
    spacing: float = 0.12
    target: Sequence[float] = (0.0, 8.0, 0.0)
    aspect: float = 0.75
    focal: float = 0.95
    probe_width: int = 96
    bound_margin: float = 0.05
    exposure: Exposure | None = None

    def camera(self, resolution: int) -> Pinhole:
        width, height = _size(resolution, self.aspect)
        f = self.focal * width
        return Pinhole(f, f, 0.5 * width, 0.5 * height, width, height)

    def poses(self, seed: int) -> Array:
        """``[columns * rows, 4, 4]`` canonical cameras."""
        return grid_poses(self.columns, self.rows, seed, spacing=self.spacing, target=np.array(self.target))

    def bounds(self, poses: Array) -> Array:
        """``[N, 2]`` canonical near and far depth of each view (module docstring)."""
        probe = WorldRenderer(self.world, supersample=1)(poses, self.camera(self.probe_width))
        return probe.depth_range * np.array([1.0 - self.bound_margin, 1.0 + self.bound_margin])

    def write(self, folder: Path, resolution: int, seed: int) -> None:
        camera = self.camera(resolution)
        poses = self.poses(seed)
        (folder / "images").mkdir()
        gains = None if self.exposure is None else self.exposure.gains(len(poses), seed)
        for i, view in enumerate(_views(WorldRenderer(self.world), poses, camera)):
            name = f"images/img_{i:03d}.png"
            rgba = _exposed(view.rgba[0], None if gains is None else gains[i])
            Image.fromarray(_opaque(rgba, name)).save(folder / name, format="PNG")
        placed = self.placement.poses(poses)
        rotation, position = placed[:, :3, :3], placed[:, :3, 3:4]
        hwf = np.broadcast_to(np.array([[camera.height], [camera.width], [camera.fx]]), position.shape)
        # LLFF's columns: down, right, backwards (= -up, right, back of OpenGL), position, [H, W, focal].
        columns = [-rotation[:, :, 1:2], rotation[:, :, 0:1], rotation[:, :, 2:3], position, hwf]
        bounds = self.bounds(poses) * self.placement.scale
        rows = np.concatenate([np.concatenate(columns, axis=2).reshape(len(poses), 15), bounds], axis=1)
        np.save(folder / "poses_bounds.npy", rows)


@dataclass(frozen=True)
class DemoRecipe:
    """The demo scene itself (:func:`~nerf_lightning.datasets.demo_scene.make_demo_scene`)."""

    dataset_format: ClassVar[str] = "blender"
    placement: Placement = IDENTITY
    aabb_scale: None = None

    def make(self, out_dir: Path, resolution: int, seed: int) -> Path:
        return demo_scene.make_demo_scene(out_dir, seed=seed, resolution=resolution)
