"""Tests of the procedural demo scene: files, determinism, alpha, exactness against the ray
conventions, coverage, and the completeness check."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from nerf_lightning.datasets import demo_scene as ds
from nerf_lightning.datasets.demo_scene import is_demo_scene_complete, make_demo_scene

COUNTS = {"train": 4, "val": 2, "test": 2}


def _make(root: Path, seed: int = 0, resolution: int = 32) -> Path:
    return make_demo_scene(root, seed=seed, num_train=COUNTS["train"], num_val=COUNTS["val"],
                           num_test=COUNTS["test"], resolution=resolution)


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make(tmp_path_factory.mktemp("demo") / "scene")


@pytest.fixture(scope="module")
def scene64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make(tmp_path_factory.mktemp("demo64") / "scene", resolution=64)


def _load(root: Path, split: str) -> tuple[dict, list[np.ndarray]]:
    """The split's JSON and its images as ``[H, W, 4]`` uint8 arrays."""
    meta = json.loads((root / f"transforms_{split}.json").read_text())
    images = [np.asarray(Image.open(root / f"{f['file_path']}.png")) for f in meta["frames"]]
    return meta, images


def _pixel_rays(c2w: np.ndarray, width: int, height: int, angle_x: float, du: float, dv: float
                ) -> np.ndarray:
    """``[H, W, 3]`` unit world directions through ``(col + du, row + dv)``, by the conventions
    written out by hand."""
    f = 0.5 * width / math.tan(0.5 * angle_x)
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    d = np.stack([(cols + du - width / 2) / f, -(rows + dv - height / 2) / f, -np.ones(rows.shape)], -1)
    d = d @ c2w[:3, :3].T
    return d / np.linalg.norm(d, axis=-1, keepdims=True)


def _ray_hits_ball(origin: np.ndarray, dirs: np.ndarray, center: np.ndarray, radius: float) -> np.ndarray:
    """``[...]`` whether rays ``[..., 3]`` from ``origin`` (outside the ball) hit it in front."""
    oc = center - origin
    along = dirs @ oc
    dist2 = oc @ oc - along**2
    return (along > 0) & (dist2 < radius**2)


# ----------------------------------------------------------------------------- files and JSON


def test_files_and_json_structure(scene: Path) -> None:
    for split, count in COUNTS.items():
        meta, images = _load(scene, split)
        assert set(meta) == {"camera_angle_x", "frames"}
        assert meta["camera_angle_x"] == pytest.approx(0.6911112070083618, abs=0)
        assert len(meta["frames"]) == count
        assert sorted(p.name for p in (scene / split).iterdir()) == sorted(f"r_{i}.png" for i in range(count))
        for i, frame in enumerate(meta["frames"]):
            assert frame["file_path"] == f"./{split}/r_{i}"
            m = np.array(frame["transform_matrix"])
            assert m.shape == (4, 4)
            np.testing.assert_allclose(m[3], [0, 0, 0, 1])
            np.testing.assert_allclose(m[:3, :3].T @ m[:3, :3], np.eye(3), atol=1e-12)
            assert np.linalg.det(m[:3, :3]) == pytest.approx(1.0)
            position = m[:3, 3]
            assert np.linalg.norm(position) == pytest.approx(4.0)
            # Looks at the origin along its -z, with the camera's x axis horizontal (world z up).
            np.testing.assert_allclose(-m[:3, 2], -position / 4.0, atol=1e-12)
            assert abs(m[2, 0]) < 1e-12 and m[2, 1] > 0
            elevation = math.degrees(math.asin(position[2] / 4.0))
            assert -15.0 - 1e-9 <= elevation <= 85.0 + 1e-9
        for image in images:
            assert image.shape == (32, 32, 4) and image.dtype == np.uint8
        for frame in meta["frames"]:
            with Image.open(scene / f"{frame['file_path']}.png") as im:
                assert im.mode == "RGBA" and im.format == "PNG"
    assert not [p for p in scene.parent.iterdir() if p.name.startswith(".")], "temporary dirs left"


def test_val_and_test_views_differ_from_train(scene: Path) -> None:
    positions = {
        split: np.array([np.array(f["transform_matrix"])[:3, 3] for f in _load(scene, split)[0]["frames"]])
        for split in COUNTS
    }
    for split in ("val", "test"):
        gaps = np.linalg.norm(positions[split][:, None] - positions["train"][None], axis=-1)
        assert gaps.min() > 1e-3
    assert np.linalg.norm(positions["val"][:, None] - positions["test"][None], axis=-1).min() > 1e-3


