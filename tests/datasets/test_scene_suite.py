"""Tests of the scene suite: every scene loads through our loaders and validates, is deterministic, puts
its declared placement and instant-ngp keys in its files, is seen by the loaded cameras exactly as it
was rendered; the 360-degree and forward-facing scenes are hit everywhere; the specular scene's colour
depends on the view direction; the tabletop scene's phone capture is as awkward as it says (a partial
arc, aimed beside the objects, rolled, looking away at the ends, in a tilted file frame); the
renderer's culling changes no pixel; the new shapes are exact."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from nerf_lightning.cameras.geometry import generate_rays, pixel_grid
from nerf_lightning.core.types import SceneBox
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.datasets import demo_scene, suite_render
from nerf_lightning.datasets.demo_shapes import LIGHT_DIRECTION, Capsule, OrientedBox, Sphere, _rotation
from nerf_lightning.datasets.scene_suite import SUITE, SuiteScene, make_suite_scene
from nerf_lightning.datasets.suite_formats import (
    BlenderRecipe,
    ForwardRecipe,
    HandheldRecipe,
    RingRecipe,
    TransformsRecipe,
)
from nerf_lightning.datasets.suite_render import Part, Pinhole, World, render_views
from nerf_lightning.datasets.suite_rigs import (
    Exposure,
    HandheldArc,
    Placement,
    linear_to_srgb,
    look_at,
    srgb_to_linear,
)
from nerf_lightning.datasets.suite_shapes import Disc, Dome, Painted, Surface, Wall
from nerf_lightning.datasets.suite_worlds import (
    ROOM,
    outdoor_world,
    specular_world,
    tabletop_objects,
    thin_world,
)
from nerf_lightning.scenes.bounds import focus_point
from nerf_lightning.scenes.loading import detect_format, load_split
from nerf_lightning.scenes.scene import SceneSplit
from nerf_lightning.scenes.validate import validate_dataset

# Every test here renders or loads procedural scenes (seconds in all): outside `make test-fast`.
pytestmark = pytest.mark.slow

RESOLUTION = 16
SPLITS = ("train", "val", "test")
FORMAT_OF_KIND = {"object": "blender", "360": "nerfstudio", "forward": "llff"}
PLACED = ["offcentre", "360", "360-small", "tabletop", "garden", "forward"]
COUNTS = {"object": {"train": 100, "val": 10, "test": 20}, "360": {"train": 90, "val": 15, "test": 15},
          "forward": {"train": 18, "val": 3, "test": 3}, "tabletop": {"train": 60, "val": 10, "test": 11},
          "tabletop-poses": {"train": 60, "val": 10, "test": 11},
          "tabletop-exposure": {"train": 60, "val": 10, "test": 11},
          "forward-exposure": {"train": 18, "val": 3, "test": 3},
          "garden": {"train": 54, "val": 9, "test": 9}}
"""Frames per split: by kind, or by name where a scene differs from its kind (phone captures: 81, 72)."""
SIZES = {"object": (16, 16), "360": (16, 11), "forward": (16, 12), "tabletop": (12, 16),
         "tabletop-poses": (12, 16), "tabletop-exposure": (12, 16), "garden": (16, 12),
         "forward-exposure": (16, 12)}
"""``(width, height)`` at 16 px: the longer side is the resolution (tabletop's phone photos: portrait)."""


@pytest.fixture(scope="module")
def scenes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every scene at 16 px, seed 0."""
    base = tmp_path_factory.mktemp("suite")
    return {name: scene.make(base / name, resolution=RESOLUTION) for name, scene in SUITE.items()}


def _bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _pose_files(files: dict[str, bytes]) -> list[str]:
    return [name for name in files if name.endswith((".json", ".npy"))]


def _c2w(split: SceneSplit, index: int) -> np.ndarray:
    m = np.eye(4)
    m[:3] = split.cameras.camera_to_world[index].double().numpy()
    return m


def _to_file_world(split: SceneSplit, c2w: np.ndarray) -> np.ndarray:
    """Undo a loader's normalisation (LLFF's scale and recentring)."""
    if split.world_transform is None:
        return c2w
    t = split.world_transform.double().numpy()
    out = np.eye(4)
    out[:3, :3] = t[:, :3].T @ c2w[:3, :3]
    out[:3, 3] = t[:, :3].T @ (c2w[:3, 3] - t[:, 3]) / split.world_scale
    return out


def _to_canonical(scene: SuiteScene, c2w: np.ndarray) -> np.ndarray:
    placement = scene.placement
    out = np.eye(4)
    out[:3, :3] = placement.rotation.T @ c2w[:3, :3]
    out[:3, 3] = placement.rotation.T @ (c2w[:3, 3] - np.array(placement.offset)) / placement.scale
    return out


def _canonical_poses(scene: SuiteScene, split: SceneSplit, split_name: str, seed: int = 0) -> np.ndarray:
    """``[N, 4, 4]`` the canonical cameras the recipe rendered the split's frames with."""
    recipe = scene.recipe
    if isinstance(recipe, BlenderRecipe):
        return recipe.poses(split_name, seed)
    assert isinstance(recipe, TransformsRecipe | ForwardRecipe)
    frames = [int(Path(name).stem.split("_")[-1]) for name in split.names]
    return recipe.poses(seed)[frames]


# ---------------------------------------------------------------------------------------- the table


