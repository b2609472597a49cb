"""The kornia peer baseline's scene export and camera conversion (no peer environment, no training).

The end-to-end check (builds the peer environment with kornia 0.8.2, trains, renders) is a script:
``python -m benchmarks.peer_kornia --scene demo --wall-s 60 --out bench_out/peer``.
"""

from __future__ import annotations

import ast
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from kornia.geometry.camera import PinholeCamera

from benchmarks import peer_kornia, peer_venv
from nerf_lightning.cameras.geometry import Cameras, generate_rays, pixel_grid
from nerf_lightning.core.types import SceneBox
from nerf_lightning.datasets.demo_scene import _first_hits, demo_shapes
from nerf_lightning.scenes.loading import load_split
from nerf_lightning.scenes.scene import PackedImages, SceneSplit

_BIG_BOX = SceneBox(torch.full((3,), -1.0e6), torch.full((3,), 1.0e6))


def _load_worker():
    spec = importlib.util.spec_from_file_location("kornia_nerf_train", peer_kornia.WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _exported_rays(c2w: np.ndarray, intrinsics: np.ndarray, camera: np.ndarray, cols: np.ndarray,
                   rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rays in scene.npz's documented convention (OpenCV camera-to-world, pixel centres at +0.5)."""
    fx, fy, cx, cy = (intrinsics[camera, i] for i in range(4))
    d_cam = np.stack([(cols + 0.5 - cx) / fx, (rows + 0.5 - cy) / fy, np.ones_like(fx)], axis=-1)
    d = np.einsum("nij,nj->ni", c2w[camera, :3, :3], d_cam)
    return c2w[camera, :3, 3], d / np.linalg.norm(d, axis=-1, keepdims=True)


def _random_split(seed: int = 0, count: int = 5, width: int = 40, height: int = 30) -> SceneSplit:
    """Cameras with random orientations and unequal, off-centre intrinsics (OpenGL convention)."""
    generator = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(count, 3, 3, generator=generator, dtype=torch.float64))
    rotations = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]
    rotations[torch.linalg.det(rotations) < 0, :, 0] *= -1.0
    centers = 3.0 * torch.randn(count, 3, generator=generator, dtype=torch.float64)
    cameras = Cameras(
        camera_to_world=torch.cat([rotations, centers[:, :, None]], dim=-1).float(),
        fx=torch.linspace(30.0, 55.0, count), fy=torch.linspace(33.0, 50.0, count),
        cx=torch.linspace(17.0, 23.5, count), cy=torch.linspace(12.0, 16.25, count),
        width=torch.full((count,), width), height=torch.full((count,), height),
        distortion=torch.zeros(count, 4),
    )
    images = [torch.rand(height, width, 3, generator=generator) for _ in range(count)]
    return SceneSplit(cameras=cameras, images=PackedImages.from_images(images),
                      names=[f"{i}.png" for i in range(count)], source="synthetic")


def _all_pixels(split: SceneSplit) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width, height = int(split.cameras.width[0]), int(split.cameras.height[0])
    cols, rows = pixel_grid(width, height)
    camera = torch.arange(len(split)).repeat_interleave(cols.shape[0])
    return camera, cols.repeat(len(split)), rows.repeat(len(split))


