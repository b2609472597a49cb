"""Blender and nerfstudio loaders on tiny synthetic datasets written to ``tmp_path``."""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.blender import load_blender
from nerf_lightning.scenes.formats.nerfstudio import load_nerfstudio
from nerf_lightning.scenes.images import composite, downscale, load_image
from nerf_lightning.scenes.loading import detect_format, load_split
from tests.helpers.datasets import (
    ANGLE,
    names_of,
    pose,
    rgba_pixels,
    write_blender,
    write_image,
    write_json,
    write_nerfstudio,
)

# --------------------------------------------------------------------------------------------- helpers


@contextmanager
def dataset_error(file: str, frame: int | None, field: str | None, detail: str = "") -> Iterator[None]:
    """Expect a one-line DatasetError naming ``file``, ``frame`` and ``field`` (in that order)."""
    pattern = re.escape(file)
    if frame is not None:
        pattern += re.escape(f": frame {frame}")
    if field is not None:
        pattern += re.escape(f": field '{field}'")
    pattern += ": .*" + detail
    with pytest.raises(DatasetError, match=pattern) as info:
        yield
    assert "\n" not in str(info.value)


def set_frame(root: Path, name: str, index: int, **fields: Any) -> None:
    """Change (``None`` removes) fields of frame ``index`` of ``root/name``."""
    meta = json.loads((root / name).read_text())
    for key, value in fields.items():
        if value is None:
            meta["frames"][index].pop(key, None)
        else:
            meta["frames"][index][key] = value
    write_json(root / name, meta)


def set_top(root: Path, name: str, **fields: Any) -> None:
    meta = json.loads((root / name).read_text())
    for key, value in fields.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    write_json(root / name, meta)


# ------------------------------------------------------------------------------------------------ images


def test_load_image_modes(tmp_path: Path) -> None:
    gray16 = np.array([[0, 65535], [32768, 1000]], dtype=np.uint16)
    Image.fromarray(gray16).save(tmp_path / "g16.png")
    image = load_image(tmp_path / "g16.png", file_for_errors="t.json", frame=0)
    assert image.shape == (2, 2, 3) and image.dtype == torch.float32
    torch.testing.assert_close(image[..., 1], torch.from_numpy(gray16.astype(np.float32) / 65535.0))

    Image.fromarray(np.array([[0, 255]], dtype=np.uint8), mode="L").save(tmp_path / "g8.png")
    assert load_image(tmp_path / "g8.png", file_for_errors="t.json", frame=0).tolist() == [
        [[0.0] * 3, [1.0] * 3]
    ]

    Image.fromarray(np.array([[[10, 0], [20, 255]]], dtype=np.uint8), mode="LA").save(tmp_path / "la.png")
    assert load_image(tmp_path / "la.png", file_for_errors="t.json", frame=0).shape == (1, 2, 4)

    palette = Image.new("P", (3, 2), 1)
    palette.putpalette([0, 0, 0, 255, 0, 0])
    palette.save(tmp_path / "p.png", transparency=0)
    assert load_image(tmp_path / "p.png", file_for_errors="t.json", frame=0).shape == (2, 3, 4)

    Image.fromarray(np.full((4, 5, 3), 200, dtype=np.uint8)).save(tmp_path / "c.jpg")
    jpeg = load_image(tmp_path / "c.jpg", file_for_errors="t.json", frame=0)
    assert jpeg.shape == (4, 5, 3) and abs(float(jpeg.mean()) - 200 / 255) < 0.02


def test_composite_and_downscale() -> None:
    rgb = torch.rand(5, 7, 3)
    assert composite(rgb, (0.0, 0.0, 0.0)) is rgb
    assert downscale(rgb, 1) is rgb
    small = downscale(rgb, 2)  # cropped to 4x6 then 2x2 means
    assert small.shape == (2, 3, 3)
    torch.testing.assert_close(small[1, 2], rgb[2:4, 4:6].mean(dim=(0, 1)))


# ----------------------------------------------------------------------------------------------- Blender