def test_the_suite_table() -> None:
    assert list(SUITE) == ["demo", "thin", "texture", "specular", "offcentre", "workshop", "360", "360-small",
                           "tabletop", "tabletop-poses", "tabletop-exposure", "garden", "forward",
                           "forward-exposure"]
    for name, scene in SUITE.items():
        assert scene.name == name and "\n" not in scene.description and scene.description
        assert scene.dataset_format == FORMAT_OF_KIND[scene.kind]
    assert {scene.kind for scene in SUITE.values()} == set(FORMAT_OF_KIND)
    assert {name: SUITE[name].aabb_scale for name in ("360", "360-small", "tabletop", "tabletop-poses",
                                                      "tabletop-exposure", "garden")} == {
        "360": 16, "360-small": 2, "tabletop": 32, "tabletop-poses": 32, "tabletop-exposure": 32, "garden": 8}
    with pytest.raises(KeyError, match=r"expected one of demo, thin, .*forward"):
        make_suite_scene("nope", "unused")


# ---------------------------------------------------------------------------- loading and validating


@pytest.mark.parametrize("name", list(SUITE))
def test_every_scene_validates_and_loads_with_its_splits(scenes: dict[str, Path], name: str) -> None:
    scene, root = SUITE[name], scenes[name]
    report = validate_dataset(root)
    assert report.ok and not report.warnings, report.lines()
    assert detect_format(root) == scene.dataset_format
    counts = {split: len(load_split(root, split)) for split in SPLITS}
    assert counts == COUNTS.get(name, COUNTS[scene.kind])
    train = load_split(root, "train")
    width = int(train.cameras.width[0])
    height = int(train.cameras.height[0])
    assert (width, height) == SIZES.get(name, SIZES[scene.kind])
    # Object scenes keep their alpha (transparent background); the others are opaque photographs.
    assert (train.alphas is not None) == (scene.kind == "object")
    if scene.kind == "object":
        assert (train.alphas == 0).any() and (train.alphas == 255).any()


def test_demo_is_the_demo_scene_and_offcentre_its_images_placed(scenes: dict[str, Path],
                                                                tmp_path: Path) -> None:
    demo = _bytes(scenes["demo"])
    assert demo == _bytes(demo_scene.make_demo_scene(tmp_path / "demo", resolution=RESOLUTION))
    offcentre = _bytes(scenes["offcentre"])
    images = [name for name in demo if name.endswith(".png")]
    assert len(images) == 130 and all(offcentre[name] == demo[name] for name in images)
    placement = SUITE["offcentre"].placement
    for split in SPLITS:
        placed = json.loads(offcentre[f"transforms_{split}.json"])
        original = json.loads(demo[f"transforms_{split}.json"])
        assert placed["camera_angle_x"] == original["camera_angle_x"]
        for a, b in zip(placed["frames"], original["frames"], strict=True):
            np.testing.assert_allclose(np.array(a["transform_matrix"]),
                                       placement.poses(np.array([b["transform_matrix"]]))[0], atol=1e-12)


def test_the_data_module_places_offcentre_as_the_demo(scenes: dict[str, Path]) -> None:
    """Training's scene box follows the cameras: ``offcentre``'s is the demo's, scaled and moved."""
    boxes = {}
    for name in ("demo", "offcentre"):
        data = NerfDataModule(root=str(scenes[name]), cache=False)
        data.setup("fit")
        assert data.scene_box is not None
        boxes[name] = data.scene_box
    placement = SUITE["offcentre"].placement
    demo_center = 0.5 * (boxes["demo"].lower + boxes["demo"].upper)
    center = 0.5 * (boxes["offcentre"].lower + boxes["offcentre"].upper)
    np.testing.assert_allclose(center.numpy(), placement.points(demo_center.double().numpy()), atol=1e-5)
    np.testing.assert_allclose((boxes["offcentre"].upper - center).numpy(),
                               placement.scale * (boxes["demo"].upper - demo_center).numpy(), rtol=1e-4)


# --------------------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("name", [name for name in SUITE if name != "demo"])
def test_same_seed_same_bytes_other_seed_other_cameras(scenes: dict[str, Path], tmp_path: Path,
                                                       name: str) -> None:
    first = _bytes(scenes[name])
    assert _bytes(SUITE[name].make(tmp_path / "again", resolution=RESOLUTION)) == first
    other = _bytes(SUITE[name].make(tmp_path / "other", resolution=RESOLUTION, seed=1))
    assert set(other) == set(first)
    assert all(other[f] != first[f] for f in _pose_files(first))
    images = [f for f in first if f.endswith(".png")]
    assert sum(other[f] != first[f] for f in images) >= 0.9 * len(images)