def test_train_cameras_are_spread() -> None:
    poses = ds.camera_poses("train", 100, seed=0)
    z = poses[:, 2, 3] / 4.0
    # Golden spiral: elevations fill the band, azimuths cover all directions.
    assert z.min() < math.sin(math.radians(-10)) and z.max() > math.sin(math.radians(80))
    azimuth = np.arctan2(poses[:, 1, 3], poses[:, 0, 3])
    assert np.histogram(azimuth, bins=8, range=(-math.pi, math.pi))[0].min() >= 6


# ----------------------------------------------------------------------------- determinism


def _all_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_deterministic_by_seed(scene: Path, tmp_path: Path) -> None:
    same = _all_bytes(_make(tmp_path / "same"))
    assert same == _all_bytes(scene)
    other = _all_bytes(_make(tmp_path / "other", seed=1))
    assert set(other) == set(same)
    for split in COUNTS:
        assert all(other[k] != same[k] for k in same if k.startswith(split) and k.endswith(".png"))


def test_overwrite_and_refuse_foreign_dir(tmp_path: Path) -> None:
    root = make_demo_scene(tmp_path / "scene", num_train=2, num_val=1, num_test=1, resolution=8)
    make_demo_scene(root, seed=3, num_train=1, num_val=1, num_test=1, resolution=8)
    assert is_demo_scene_complete(root)
    assert not (root / "train" / "r_1.png").exists()  # replaced, not merged
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        make_demo_scene(tmp_path / "mine", num_train=1, num_val=1, num_test=1, resolution=8)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "scene"]


# ----------------------------------------------------------------------------- alpha


def test_transparent_background_and_antialiased_edges(scene64: Path) -> None:
    alphas = np.stack([image[..., 3] for split in COUNTS for image in _load(scene64, split)[1]])
    assert (alphas[:, [0, 0, -1, -1], [0, -1, 0, -1]] == 0).all()
    assert (alphas == 255).any() and (alphas == 0).any()
    fractional = (alphas > 0) & (alphas < 255)
    assert fractional.sum() > 50
    # Coverage comes in steps of 1/9 (3x3 supersampling).
    steps = np.round(alphas.astype(np.float64) / 255 * ds.SUPERSAMPLE**2)
    np.testing.assert_allclose(alphas, np.round(steps / ds.SUPERSAMPLE**2 * 255))
    images = np.stack([image for split in COUNTS for image in _load(scene64, split)[1]])
    assert (images[alphas == 0][:, :3] == 0).all()


# ----------------------------------------------------------------------------- exactness


def test_content_inside_box_and_content_ball() -> None:
    for shape in ds.demo_shapes():
        if isinstance(shape, ds.Sphere):
            extremes = [shape.center + s * shape.radius * e for e in np.eye(3) for s in (-1, 1)]
            reach = np.linalg.norm(shape.center) + shape.radius
        elif isinstance(shape, ds.Capsule):
            extremes = [p + s * shape.radius * e
                        for p in (shape.a, shape.b) for e in np.eye(3) for s in (-1, 1)]
            reach = max(np.linalg.norm(shape.a), np.linalg.norm(shape.b)) + shape.radius
        else:
            signs = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1)
            corners = shape.rotation @ (signs * shape.half_extents[:, None]) + shape.center[:, None]
            extremes = list(corners.T)
            reach = np.linalg.norm(corners, axis=0).max()
        assert np.abs(np.array(extremes)).max() < 1.5
        assert reach < ds.CONTENT_RADIUS