def test_blender_round_trip(tmp_path: Path) -> None:
    pixels = write_blender(tmp_path)
    split = load_blender(tmp_path, "train")
    assert len(split) == 3
    assert split.names == ["train/r_0.png", "train/r_1.png", "train/r_2.png"]
    assert split.source == str(tmp_path / "transforms_train.json")
    cams = split.cameras
    focal = 0.5 * 8 / math.tan(ANGLE / 2)
    torch.testing.assert_close(cams.fx, torch.full((3,), focal))
    torch.testing.assert_close(cams.fy, torch.full((3,), focal))
    assert cams.cx.tolist() == [4.0] * 3 and cams.cy.tolist() == [3.0] * 3
    assert cams.width.tolist() == [8] * 3 and cams.height.tolist() == [6] * 3
    assert not cams.distortion.any()
    for i in range(3):
        expected = torch.tensor(pose(0.3 * i, (i, 0.5, 4.0)), dtype=torch.float32)[:3]
        torch.testing.assert_close(cams.camera_to_world[i], expected)

    for background in [(1.0, 1.0, 1.0), (0.0, 0.0, 0.0)]:
        split = load_blender(tmp_path, "train", background=background)
        for image, p in zip(split.images, pixels, strict=True):
            assert image.shape == (6, 8, 3) and image.dtype == torch.float32
            rgb = torch.from_numpy(p[..., :3].astype(np.float32) / 255.0)
            alpha = p[..., 3]
            opaque, clear, half = alpha == 255, alpha == 0, alpha == 128
            assert torch.equal(image[opaque], rgb[opaque])
            assert torch.equal(image[clear], torch.tensor(background).expand(int(clear.sum()), 3))
            a = 128 / 255
            torch.testing.assert_close(image[half], rgb[half] * a + torch.tensor(background) * (1 - a))


def test_blender_downscale(tmp_path: Path) -> None:
    write_blender(tmp_path)
    full = load_blender(tmp_path, "train", background=(0.0, 0.0, 0.0))
    half = load_blender(tmp_path, "train", background=(0.0, 0.0, 0.0), downscale=2)
    torch.testing.assert_close(half.cameras.fx, full.cameras.fx / 2)
    assert half.cameras.cx.tolist() == [2.0] * 3 and half.cameras.cy.tolist() == [1.5] * 3
    assert half.cameras.width.tolist() == [4] * 3 and half.cameras.height.tolist() == [3] * 3
    for small, big in zip(half.images, full.images, strict=True):
        assert small.shape == (3, 4, 3)
        expected = big.reshape(3, 2, 4, 2, 3).mean(dim=(1, 3))
        torch.testing.assert_close(small, expected)


def test_blender_images_of_different_sizes(tmp_path: Path) -> None:
    write_blender(tmp_path)
    write_image(tmp_path / "train" / "r_1.png", rgba_pixels(16, 12, 7))  # the split's aspect ratio: a warning
    warning = r"1 image\(s\) of another size than the split's 8x6.*r_1\.png' 16x12"
    with pytest.warns(UserWarning, match=warning):
        split = load_blender(tmp_path, "train")
    assert split.cameras.width.tolist() == [8, 16, 8] and split.cameras.height.tolist() == [6, 12, 6]
    assert split.images[1].shape == (12, 16, 3)
    torch.testing.assert_close(split.cameras.fx[1], torch.tensor(0.5 * 16 / math.tan(ANGLE / 2)))
    write_image(tmp_path / "train" / "r_1.png", rgba_pixels(12, 4, 7))  # another aspect ratio: refused
    refused = r"'train/r_1\.png' is 12x4 pixels but the split's images are 8x6 \(2 of 3, e\.g\. 'train/r_0"
    with dataset_error("transforms_train.json", 1, "file_path", refused):
        load_blender(tmp_path, "train")


