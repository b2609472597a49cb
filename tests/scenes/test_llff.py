"""LLFF loader (``poses_bounds.npy`` + ``images*/``) on a tiny synthetic capture, plus the fern capture."""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from nerf_lightning.cameras.geometry import Cameras, generate_rays, pixel_grid
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.scenes.bounds import scene_box_from_frustums
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.llff import llff_to_opengl, load_llff, split_of
from nerf_lightning.scenes.images import downscale as area_downscale
from nerf_lightning.scenes.loading import detect_format, load_split

FERN = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "fern"
FULL_W, FULL_H, FOCAL = 16, 12, 20.0
NUM = 9


# --------------------------------------------------------------------------------------------- helpers


def rotation_y(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def opengl_poses() -> np.ndarray:
    """``[9, 3, 4]`` OpenGL cameras on a 3x3 grid (spacing 2) at z = 5, looking down -z; camera 5 is
    turned 10 degrees about y."""
    poses = []
    for i in range(NUM):
        rotation = rotation_y(math.radians(10.0)) if i == 5 else np.eye(3)
        position = np.array([2.0 * (i % 3 - 1), 2.0 * (i // 3 - 1), 5.0])
        poses.append(np.concatenate([rotation, position[:, None]], axis=1))
    return np.stack(poses)


def to_llff(pose: np.ndarray) -> np.ndarray:
    """OpenGL ``[..., 3, 4]`` -> LLFF ``[..., 3, 4]`` (columns down, right, back, position)."""
    return np.stack([-pose[..., 1], pose[..., 0], pose[..., 2], pose[..., 3]], axis=-1)


def nears() -> np.ndarray:
    return 4.0 + 0.5 * np.arange(NUM)


def poses_bounds() -> np.ndarray:
    rows = []
    for i, pose in enumerate(opengl_poses()):
        hwf = np.array([[FULL_H], [FULL_W], [FOCAL]])
        matrix = np.concatenate([to_llff(pose), hwf], axis=1)
        rows.append(np.concatenate([matrix.reshape(-1), [nears()[i], 30.0 + i]]))
    return np.stack(rows)


def pixels(width: int, height: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def write_capture(root: Path, *, full: bool = True, half: bool = True) -> Path:
    """Poses plus images 16x12 in ``images/`` and (different content) 8x6 in ``images_2/``."""
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / "poses_bounds.npy", poses_bounds())
    for i in range(NUM):
        if full:
            (root / "images").mkdir(exist_ok=True)
            Image.fromarray(pixels(FULL_W, FULL_H, i)).save(root / "images" / f"IMG_{i:02d}.png")
        if half:
            (root / "images_2").mkdir(exist_ok=True)
            Image.fromarray(pixels(FULL_W // 2, FULL_H // 2, 100 + i)).save(root / "images_2" / f"im{i}.PNG")
    return root


def set_value(root: Path, row: int, column: int, value: float) -> None:
    array = np.load(root / "poses_bounds.npy")
    array[row, column] = value
    np.save(root / "poses_bounds.npy", array)


@contextmanager
def dataset_error(file: Path, frame: int | None, field: str | None, detail: str = "") -> Iterator[None]:
    """Expect a one-line DatasetError naming ``file``, ``frame`` and ``field`` (in that order)."""
    pattern = re.escape(str(file))
    if frame is not None:
        pattern += re.escape(f": frame {frame}")
    if field is not None:
        pattern += re.escape(f": field '{field}'")
    pattern += ": .*" + detail
    with pytest.raises(DatasetError, match=pattern) as info:
        yield
    assert "\n" not in str(info.value)


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    return write_capture(tmp_path / "scene")


def all_splits(root: Path, downscale: int = 2) -> dict[str, object]:
    return {s: load_llff(root, s, downscale=downscale) for s in ("train", "val", "test")}


# --------------------------------------------------------------------------------------------- conversion


def test_llff_to_opengl_hand_written() -> None:
    # LLFF columns: down = -z, right = +x, back = -y, position (1, 2, 3): a camera looking along +y
    # with +z up, i.e. OpenGL right +x, up +z, back -y.
    llff = np.array([[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, -1.0, 2.0], [-1.0, 0.0, 0.0, 3.0]])
    expected = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, -1.0, 2.0], [0.0, 1.0, 0.0, 3.0]])
    np.testing.assert_allclose(llff_to_opengl(llff), expected)
    np.testing.assert_allclose(llff_to_opengl(to_llff(opengl_poses())), opengl_poses())


def test_loader_recovers_opengl_poses_after_undoing_normalisation(capture: Path) -> None:
    written = opengl_poses()
    for split, scene in all_splits(capture).items():
        transform = scene.world_transform.double().numpy()
        rotation, offset = transform[:, :3], transform[:, 3]
        indices = [i for i in range(NUM) if split_of(i) == split]
        for row, i in enumerate(indices):
            c2w = scene.cameras.camera_to_world[row].double().numpy()
            np.testing.assert_allclose(rotation.T @ c2w[:, :3], written[i, :, :3], atol=1e-5)
            position = rotation.T @ (c2w[:, 3] - offset) / scene.world_scale
            np.testing.assert_allclose(position, written[i, :, 3], atol=1e-5)


def test_rescale_and_recentre(capture: Path) -> None:
    splits = all_splits(capture)
    train = splits["train"]
    assert train.world_scale == pytest.approx(1.0 / (4.0 * 0.75))
    assert train.depth_range == pytest.approx((1.0 / 0.75, (30.0 + NUM - 1) / 3.0))
    assert all(s.depth_range == train.depth_range for s in splits.values())
    cameras = [s.cameras for s in splits.values()]
    centers = torch.cat([c.centers for c in cameras]).double()
    forward = torch.cat([c.forward_axes for c in cameras]).double().mean(0)
    torch.testing.assert_close(centers.mean(0), torch.zeros(3, dtype=torch.float64), atol=1e-5, rtol=0)
    torch.testing.assert_close(forward / forward.norm(), torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64),
                               atol=1e-5, rtol=0)
    # grid spacing 2 (cameras 1 and 2 are both train) scaled by 1/3
    assert float((train.cameras.centers[1] - train.cameras.centers[0]).norm()) == pytest.approx(2.0 / 3.0)


def test_split_indices(capture: Path) -> None:
    splits = all_splits(capture)
    names = {s: [Path(n).name for n in scene.names] for s, scene in splits.items()}
    assert names["test"] == ["im0.PNG", "im8.PNG"]
    assert names["val"] == ["im4.PNG"]
    assert names["train"] == [f"im{i}.PNG" for i in (1, 2, 3, 5, 6, 7)]
    assert splits["train"].names[0] == "images_2/im1.PNG"


# ----------------------------------------------------------------------------------------------- images


def test_images_k_folder_and_focal_scaling(capture: Path) -> None:
    scene = load_llff(capture, "val", downscale=2)
    cams = scene.cameras
    assert scene.images[0].shape == (6, 8, 3)
    assert (cams.width[0].item(), cams.height[0].item()) == (8, 6)
    assert cams.fx[0].item() == pytest.approx(FOCAL / 2) and cams.fy[0].item() == pytest.approx(FOCAL / 2)
    assert (cams.cx[0].item(), cams.cy[0].item()) == (4.0, 3.0)
    assert not cams.distortion.any()
    expected = torch.from_numpy(pixels(8, 6, 100 + 4).astype(np.float32) / 255.0)
    torch.testing.assert_close(scene.images[0], expected)


def test_full_images_area_downscaled_when_images_k_absent(tmp_path: Path) -> None:
    root = write_capture(tmp_path / "scene", half=False)
    scene = load_llff(root, "val", downscale=2)
    assert scene.names == ["images/IMG_04.png"]
    full = torch.from_numpy(pixels(FULL_W, FULL_H, 4).astype(np.float32) / 255.0)
    torch.testing.assert_close(scene.images[0], area_downscale(full, 2))
    cams = scene.cameras
    assert (cams.width[0].item(), cams.height[0].item()) == (8, 6)
    assert (cams.fx[0].item(), cams.cx[0].item(), cams.cy[0].item()) == pytest.approx((FOCAL / 2, 4.0, 3.0))
    full_scene = load_llff(root, "val")
    assert full_scene.cameras.fx[0].item() == pytest.approx(FOCAL)


def test_finer_images_k_folder_is_downscaled_further(tmp_path: Path) -> None:
    root = write_capture(tmp_path / "scene")  # images/ (16x12) and images_2/ (8x6, other content)
    scene = load_llff(root, "val", downscale=4)
    assert scene.names == ["images_2/im4.PNG"]  # the finer folder, not the full images
    half = torch.from_numpy(pixels(FULL_W // 2, FULL_H // 2, 100 + 4).astype(np.float32) / 255.0)
    torch.testing.assert_close(scene.images[0], area_downscale(half, 2))
    cams = scene.cameras
    assert (cams.width[0].item(), cams.height[0].item()) == (4, 3)
    assert (cams.fx[0].item(), cams.cx[0].item(), cams.cy[0].item()) == pytest.approx((FOCAL / 4, 2.0, 1.5))


def test_detect_format_and_load_split(capture: Path) -> None:
    assert detect_format(capture) == "llff"
    assert len(load_split(capture, "test", downscale=2)) == 2


def test_datamodule_uses_frustum_box(capture: Path) -> None:
    data = NerfDataModule(root=str(capture), downscale=2, scene_box_scale=1.5)
    data.setup("validate")
    train = data.splits["train"]
    box = scene_box_from_frustums(train.cameras, *train.depth_range, scale=1.5)
    torch.testing.assert_close(data.scene_box.lower, box.lower)
    torch.testing.assert_close(data.scene_box.upper, box.upper)


# -------------------------------------------------------------------------------------------- frustums


def single_camera(rotation: np.ndarray, position: tuple[float, float, float]) -> Cameras:
    c2w = np.concatenate([rotation, np.array(position)[:, None]], axis=1)

    def one(value: float) -> torch.Tensor:
        return torch.tensor([value])

    return Cameras(camera_to_world=torch.tensor(c2w[None], dtype=torch.float32), fx=one(2.0), fy=one(2.0),
                   cx=one(2.0), cy=one(1.0), width=torch.tensor([4]), height=torch.tensor([2]),
                   distortion=torch.zeros(1, 4))


def test_scene_box_from_frustums_hand_computed() -> None:
    # 4x2 image, f = 2, centred principal point: at depth d the frustum spans x in [-d, d], y in [-d/2, d/2].
    box = scene_box_from_frustums(single_camera(np.eye(3), (0.0, 0.0, 0.0)), 1.0, 3.0)
    torch.testing.assert_close(box.lower, torch.tensor([-3.0, -1.5, -3.0]))
    torch.testing.assert_close(box.upper, torch.tensor([3.0, 1.5, -1.0]))
    # turned 90 degrees about y (looking along -x) and moved to (1, 2, 3): camera x -> world -z.
    turned = single_camera(rotation_y(math.pi / 2), (1.0, 2.0, 3.0))
    box = scene_box_from_frustums(turned, 1.0, 3.0)
    torch.testing.assert_close(box.lower, torch.tensor([-2.0, 0.5, 0.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(box.upper, torch.tensor([0.0, 3.5, 6.0]), atol=1e-6, rtol=0)
    scaled = scene_box_from_frustums(turned, 1.0, 3.0, scale=2.0)
    torch.testing.assert_close(scaled.lower, torch.tensor([-3.0, -1.0, -3.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(scaled.upper, torch.tensor([1.0, 5.0, 9.0]), atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------------------ errors


def test_error_missing_npy(tmp_path: Path) -> None:
    with dataset_error(tmp_path / "poses_bounds.npy", None, None, "file not found"):
        load_llff(tmp_path, "train")


def test_error_unreadable_npy(capture: Path) -> None:
    (capture / "poses_bounds.npy").write_bytes(b"not a numpy file")
    with dataset_error(capture / "poses_bounds.npy", None, None, "cannot be read"):
        load_llff(capture, "train", downscale=2)


def test_error_wrong_shape(capture: Path) -> None:
    np.save(capture / "poses_bounds.npy", poses_bounds()[:, :15])
    with dataset_error(capture / "poses_bounds.npy", None, None, r"shape \[9, 15\].*\[N, 17\]"):
        load_llff(capture, "train", downscale=2)


def test_error_non_finite(capture: Path) -> None:
    set_value(capture, 3, 16, float("nan"))
    with dataset_error(capture / "poses_bounds.npy", 3, "bounds", "finite"):
        load_llff(capture, "train", downscale=2)


def test_error_non_positive_hwf(capture: Path) -> None:
    set_value(capture, 2, 14, 0.0)  # focal
    with dataset_error(capture / "poses_bounds.npy", 2, "hwf", "positive"):
        load_llff(capture, "train", downscale=2)


@pytest.mark.parametrize(("near", "far"), [(0.0, 10.0), (-1.0, 10.0), (5.0, 5.0)])
def test_error_bad_bounds(capture: Path, near: float, far: float) -> None:
    set_value(capture, 1, 15, near)
    set_value(capture, 1, 16, far)
    with dataset_error(capture / "poses_bounds.npy", 1, "bounds", "0 < near < far"):
        load_llff(capture, "train", downscale=2)


def test_error_rotation_not_orthonormal(capture: Path) -> None:
    array = np.load(capture / "poses_bounds.npy")
    matrix = array[6, :15].reshape(3, 5)
    matrix[:, :3] *= 1.1
    array[6, :15] = matrix.reshape(-1)
    np.save(capture / "poses_bounds.npy", array)
    with dataset_error(capture / "poses_bounds.npy", 6, "pose", "rotation"):
        load_llff(capture, "train", downscale=2)


def test_error_image_folder_missing(tmp_path: Path) -> None:
    root = write_capture(tmp_path / "scene", full=False, half=False)
    with dataset_error(root / "images", None, "downscale", "folder not found"):
        load_llff(root, "train")
    with dataset_error(root / "images_4", None, "downscale", "folder not found"):
        load_llff(root, "train", downscale=4)


def test_error_only_downscaled_folder(tmp_path: Path) -> None:
    root = write_capture(tmp_path / "scene", full=False)
    with dataset_error(root / "images", None, "downscale", "images_2/.*downscale 2"):
        load_llff(root, "train")


def test_error_image_count_mismatch(capture: Path) -> None:
    (capture / "images_2" / "im3.PNG").unlink()
    with dataset_error(capture / "images_2", None, "file_path", "8 image.*9 pose"):
        load_llff(capture, "train", downscale=2)


def test_error_unreadable_image(capture: Path) -> None:
    (capture / "images_2" / "im2.PNG").write_bytes(b"not an image")
    with dataset_error(capture / "poses_bounds.npy", 2, "file_path", "cannot be decoded"):
        load_llff(capture, "train", downscale=2)


def test_error_image_aspect_mismatch(capture: Path) -> None:
    Image.fromarray(pixels(8, 8, 0)).save(capture / "images_2" / "im4.PNG")
    with dataset_error(capture / "poses_bounds.npy", 4, "hwf", "8x8 pixels"):
        load_llff(capture, "val", downscale=2)


def test_unknown_split(capture: Path) -> None:
    with pytest.raises(ValueError, match="split"):
        load_llff(capture, "training", downscale=2)


def test_ignores_non_image_files(capture: Path) -> None:
    (capture / "images_2" / "notes.txt").write_text("x")
    shutil.copy(capture / "images_2" / "im0.PNG", capture / "images_2" / "im0.tif")
    assert len(load_llff(capture, "test", downscale=2)) == 2


# -------------------------------------------------------------------------------------------------- fern


def test_fern() -> None:
    if not (FERN / "poses_bounds.npy").is_file():
        pytest.skip(f"{FERN} is not available")
    splits = all_splits(FERN, downscale=8)
    assert sum(len(s) for s in splits.values()) == 20
    train = splits["train"]
    assert train.depth_range[0] == pytest.approx(1.0 / 0.75)
    box = scene_box_from_frustums(train.cameras, *train.depth_range)
    for scene in splits.values():
        cams = scene.cameras
        assert all(image.shape == (378, 504, 3) for image in scene.images)
        assert (cams.width == 504).all() and (cams.height == 378).all()
        entry, exit_ = box.intersect(cams.centers, cams.forward_axes)
        assert (exit_ > entry.clamp_min(0.0)).all()
    cols, rows = pixel_grid(504, 378)
    rays = generate_rays(train.cameras, torch.zeros_like(cols), cols, rows, box)
    assert torch.isfinite(rays.origins).all() and torch.isfinite(rays.directions).all()
    assert torch.isfinite(rays.near).all() and torch.isfinite(rays.far).all()
    assert (rays.far > rays.near).all()


def test_a_capture_with_only_images_k_names_the_downscale_as_each_command_spells_it(capture: Path) -> None:
    shutil.rmtree(capture / "images")  # images_2/ only, as some LLFF downloads ship
    with pytest.raises(DatasetError, match="images_2/ holds images downscaled by 2") as refused:
        load_llff(capture, "train", downscale=1)
    assert "--data.downscale 2 for fit" in str(refused.value)
    assert "--downscale 2 for data validate" in str(refused.value)