def test_pixels_match_analytic_rays(scene: Path) -> None:
    """Pixels whose whole footprint sees the big sphere are opaque (the centre pixel always
    does); pixels whose whole footprint misses the ball holding all content are transparent."""
    big = ds.demo_shapes()[0]
    assert isinstance(big, ds.Sphere) and big.radius == pytest.approx(0.45)
    checked_opaque = checked_empty = 0
    for split in COUNTS:
        meta, images = _load(scene, split)
        angle_x = meta["camera_angle_x"]
        for frame, image in zip(meta["frames"], images, strict=True):
            c2w = np.array(frame["transform_matrix"])
            origin = c2w[:3, 3]
            h, w = image.shape[:2]
            corners = [_pixel_rays(c2w, w, h, angle_x, du, dv) for du in (0, 1) for dv in (0, 1)]
            # The sphere's silhouette is convex, so four corners inside means the whole pixel is.
            inside = np.all([_ray_hits_ball(origin, d, big.center, big.radius) for d in corners], axis=0)
            assert inside[h // 2, w // 2], "the centre ray always passes through the big sphere"
            assert (image[..., 3][inside] == 255).all()
            checked_opaque += int(inside.sum())
            # A ray at angle theta from the view axis passes 4 sin(theta) from the origin; every ray
            # of a pixel is within the half-diagonal of the pixel's centre ray.
            centre = _pixel_rays(c2w, w, h, angle_x, 0.5, 0.5)
            theta = np.arccos(np.clip(centre @ (-c2w[:3, 2]), -1, 1))
            half_diagonal = math.atan(math.sqrt(0.5) / (0.5 * w / math.tan(0.5 * angle_x)))
            empty = 4.0 * np.sin(theta - half_diagonal) > ds.CONTENT_RADIUS
            assert (image[..., 3][empty] == 0).all()
            checked_empty += int(empty.sum())
    assert checked_opaque > 100 and checked_empty > 50


@pytest.mark.parametrize("index", [0, 1, 3, 4, 13])
def test_shape_intersections_are_exact(index: int) -> None:
    """Analytic first hits agree with the shapes' signed distances: the hit point lies on the
    surface, no earlier point along the ray is inside, missed rays never go inside, and the
    shading normal is the distance gradient."""
    shape = ds.demo_shapes()[index]
    center, radius = shape.bounding_sphere
    rng = np.random.default_rng(index)
    n = 400
    origins = rng.normal(size=(3, n))
    origins = center[:, None] + 4.0 * origins / np.linalg.norm(origins, axis=0)
    targets = center[:, None] + rng.uniform(-1.2, 1.2, size=(3, n)) * radius
    if isinstance(shape, ds.Capsule):  # aim near the thin segment, some rays nearly along it
        along = rng.uniform(-0.1, 1.1, size=n)
        targets = shape.a[:, None] + along * (shape.b - shape.a)[:, None] + rng.normal(
            scale=1.5 * shape.radius, size=(3, n))
        targets[:, :40] = shape.b[:, None] + rng.normal(scale=0.01, size=(3, 40))
        origins[:, :40] = shape.a[:, None] + 3.0 * (shape.a - shape.b)[:, None] + rng.normal(
            scale=0.02, size=(3, 40))
    directions = targets - origins
    directions /= np.linalg.norm(directions, axis=0)
    t = shape.intersect(origins, directions)
    hit = np.isfinite(t)
    assert 0.2 * n < hit.sum() < n
    points = origins[:, hit] + t[hit] * directions[:, hit]
    np.testing.assert_allclose(shape.sdf(points), 0.0, atol=1e-9)
    # Dense samples along each ray up to the hit (or through the bounding ball) stay outside.
    far = np.where(hit, t, np.linalg.norm(origins - center[:, None], axis=0) + radius)
    fractions = np.linspace(0.0, 1.0, 3001)[:-1]
    samples = origins[:, :, None] + directions[:, :, None] * (far[:, None] * fractions[None, :])
    depths = shape.sdf(samples.reshape(3, -1)).reshape(n, -1)
    assert (depths > -1e-9).all()
    # Normals: unit length and equal to the central-difference gradient of the distance.
    normals = shape.normal(points)
    np.testing.assert_allclose(np.linalg.norm(normals, axis=0), 1.0, atol=1e-9)
    eps = 1e-6
    grad = np.stack([(shape.sdf(points + eps * e[:, None]) - shape.sdf(points - eps * e[:, None])) / (2 * eps)
                     for e in np.eye(3)])
    np.testing.assert_allclose(normals, grad, atol=1e-4)
    assert (np.einsum("in,in->n", normals, directions[:, hit]) < 0).all()


# ----------------------------------------------------------------------------- coverage


def test_training_coverage(scene: Path) -> None:
    alphas = np.stack([image[..., 3] for image in _load(scene, "train")[1]])
    opaque = float((alphas == 255).mean())
    assert 0.05 < opaque < 0.60
    # Content is spread out: opaque pixels are not all in the middle of the image.
    rows, cols = np.nonzero(alphas.max(axis=0) == 255)
    assert np.ptp(rows) > 0.5 * alphas.shape[1] and np.ptp(cols) > 0.5 * alphas.shape[2]


# ----------------------------------------------------------------------------- completeness


def test_is_demo_scene_complete(tmp_path: Path) -> None:
    assert not is_demo_scene_complete(tmp_path / "missing")
    root = _make(tmp_path / "scene", resolution=8)
    assert is_demo_scene_complete(root)
    (root / "val" / "r_1.png").unlink()
    assert not is_demo_scene_complete(root)
    root = _make(tmp_path / "scene2", resolution=8)
    (root / "transforms_test.json").write_text("{not json")
    assert not is_demo_scene_complete(root)