def test_load_split_detects_formats(tmp_path: Path) -> None:
    write_blender(tmp_path / "b")
    write_nerfstudio(tmp_path / "n", names_of(3))
    assert detect_format(tmp_path / "b") == "blender"
    assert detect_format(tmp_path / "n") == "nerfstudio"
    assert len(load_split(tmp_path / "b", "train")) == 3
    assert len(load_split(str(tmp_path / "n"), "train", dataset_format="nerfstudio")) == 2
    (tmp_path / "empty").mkdir()
    with dataset_error("empty", None, None, "transforms_train.json"):
        detect_format(tmp_path / "empty")
    with pytest.raises(ValueError, match="dataset_format"):
        load_split(tmp_path / "b", "train", dataset_format="colmap")


# -------------------------------------------------------------------------------------------- nerfstudio


def test_nerfstudio_intrinsics_and_overrides(tmp_path: Path) -> None:
    names = names_of(3)
    meta = {"k1": 0.1, "k2": 0.01, "p1": 0.001, "p2": -0.002, "train_filenames": names}
    overrides = {1: {"fl_x": 30.0, "fl_y": 25.0, "cx": 4.0, "w": 12, "h": 6, "k1": -0.05}}
    write_nerfstudio(tmp_path, names, meta, frame_extra=overrides)
    split = load_nerfstudio(tmp_path, "train")
    cams = split.cameras
    assert split.names == names
    assert cams.fx.tolist() == [20.0, 30.0, 20.0]
    assert cams.fy.tolist() == [20.0, 25.0, 20.0]  # fl_y defaults to fl_x
    assert cams.cx.tolist() == [5.0, 4.0, 5.0]
    assert cams.cy.tolist() == [4.0, 3.0, 4.0]
    assert cams.width.tolist() == [10, 12, 10] and cams.height.tolist() == [8, 6, 8]
    torch.testing.assert_close(cams.distortion[0, :4], torch.tensor([0.1, 0.01, 0.001, -0.002]))
    torch.testing.assert_close(cams.distortion[1, :4], torch.tensor([-0.05, 0.01, 0.001, -0.002]))
    assert split.images[1].shape == (6, 12, 3)
    torch.testing.assert_close(cams.camera_to_world[2], torch.tensor(pose(0.2), dtype=torch.float32)[:3])


def test_nerfstudio_size_from_image_and_angle(tmp_path: Path) -> None:
    write_nerfstudio(tmp_path, names_of(2), size=(10, 8))
    set_top(tmp_path, "transforms.json", fl_x=None, w=None, h=None, camera_angle_x=ANGLE)
    cams = load_nerfstudio(tmp_path, "train", downscale=2).cameras
    assert cams.width.tolist() == [5] and cams.height.tolist() == [4]
    torch.testing.assert_close(cams.fx, torch.tensor([0.25 * 10 / math.tan(ANGLE / 2)]))
    assert cams.cx.tolist() == [2.5] and cams.cy.tolist() == [2.0]