def test_exported_scene_reproduces_our_images_and_rays(tiny_scene: Path, tmp_path: Path) -> None:
    arrays = peer_kornia.export_scene("demo", tiny_scene, tmp_path / "scene.npz")
    with np.load(tmp_path / "scene.npz") as saved:
        assert set(arrays) == set(saved.files)
        assert str(saved["convention"]) == peer_kornia.SCENE_CONVENTION
    for split in ("train", "test"):
        loaded = load_split(tiny_scene, split, background=(1.0, 1.0, 1.0))
        images = arrays[f"{split}_images"]
        assert images.dtype == np.uint8 and images.shape == (len(loaded), 24, 24, 3)
        assert all(np.array_equal(images[i], loaded.images.uint8(i).numpy()) for i in range(len(loaded)))
        camera, cols, rows = _all_pixels(loaded)
        ours = generate_rays(loaded.cameras, camera, cols, rows, _BIG_BOX)
        origins, directions = _exported_rays(arrays[f"{split}_camera_to_world"],
                                             arrays[f"{split}_intrinsics"], camera.numpy(), cols.numpy(),
                                             rows.numpy())
        np.testing.assert_allclose(origins, ours.origins.numpy(), atol=1e-6)
        np.testing.assert_allclose(directions, ours.directions.numpy(), atol=1e-6)
        # The probes the worker checks kornia against are these same rays.
        pixels = arrays[f"probe_{split}_pixels"]
        probe_o, probe_d = _exported_rays(arrays[f"{split}_camera_to_world"], arrays[f"{split}_intrinsics"],
                                          pixels[:, 0], pixels[:, 1], pixels[:, 2])
        np.testing.assert_allclose(arrays[f"probe_{split}_origins"], probe_o, atol=1e-6)
        np.testing.assert_allclose(arrays[f"probe_{split}_directions"], probe_d, atol=1e-6)
    near, far = float(arrays["near"]), float(arrays["far"])
    # Demo cameras are 4 units from the origin and the scene box is about [-1.45, 1.45]^3.
    assert 0.5 < near < 4.0 - 1.45 < 4.0 + 1.45 < far < 8.0
    np.testing.assert_array_equal(arrays["background"], [1.0, 1.0, 1.0])


def test_exported_rays_hit_the_demo_objects_where_the_images_show_them(tiny_scene: Path,
                                                                        tmp_path: Path) -> None:
    """The demo scene's own ray tracer, on rays made from scene.npz alone: a pixel whose centre ray hits
    an object is never pure background (the centre is one of the 3x3 sub-samples of the rendering)."""
    arrays = peer_kornia.export_scene("demo", tiny_scene, tmp_path / "scene.npz")
    images = arrays["train_images"]
    count, height, width = images.shape[:3]
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    camera = np.repeat(np.arange(count), height * width)
    origins, directions = _exported_rays(arrays["train_camera_to_world"], arrays["train_intrinsics"], camera,
                                         np.tile(cols.reshape(-1), count), np.tile(rows.reshape(-1), count))
    _, shape_index = _first_hits(demo_shapes(), origins.T, directions.T)
    hit = shape_index >= 0
    background = (images.reshape(-1, 3) == 255).all(axis=-1)
    assert hit.sum() > 100
    assert not (hit & background).any()
    assert hit.sum() > 0.6 * (~background).sum()  # the rest: edge pixels covered by a few sub-samples


def test_kornia_conversion_gives_our_rays() -> None:
    """kornia.nerf's ray recipe (``RaySampler._calc_ray_params``: unproject the integer pixel position at
    ``min_depth`` and ``max_depth`` with ``PinholeCamera.unproject``; origin the first point, direction
    the difference) on the converted cameras gives our ray of that pixel, starting at depth ``near``."""
    worker = _load_worker()
    split = _random_split()
    arrays = peer_kornia.split_arrays("train", split)
    k, e = worker.kornia_camera_matrices(arrays["train_camera_to_world"], arrays["train_intrinsics"])
    camera, cols, rows = _all_pixels(split)
    ours = generate_rays(split.cameras, camera, cols, rows, _BIG_BOX)
    pinhole = PinholeCamera(torch.from_numpy(k)[camera], torch.from_numpy(e)[camera],
                            split.cameras.height[camera], split.cameras.width[camera])
    pixels = torch.stack([cols, rows], dim=-1).double()[:, None]  # kornia.nerf: integer positions, no +0.5
    near, far = 0.7, 5.0
    p_near = pinhole.unproject(pixels, torch.full((len(camera), 1, 1), near, dtype=torch.float64))[:, 0]
    p_far = pinhole.unproject(pixels, torch.full((len(camera), 1, 1), far, dtype=torch.float64))[:, 0]
    distance, angle = worker.ray_mismatch(p_near.numpy(), (p_far - p_near).numpy(),
                                          ours.origins.double().numpy(), ours.directions.double().numpy())
    assert distance < 1e-5 and angle < 1e-5
    # The segment runs from depth `near` to depth `far` along each camera's optical axis.
    forward = -split.cameras.camera_to_world[camera, :, 2].double()
    centers = ours.origins.double()
    torch.testing.assert_close(((p_near - centers) * forward).sum(-1), torch.full((len(camera),), near,
                                                                                 dtype=torch.float64))
    torch.testing.assert_close(((p_far - centers) * forward).sum(-1), torch.full((len(camera),), far,
                                                                                dtype=torch.float64))