def test_a_folder_with_other_files_is_kept(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a generated scene"):
        SUITE["forward"].make(tmp_path / "mine", resolution=RESOLUTION)
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    # A folder holding another generated scene is replaced.
    root = SUITE["forward"].make(tmp_path / "scene", resolution=RESOLUTION)
    SUITE["360"].make(root, resolution=RESOLUTION)
    assert sorted(p.name for p in root.iterdir()) == ["images", "transforms.json"]
    with pytest.raises(ValueError, match="at least 8"):
        SUITE["thin"].make(tmp_path / "tiny", resolution=4)


# ----------------------------------------------------------------------- what the files declare


@pytest.mark.parametrize("name", PLACED)
def test_the_declared_placement_is_in_the_files(scenes: dict[str, Path], name: str) -> None:
    """The cameras sit where the placement puts the canonical rig: far from the origin, at the scaled
    distance (read from the files, before any loader normalisation)."""
    scene, root = SUITE[name], scenes[name]
    placement = scene.placement
    assert np.linalg.norm(placement.offset) > 3.0 * placement.scale and placement.scale != 1.0
    if scene.kind == "forward":
        rows = np.load(root / "poses_bounds.npy")
        centers = rows[:, :15].reshape(-1, 3, 5)[:, :, 3]
        assert np.abs(centers.mean(axis=0) - placement.offset).max() < 0.1 * placement.scale
        # Back in the canonical frame: a 0.6 x 0.36 grid (jittered by up to 0.024) about the origin.
        canonical = (centers - placement.offset) @ placement.rotation / placement.scale
        np.testing.assert_allclose(np.ptp(canonical, axis=0), [0.6, 0.0, 0.36], atol=0.05)
        # Bounds in file units: the canonical depths 1.08 (nearest ball) to about 5.1 (the wall), scaled.
        near, far = rows[:, 15] / placement.scale, rows[:, 16] / placement.scale
        assert 0.9 < near.min() < 1.1 and 4.8 < far.max() < 5.8
        return
    poses = []
    for split in SPLITS:
        loaded = load_split(root, split)
        poses += [loaded.cameras.camera_to_world[i].double().numpy() for i in range(len(loaded))]
    centers = np.stack([m[:, 3] for m in poses])
    if scene.kind == "object":  # the demo's cameras: 4 canonical units from the content's middle
        distances = np.linalg.norm(centers - placement.offset, axis=1)
        np.testing.assert_allclose(distances, 4.0 * placement.scale, rtol=1e-6)  # float32 poses
    elif isinstance(scene.recipe, HandheldRecipe):  # the rig's ranges (+ 1 cm of shake), well used
        rig = scene.recipe.rig
        canonical = (centers - placement.offset) @ placement.rotation / placement.scale - rig.center
        distances, heights = np.hypot(canonical[:, 0], canonical[:, 1]), canonical[:, 2]
        for values, (lo, hi) in ((distances, rig.distance), (heights, rig.height)):
            assert lo - 0.015 < values.min() and values.max() < hi + 0.015
            assert np.ptp(values) > 0.7 * (hi - lo)
    else:  # a ring of radius 1 (+-8%) around canonical (0, 0, 0.15)
        target = placement.points(np.array([0.0, 0.0, 0.15]))
        distances = np.linalg.norm(centers - target, axis=1) / placement.scale
        assert distances.min() > 0.919 and distances.max() < 1.081
        assert np.linalg.norm(centers.mean(axis=0) - target) < 0.5 * placement.scale


@pytest.mark.parametrize("name", ["360", "360-small"])
def test_instant_ngp_keys_are_declared_and_honest(scenes: dict[str, Path], name: str) -> None:
    """``aabb_scale`` is the scene's; ``scale`` / ``offset`` put the cameras inside instant-ngp's unit cube;
    the enlarged cube holds the environment dome, and half of it would not."""
    scene, root = SUITE[name], scenes[name]
    meta = json.loads((root / "transforms.json").read_text())
    assert meta["aabb_scale"] == scene.aabb_scale
    assert {"fl_x", "fl_y", "cx", "cy", "w", "h", "scale", "offset"} <= set(meta)
    assert meta["cx"] != meta["w"] / 2 and meta["cy"] != meta["h"] / 2  # a calibrated principal point
    train = load_split(root, "train")
    assert train.ngp is not None and train.aabb_scale == scene.aabb_scale
    cube = train.ngp.unit_cube()
    centers = train.cameras.centers
    assert ((centers > cube.lower) & (centers < cube.upper)).all()
    assert isinstance(scene.recipe, RingRecipe)
    dome = next(part.surface.shape for part in scene.recipe.world().parts
                if isinstance(getattr(part.surface, "shape", None), Dome))
    center = torch.tensor(scene.placement.points(dome.center))
    radius = dome.radius * scene.placement.scale
    box = train.ngp.box()
    assert ((center - radius > box.lower) & (center + radius < box.upper)).all()
    half = 0.5 * (box.upper - box.lower) / 2  # the cube of aabb_scale / 2 about the same centre
    middle = 0.5 * (box.upper + box.lower)
    assert not ((center - radius > middle - half) & (center + radius < middle + half)).all()


# ------------------------------------------------------------------------ the phone capture's awkwardness


def _support(surface: Surface, direction: np.ndarray) -> float:
    """How far ``surface`` reaches along the unit ``direction [3]`` (exact for the demo's shapes)."""
    while isinstance(surface, Painted):
        surface = surface.shape
    if isinstance(surface, Sphere):
        return float(surface.center @ direction + surface.radius)
    if isinstance(surface, Capsule):
        return float(max(surface.a @ direction, surface.b @ direction) + surface.radius)
    assert isinstance(surface, OrientedBox)
    return float(surface.center @ direction + np.abs(surface.rotation.T @ direction) @ surface.half_extents)


def _inside(points: np.ndarray, box: SceneBox) -> np.ndarray:
    """``[N]`` whether each point ``[N, 3]`` lies strictly inside ``box``."""
    return ((points > box.lower.double().numpy()) & (points < box.upper.double().numpy())).all(axis=1)


def _check_objects_in_cube_cameras_outside(objects: Sequence[Surface], placement: Placement,
                                           train: SceneSplit) -> None:
    """Each object's reach along each file axis (both ways), in file coordinates, is inside instant-ngp's
    unit cube; no training camera is, and every one is inside the ``aabb_scale`` box."""
    assert train.ngp is not None
    cube, box = train.ngp.unit_cube(), train.ngp.box()
    lower, upper = cube.lower.double().numpy(), cube.upper.double().numpy()
    for surface in objects:
        for axis in np.eye(3):
            canonical_axis = placement.rotation.T @ axis
            reach = placement.offset @ axis + placement.scale * _support(surface, canonical_axis)
            back = placement.offset @ axis - placement.scale * _support(surface, -canonical_axis)
            assert lower @ axis < back and reach < upper @ axis
    centers = train.cameras.centers.double().numpy()
    assert not _inside(centers, cube).any() and _inside(centers, box).all()


def test_the_phone_capture_declares_instant_ngp_keys_as_colmap2nerf_does(scenes: dict[str, Path]) -> None:
    """``aabb_scale`` 32 is the smallest power of two whose cube holds the room (16's would not);
    instant-ngp's unit cube holds the objects on the table, and the cameras stand outside it."""
    scene, root = SUITE["tabletop"], scenes["tabletop"]
    meta = json.loads((root / "transforms.json").read_text())
    assert meta["aabb_scale"] == 32 and (meta["w"], meta["h"]) == (12, 16)
    assert meta["cx"] != meta["w"] / 2 and meta["cy"] != meta["h"] / 2
    train = load_split(root, "train")
    assert train.ngp is not None and train.aabb_scale == 32
    box = train.ngp.box()
    placement = scene.placement
    x0, x1, y0, y1, z0, z1 = ROOM
    corners = placement.points(np.array(list(itertools.product((x0, x1), (y0, y1), (z0, z1)))))
    assert _inside(corners, box).all()
    middle, quarter = 0.5 * (box.upper + box.lower), 0.25 * (box.upper - box.lower)
    assert not _inside(corners, SceneBox(middle - quarter, middle + quarter)).all()
    _check_objects_in_cube_cameras_outside(tabletop_objects(), placement, train)


def test_the_pose_error_scene_is_tabletop_with_its_training_poses_off(scenes: dict[str, Path]) -> None:
    """``tabletop-poses``: tabletop's images byte for byte and its validation and test poses; each
    training pose turned about its own centre and moved by about a pixel per axis of the written images
    (the standard deviations, estimated over the 60 training views, within a quarter of it)."""
    plain, off = _bytes(scenes["tabletop"]), _bytes(scenes["tabletop-poses"])
    images = [name for name in plain if name.endswith(".png")]
    assert len(images) == 81 and all(off[name] == plain[name] for name in images)
    scene = SUITE["tabletop-poses"]
    error = scene.recipe.pose_error  # type: ignore[attr-defined]
    assert (error.rotation_pixels, error.translation_pixels) == (1.0, 1.0)
    true_meta, recorded_meta = (json.loads(files["transforms.json"]) for files in (plain, off))
    assert {k: v for k, v in true_meta.items() if k != "frames"} == {
        k: v for k, v in recorded_meta.items() if k != "frames"}
    focal = recorded_meta["fl_x"]
    turns, moves = [], []
    for i, (true, recorded) in enumerate(zip(true_meta["frames"], recorded_meta["frames"], strict=True)):
        assert true["file_path"] == recorded["file_path"]
        a, b = np.array(true["transform_matrix"]), np.array(recorded["transform_matrix"])
        if i % 8 in (0, 4):  # test and validation views
            assert np.array_equal(a, b)
            continue
        relative = b[:3, :3] @ a[:3, :3].T
        turns.append(math.acos(min(1.0, (np.trace(relative) - 1.0) / 2.0)) * focal)
        distance = np.linalg.norm(_to_canonical(scene, a)[:3, 3] - np.array(error.center))
        moves.append(np.linalg.norm(b[:3, 3] - a[:3, 3]) / scene.placement.scale / distance * focal)
    assert len(turns) == 60 and min(turns) > 0.0
    for pixels in (turns, moves):  # three normal components each: the mean square is 3 sigma^2
        assert 0.75 < math.sqrt(np.mean(np.square(pixels)) / 3.0) < 1.25, pixels


EXPOSED = {"tabletop-exposure": ("tabletop", "transforms.json", "images/frame_{:03d}.png", 81),
           "forward-exposure": ("forward", "poses_bounds.npy", "images/img_{:03d}.png", 24)}
"""Each scene with a phone's automatic exposure: the scene it photographs again, its pose file, its
images' names and its frame count."""


@pytest.mark.parametrize("name", list(EXPOSED))
def test_an_exposure_scene_is_its_scene_through_a_phones_automatic_exposure(scenes: dict[str, Path],
                                                                            name: str) -> None:
    """``tabletop-exposure`` and ``forward-exposure``: their scene's files with each training photo's linear
    colours scaled per channel by its frame's gains (read back from the written images within 8-bit
    rounding), the gains' exposure and white balance spread as declared; held-out photos and every pose as
    their scene's."""
    base, pose_file, image_name, frames = EXPOSED[name]
    plain, varied = _bytes(scenes[base]), _bytes(scenes[name])
    assert plain.keys() == varied.keys() and plain[pose_file] == varied[pose_file]
    exposure = SUITE[name].recipe.exposure  # type: ignore[attr-defined]
    assert exposure is not None and SUITE[base].recipe.exposure is None  # type: ignore[attr-defined]
    gains = exposure.gains(frames, seed=0)
    measured = []
    for i in range(frames):
        image = image_name.format(i)
        if i % 8 in (0, 4):  # test and validation photos: as rendered
            assert varied[image] == plain[image] and (gains[i] == 1.0).all()
            continue
        assert varied[image] != plain[image]
        a, b = (srgb_to_linear(np.asarray(Image.open(scenes[key] / image), dtype=np.float64) / 255.0)
                for key in (base, name))
        usable = (a > 0.05) & (b < 0.95)  # away from 8-bit rounding near black and from clipping at white
        ratio = np.array([np.median(b[..., c][usable[..., c]] / a[..., c][usable[..., c]]) for c in range(3)])
        np.testing.assert_allclose(ratio, gains[i], rtol=0.03)
        measured.append(np.log2(ratio))
    logs = np.array(measured)  # [training photos, 3] stops per channel
    assert len(logs) == COUNTS[name]["train"]
    assert 0.75 * exposure.stops < logs.mean(axis=1).std() < 1.25 * exposure.stops
    balance = (logs - logs.mean(axis=1, keepdims=True)).std()
    assert 0.5 * exposure.white_balance < balance < 1.5 * exposure.white_balance


def test_exposure_checks_its_values_and_keeps_white_and_black() -> None:
    with pytest.raises(ValueError, match="stops must be a number >= 0"):
        Exposure(stops=-0.1, white_balance=0.0)
    with pytest.raises(ValueError, match="white_balance must be a number >= 0"):
        Exposure(stops=0.3, white_balance=float("nan"))
    image = np.array([[[0.0, 0.5, 1.0]]])
    np.testing.assert_allclose(Exposure.apply(image, np.ones(3)), image, atol=1e-12)
    brighter = Exposure.apply(image, np.full(3, 2.0))
    assert brighter[0, 0, 0] == 0.0 and 0.5 < brighter[0, 0, 1] < 1.0
    assert brighter[0, 0, 2] == pytest.approx(1.0, abs=1e-12)  # clipped at white
    # one stop in linear light: the encoded mid grey moves as sRGB's curve says, not by a factor of 2
    np.testing.assert_allclose(srgb_to_linear(brighter[0, 0, 1]), 2.0 * srgb_to_linear(0.5))
    # IEC 61966-2-1's values, not merely a pair of functions that undo each other
    np.testing.assert_allclose(srgb_to_linear(np.array([0.5, 0.04045, 1.0])), [0.21404, 0.0031308, 1.0],
                               rtol=1e-4)
    np.testing.assert_allclose(linear_to_srgb(np.array([0.18, 0.0031308])), [0.46135, 0.04045], rtol=1e-4)


def _optical_axis_miss(c2w: np.ndarray, point: np.ndarray) -> np.ndarray:
    """``[N]`` distance from ``point [3]`` to each camera's optical axis (in front of it)."""
    forward = -c2w[:, :3, 2]
    along = np.einsum("ij,ij->i", point - c2w[:, :3, 3], forward)
    return np.linalg.norm(c2w[:, :3, 3] + along[:, None] * forward - point, axis=1)


def _check_handheld_arc(c2w: np.ndarray, rig: HandheldArc) -> None:
    """What makes the rig ``c2w [N, 4, 4]`` (canonical, frame order) a phone capture, not a ring."""
    center = np.array(rig.center)
    offsets = c2w[:, :3, 3] - center
    azimuth = np.degrees(np.unwrap(np.arctan2(offsets[:, 1], offsets[:, 0])))
    assert 150.0 < azimuth.max() - azimuth.min() < 220.0  # a partial arc...
    around = np.sort(np.mod(azimuth, 360.0))
    assert np.diff(np.append(around, around[0] + 360.0)).max() > 140.0  # ...leaving one side unvisited
    assert np.linalg.norm(offsets.mean(axis=0)[:2]) > 0.25  # the cameras' middle is not the objects'
    # Pitched down at the objects, except the frames looking off into the room at either end.
    middle = slice(len(rig.start_away), len(c2w) - len(rig.end_away))
    assert (c2w[middle, 2, 2] > math.sin(math.radians(12.0))).all()  # back axis up: looking down
    miss = _optical_axis_miss(c2w, center)
    assert (miss[middle] < 0.2).all() and np.median(miss[middle]) > 0.03
    assert (miss[[0, 1, -2, -1]] > 0.3).all()
    # Rolled a little, never level: the right axis leaves the horizontal plane by a few degrees.
    roll = np.degrees(np.arcsin(c2w[:, 2, 0]))
    assert roll.std() > 1.5 and np.abs(roll).max() < 12.0


def _file_cameras(root: Path) -> np.ndarray:
    """``[N, 4, 4]`` every split's loaded cameras, in frame (file) order."""
    frames = {}
    for split in SPLITS:
        loaded = load_split(root, split)
        for index, name in enumerate(loaded.names):
            frames[int(Path(name).stem.split("_")[-1])] = _c2w(loaded, index)
    return np.stack([frames[i] for i in sorted(frames)])


def test_the_phone_capture_is_a_tilted_partial_arc_aimed_beside_the_objects(scenes: dict[str, Path]) -> None:
    """Read back from the files: the up axis of the file's world is tilted 48 degrees (the cameras'
    vertical says so, their mean up is another 10 degrees and more off it); back in the scene's frame
    the rig is a 200-degree hand-held arc whose focus is beside the objects; and every seed's rig is."""
    scene, root = SUITE["tabletop"], scenes["tabletop"]
    recipe = scene.recipe
    assert isinstance(recipe, HandheldRecipe)
    placement = scene.placement
    files = _file_cameras(root)
    assert len(files) == recipe.rig.frames == 81
    # The files' frame: +z is not up. The vertical (the direction most perpendicular to every camera's
    # right axis) is the scene's up, 48 degrees from +z; the mean camera up is pulled off it by the pitch.
    vertical = np.linalg.svd(files[:, :3, 0])[2][-1]
    vertical *= np.sign(vertical @ files[:, :3, 1].mean(axis=0))
    assert math.degrees(math.acos(placement.up[2])) == pytest.approx(48.0)
    assert math.degrees(math.acos(np.clip(vertical @ placement.up, -1.0, 1.0))) < 1.0
    mean_up = files[:, :3, 1].mean(axis=0) / np.linalg.norm(files[:, :3, 1].mean(axis=0))
    assert math.degrees(math.acos(mean_up @ placement.up)) > 10.0
    canonical = np.stack([_to_canonical(scene, m) for m in files])
    np.testing.assert_allclose(canonical, recipe.poses(0), atol=2e-5)
    _check_handheld_arc(canonical, recipe.rig)
    # Where the training cameras' optical axes meet (the scene box's centre today) is not the objects'.
    train = load_split(root, "train")
    focus = focus_point(train.cameras).double().numpy()
    focus = placement.rotation.T @ (focus - np.array(placement.offset)) / placement.scale
    assert np.linalg.norm(focus - np.array(recipe.rig.center)) > 0.05
    for seed in range(1, 6):
        _check_handheld_arc(recipe.poses(seed), recipe.rig)


def test_the_held_out_capture_walks_all_the_way_round_in_landscape(scenes: dict[str, Path]) -> None:
    """``garden``, read back from the files: landscape photos of a wide lens, ``aabb_scale`` 8, the
    scene's up axis (the cameras' vertical) 75 degrees from the file's ``+z``, a walk that leaves no side
    of the statue unseen; instant-ngp's unit cube holds the statue and not the cameras, and its
    ``aabb_scale`` box holds the house front but not the sky."""
    scene, root = SUITE["garden"], scenes["garden"]
    recipe = scene.recipe
    assert isinstance(recipe, HandheldRecipe)
    placement = scene.placement
    meta = json.loads((root / "transforms.json").read_text())
    assert meta["aabb_scale"] == 8 and meta["w"] > meta["h"]
    fov = (math.degrees(meta["camera_angle_x"]), math.degrees(meta["camera_angle_y"]))
    assert fov == pytest.approx((64.0, 50.2), abs=0.5)
    files = _file_cameras(root)
    assert len(files) == recipe.rig.frames == 72
    vertical = np.linalg.svd(files[:, :3, 0])[2][-1]  # most perpendicular to every camera's right axis
    assert math.degrees(math.acos(abs(vertical[2]))) == pytest.approx(75.0, abs=1.0)
    assert math.degrees(math.acos(min(abs(float(vertical @ placement.up)), 1.0))) < 1.0
    canonical = np.stack([_to_canonical(scene, m) for m in files])
    np.testing.assert_allclose(canonical, recipe.poses(0), atol=2e-5)
    for seed in (0, 1, 2):
        offsets = recipe.poses(seed)[:, :3, 3] - np.array(recipe.rig.center)
        azimuth = np.degrees(np.unwrap(np.arctan2(offsets[:, 1], offsets[:, 0])))
        assert 320.0 < azimuth.max() - azimuth.min() < 360.0
        around = np.sort(np.mod(azimuth, 360.0))
        assert np.diff(np.append(around, around[0] + 360.0)).max() < 45.0  # no side left unvisited
    train = load_split(root, "train")
    assert train.ngp is not None and train.aabb_scale == 8
    box = train.ngp.box()
    # The statue (the plinth and the ball on it, standing on the centre's vertical), as the world builds
    # it: each one's reach along each file axis, both ways, lies inside the unit cube.
    center = np.array(recipe.rig.center)
    shapes = [(part.surface, _shape(part.surface)) for part in recipe.world().parts]
    statue = [surface for surface, shape in shapes if isinstance(shape, Sphere | OrientedBox)
              and np.hypot(*(shape.center - center)[:2]) < 0.01]
    assert len(statue) == 2
    _check_objects_in_cube_cameras_outside(statue, placement, train)
    house_front, sky = placement.points(np.array([[0.0, 5.0, 1.0], [0.0, -40.0, 1.0]]))
    assert _inside(house_front[None], box).all() and not _inside(sky[None], box).any()


def _shape(surface: Surface) -> Surface:
    """The geometry under any paint."""
    while isinstance(surface, Painted):
        surface = surface.shape
    return surface


def test_a_tilt_leans_the_up_axis_and_no_tilt_is_the_old_turn() -> None:
    tilted = Placement(2.0, (1.0, 2.0, 3.0), 115.0, 48.0, 200.0)
    rotation = tilted.rotation
    np.testing.assert_allclose(rotation.T @ rotation, np.eye(3), atol=1e-12)
    assert np.linalg.det(rotation) == pytest.approx(1.0)
    assert math.degrees(math.acos(tilted.up[2])) == pytest.approx(48.0)
    axis = np.array([math.cos(math.radians(200.0)), math.sin(math.radians(200.0)), 0.0])
    tilt = rotation @ _rotation("z", 115.0).T  # the tilt alone keeps its horizontal axis where it is
    np.testing.assert_allclose(tilt @ axis, axis, atol=1e-12)
    assert tilted.up @ axis == pytest.approx(0.0, abs=1e-12)
    above = tilted.points(np.array([[0.0, 0.0, 1.0]]))[0]  # a canonical unit up: scale x the up axis
    np.testing.assert_allclose(above, 2.0 * tilted.up + np.array([1.0, 2.0, 3.0]))
    assert np.array_equal(Placement(yaw_degrees=30.0).rotation, _rotation("z", 30.0))  # as before tilts


# ------------------------------------------------------------------- the loaded cameras see the render


@pytest.mark.parametrize("name", ["specular", "offcentre", "360", "tabletop", "garden", "forward"])
def test_loaded_rays_are_the_rendered_rays(scenes: dict[str, Path], name: str) -> None:
    """Pixel-centre rays of the loaded cameras (the loader's conventions, its LLFF normalisation undone),
    taken back to the canonical frame, are the rays the scene was rendered with."""
    scene, root = SUITE[name], scenes[name]
    split = load_split(root, "test")
    canonical = _canonical_poses(scene, split, "test")
    recipe = scene.recipe
    camera = recipe.camera(RESOLUTION)  # type: ignore[attr-defined]
    cams = split.cameras
    assert (float(cams.fx[0]), float(cams.fy[0]), float(cams.cx[0]), float(cams.cy[0])) == pytest.approx(
        (camera.fx, camera.fy, camera.cx, camera.cy), rel=1e-6)
    for index in range(len(split)):
        back = _to_canonical(scene, _to_file_world(split, _c2w(split, index)))
        np.testing.assert_allclose(back, canonical[index], atol=2e-5)
    cols, rows = pixel_grid(camera.width, camera.height)
    box = SceneBox(torch.full((3,), -1e4), torch.full((3,), 1e4))
    rays = generate_rays(cams, torch.zeros_like(cols), cols, rows, box, far=1.0)
    transform = _to_canonical(scene, _to_file_world(split, np.eye(4)))  # file/loader world -> canonical
    directions = rays.directions.double().numpy() @ transform[:3, :3].T
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    expected = (canonical[0][:3, :3] @ camera.directions(1).reshape(3, -1)).T
    np.testing.assert_allclose(directions, expected, atol=1e-5)


# ------------------------------------------------------------------------------ opaque scenes


@pytest.mark.parametrize("name", ["360", "360-small", "tabletop", "garden", "forward"])
def test_every_ray_of_an_opaque_scene_hits_something(scenes: dict[str, Path], name: str) -> None:
    scene, root = SUITE[name], scenes[name]
    recipe = scene.recipe
    assert isinstance(recipe, TransformsRecipe | ForwardRecipe)
    rendered = render_views(recipe.world(), recipe.poses(0), recipe.camera(RESOLUTION))
    assert (rendered.rgba[..., 3] == 1.0).all()
    assert np.isfinite(rendered.depth_range).all()
    for image in sorted((root / "images").iterdir()):
        with Image.open(image) as im:
            assert im.mode == "RGB"


def test_a_ray_that_sees_nothing_stops_an_opaque_scene(tmp_path: Path) -> None:
    world = outdoor_world(15.0, 4.0)
    kept = tuple(part for part in world.parts if not isinstance(getattr(part.surface, "shape", None), Dome))
    no_dome = World(parts=kept, sky=world.sky)
    recipe = RingRecipe(lambda: no_dome, SUITE["360"].placement, 16, frames=8)
    with pytest.raises(RuntimeError, match="see no surface"):
        recipe.make(tmp_path / "open", RESOLUTION, 0)
    assert not (tmp_path / "open").exists()


# ---------------------------------------------------------------------------------- view dependence


def _colours_seen(world: World, part: Part, point: np.ndarray, split: SceneSplit, scene: SuiteScene
                   ) -> tuple[np.ndarray, list[int]]:
    """Exact colours ``[V, 3]`` of ``point`` (on ``part``) seen from each loaded camera that sees it
    well (not grazing), and those cameras."""
    normal = part.surface.normal(point[:, None])[:, 0]
    colours, seen = [], []
    for index in range(len(split)):
        c2w = _to_canonical(scene, _c2w(split, index))
        towards = point - c2w[:3, 3]
        direction = towards / np.linalg.norm(towards)
        if -direction @ normal > 0.5 and suite_render.is_visible(world, c2w, point):
            colours.append(world.shade(part, point[:, None], direction[:, None])[:, 0])
            seen.append(index)
    return np.array(colours), seen


def test_the_specular_scene_changes_colour_with_the_view_direction(tmp_path: Path) -> None:
    """One point of each sphere, facing the light, seen by the loaded training cameras: the glossy and
    mirror-like spheres show it in very different colours, the matte one always in the same; the
    images show the glossy sphere's highlight where the exact colour has it."""
    scene = SUITE["specular"]
    root = scene.make(tmp_path / "specular", resolution=32)
    split = load_split(root, "train")
    world = specular_world()
    spheres = [part for part in world.parts if isinstance(part.surface, Sphere)]
    assert [part.material.view_dependent for part in spheres] == [True, True, False]
    for part in spheres:
        assert isinstance(part.surface, Sphere)
        point = part.surface.center + part.surface.radius * LIGHT_DIRECTION
        colours, seen = _colours_seen(world, part, point, split, scene)
        assert len(seen) >= 10
        spread = float((colours.max(axis=0) - colours.min(axis=0)).max())
        if part.material.view_dependent:
            assert spread > 0.3
        else:
            assert spread < 1e-12
    glossy = spheres[0]
    assert isinstance(glossy.surface, Sphere)
    point = glossy.surface.center + glossy.surface.radius * LIGHT_DIRECTION
    colours, seen = _colours_seen(world, glossy, point, split, scene)
    camera = BlenderRecipe.camera(32)
    greens = []
    for index in seen:
        (u, v), = suite_render.project(camera, _to_canonical(scene, _c2w(split, index)), point[None])[0]
        greens.append(float(split.images[index][int(v), int(u), 1]))
    highlight = colours[:, 1] > 0.6  # red albedo: green only comes from the white highlight
    assert 0 < highlight.sum() < len(seen)
    assert np.mean(np.array(greens)[highlight]) > np.mean(np.array(greens)[~highlight]) + 0.25


# ------------------------------------------------------------------------------------ the renderer


def _inside_the_cube() -> np.ndarray:
    """Cameras among the thin scene's wires: balls around them, beside them and behind them."""
    return np.stack([look_at(np.array([0.1, -0.1, 0.0]), np.array([-1.0, 0.6, -0.3])),
                     look_at(np.array([0.6, -0.5, -0.6]), np.array([0.75, -0.65, 1.0]) + 0.01)])


@pytest.mark.parametrize("name", ["thin", "360-small", "tabletop"])
def test_culling_changes_no_pixel(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Testing only the rays of each part's screen rectangle gives the images of testing every ray."""
    if name == "thin":
        world = thin_world()
        poses = np.concatenate([demo_scene.camera_poses("val", 4, 3), _inside_the_cube()])
    else:
        recipe = SUITE[name].recipe
        assert isinstance(recipe, TransformsRecipe)
        world, poses = recipe.world(), recipe.poses(2)[[0, 1, 20, 40, 79, 80]]
    camera = Pinhole(20.0, 20.0, 12.3, 9.1, 24, 18)
    culled = render_views(world, poses, camera, supersample=2)
    monkeypatch.setattr(suite_render, "hull_balls", lambda surface: None)
    every_ray = render_views(world, poses, camera, supersample=2)
    assert (culled.rgba[..., 3] > 0).mean() > 0.02
    np.testing.assert_array_equal(culled.rgba, every_ray.rgba)
    np.testing.assert_array_equal(culled.depth_range, every_ray.depth_range)


def test_disc_wall_and_dome_hits_are_exact() -> None:
    rng = np.random.default_rng(0)
    n = 2000
    directions = rng.normal(size=(3, n))
    directions /= np.linalg.norm(directions, axis=0)
    origins = rng.uniform(-0.5, 0.5, size=(3, n)) + np.array([[0.0], [0.0], [1.0]])
    up = np.array([0.0, 0.0, 1.0])
    disc = Disc(center=np.zeros(3), normal_vector=up, radius=2.0)
    t = disc.intersect(origins, directions)
    hit = np.isfinite(t)
    points = origins[:, hit] + t[hit] * directions[:, hit]
    np.testing.assert_allclose(points[2], 0.0, atol=1e-12)
    assert (np.hypot(points[0], points[1]) <= 2.0).all()
    # Exactly the downward rays that land within the radius hit; the face is one-sided.
    landing = origins - origins[2] / directions[2] * directions
    expected = (directions[2] < 0) & (np.hypot(landing[0], landing[1]) <= 2.0)
    np.testing.assert_array_equal(hit, expected)
    assert np.isinf(disc.intersect(-origins, -directions)[expected]).all()  # from below: no hit
    wall = Wall(point=np.zeros(3), normal_vector=up)
    np.testing.assert_array_equal(np.isfinite(wall.intersect(origins, directions)), directions[2] < 0)
    dome = Dome(center=np.array([0.1, -0.2, 0.3]), radius=3.0)
    t = dome.intersect(origins, directions)
    assert np.isfinite(t).all() and (t > 0).all()
    points = origins + t * directions
    np.testing.assert_allclose(np.linalg.norm(points - dome.center[:, None], axis=0), 3.0, rtol=1e-12)
    normals = dome.normal(points)
    assert (np.einsum("in,in->n", normals, directions) < 0).all()  # facing the rays, inwards


def test_principal_point_and_aspect_reach_the_pixels() -> None:
    """A point on the optical axis lands on ``(cx, cy)``, whatever the aspect ratio."""
    camera = Pinhole(30.0, 30.0, 17.2, 8.4, 36, 24)
    pose = np.eye(4)
    pose[:3, 3] = [1.0, 2.0, 3.0]
    pixels, depth = suite_render.project(camera, pose, np.array([[1.0, 2.0, -2.0]]))
    np.testing.assert_allclose(pixels[0], [17.2, 8.4])
    assert depth[0] == pytest.approx(5.0)
    directions = camera.directions(1)  # [3, H, W, 1]: pixel (col 17, row 8) is centred at (17.5, 8.5)
    expected = np.array([(17.5 - 17.2) / 30.0, -(8.5 - 8.4) / 30.0, -1.0])
    np.testing.assert_allclose(directions[:, 8, 17, 0], expected / np.linalg.norm(expected))
    assert math.isclose(float(np.linalg.norm(directions[:, 0, 0, 0])), 1.0)