def test_nerfstudio_missing_images_one_warning(tmp_path: Path) -> None:
    names = names_of(16)
    missing = tuple(names[i] for i in (1, 5, 9))
    write_nerfstudio(tmp_path, names, skip=missing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        split = load_nerfstudio(tmp_path, "train")
    assert len(caught) == 1 and issubclass(caught[0].category, UserWarning)
    message = str(caught[0].message)
    assert "3 frame" in message and all(name in message for name in missing)
    assert not set(missing) & set(split.names)
    # the split rule applies to the 13 frames on disk
    existing = [n for n in names if n not in missing]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        test_names = load_nerfstudio(tmp_path, "test").names
        val_names = load_nerfstudio(tmp_path, "val").names
    assert test_names == [existing[0], existing[8]]
    assert val_names == [existing[4], existing[12]]


def test_nerfstudio_many_missing_images_are_elided(tmp_path: Path) -> None:
    names = names_of(14)
    write_nerfstudio(tmp_path, names, skip=tuple(names[:12]))
    with pytest.warns(UserWarning, match=r"12 frame.*frame_009\.png, \.\.\.") as record:
        load_nerfstudio(tmp_path, "train")
    assert len(record) == 1 and "frame_010" not in str(record[0].message)


def test_nerfstudio_deterministic_split(tmp_path: Path) -> None:
    names = names_of(17)
    shuffled = [names[i] for i in np.random.default_rng(0).permutation(17)]
    write_nerfstudio(tmp_path, shuffled)
    test = load_nerfstudio(tmp_path, "test")
    val = load_nerfstudio(tmp_path, "val")
    train = load_nerfstudio(tmp_path, "train")
    assert test.names == [names[0], names[8], names[16]]
    assert val.names == [names[4], names[12]]
    assert train.names == [n for i, n in enumerate(names) if i % 8 not in (0, 4)]
    # each camera keeps its own frame's pose (pose angle = 0.1 * JSON index)
    json_index = shuffled.index(names[8])
    torch.testing.assert_close(
        test.cameras.camera_to_world[1], torch.tensor(pose(0.1 * json_index))[:3].float()
    )


def test_nerfstudio_explicit_filenames(tmp_path: Path) -> None:
    names = names_of(5)
    meta = {"train_filenames": [names[3], "./" + names[0]], "val_filenames": [names[1]], "test_filenames": []}
    write_nerfstudio(tmp_path, names, meta)
    assert load_nerfstudio(tmp_path, "train").names == [names[0], names[3]]
    assert load_nerfstudio(tmp_path, "val").names == [names[1]]
    with dataset_error("transforms.json", None, "test_filenames", "no frames"):
        load_nerfstudio(tmp_path, "test")


def test_nerfstudio_filename_list_errors(tmp_path: Path) -> None:
    names = names_of(3)
    write_nerfstudio(tmp_path, names, {"train_filenames": [names[0], "images/nope.png"]})
    with dataset_error("transforms.json", None, "train_filenames", "nope.png"):
        load_nerfstudio(tmp_path, "train")
    with dataset_error("transforms.json", None, "val_filenames", "missing"):
        load_nerfstudio(tmp_path, "val")


# ----------------------------------------------------------------------------------- DatasetError cases


def test_error_json_missing(tmp_path: Path) -> None:
    with dataset_error("transforms_train.json", None, None, "not found"):
        load_blender(tmp_path, "train")
    with dataset_error("transforms.json", None, None, "not found"):
        load_nerfstudio(tmp_path, "train")


def test_error_json_unparsable(tmp_path: Path) -> None:
    (tmp_path / "transforms_train.json").write_text('{\n  "camera_angle_x": 0.5,\n  "frames": [,]\n}')
    with dataset_error("transforms_train.json", None, None, "not valid JSON.*line 3 column 14"):
        load_blender(tmp_path, "train")


def test_error_top_level_not_object(tmp_path: Path) -> None:
    write_json(tmp_path / "transforms.json", [1, 2])
    with dataset_error("transforms.json", None, None, "expected a JSON object"):
        load_nerfstudio(tmp_path, "train")


@pytest.mark.parametrize("frames", [None, [], {"a": 1}], ids=["missing", "empty", "not-a-list"])
def test_error_frames(tmp_path: Path, frames: Any) -> None:
    write_blender(tmp_path)
    set_top(tmp_path, "transforms_train.json", frames=frames)  # None removes the key
    with dataset_error("transforms_train.json", None, "frames", "expected a non-empty list"):
        load_blender(tmp_path, "train")


def test_error_frame_not_object(tmp_path: Path) -> None:
    write_nerfstudio(tmp_path, names_of(3))
    meta = json.loads((tmp_path / "transforms.json").read_text())
    meta["frames"][1] = "images/frame_001.png"
    write_json(tmp_path / "transforms.json", meta)
    with dataset_error("transforms.json", 1, None, "expected an object"):
        load_nerfstudio(tmp_path, "train")


BAD_MATRICES = {
    "missing": (None, "missing"),
    "3x4": (pose()[:3], "4x4"),
    "ragged": ([[1, 0, 0, 0], [0, 1, 0], [0, 0, 1, 0], [0, 0, 0, 1]], "4x4"),
    "strings": ([["1", 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], "4x4"),
    "nan": ([[float("nan"), 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], "finite"),
    "last-row": ([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0.1, 1]], r"last row \[0, 0, 0, 1\]"),
    "shear": ([[1, 0.2, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], "rotation"),
    "scaled": ([[2, 0, 0, 0], [0, 2, 0, 0], [0, 0, 2, 0], [0, 0, 0, 1]], "uniform scale of 2"),
    "reflection": ([[-1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], "det"),
}


@pytest.mark.parametrize("case", list(BAD_MATRICES))
def test_error_transform_matrix(tmp_path: Path, case: str) -> None:
    matrix, detail = BAD_MATRICES[case]
    write_blender(tmp_path)
    if matrix is None:
        set_frame(tmp_path, "transforms_train.json", 1, transform_matrix=None)
    else:
        set_frame(tmp_path, "transforms_train.json", 1, transform_matrix=matrix)
    with dataset_error("transforms_train.json", 1, "transform_matrix", detail):
        load_blender(tmp_path, "train")


def test_error_transform_matrix_nerfstudio_frame_index(tmp_path: Path) -> None:
    write_nerfstudio(tmp_path, list(reversed(names_of(4))))  # JSON order differs from the sorted order
    set_frame(tmp_path, "transforms.json", 2, transform_matrix=[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]])
    with dataset_error("transforms.json", 2, "transform_matrix", "4x4"):
        load_nerfstudio(tmp_path, "train")


@pytest.mark.parametrize("angle", [None, 0.0, -0.3, math.pi, 4.0, "0.5"])
def test_error_camera_angle_x(tmp_path: Path, angle: Any) -> None:
    write_blender(tmp_path)
    meta = json.loads((tmp_path / "transforms_train.json").read_text())
    if angle is None:
        del meta["camera_angle_x"]
    else:
        meta["camera_angle_x"] = angle
    write_json(tmp_path / "transforms_train.json", meta)
    with dataset_error("transforms_train.json", None, "camera_angle_x", r"\(0, pi\)"):
        load_blender(tmp_path, "train")


def test_error_focal_missing(tmp_path: Path) -> None:
    write_nerfstudio(tmp_path, names_of(2))
    set_top(tmp_path, "transforms.json", fl_x=None)
    with dataset_error("transforms.json", 0, "fl_x", "missing"):
        load_nerfstudio(tmp_path, "train")


@pytest.mark.parametrize(
    ("field", "value"), [("fl_x", -20.0), ("fl_y", 0.0), ("w", 0), ("h", -8), ("w", 10.5)]
)
def test_error_intrinsics_not_positive(tmp_path: Path, field: str, value: float) -> None:
    write_nerfstudio(tmp_path, names_of(3))
    set_top(tmp_path, "transforms.json", **{field: value})
    with dataset_error("transforms.json", None, field, "positive"):
        load_nerfstudio(tmp_path, "train")
    # the same value as a per-frame override names the frame
    write_nerfstudio(tmp_path, names_of(3))
    set_frame(tmp_path, "transforms.json", 2, **{field: value})
    with dataset_error("transforms.json", 2, field, "positive"):
        load_nerfstudio(tmp_path, "train")


def test_error_unsupported_camera(tmp_path: Path) -> None:
    write_nerfstudio(tmp_path, names_of(2), {"camera_model": "EQUIRECTANGULAR"})
    with dataset_error("transforms.json", None, "camera_model", "OPENCV_FISHEYE.*EQUIRECTANGULAR"):
        load_nerfstudio(tmp_path, "train")
    # OPENCV has k3 (r^6) but not k4 (an r^8 term to nerfstudio, a rational one to OpenCV)
    write_nerfstudio(tmp_path, names_of(2), frame_extra={1: {"k4": 0.01}})
    with dataset_error("transforms.json", 1, "k4", "camera model OPENCV has k1, k2, p1, p2, k3"):
        load_nerfstudio(tmp_path, "train")
    write_nerfstudio(tmp_path, names_of(2), {"camera_model": "OPENCV_FISHEYE", "p1": 0.01})
    with dataset_error("transforms.json", None, "p1", "OPENCV_FISHEYE has k1, k2, k3, k4"):
        load_nerfstudio(tmp_path, "train")


@pytest.mark.parametrize("value", [None, 3, ""], ids=["missing", "number", "empty"])
def test_error_file_path_invalid(tmp_path: Path, value: Any) -> None:
    write_blender(tmp_path)
    meta = json.loads((tmp_path / "transforms_train.json").read_text())
    if value is None:
        del meta["frames"][2]["file_path"]
    else:
        meta["frames"][2]["file_path"] = value
    write_json(tmp_path / "transforms_train.json", meta)
    with dataset_error("transforms_train.json", 2, "file_path", "expected a path"):
        load_blender(tmp_path, "train")


def test_error_file_path_outside(tmp_path: Path) -> None:
    root = tmp_path / "scene"
    write_blender(root)
    write_image(tmp_path / "outside.png", rgba_pixels(8, 6, 9))
    set_frame(root, "transforms_train.json", 1, file_path="../outside.png")
    with dataset_error("transforms_train.json", 1, "file_path", "outside the dataset folder"):
        load_blender(root, "train")
    # '..' that comes back inside is fine
    set_frame(root, "transforms_train.json", 1, file_path="../scene/train/r_1.png")
    assert load_blender(root, "train").names[1] == "train/r_1.png"


def test_error_file_path_symlink_outside(tmp_path: Path) -> None:
    root = tmp_path / "scene"
    names = names_of(3)
    write_nerfstudio(root, names)
    write_image(tmp_path / "outside.png", np.zeros((8, 10, 3), dtype=np.uint8))
    (root / "images" / "link.png").symlink_to(tmp_path / "outside.png")
    set_frame(root, "transforms.json", 0, file_path="images/link.png")
    with dataset_error("transforms.json", 0, "file_path", "outside the dataset folder"):
        load_nerfstudio(root, "train")


def test_error_image_size_disagrees(tmp_path: Path) -> None:
    names = names_of(3)
    write_nerfstudio(tmp_path, names, {"train_filenames": names}, frame_extra={1: {"w": 12}})
    write_image(tmp_path / names[1], np.zeros((8, 10, 3), dtype=np.uint8))  # 10 wide, frame says 12
    with dataset_error("transforms.json", 1, "w", "10x8.*12x8"):
        load_nerfstudio(tmp_path, "train")


def test_error_blender_image_missing(tmp_path: Path) -> None:
    write_blender(tmp_path)
    (tmp_path / "train" / "r_0.png").unlink()
    with dataset_error("transforms_train.json", 0, "file_path", "r_0.*does not exist"):
        load_blender(tmp_path, "train")


def test_error_image_truncated(tmp_path: Path) -> None:
    write_blender(tmp_path, width=64, height=64)
    noisy = np.random.default_rng(0).integers(0, 256, size=(64, 64, 4), dtype=np.uint8)
    path = tmp_path / "train" / "r_1.png"
    write_image(path, noisy)
    path.write_bytes(path.read_bytes()[:2000])
    with dataset_error("transforms_train.json", 1, "file_path", "r_1.png.*cannot be decoded"):
        load_blender(tmp_path, "train")


def test_error_not_an_image(tmp_path: Path) -> None:
    write_blender(tmp_path)
    (tmp_path / "train" / "r_2.png").write_text("not an image")
    with dataset_error("transforms_train.json", 2, "file_path", "r_2.png.*cannot be decoded"):
        load_blender(tmp_path, "train")


def test_error_no_image_exists(tmp_path: Path) -> None:
    names = names_of(2)
    write_nerfstudio(tmp_path, names, skip=tuple(names))
    with pytest.warns(UserWarning), dataset_error("transforms.json", None, "frames", "none of the 2"):
        load_nerfstudio(tmp_path, "train")