def test_ray_mismatch_detects_half_a_pixel() -> None:
    worker = _load_worker()
    split = _random_split(seed=1)
    arrays = peer_kornia.split_arrays("train", split)
    shifted = arrays["train_intrinsics"].copy()
    shifted[:, 2] += 0.5  # kornia's cx without the half-pixel correction
    camera, cols, rows = (t.numpy() for t in _all_pixels(split))
    c2w = arrays["train_camera_to_world"]
    ours_o, ours_d = _exported_rays(c2w, arrays["train_intrinsics"], camera, cols, rows)
    bad_o, bad_d = _exported_rays(c2w, shifted, camera, cols, rows)
    _, angle = worker.ray_mismatch(bad_o, bad_d, ours_o, ours_d)
    assert angle > 0.5 / 55.0 * 0.5  # half a pixel at the longest focal length, with margin
    assert worker.ray_mismatch(ours_o, ours_d, ours_o, ours_d) == pytest.approx((0.0, 0.0), abs=1e-12)


def test_split_arrays_refuses_distortion() -> None:
    split = _random_split()
    cameras = split.cameras
    split.cameras = Cameras(cameras.camera_to_world, cameras.fx, cameras.fy, cameras.cx, cameras.cy,
                            cameras.width, cameras.height, torch.full_like(cameras.distortion, 0.01))
    with pytest.raises(ValueError, match="distortion"):
        peer_kornia.split_arrays("train", split)


def test_depth_range_prefers_the_loaders() -> None:
    split = _random_split()
    split.depth_range = (1.25, 9.5)
    settings = peer_kornia.data_settings(peer_kornia.SCENES["fern"]["config"])
    assert settings["downscale"] == 8
    assert peer_kornia.depth_range(split, settings) == (1.25, 9.5)


def test_score_predictions_is_the_per_image_mean_psnr() -> None:
    generator = np.random.default_rng(0)
    targets = generator.integers(0, 256, size=(3, 8, 9, 3), dtype=np.uint8)
    noise = np.array([0.01, 0.05, 0.2])[:, None, None, None] * generator.standard_normal(targets.shape)
    predictions = np.clip(targets / 255.0 + noise, 0.0, 1.0).astype(np.float32)
    expected = np.mean([-10.0 * math.log10(float(np.mean((p.astype(np.float64) - t / 255.0) ** 2)))
                        for p, t in zip(predictions, targets, strict=True)])
    scores = peer_kornia.score_predictions(predictions, targets)
    assert scores["psnr"] == pytest.approx(expected, abs=1e-3)
    assert 0.0 < scores["ssim"] < 1.0


def test_worker_does_not_import_nerf_lightning() -> None:
    tree = ast.parse(peer_kornia.WORKER.read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.split(".")[0] in ("nerf_lightning", "benchmarks") for name in imported)
    assert "kornia.nerf.nerf_solver" in imported  # kornia's own solver trains


def test_run_peer_skips_an_absent_scene_without_building(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    fern = {**peer_kornia.SCENES["fern"], "root": tmp_path / "absent"}
    monkeypatch.setitem(peer_kornia.SCENES, "fern", fern)
    venv = tmp_path / "venv"
    assert peer_kornia.run_peer("fern", tmp_path / "out", 1.0, venv=venv, verbose=False) is None
    assert not venv.exists() and not (tmp_path / "out").exists()


def test_peer_venv_needs_its_marker(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    assert not peer_venv.peer_venv_ready(venv)
    (venv / peer_venv.READY_MARKER).write_text("{}")
    assert peer_venv.peer_venv_ready(venv)
    other = tmp_path / "not-a-venv"
    other.mkdir()
    (other / "precious.txt").write_text("keep")
    with pytest.raises(FileExistsError):
        peer_venv.ensure_peer_venv(other)
    assert (other / "precious.txt").read_text() == "keep"
